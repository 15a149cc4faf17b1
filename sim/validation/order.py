"""The order of optimizers on the paper's rows, on the site profiles and on generic presets (``order_check``),
and its Markdown table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:

    pass
from sim.validation.figures import percent
from sim.validation.paper import GPUS_PER_NODE, OrderAgreement, Prediction, Row, compare, mape, order_agreement, site_of

BASES = ("site profiles", "generic presets")  # what an order check predicts the paper's rows on


@dataclass(frozen=True)
class OrderCheck:
    """The rows of a table predicted on one basis: the paper's site profiles (constants fitted on the public rows)
    or the generic presets of the rows' network names (hardware values only, nothing fitted), each calibrated by
    its single-node row; with the order of optimizers in every multi-node (model, batch, network, GPUs) group."""

    basis: str  # one of BASES
    predictions: tuple[Prediction, ...]  # every row, single-node rows included (they are the calibration)
    orders: tuple[OrderAgreement, ...]  # multi-node groups only: a single node is matched by construction

    @property
    def multi_node(self) -> list[Prediction]:
        return [p for p in self.predictions if p.gpus > GPUS_PER_NODE]

    @property
    def orders_wrong(self) -> int:
        return sum(not o.same for o in self.orders)

    @classmethod
    def of(cls, basis: str, predictions: list[Prediction]) -> OrderCheck:
        """The check of ``predictions`` made on ``basis``: their multi-node groups' orders."""
        orders = tuple(o for o in order_agreement(predictions) if o.gpus > GPUS_PER_NODE)
        return cls(basis, tuple(predictions), orders)

    def as_dict(self) -> dict:
        return {"basis": self.basis, "mape_multi_node": mape(self.multi_node), "groups": len(self.orders),
                "orders_wrong": self.orders_wrong, "rows": [p.as_dict() for p in self.predictions],
                "orders": [o.as_dict() for o in self.orders]}


def order_check(table: list[Row], basis: str, progress=None) -> OrderCheck:
    """Predict every row of ``table`` on ``basis`` (``BASES``) and rank the optimizers of every multi-node group
    by published and by predicted throughput. Generic presets take the row's network name as it stands (the
    paper's ``10gbe`` and ``ib-hdr`` are then the hardware presets, not its clusters)."""
    predictions = [p for row in table
                   for p in compare([row], progress=progress, table=table, network=basis_network(basis, row.network))]
    return OrderCheck.of(basis, predictions)


def basis_network(basis: str, network: str) -> str:
    """The ``--network`` profile a paper's network name (``10gbe``, ``ib-hdr``) is predicted on, on ``basis``:
    its cluster's site profile, or the generic preset of the same name."""
    if basis not in BASES:
        raise ValueError(f"unknown basis {basis!r}; choose one of {', '.join(BASES)}")
    return site_of(network) if basis == BASES[0] else network


def order_check_markdown(checks: list[OrderCheck]) -> str:
    """The order checks as the sim README prints them (a test compares them with a fresh run): one line per
    multi-node group, the published order beside each basis's, then each row's error on each basis."""
    head = "| model | batch | network | GPUs | published order | " + " | ".join(c.basis for c in checks) + " |"
    lines = [head, "|" + "---|" * (5 + len(checks))]
    for k, o in enumerate(checks[0].orders):
        cells = [f"{' > '.join(c.orders[k].predicted_order)} ({'right' if c.orders[k].same else '**wrong**'})"
                 for c in checks]
        lines.append(f"| {o.model} | {o.batch_per_gpu} | {o.network} | {o.gpus} | {' > '.join(o.published_order)} | "
                     + " | ".join(cells) + " |")
    lines.append("| | | | | groups in the published order | "
                 + " | ".join(f"{len(c.orders) - c.orders_wrong} of {len(c.orders)}" for c in checks) + " |")
    lines += ["", "| model | batch | network | optimizer | GPUs | published | "
              + " | ".join(f"{c.basis} (error)" for c in checks) + " |", "|" + "---|" * (6 + len(checks))]
    for k, p in enumerate(checks[0].multi_node):
        lines.append(f"| {p.model} | {p.batch_per_gpu} | {p.network} | {p.optimizer} | {p.gpus} | {p.published:,.0f} | "
                     + " | ".join(f"{c.multi_node[k].predicted:,.0f} ({c.multi_node[k].error * 100:+.1f}%)"
                                  for c in checks) + " |")
    lines.append("| | | | | | MAPE | " + " | ".join(f"{percent(mape(c.multi_node))}" for c in checks) + " |")
    return "\n".join(lines)
