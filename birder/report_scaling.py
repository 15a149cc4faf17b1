"""The scaling sections of `birder report`: the answer first (which network, does Birder help), then how the
predictions were made and how accurate they are.

Every number comes from the simulator through ``sim.api`` (``sweep_grid``, ``validation_summary``); the
sentences are generated from the same predictions the tables and plots show. The networks are the presets of
``sim.network.NETWORKS`` that describe hardware (site profiles, fitted to one testbed, are left out), in order of
line rate: the slowest is taken to be the cheapest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from birder.report import Section, show_progress
from birder_ref import registry
from birder_ref.schedules import Layout
from safeio.serialise import markdown_text

MATCH_SHARE = 0.95  # "matches": at least this share of the other's throughput
NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
QUICK_NODES = (1, 2, 16, 64)
QUICK_MODELS = ("resnet50", "bert-base")  # --quick: the two models of the buyer's question, fewer optimizers
HEADLINE_NODES = (16, 64)
GPUS_PER_NODE = 8
INCAST_KEYS = ("incast_onset_bytes", "incast_certain_bytes")  # fitted as a bracket where a preset sets them

# A published single-node throughput that calibrates one optimizer; the others are scaled from it by the
# simulated one-node ratio (their compression costs on one node), so every optimizer shares the same compute.
NVIDIA_BERT_LARGE = {
    "optimizer": "adam", "throughput": 469.8,
    "source": "NVIDIA DeepLearningExamples, PyTorch BERT README: SQuAD v1.1 fine-tuning of BERT-Large, sequence "
              "384, batch 32 per GPU, TF32, 8 x A100-80GB, PyTorch 21.11: 469.8 sequences/s",
}


@dataclass(frozen=True)
class Setting:
    """One model's section: its batch and where its single-node compute comes from."""

    model: str
    label: str
    batch_per_gpu: int
    calibration: str  # "paper" (published single-node rows), "nvidia" (NVIDIA_BERT_LARGE), "built-in"


SETTINGS = (
    Setting("resnet50", "ResNet-50", 32, "paper"),
    Setting("bert-base", "BERT-base", 32, "built-in"),
    Setting("bert-large", "BERT-large", 32, "nvidia"),
    Setting("gpt2", "GPT-2", 8, "built-in"),
)


# ------------------------------------------------------------------------------------------ optimizers
def is_uncompressed(optimizer: str) -> bool:
    """Whether ``optimizer`` sends every step in full precision (SGDM, Adam): a baseline Birder is measured
    against (``OptimizerSpec.compressed``)."""
    return not registry.get(optimizer).compressed


def section_optimizers(quick: bool = False) -> tuple[str, ...]:
    """The optimizers each model's section predicts, in the registry's order: every simulated one, or with
    ``quick`` only the uncompressed baselines and Birder."""
    return tuple(o for o in registry.SIMULATED if not quick or is_uncompressed(o) or o == "birder")


# ------------------------------------------------------------------------------------------ networks
def is_site_profile(name: str, networks: dict, transports: dict, fitted: dict) -> bool:
    """A preset fitted to one testbed (a ``birder-paper-*`` profile, or one overriding its transport's fitted
    constants with values of its own) rather than hardware."""
    if name.startswith("birder-paper"):
        return True
    spec = networks[name]
    base = transports.get(spec.get("transport"), {})
    return any(k in spec and spec[k] != base.get(k) for k in fitted.get(spec.get("transport"), ()))


def buying_networks() -> list[str]:
    """The hardware presets, slowest line rate first."""
    from sim import plots
    from sim.network import NETWORKS, TRANSPORTS

    fitted = _fitted_names()
    names = [n for n in NETWORKS if not is_site_profile(n, NETWORKS, TRANSPORTS, fitted)]
    return plots.speed_order(names)


def _fitted_names() -> dict:
    try:
        from sim.validation.site_fit import FITTED
    except ImportError:
        return {}
    return dict(FITTED)


# ------------------------------------------------------------------------------------------ calibration
def single_node_figures(setting: Setting, summary: dict, optimizers: tuple[str, ...], network: str
                        ) -> tuple[dict[str, float] | None, tuple[str, ...], str]:
    """(single-node throughput per optimizer or None, the optimizers the section runs, the calibration's words)."""
    from sim import api

    if setting.calibration == "paper":
        published = {}
        for r in summary["rows"]:
            if (r["model"], r["batch_per_gpu"], r["gpus"]) == (setting.model, setting.batch_per_gpu, GPUS_PER_NODE):
                published.setdefault(r["optimizer"], r["published"])
        if published:
            runs = tuple(o for o in optimizers if o in published)
            words = ("calibrated with each optimizer's published single-node throughput (Birder paper, Table 1: "
                     + ", ".join(f"{o} {published[o]:,.0f}/s" for o in runs) + ")")
            return {o: published[o] for o in runs}, runs, words
    if setting.calibration == "nvidia":
        ref = NVIDIA_BERT_LARGE
        one = {o: api.predict_config(setting.model, 1, network, o, batch_per_gpu=setting.batch_per_gpu,
                                     gpus_per_node=GPUS_PER_NODE)["throughput"] for o in optimizers}
        scaled = {o: ref["throughput"] * one[o] / one[ref["optimizer"]] for o in optimizers}
        words = (f"calibrated with {ref['optimizer']}'s published single-node throughput, {ref['throughput']}/s "
                 f"({ref['source']}); the other optimizers' single-node figures scaled from it by the simulated "
                 "one-node ratio")
        return scaled, optimizers, words
    return None, optimizers, "built-in A100 compute profile (no published single-node figure in this project)"


