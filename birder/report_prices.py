"""A price file for `birder report --prices`: what a cluster costs (``report_verdict`` ranks the set-ups by it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safeio.serialise import markdown_text


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
# Any price is 0 (a NIC or port included in the node's price; never the node itself) or in [1e-4, 1e12] units of
# its currency: from the finest price quoted (cloud prices per hour, to 1/10,000 of a unit) to more than any
# cluster's purchase in any currency (a 1,000-node cluster of 500,000 USD nodes is 5e8 USD, 1.3e13 VND; per node
# 1.3e10). Within these bounds costs and samples per cost are finite and non-zero (no overflow, no division by 0).
PRICE_RANGE = (1e-4, 1e12)
MAX_CURRENCY_CHARS = 24  # "USD", "EUR per hour", "k CHF": a name, not a sentence
YEARS_RANGE = (0.01, 100.0)  # a few days of cloud rental to a century: a payoff period, not a typo's 1e308
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
    years = data.get("years")
    if years is not None and not (isinstance(years, int | float) and not isinstance(years, bool)
                                  and YEARS_RANGE[0] <= years <= YEARS_RANGE[1]):
        raise ValueError(f"{path}: years must be a number from {YEARS_RANGE[0]:g} to {YEARS_RANGE[1]:g} (the years "
                         f"the cluster is paid off over), got {years!r:.40}")
    # the currency and the path appear only in report.md: escaped there once, here (no | or # of theirs is syntax)
    return Prices(price(data["node"], "node", positive=True), tables["nic"], tables["switch_port"],
                  markdown_text(currency.strip()), markdown_text(str(path)), None if years is None else float(years))


def use_prices(prices: Prices | None) -> None:
    """Rank by samples/s per unit cost in this run's report (None: no price file)."""
    _PRICES[:] = [prices] if prices is not None else []


def current_prices() -> Prices | None:
    """The price file of this run (``use_prices``), or None."""
    return _PRICES[0] if _PRICES else None
