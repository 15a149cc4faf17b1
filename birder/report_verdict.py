"""The answer to one question (a model on a number of nodes): which network to buy, and whether Birder pays,
computed once (``verdict``) into one ``Verdict`` that the first screen's table and sentence, the terminal, the
plot and the headline all read. Nothing else decides.

Without a price file, networks are ranked by line rate (the slowest taken as the cheapest) and the answer is the
cheapest network whose best set-up (any optimizer) reaches ``MATCH_SHARE`` of the fastest set-up; with one, the
priced set-up with the most samples/s per unit of cost. Birder pays where its speed-up over the best uncompressed
optimizer (by value, with prices) has an interval above 1 (``sim.uncertainty.speedup_interval``); it does not where the
interval is below 1; otherwise the prediction cannot tell. A cheaper network whose best set-up is within the
uncertainty of the answer's is named as not ruled out: then, and where Birder's case cannot be told, the range is
too wide to decide, and the verdict says what would narrow it.
"""

from __future__ import annotations

from dataclasses import dataclass

from birder.report_core import interval, num
from birder.report_grid import MATCH_SHARE, ModelGrid, best, is_uncompressed, speedup
from birder.report_prices import Prices

SECONDS_PER_YEAR = 365.25 * 86400


@dataclass(frozen=True)
class Row:
    """One network of a question's table: its best set-up of each kind, and its cost where priced."""

    network: str
    baseline: dict | None  # best of the uncompressed optimizers (SGDM/Adam)
    birder: dict | None
    other: dict | None  # best of the other 1-bit optimizers
    cost: float | None  # the cluster's, from the price file
    nics_per_node: int

    @property
    def top(self) -> dict | None:
        found = [p for p in (self.baseline, self.birder, self.other) if p is not None]
        return max(found, key=lambda p: p["throughput"], default=None)


@dataclass(frozen=True)
class Verdict:
    """What one question's predictions decide; every sentence, table and plot of it reads this."""

    label: str  # the model's label
    nodes: int
    gpus: int
    by: str  # "throughput" (no price file) or "value" (samples/s per unit of cost)
    rows: tuple[Row, ...]  # every network, cheapest first
    buy: Row  # the network to buy
    setup: dict  # the set-up on it (the optimizer to run)
    fastest: dict  # the fastest set-up of all (the yardstick of "enough")
    birder_case: tuple[dict, dict] | None  # (Birder's set-up, the best uncompressed one) the gain compares
    birder_gain: dict | None  # their speed-up (by value with prices): ratio, low, high, verdict
    birder_pays: str  # "yes", "no", "cannot tell", or "not simulated"
    rivals: tuple[tuple[Row, dict], ...]  # cheaper networks within the uncertainty of the answer's
    prices: Prices | None = None

    @property
    def too_wide(self) -> bool:
        return bool(self.rivals) or self.birder_pays == "cannot tell"

    def value(self, p: dict) -> float | None:
        """Samples/s per 1,000 of cluster cost of the set-up ``p`` (None without prices)."""
        row = next(r for r in self.rows if r.network == p["network"])
        return None if row.cost is None else p["throughput"] / row.cost * 1e3

    def cost_per_million(self, p: dict) -> float | None:
        """The cluster's cost per million samples of ``p`` over the price file's ``years`` (None without)."""
        row = next(r for r in self.rows if r.network == p["network"])
        if row.cost is None or self.prices is None or self.prices.years is None:
            return None
        return row.cost / (p["throughput"] * self.prices.years * SECONDS_PER_YEAR) * 1e6


def _best_of(g: ModelGrid, network: str, nodes: int, which) -> dict | None:
    return best(g, network, nodes, [o for o in g.optimizers if which(o)])


def rows_of(g: ModelGrid, nodes: int, prices: Prices | None, price_network=lambda name: name) -> tuple[Row, ...]:
    out = []
    for net in g.networks:
        base = _best_of(g, net, nodes, is_uncompressed)
        birder = g.get(net, "birder", nodes)
        other = _best_of(g, net, nodes, lambda o: not is_uncompressed(o) and o != "birder")
        any_p = base or birder or other
        if any_p is None:
            continue
        nics = int(any_p.get("nics_per_node", 1))
        cost = None if prices is None else prices.cluster_cost(price_network(net), nodes, nics)
        out.append(Row(net, base, birder, other, cost, nics))
    return tuple(out)