# ------------------------------------------------------------------------------------------ the grid
@dataclass(frozen=True)
class ModelGrid:
    setting: Setting
    calibration: str  # in words, with its source
    optimizers: tuple[str, ...]
    networks: tuple[str, ...]
    nodes: tuple[int, ...]
    predictions: tuple[dict, ...]

    def get(self, network: str, optimizer: str, nodes: int) -> dict | None:
        for p in self.predictions:
            if (p["network"], p["optimizer"], p["nodes"]) == (network, optimizer, nodes):
                return p
        return None

    @property
    def baselines(self) -> tuple[str, ...]:
        return tuple(o for o in self.optimizers if is_uncompressed(o))

    @property
    def title(self) -> str:
        s = self.setting
        if self.calibration.startswith("built-in"):
            short = "built-in compute profile (no published single-node figure)"
        elif "Birder paper" in self.calibration:
            short = "calibrated on the Birder paper's single-node throughputs"
        else:
            short = "calibrated on a published single-node throughput"
        return f"{s.label}, {s.batch_per_gpu} samples per GPU, {short}"


@dataclass(frozen=True)
class Grid:
    models: tuple[ModelGrid, ...]
    summary: dict
    networks: tuple[str, ...]


_CACHE: dict[bool, Grid] = {}


def grid(quick: bool = False, progress: bool = False) -> Grid:
    """Every setting's predictions over the buying networks and nodes (computed once per process)."""
    if quick in _CACHE:
        return _CACHE[quick]
    from sim import api
    from sim.validation.stored import validation_summary

    summary = validation_summary()
    networks = tuple(buying_networks())
    nodes = QUICK_NODES if quick else NODES
    models = []
    for setting in SETTINGS:
        if quick and setting.model not in QUICK_MODELS:
            continue
        single, optimizers, words = single_node_figures(setting, summary, section_optimizers(quick), networks[0])
        predictions = api.sweep_grid(setting.model, list(nodes), list(networks), list(optimizers),
                                     batch_per_gpu=setting.batch_per_gpu, gpus_per_node=GPUS_PER_NODE, gpu="a100",
                                     single_node_throughput=single, progress=progress)
        models.append(ModelGrid(setting, words, optimizers, networks, nodes, tuple(predictions)))
    _CACHE[quick] = Grid(tuple(models), summary, networks)
    return _CACHE[quick]


# ------------------------------------------------------------------------------------------ decisions
def interval(p: dict) -> tuple[float, float]:
    return p.get("throughput_low", p["throughput"]), p.get("throughput_high", p["throughput"])


def speedup(a: dict, b: dict) -> dict:
    """a's throughput over b's with its interval, calibrated on the corpus's paired rows
    (``sim.uncertainty.speedup_interval``: ``ratio``, ``low``, ``high``, ``basis``, ``verdict``)."""
    from sim.uncertainty import speedup_interval

    return speedup_interval(a, b)


def within_uncertainty(a: dict, b: dict) -> bool:
    """Whether the speed-up of a over b has an interval containing 1: neither is known to be faster."""
    return speedup(a, b)["verdict"] == "within the uncertainty"


def best(g: ModelGrid, network: str, nodes: int, optimizers) -> dict | None:
    found = [p for o in optimizers if (p := g.get(network, o, nodes)) is not None]
    return max(found, key=lambda p: p["throughput"], default=None)


@dataclass(frozen=True)
class Decision:
    """What one model at one node count tells a buyer."""

    nodes: int
    reference: dict  # the best uncompressed baseline on the fastest network
    without: dict | None  # the cheapest network's best baseline reaching MATCH_SHARE of the reference
    with_birder: dict | None  # the cheapest network where Birder reaches MATCH_SHARE of the reference
    best_birder: dict | None  # Birder's best over the networks
    speedups: dict[str, dict]  # per network: Birder / best baseline there (``speedup``)
    best_per_network: dict[str, str]  # per network: the fastest optimizer


def decide(g: ModelGrid, nodes: int) -> Decision | None:
    fastest = g.networks[-1]
    reference = best(g, fastest, nodes, g.baselines)
    if reference is None:
        return None
    target = MATCH_SHARE * reference["throughput"]
    without = next((b for n in g.networks if (b := best(g, n, nodes, g.baselines)) and b["throughput"] >= target),
                   None)
    birders = [p for n in g.networks if (p := g.get(n, "birder", nodes)) is not None]
    with_birder = next((p for p in birders if p["throughput"] >= target), None)
    speedups = {}
    for n in g.networks:
        b, base = g.get(n, "birder", nodes), best(g, n, nodes, g.baselines)
        if b is not None and base is not None:
            speedups[n] = speedup(b, base)
    best_per = {n: top["optimizer"] for n in g.networks if (top := best(g, n, nodes, g.optimizers)) is not None}
    return Decision(nodes, reference, without, with_birder, max(birders, key=lambda p: p["throughput"], default=None),
                    speedups, best_per)


def pays_runs(g: ModelGrid, network: str) -> tuple[list[int], list[int]]:
    """(node counts > 1 where Birder beats the best baseline, those where it does not)."""
    pays, not_pays = [], []
    for n in g.nodes:
        if n < 2:
            continue
        b, base = g.get(network, "birder", n), best(g, network, n, g.baselines)
        if b is None or base is None:
            continue
        (pays if b["throughput"] > base["throughput"] else not_pays).append(n)
    return pays, not_pays


def tied_counts(g: ModelGrid, network: str) -> list[int]:
    """Node counts > 1 where Birder's speed-up over the best baseline has an interval containing 1."""
    return [n for n in g.nodes if n >= 2 and (b := g.get(network, "birder", n)) is not None
            and (base := best(g, network, n, g.baselines)) is not None and within_uncertainty(b, base)]


