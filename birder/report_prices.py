"""A price file for `birder report --prices`: what a cluster costs, and the networks ranked by samples/s per unit
of cost."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from birder.report_core import interval, num, rate
from birder.report_grid import ModelGrid, best, speedup


@dataclass(frozen=True)
class Prices:
    """What a cluster costs: per node (its GPUs included), per NIC and per switch port, by network."""

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
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
            value > 0 if positive else value >= 0)
        if not ok:
            raise ValueError(f"{path}: {key} must be a {'positive' if positive else 'non-negative'} number, "
                             f"got {value!r}")
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
    if not isinstance(currency, str) or not currency.strip():
        raise ValueError(f"{path}: currency must be a non-empty string, got {currency!r}")
    return Prices(price(data["node"], "node", positive=True), tables["nic"], tables["switch_port"], currency,
                  str(path))


def use_prices(prices: Prices | None) -> None:
    """Rank by samples/s per unit cost in this run's report (None: no price file)."""
    _PRICES[:] = [prices] if prices is not None else []


def current_prices() -> Prices | None:
    """The price file of this run (``use_prices``), or None."""
    return _PRICES[0] if _PRICES else None


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



def per_cost(p: dict, prices: Prices) -> float | None:
    """Samples/s per 1,000 of cluster cost of the set-up ``p``; None where its network is not priced."""
    cost = prices.cluster_cost(p["network"], p["nodes"], p.get("nics_per_node", 1))
    return None if not cost else p["throughput"] / cost * 1e3