def value_ratio(a: dict, cost_a: float, b: dict, cost_b: float) -> dict:
    """a's samples/s per unit cost over b's, with the interval of their speed-up scaled by the cost ratio."""
    s = speedup(a, b)
    k = cost_b / cost_a
    low, high = s["low"] * k, s["high"] * k
    return {"ratio": s["ratio"] * k, "low": low, "high": high,
            "verdict": "faster" if low > 1 else "slower" if high < 1 else "within the uncertainty"}


def verdict(g: ModelGrid, nodes: int, prices: Prices | None = None, price_network=lambda name: name
            ) -> Verdict | None:
    """The one answer for ``g``'s model on ``nodes`` nodes (None where nothing was predicted there)."""
    rows = rows_of(g, nodes, prices, price_network)
    tops = [(r, r.top) for r in rows if r.top is not None]
    if not tops:
        return None
    fastest = max((p for _, p in tops), key=lambda p: p["throughput"])
    priced = [(r, p) for r, p in tops if r.cost]
    by = "value" if prices is not None and priced else "throughput"
    if by == "value":
        buy, setup = max(priced, key=lambda rp: rp[1]["throughput"] / rp[0].cost)
        rivals = tuple((r, p) for r, p in priced if r is not buy and r.cost < buy.cost
                       and value_ratio(p, r.cost, setup, buy.cost)["verdict"] == "within the uncertainty")
        with_birder = [(r, r.birder) for r, _ in priced if r.birder is not None]
        without = [(r, r.baseline) for r, _ in priced if r.baseline is not None]
        case = gain = None
        if with_birder and without:
            rb, b = max(with_birder, key=lambda rp: rp[1]["throughput"] / rp[0].cost)
            rs, s = max(without, key=lambda rp: rp[1]["throughput"] / rp[0].cost)
            case, gain = (b, s), value_ratio(b, rb.cost, s, rs.cost)
    else:
        buy, setup = next((r, p) for r, p in tops if p["throughput"] >= MATCH_SHARE * fastest["throughput"])
        index = [r for r, _ in tops].index(buy)
        rivals = tuple((r, p) for r, p in tops[:index] if speedup(p, setup)["verdict"] == "within the uncertainty")
        case = (buy.birder, buy.baseline) if buy.birder is not None and buy.baseline is not None else None
        gain = speedup(*case) if case else None
    pays = ("not simulated" if gain is None else
            {"faster": "yes", "slower": "no"}.get(gain["verdict"], "cannot tell"))
    return Verdict(g.setting.label, nodes, nodes * g.gpus_per_node, by, rows, buy, setup, fastest, case, gain, pays,
                   rivals, prices if by == "value" else None)


_VERDICTS: dict[tuple, list] = {}


def verdicts(g, question, prices: Prices | None) -> list[tuple[ModelGrid, Verdict]]:
    """Every question's verdict for this grid (``report_grid.grid``), computed once per grid, question and price
    file: the decision section and the scaling section's figures read the same objects."""
    key = (id(g), question, id(prices))
    if key not in _VERDICTS:
        to_price = price_network(question.cluster)
        _VERDICTS[key] = [(m, v) for m in g.models for n in question.decision_nodes() if n in m.nodes
                          and (v := verdict(m, n, prices, to_price)) is not None]
    return _VERDICTS[key]


def price_network(cluster: str | None):
    """The network a price file's ``[nic]``/``[switch_port]`` prices for a prediction's network name: a cluster
    file's ``[network] preset``."""
    if cluster is None:
        return lambda name: name
    import tomllib
    from pathlib import Path

    from safeio.inputs import read_text_bounded

    data = tomllib.loads(read_text_bounded(Path(cluster), 1 << 20, "cluster file"))
    preset = (data.get("network") or {}).get("preset")
    return lambda name: preset or name