def why_not(g: ModelGrid, network: str, nodes: int) -> str:
    """Why Birder does not beat the best baseline here: compute-bound, per-message costs, or compression."""
    b, base = g.get(network, "birder", nodes), best(g, network, nodes, g.baselines)
    base_comm = base["exposed_communication_s"] / base["iteration_s"]
    if base_comm < 0.10:
        return (f"compute-bound: {base['optimizer']}'s communication is {100 * base_comm:.0f}% of its iteration, "
                "so there is little to save")
    if b.get("incast_s", 0.0) >= 0.5 * b["exposed_communication_s"] > 0:
        return (f"TCP incast: Birder's point-to-point phases lose {b['incast_timeouts']:.1f} retransmission "
                f"timeouts per step ({1e3 * b['incast_s']:,.0f} ms; {b['incast_basis']})")
    if (b["exposed_communication_s"] >= base["exposed_communication_s"]
            and b["inter_node_bytes_per_gpu"] < base["inter_node_bytes_per_gpu"]):
        fewer = base["inter_node_bytes_per_gpu"] / max(1.0, b["inter_node_bytes_per_gpu"])
        return (f"per-message costs: Birder sends {fewer:.0f}x fewer bytes but waits "
                f"{1e3 * b['exposed_communication_s']:,.0f} ms on communication against "
                f"{1e3 * base['exposed_communication_s']:,.0f} ms")
    return (f"compression and communication together: {1e3 * b['iteration_s']:,.0f} ms per iteration against "
            f"{1e3 * base['iteration_s']:,.0f} ms")


# ------------------------------------------------------------------------------------------ prices
@dataclass(frozen=True)
class Prices:
    """What a cluster costs: per node (its GPUs included), per NIC and per switch port, by network. ``currency``
    and ``path`` as Markdown text (``load_prices`` escapes them)."""

    node: float
    nic: dict[str, float]
    switch_port: dict[str, float]
    currency: str = "units"
    path: str = ""

    def cluster_cost(self, network: str, nodes: int, nics_per_node: int) -> float | None:
        """nodes x (node + NICs x (NIC + switch port)); None where the file prices no NIC or port of ``network``."""
        if network not in self.nic or network not in self.switch_port:
            return None
        return nodes * (self.node + nics_per_node * (self.nic[network] + self.switch_port[network]))


PRICE_KEYS = {"currency", "node", "nic", "switch_port"}
_PRICES: list[Prices] = []  # the price file of this run (``use_prices``), read by the decision section


MAX_PRICE_FILE_BYTES = 1 << 20  # a price file is a few lines; a megabyte is the wrong file
# Any price is 0 (a NIC or port included in the node's price; never the node itself) or in [1e-4, 1e12] units of
# its currency: from the finest price quoted (cloud prices per hour, to 1/10,000 of a unit) to more than any
# cluster's purchase in any currency (a 1,000-node cluster of 500,000 USD nodes is 5e8 USD, 1.3e13 VND; per node
# 1.3e10). Within these bounds costs and samples per cost are finite and non-zero (no overflow, no division by 0).
PRICE_RANGE = (1e-4, 1e12)
MAX_CURRENCY_CHARS = 24  # "USD", "EUR per hour", "k CHF": a name, not a sentence


def load_prices(path: str | Path) -> Prices:
    """A price file: ``node = X`` (one node), ``[nic]`` and ``[switch_port]`` tables of network = price,
    optional ``currency``. ValueError naming the file and key for anything else or a price that is not a
    non-negative number (a node's must be positive)."""
    import tomllib

    from safeio.inputs import read_text_bounded

    path = Path(path)
    text = read_text_bounded(path, MAX_PRICE_FILE_BYTES, "price file")  # a regular file: no FIFO, no device
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: cannot read the price file ({error})") from None
    unknown = set(data) - PRICE_KEYS
    if unknown or "node" not in data:
        raise ValueError(f"{path}: expected node = PRICE, [nic] and [switch_port] tables of network = PRICE and an "
                         f"optional currency; found {sorted(data)}")

    def price(value, key: str, positive: bool = False) -> float:
        low, high = PRICE_RANGE
        ok = isinstance(value, int | float) and not isinstance(value, bool) and (
            low <= value <= high or (value == 0 and not positive))  # NaN and infinities fail too
        if not ok:
            what = (f"positive number, a price between {low:g} and {high:g}" if positive else
                    f"non-negative number, a price between {low:g} and {high:g} or 0 (included in the node's)")
            raise ValueError(f"{path}: {key} must be a {what} in the file's currency, got {value!r:.40}")
        return float(value)

    tables = {}
    for table in ("nic", "switch_port"):
        entries = data.get(table, {})
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: [{table}] must be a table of network = price")
        from sim.network import NETWORKS

        unknown_networks = sorted(set(entries) - set(NETWORKS))
        if unknown_networks:
            raise ValueError(f"{path}: [{table}] names no network the simulator knows: {', '.join(unknown_networks)} "
                             f"(known: {', '.join(NETWORKS)})")
        tables[table] = {net: price(v, f"[{table}] {net}") for net, v in entries.items()}
    currency = data.get("currency", "units")
    if not isinstance(currency, str) or not currency.strip() or len(currency) > MAX_CURRENCY_CHARS or not \
            currency.isprintable():
        raise ValueError(f"{path}: currency must be a name of 1 to {MAX_CURRENCY_CHARS} printable characters (USD, "
                         f"EUR), got {currency!r:.60}")
    # the currency and the path appear only in report.md: escaped there once, here (no | or # of theirs is syntax)
    return Prices(price(data["node"], "node", positive=True), tables["nic"], tables["switch_port"],
                  markdown_text(currency.strip()), markdown_text(path))


def use_prices(prices: Prices | None) -> None:
    """Rank by samples/s per unit cost in this run's report (None: no price file)."""
    _PRICES[:] = [prices] if prices is not None else []


