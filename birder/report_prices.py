"""A price file for `birder report --prices`: what a cluster costs (``report_verdict`` ranks the set-ups by it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Prices:
    """What a cluster costs: per node (its GPUs included), per NIC and per switch port, by network; ``years``
    (optional): the years the cluster is paid off over, for a cost per sample. The NICs per node are not the file's:
    they are the simulated cluster's (a preset's count, or a cluster file's ``[network] count``), and the report
    says how many it priced."""

    node: float
    nic: dict[str, float]
    switch_port: dict[str, float]
    currency: str = "units"
    path: str = ""
    years: float | None = None

    def cluster_cost(self, network: str, nodes: int, nics_per_node: int) -> float | None:
        """nodes x (node + NICs per node x (NIC + switch port)); None where the file prices no NIC or port of
        ``network``."""
        if network not in self.nic or network not in self.switch_port:
            return None
        return nodes * (self.node + nics_per_node * (self.nic[network] + self.switch_port[network]))


PRICE_KEYS = {"currency", "node", "nic", "switch_port", "years"}
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
                         f"optional currency and years; found {sorted(data)}")

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
    years = price(data["years"], "years", positive=True) if "years" in data else None
    return Prices(price(data["node"], "node", positive=True), tables["nic"], tables["switch_port"], currency,
                  str(path), years)


def use_prices(prices: Prices | None) -> None:
    """Rank by samples/s per unit cost in this run's report (None: no price file)."""
    _PRICES[:] = [prices] if prices is not None else []


def current_prices() -> Prices | None:
    """The price file of this run (``use_prices``), or None."""
    return _PRICES[0] if _PRICES else None