def shown_rows(v: Verdict, limit: int) -> tuple[Row, ...]:
    """The networks a question's table and figure show: all when they fit, else the ones the verdict rests on (the
    network to buy, those not ruled out, closest to it first, where Birder's case is), then the cheapest and the
    fastest."""
    if len(v.rows) <= limit:
        return v.rows
    closest_first = sorted(v.rivals, key=lambda rp: -(v.value(rp[1]) if v.by == "value" else rp[1]["throughput"]))
    keep = [v.buy, *(r for r, _ in closest_first)]
    if v.birder_case:
        keep += [r for r in v.rows if r.network in {p["network"] for p in v.birder_case}]
    keep += [v.rows[0], next(r for r in v.rows if v.fastest in (r.baseline, r.birder, r.other))]
    chosen = list(dict.fromkeys(r.network for r in keep))[:limit]
    return tuple(r for r in v.rows if r.network in chosen)


# ------------------------------------------------------------------------------------------ words
def cell(p: dict | None, with_optimizer: bool = False) -> str:
    if p is None:
        return ""
    lo, hi = interval(p)
    return (f"{p['optimizer']} " if with_optimizer else "") + f"{num(p['throughput'])} ({num(lo)}-{num(hi)})"


def sentence(v: Verdict) -> str:
    """The verdict in one sentence: what to buy and run, and whether Birder pays, as the table shows it."""
    s = v.setup
    lo, hi = interval(s)
    what = (f"buy **{v.buy.network}** and run {s['optimizer']}: {num(s['throughput'])} samples/s "
            f"({num(lo)} to {num(hi)})")
    if v.by == "value" and v.prices.years:
        what += (f", the lowest cost per sample ({num(v.cost_per_million(s))} {v.prices.currency} per million "
                 f"samples over {v.prices.years:g} years)")
    elif v.by == "value":
        what += f", the most samples/s per 1,000 {v.prices.currency} ({num(v.value(s))})"
    elif s is not v.fastest:
        what += f", {100 * s['throughput'] / v.fastest['throughput']:.0f}% of the fastest set-up"
    if v.birder_gain is None:
        birder = "Birder was not simulated here."
    else:
        b, base = v.birder_case
        r = v.birder_gain
        where = (f"on {v.buy.network}" if v.by == "throughput" else
                 f"by value (Birder at its best on {b['network']}, {base['optimizer']} on {base['network']})")
        shown = f"{r['ratio']:.2f}x the best of SGDM/Adam {where}, {r['low']:.2f} to {r['high']:.2f}"
        birder = {"yes": f"Birder pays: {shown}.", "no": f"Birder does not pay: {shown}.",
                  "cannot tell": f"whether Birder pays the prediction cannot tell: {shown}."}[v.birder_pays]
    text = f"{what}. {birder[0].upper()}{birder[1:]}"
    if v.rivals:
        text += (" Not ruled out, within the uncertainty of it: the cheaper "
                 + ", ".join(f"{r.network} ({p['optimizer']} {num(p['throughput'])}/s)" for r, p in v.rivals) + ".")
    return text


def narrowing(summary: dict, cluster_given: bool) -> str:
    """What would narrow a range too wide to decide, with the corpus's widths for a measured node and without."""
    corpus = (summary.get("corpus_validation") or {}).get("summary") or {}
    measured, unmeasured = corpus.get("median_half_width"), (corpus.get("unmeasured_node") or {}).get(
        "median_half_width")
    widths = (f" (on the validation corpus a measured node gives intervals of median half-width "
              f"{100 * measured:.0f}%, against {100 * unmeasured:.0f}% without)"
              if measured is not None and unmeasured is not None else "")
    network = ("" if cluster_given else
               " Run nccl-tests' all_reduce_perf on two nodes of the network you consider, fit it with `birder "
               "calibrate LOG --out mine.toml` and ask again with `--cluster mine.toml`.")
    return ("**Too wide to decide?** Measure one node of your own with the optimizer you would run and pass its "
            f"samples/s as `birder predict --single-node-throughput X`{widths}.{network}")