def cost_ranking(g: ModelGrid, nodes: int, prices: Prices) -> list[str]:
    """Markdown: per network, its best set-up's samples/s per 1,000 of cost, best first, with its interval, and
    whether it is within the uncertainty of the first."""
    ranked = []
    for net in g.networks:
        p = best(g, net, nodes, g.optimizers)
        cost = None if p is None else prices.cluster_cost(net, nodes, p.get("nics_per_node", 1))
        if cost:
            ranked.append((p["throughput"] / cost * 1e3, p, cost))
    unpriced = [n for n in g.networks if prices.cluster_cost(n, nodes, 1) is None]
    if not ranked:
        return [f"No network of this grid is priced in {prices.path}."]
    ranked.sort(key=lambda item: -item[0])
    top = ranked[0]
    lines = [f"Samples/s per 1,000 {prices.currency} of cluster at {nodes} nodes (node {num(prices.node)}, NICs and "
             f"switch ports per network from {prices.path}), best set-up per network:", "",
             f"| rank | network | optimizer | samples/s | cluster cost ({prices.currency}) | per 1,000 "
             f"{prices.currency} | vs the first |", "|---:|---|---|---:|---:|---:|---|"]
    for i, (value, p, cost) in enumerate(ranked, 1):
        lo, hi = interval(p)
        tied = i > 1 and speedup(p, top[1])["high"] * top[2] / cost >= 1  # samples/s per cost: ratio x cost ratio
        lines.append(f"| {i} | {p['network']} | {p['optimizer']} | {rate(p)} | {num(cost)} | {num(value)} "
                     f"({num(lo / cost * 1e3)} to {num(hi / cost * 1e3)}) | "
                     + ("first" if i == 1 else "within the uncertainty" if tied else "below") + " |")
    if unpriced:
        lines += ["", f"Not priced (no NIC or switch port price): {', '.join(unpriced)}."]
    return lines


# ------------------------------------------------------------------------------------------ words
def num(x: float) -> str:
    """Three significant figures with thousands separators: 61,234 -> 61,200; 4.567 -> 4.57."""
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    exponent = math.floor(math.log10(abs(x)))
    return f"{round(x, 2 - exponent):,.{max(0, 2 - exponent)}f}"


def rate(p: dict) -> str:
    lo, hi = interval(p)
    return f"{num(p['throughput'])}/s ({num(lo)} to {num(hi)})"


def ratio(r: dict) -> str:
    """A speed-up (``speedup``) in words: the ratio, its interval, and whether it decides."""
    verdict = r["verdict"] if r["verdict"] == "within the uncertainty" else f"{r['verdict']} beyond the uncertainty"
    return f"{r['ratio']:.2f}x ({r['low']:.2f} to {r['high']:.2f}, {verdict})"


def spans(values: list[int], all_values: list[int]) -> str:
    """Node counts as runs of consecutive grid points: '2-128', '2, 16-64'."""
    out, run = [], []
    for v in all_values:
        if v in values:
            run.append(v)
        elif run:
            out.append(run)
            run = []
    if run:
        out.append(run)
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


def best_alternative(g: ModelGrid, d: Decision) -> tuple[str, dict] | None:
    """The network slower than the reference's where Birder gains most over the best baseline, if it gains."""
    cheaper = [(n, r) for n, r in d.speedups.items() if n != d.reference["network"] and r["ratio"] > 1]
    return max(cheaper, key=lambda item: item[1]["ratio"], default=None)


def decision_sentence(g: ModelGrid, d: Decision, prices: Prices | None = None) -> str:
    """One node count's answer: the cheapest network that is enough without and with Birder, each with its own
    figure, against the fastest uncompressed set-up. With a price file, the best samples/s per unit cost among
    the networks it prices instead (``priced_decision_sentence``); without one, the slowest network is taken as
    the cheapest."""
    if prices is not None:
        return priced_decision_sentence(g, d, prices)
    ref = d.reference
    head = f"**{d.nodes} nodes ({Layout(d.nodes, GPUS_PER_NODE).n_ranks} GPUs):**"
    without = d.without if d.without is not None else ref
    need = without["network"]
    share = 100 * without["throughput"] / ref["throughput"]
    fastest = f"the fastest uncompressed set-up is {ref['optimizer']} on {ref['network']}, {rate(ref)}"
    if d.with_birder is not None and g.networks.index(d.with_birder["network"]) < g.networks.index(need):
        text = (f"{head} without Birder buy {need} ({without['optimizer']} {rate(without)}, {share:.0f}% of the "
                f"fastest); with Birder {d.with_birder['network']} is enough (birder {rate(d.with_birder)}, "
                f"{100 * d.with_birder['throughput'] / ref['throughput']:.0f}%); {fastest}.")
    else:
        text = (f"{head} buy {need} with or without Birder: {without['optimizer']} there {rate(without)}, "
                f"{share:.0f}% of the fastest; {fastest}.")
        gain = d.speedups.get(need)
        if gain is not None:
            text += f" Birder on {need}: {ratio(gain)} the best baseline there."
    text += " " + uncertainty_sentence(g, d.nodes)
    alternative = best_alternative(g, d)
    if alternative is not None:
        net, r = alternative
        b = g.get(net, "birder", d.nodes)
        text += (f" On a cheaper network Birder gains most on {net}: {ratio(r)} the best baseline there, "
                 f"{100 * b['throughput'] / ref['throughput']:.0f}% of the fastest set-up.")
    else:
        text += " On no cheaper network does Birder beat the best baseline."
    return text


def per_cost(p: dict, prices: Prices) -> float | None:
    """Samples/s per 1,000 of cluster cost of the set-up ``p``; None where its network is not priced."""
    cost = prices.cluster_cost(p["network"], p["nodes"], p.get("nics_per_node", 1))
    return None if not cost else p["throughput"] / cost * 1e3


def priced_decision_sentence(g: ModelGrid, d: Decision, prices: Prices) -> str:
    """One node count's answer by the price file: among the networks it prices, the best samples/s per 1,000 of
    cluster cost without Birder (best baseline) and with it (Birder), the networks left out for lack of a price,
    and of the priced networks whose best set-ups are within the uncertainty of the fastest priced one, the
    cheaper by the prices."""
    head = f"**{d.nodes} nodes ({Layout(d.nodes, GPUS_PER_NODE).n_ranks} GPUs):**"
    priced = [n for n in g.networks if prices.cluster_cost(n, d.nodes, 1) is not None]
    unpriced = [n for n in g.networks if n not in priced]
    left_out = f" ({', '.join(unpriced)} left out: {prices.path} prices no NIC or switch port of them)" \
        if unpriced else ""
    if not priced:
        return f"{head} no network of this grid is priced in {prices.path}; nothing to rank by cost."
    unit = f"per 1,000 {prices.currency}"

    def top(optimizers) -> dict | None:
        found = [p for n in priced if (p := best(g, n, d.nodes, optimizers)) is not None]
        return max(found, key=lambda p: per_cost(p, prices), default=None)

    without, with_birder = top(g.baselines), top(("birder",))
    text = f"{head} by samples/s {unit} of cluster among the priced networks{left_out}:"
    if without is not None:
        text += (f" without Birder buy {without['network']} ({without['optimizer']} {rate(without)}, "
                 f"{num(per_cost(without, prices))}/s {unit})")
    if with_birder is not None:
        gain = per_cost(with_birder, prices) / per_cost(without, prices) if without is not None else None
        text += (f"; with Birder buy {with_birder['network']} (birder {rate(with_birder)}, "
                 f"{num(per_cost(with_birder, prices))}/s {unit}"
                 + (f", {gain:.2f}x the value without" if gain is not None else "") + ")")
    fastest = best(g, priced[-1], d.nodes, g.optimizers)
    tied = [p for n in priced if (p := best(g, n, d.nodes, g.optimizers)) and within_uncertainty(p, fastest)]
    cheapest = min(tied, key=lambda p: prices.cluster_cost(p["network"], d.nodes, p.get("nics_per_node", 1)),
                   default=None)
    if cheapest is None or cheapest["network"] == fastest["network"]:
        text += (f". No priced network cheaper than the fastest priced one, {fastest['network']}, is within the "
                 "uncertainty of it.")
    else:
        text += (f". {cheapest['network']} ({cheapest['optimizer']} {rate(cheapest)}) and {fastest['network']} "
                 f"({fastest['optimizer']} {rate(fastest)}) are within the uncertainty: pick the cheaper by the "
                 f"prices, {cheapest['network']}.")
    return text


def uncertainty_sentence(g: ModelGrid, nodes: int) -> str:
    """The cheapest network whose best set-up (any optimizer) is within the uncertainty of the fastest network's:
    the interval of their ratio contains 1, so the prediction cannot tell them apart and the cheaper one is the
    buy."""
    fastest = best(g, g.networks[-1], nodes, g.optimizers)
    tied = next((p for n in g.networks if (p := best(g, n, nodes, g.optimizers)) and within_uncertainty(p, fastest)),
                None)
    if fastest is None or tied is None or tied["network"] == fastest["network"]:
        return ("Every cheaper network is slower than the fastest beyond the uncertainty of their ratio.")
    return (f"{tied['network']} ({tied['optimizer']} {rate(tied)}) and {fastest['network']} ({fastest['optimizer']} "
            f"{rate(fastest)}) are within the uncertainty: pick the cheaper, {tied['network']}.")


def stops_paying_sentence(g: ModelGrid) -> str:
    """Per network, the node counts where Birder beats the best baseline, why it does not at the others, and
    where the speed-up's interval contains 1 (within the uncertainty)."""
    grid_nodes = [n for n in g.nodes if n >= 2]
    words = []
    for net in g.networks:
        pays, not_pays = pays_runs(g, net)
        if not pays:
            text = f"never on {net} ({why_not(g, net, grid_nodes[-1]).split(':')[0]}"
        elif not not_pays:
            text = f"on {net} at every count ({grid_nodes[0]}-{grid_nodes[-1]} nodes"
        else:
            later = [n for n in not_pays if n > pays[0]]
            example = later[0] if later else not_pays[0]
            text = (f"on {net} at {spans(pays, grid_nodes)} nodes (not at {spans(not_pays, grid_nodes)}: "
                    f"{why_not(g, net, example).split(':')[0]}")
        tied = tied_counts(g, net)
        words.append(text + (f"; within the uncertainty at {spans(tied, grid_nodes)}" if tied else "") + ")")
    return ("1-bit pays: Birder beats the best uncompressed optimizer (by the prediction; where the speed-up's "
            "interval contains 1 it is within the uncertainty) " + "; ".join(words) + ".")


def stops_paying_details(g: ModelGrid) -> list[str]:
    """The reason at the first node count where Birder stops beating the best baseline, per network."""
    grid_nodes = [n for n in g.nodes if n >= 2]
    lines = []
    for net in g.networks:
        pays, not_pays = pays_runs(g, net)
        later = [n for n in not_pays if pays and n > pays[0]] or not_pays
        if later:
            lines.append(f"- {net}, {later[0] if pays else grid_nodes[-1]} nodes: "
                         f"{why_not(g, net, later[0] if pays else grid_nodes[-1])}.")
    return lines


def headline_table(g: ModelGrid, nodes=HEADLINE_NODES) -> list[str]:
    """Samples/s (range) of the best baseline and of Birder on every network at the headline node counts."""
    counts = [n for n in nodes if n in g.nodes]
    base = "best of " + "/".join(g.baselines)
    lines = ["| network | " + " | ".join(f"{n} nodes: {base} | {n} nodes: birder" for n in counts) + " |",
             "|---|" + "---:|" * (2 * len(counts))]
    for net in g.networks:
        cells = []
        for n in counts:
            for p in (best(g, net, n, g.baselines), g.get(net, "birder", n)):
                cells.append("" if p is None else
                             f"{num(p['throughput'])} ({num(interval(p)[0])} to {num(interval(p)[1])})")
        lines.append(f"| {net} | " + " | ".join(cells) + " |")
    return lines


def summary_rows(g: ModelGrid) -> list[str]:
    """Markdown rows: the best optimizer per network and node count, with Birder's speed-up."""
    head = "| network | " + " | ".join(str(n) for n in g.nodes if n >= 2) + " |"
    lines = [head, "|---|" + "---|" * len([n for n in g.nodes if n >= 2])]
    for net in g.networks:
        cells = []
        for n in g.nodes:
            if n < 2:
                continue
            top = best(g, net, n, g.optimizers)
            b, base = g.get(net, "birder", n), best(g, net, n, g.baselines)
            r = speedup(b, base) if b and base else None
            tied = r is not None and r["verdict"] == "within the uncertainty"
            ratio_text = "" if r is None else f" ({r['ratio']:.2f}x{', tied' if tied else ''})"
            cells.append(f"{top['optimizer']}{ratio_text}" if top else "")
        lines.append(f"| {net} | " + " | ".join(cells) + " |")
    return lines


# ------------------------------------------------------------------------------------------ accuracy
def interval_words(g: Grid) -> str:
    """How the ranges are made and how wide they are on this grid."""
    corpus = (g.summary.get("corpus_validation") or {}).get("summary") or {}
    widths = sorted((p["throughput_high"] - p["throughput_low"]) / 2 / p["throughput"]
                    for m in g.models for p in m.predictions if p["nodes"] >= 2)
    coverage = corpus.get("coverage")
    return (f"A range is an {100 * corpus.get('interval_level', 0.8):.0f}% interval from the errors of rows left out "
            f"of every fit (the validation corpus, {corpus.get('rows', 0)} published rows, each source left out in "
            "turn; the Birder paper's testbeds: their group cross-validation), asymmetric where the errors are and "
            "wider where an alpha-beta ring predicts communication-bound"
            + (f"; it covered {100 * coverage:.1f}% of the left-out rows" if coverage is not None else "")
            + (f"; median half-width {100 * widths[len(widths) // 2]:.0f}% here." if widths else "."))


def speedup_words(g: Grid) -> str:
    """How a speed-up's range is made, with the corpus's check of it."""
    from sim.validation.figures import percent

    corpus = (g.summary.get("corpus_validation") or {}).get("summary") or {}
    f, level = corpus.get("speedup") or {}, corpus.get("interval_level", 0.8)
    checked = "" if not f.get("pairs") else (
        f" ({f['pairs']} pairs: they covered {100 * f['coverage']:.1f}% of the pairs left out with a median "
        f"half-width of {100 * f['median_half_width']:.0f}%, against {100 * f['naive_coverage']:.1f}% and "
        f"{100 * f['naive_median_half_width']:.0f}% for the two intervals divided end by end; the "
        f"{100 * f['decided']:.0f}% that excluded 1 named the faster as measured in "
        f"{percent(f['decided_right'], 0)} of cases)")
    return ("A speed-up's range comes from the errors of predicted ratios on pairs of rows of one published table "
            f"(same set-up and node count), each source left out{checked}, where the left-out pairs of its "
            "kind (measured node or not, regime) support it; else the two ranges divided end by end."
            + (" The pairs' own covered fewer left-out pairs than their nominal level: read a named faster one as "
               "likely, not certain." if f.get("coverage") is not None and f['coverage'] < level else "")
            + " Where a speed-up's range excludes 1 the faster is named; where it contains 1 the two are within the "
              "uncertainty.")


def accuracy_words(summary: dict) -> tuple[str, str]:
    """(fit sentence, cross-validation sentence) from ``validation_summary``."""
    rows = summary["rows"]
    multi = [r for r in rows if r["gpus"] > GPUS_PER_NODE]
    fit = (f"fit (in-sample) {100 * summary['fit_mape']:.1f}% mean absolute error over {len(rows)} published rows "
           f"({len(multi)} multi-node; the site profiles' constants were fitted on these same rows)")
    cross = summary.get("cross_validation")
    if summary.get("cross_validated_mape") is None or not cross:
        return fit, "prediction (cross-validated): not available (too few published rows to hold some out)"
    by_column = cross.get("by_column") or {}
    words = {"gpus": "GPU count", "batch_per_gpu": "batch size"}
    parts = [f"each {words.get(column, column)} left out in turn: {100 * value:.1f}%"
             for column, value in by_column.items()]
    untestable = [words.get(column, column) for column in cross.get("untestable_columns") or []]
    detail = "; ".join(parts) + (f"; {', '.join(untestable)}: one value in the rows, so not testable"
                                 if untestable else "")
    site, generic = summary.get("cross_validated_mape_site"), summary.get("cross_validated_mape_generic")
    split = (f" A site profile's range is {100 * site:.0f}% (groups its fit did not see); a generic preset's is "
             f"{100 * generic:.0f}% (a network left out, predicted by its unfitted generic preset: a cluster "
             "nobody fitted)." if site is not None and generic is not None else "")
    return fit, (f"prediction (cross-validated) {100 * summary['cross_validated_mape']:.1f}% on whole groups of "
                 f"rows left out of the fit ({detail}).{split}")


def corpus_lines(summary: dict) -> list[str]:
    """The validation corpus with each source left out (``birder validate``), as the READMEs quote it, and its
    per-source table."""
    from sim.validation.figures import corpus_figures_markdown
    from sim.validation.figures import percent as pct
    from sim.validation.leave_one_source_out import EQUAL_BY_CONSTRUCTION

    corpus = summary.get("corpus_validation")
    if not corpus:
        return []
    lines = [f"- On the validation corpus (`sim/validation/`, published rows of other sources' clusters): "
             f"{corpus_figures_markdown(corpus['summary'])}", "", f"Per source ({EQUAL_BY_CONSTRUCTION}):", "",
             "| group | rows | in-sample | source left out | linear scaling | alpha-beta ring |",
             "|---|---:|---:|---:|---:|---:|"]

    lines += [f"| {t['name']} | {t['rows']} | {pct(t['mape_in_sample'])} | {pct(t['mape_left_out'])} | "
              f"{pct(t['mape_linear'])} | {pct(t['mape_alpha_beta'])} |" for t in corpus["table"]]
    return lines


def fitted_constants_lines(summary: dict) -> list[str]:
    """Which constants are fitted, where they live, and on which rows: the site profiles (sim/presets/sites.toml)."""
    from sim.hardware import SITE_ONLY_KEYS, SITES

    lines = []
    for name, spec in SITES.items():
        if not spec.get("fitted"):
            continue
        keys = [k for k in (*SITE_ONLY_KEYS, "efficiency") if k in spec and math.isfinite(float(spec[k]))]
        on = spec.get("fitted_on", {})
        rows = [r for r in summary["rows"] if r["gpus"] > GPUS_PER_NODE and r.get("network") in (name, spec["base"])]
        lines.append(f"- `{name}` ({spec.get('description', 'a site profile')}), in `sim/presets/sites.toml`: "
                     + ", ".join(f"`{k}` = {spec[k]:g}" for k in keys)
                     + f"; fitted on {len(rows)} published rows of {', '.join(on.get('models', []))} at "
                     f"{', '.join(map(str, on.get('batch_per_gpu', [])))}/GPU and "
                     f"{', '.join(map(str, on.get('gpus', [])))} GPUs. No generic preset uses them.")
    return lines


def extrapolated(p: dict) -> bool:
    """The simulator's ``extrapolated`` flag: the prediction leans on a site's fitted constants outside the
    models, batch sizes or GPU counts they were fitted on."""
    return bool(p.get("extrapolated", False))


# ------------------------------------------------------------------------------------------ sections
def decision_section(outdir: Path, quick: bool) -> Section:
    from sim import plots

    g = grid(quick, progress=show_progress())
    prices = _PRICES[0] if _PRICES else None
    fit, cross = accuracy_words(g.summary)
    leaning = sorted({p["network"] for m in g.models for p in m.predictions if extrapolated(p)},
                     key=g.networks.index)
    lines = [
        "## The answer first: which network, and does Birder help?",
        "",
        "Generated from the simulator's predictions (8 A100 GPUs per node; sections below show how). "
        f"{interval_words(g)} {speedup_words(g)} "
        + (f"Networks from the slowest (taken as the cheapest) to the fastest: {', '.join(g.networks)}. \"Enough\" "
           f"means at least {100 * MATCH_SHARE:.0f}% of the fastest uncompressed set-up." if not prices else
           f"Networks ranked by samples/s per 1,000 {prices.currency} of cluster with the prices of {prices.path} "
           f"(networks from the slowest to the fastest: {', '.join(g.networks)})."),
        "",
    ]
    if leaning:
        reasons = sorted({r for m in g.models for p in m.predictions for r in p.get("extrapolation_reasons", [])})
        lines += [f"Caution: on {', '.join(leaning)} the predictions lean on fitted constants outside the range they "
                  f"were fitted on ({'; '.join(reasons)}); read them as estimates of the trend.", ""]
    headline = ""
    for m in g.models:
        lines += [f"**{m.title}**", ""]
        for n in HEADLINE_NODES:
            d = decide(m, n)
            if d is not None:
                lines.append(f"- {decision_sentence(m, d, prices)}")
                if not headline:
                    headline = (f"{m.setting.label}, "
                                + decision_sentence(m, d, prices).replace("**", "").split(". ")[0] + ".")
        lines += [f"- {stops_paying_sentence(m)}", "", *headline_table(m), ""]
        choice = plots.network_choice(
            [{"nodes": n, "network": net, "label": label, "throughput": p["throughput"], "low": interval(p)[0],
              "high": interval(p)[1]}
             for n in HEADLINE_NODES if n in m.nodes for net in m.networks
             for label, p in ((f"best of {'/'.join(m.baselines)}", best(m, net, n, m.baselines)),
                              ("birder", m.get(net, "birder", n))) if p is not None],
            outdir / f"sim_{m.setting.model}_network_choice.png",
            f"{m.setting.label}, {m.setting.batch_per_gpu}/GPU: throughput per network, linear from 0 "
            "(error bars: 80% interval)")
        lines += [f"![throughput per network, linear axis]({choice.name})", ""]
        for n in HEADLINE_NODES:
            if prices and n in m.nodes:
                lines += [*cost_ranking(m, n, prices), ""]
    lines += [f"Accuracy: {fit}; {cross.rstrip('.')}.", ""]
    for m in g.models:
        lines += [f"Best optimizer per network and node count, {m.title} (Birder / best of "
                  f"{'/'.join(m.baselines)} in brackets; tied: its interval contains 1, within the uncertainty):", "",
                  *summary_rows(m), ""]
    error = (f"fit {100 * g.summary['fit_mape']:.1f}% (in-sample), cross-validated "
             + (f"{100 * g.summary['cross_validated_mape']:.1f}%" if g.summary.get("cross_validated_mape") is not None
                else "n/a") + " (rows left out of the fit)")
    corpus = (g.summary.get("corpus_validation") or {}).get("summary")
    if corpus:
        error += (f"; corpus, each source left out: {100 * corpus['mape_left_out']:.1f}% (linear scaling "
                  f"{100 * corpus['mape_linear']:.1f}%), 80% intervals cover {100 * corpus['coverage']:.1f}%")
    return Section("\n".join(lines), {"prediction error": error, "headline": headline})


def scaling_section(outdir: Path, quick: bool) -> str:
    from sim import plots

    g = grid(quick, progress=show_progress())
    summary = g.summary
    fit, cross = accuracy_words(summary)
    cv = summary.get("cross_validation") or {}
    validation_png = plots.validation(summary["rows"], outdir, prefix="sim_", cross_validated=cv.get("rows"),
                                      title=f"Against the Birder paper: fit {100 * summary['fit_mape']:.1f}% "
                                            "in-sample" + (f", cross-validated {100 * cv['mape']:.1f}%"
                                                           if cv.get("mape") is not None else ""))
    lines = [
        "## Scaling predictions: how they are made and how accurate they are",
        "",
        "A discrete-event model (simpy) of nodes of 8 GPUs on Ethernet or InfiniBand (`sim/README.md`). Each "
        "section below says where its single-node compute comes from: a published single-node throughput where "
        "one exists, else the built-in A100 profile (FLOP rates, `sim/presets/gpus.toml`).",
        "",
        "### How accurate",
        "",
        f"- {fit}.",
        f"- {cross}.",
        *corpus_lines(summary),
        "",
        "The fit error says how well the constants reproduce the rows they were chosen on; the errors of rows left "
        "out of the fit are the ones to expect of a prediction, and the ranges in this report come from them (the "
        "corpus's for generic presets, the group cross-validation's for the Birder paper's site profiles).",
        "",
        "| network | GPUs | optimizer | published | predicted (fit) | error |",
        "|---|---:|---|---:|---:|---:|",
    ]
    lines += [f"| {r['network']} | {r['gpus']} | {r['optimizer']} | {r['published']:,.0f} | {r['predicted']:,.0f} | "
              + ("calibration |" if r["gpus"] == GPUS_PER_NODE else f"{100 * r['error']:+.1f}% |")
              for r in summary["rows"]]
    if cv.get("rows"):
        lines += ["", "Cross-validated (constants refitted without these rows):", "",
                  "| network | GPUs | optimizer | published | predicted (cross-validated) | error |",
                  "|---|---:|---|---:|---:|---:|"]
        lines += [f"| {r['network']} | {r['gpus']} | {r['optimizer']} | {r['published']:,.0f} | "
                  f"{r['predicted']:,.0f} | {100 * r['error']:+.1f}% |" for r in cv["rows"]]
    lines += ["", f"![predicted vs published: fit and cross-validated]({validation_png.name})", "",
              "### Which constants are fitted", ""]
    lines += fitted_constants_lines(summary) or ["- none: every constant is a hardware figure with its source."]
    for m in g.models:
        flagged = [p for p in m.predictions if extrapolated(p)]
        if flagged:
            nets = sorted({p["network"] for p in flagged}, key=m.networks.index)
            lines.append(f"- {m.title}: {len(flagged)} of {len(m.predictions)} predictions (on {', '.join(nets)}) "
                         "use a site's fitted constants outside the models, batch sizes or GPU counts they were "
                         "fitted on.")
    lines.append("")

    curves = {}
    for m in g.models:
        lines += _model_section(m, outdir, plots)
        curves[f"{m.setting.label}, {m.setting.batch_per_gpu}/GPU"] = [
            {"network": n, "nodes": k, "ratio": r["ratio"], "low": r["low"], "high": r["high"]}
            for k in m.nodes if k >= 2 for n in m.networks
            if (b := m.get(n, "birder", k)) and (base := best(m, n, k, m.baselines)) and (r := speedup(b, base))]
    speed_png = plots.speedup_vs_nodes(curves, outdir / "sim_birder_speedup.png",
                                       "Birder's throughput over the best uncompressed optimizer (SGDM/Adam); "
                                       "bands: paired 80% interval", "best of SGDM/Adam")
    lines += ["### Birder's speed-up against nodes, every network", "",
              "Above the black line Birder is faster than the best uncompressed optimizer on the same network.", "",
              f"![Birder speed-up over the best baseline]({speed_png.name})", ""]
    return "\n".join(lines)


def _model_section(m: ModelGrid, outdir: Path, plots) -> list[str]:
    prefix = f"sim_{m.setting.model}_"
    title = f"{m.title}: predicted throughput (bands: prediction interval)"
    curve = plots.throughput_vs_gpus(list(m.predictions), outdir, prefix=prefix, title=title)[0]
    shown = list(m.optimizers)  # every optimizer the tables name
    multi = [p for p in m.predictions if p["nodes"] >= 2]
    bars = plots.time_breakdown(multi, outdir, prefix=prefix, optimizers=shown,
                                title=f"{m.title}: share of each iteration, 2-{m.nodes[-1]} nodes "
                                      "(the same range as the throughput plot)")[0]
    gpus = [Layout(n, GPUS_PER_NODE).n_ranks for n in m.nodes]
    lines = [f"### {m.title}", "", f"Compute: {m.calibration}.", "",
             "Where Birder stops beating the best uncompressed optimizer, and why:", "", *stops_paying_details(m), "",
             f"![throughput vs GPUs]({curve.name})", "", f"![share of each iteration]({bars.name})", "",
             "Throughput (samples/s) by GPU count:", "",
             "| network | optimizer | " + " | ".join(str(k) for k in gpus) + " |", "|---|---|" + "---:|" * len(gpus)]
    for net in m.networks:
        for opt in m.optimizers:
            row = [m.get(net, opt, n) for n in m.nodes]
            lines.append(f"| {net} | {opt} | " + " | ".join(num(p["throughput"]) if p else "" for p in row) + " |")
    lines.append("")
    return lines
