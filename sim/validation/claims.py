"""The Birder paper's stated claims about its throughputs (sim/validation/birder_paper_claims.toml, each with
its line citation) checked against the simulator's predictions (``claim_check``).
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from safeio.inputs import read_text_bounded
from sim.hardware import (
    MAX_GPUS,
)
from sim.models import MODELS
from sim.workload import OPTIMIZERS, predict

if TYPE_CHECKING:

    from sim import workload
from sim.validation.order import basis_network
from sim.validation.paper import GPUS_PER_NODE, MAX_BATCH_PER_GPU, SITE_OF, Row, row_cluster, single_node_or_none

CLAIMS_TOML = Path(__file__).resolve().parent / "birder_paper_claims.toml"
CLAIM_QUANTITIES = ("max_speedup", "min_speedup", "growth", "compression_ms", "comm_over_compute")
SPEEDUP_QUANTITIES = ("max_speedup", "min_speedup")
MAX_CLAIMS_BYTES = 1 << 20
_CLAIM_REQUIRED = {"id": str, "lines": list, "states": str, "quantity": str, "model": str, "batch_per_gpu": int,
                   "network": str, "optimizer": str, "gpus": list}
_CLAIM_OPTIONAL = {"baseline": str, "baseline_network": str, "at_gpus": int, "value": float, "tolerance": float,
                   "low": float, "high": float}


@dataclass(frozen=True)
class Claim:
    """One statement of the paper's text about its throughputs: a quantity of the predictions (``CLAIM_QUANTITIES``,
    described in sim/validation/birder_paper_claims.toml) and the range [low, high] the text allows it."""

    id: str
    lines: tuple[int, ...]  # lines of shared/papers/birder_paper.txt that state it
    states: str
    quantity: str
    model: str
    batch_per_gpu: int
    network: str  # the paper's name: 10gbe or ib-hdr
    optimizer: str
    gpus: tuple[int, ...]
    baseline: str | None = None
    baseline_network: str | None = None
    at_gpus: int | None = None  # where a maximum or minimum must be reached
    value: float | None = None  # the stated figure, when the text gives one
    low: float | None = None
    high: float | None = None

    @property
    def stated(self) -> str:
        bounds = " to ".join(f"{b:.3g}" for b in (self.low, self.high) if b is not None)
        if self.low is None:
            bounds = f"<= {self.high:.3g}"
        elif self.high is None:
            bounds = f">= {self.low:.3g}"
        text = f"{self.value:g} ({bounds})" if self.value is not None else bounds
        return text + (f" at {self.at_gpus} GPUs" if self.at_gpus is not None else "")

    def holds(self, predicted: float, at: int) -> bool:
        return ((self.low is None or predicted >= self.low) and (self.high is None or predicted <= self.high)
                and (self.at_gpus is None or at == self.at_gpus))


def _claim(entry: object, where: str) -> Claim:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: a claim is a table of keys, got {entry!r}")
    unknown = sorted(set(entry) - set(_CLAIM_REQUIRED) - set(_CLAIM_OPTIONAL))
    missing = sorted(set(_CLAIM_REQUIRED) - set(entry))
    if unknown or missing:
        raise ValueError(f"{where}: " + "; ".join(
            part for part in (unknown and f"unknown keys {', '.join(unknown)}", missing and
                              f"missing keys {', '.join(missing)}") if part))
    for key, kind in {**_CLAIM_REQUIRED, **_CLAIM_OPTIONAL}.items():
        value = entry.get(key)
        number = kind is float and isinstance(value, int | float)
        if value is not None and (isinstance(value, bool) or not (isinstance(value, kind) or number)):
            raise ValueError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
    gpus, lines = entry["gpus"], entry["lines"]
    if not gpus or any(isinstance(g, bool) or not isinstance(g, int) or g < GPUS_PER_NODE or g % GPUS_PER_NODE
                       or g > MAX_GPUS for g in gpus) or list(gpus) != sorted(set(gpus)):
        raise ValueError(f"{where}: gpus must be increasing whole numbers of {GPUS_PER_NODE}-GPU nodes, got {gpus!r}")
    if not lines or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lines):
        raise ValueError(f"{where}: lines must be the paper's line numbers, got {lines!r}")
    quantity = entry["quantity"]
    if quantity not in CLAIM_QUANTITIES:
        raise ValueError(f"{where}: unknown quantity {quantity!r}; choose one of {', '.join(CLAIM_QUANTITIES)}")
    if (quantity in SPEEDUP_QUANTITIES) != ("baseline" in entry):
        raise ValueError(f"{where}: a baseline belongs to {' and '.join(SPEEDUP_QUANTITIES)} claims, and only to them")
    if "baseline_network" in entry and "baseline" not in entry:
        raise ValueError(f"{where}: baseline_network without a baseline")
    if quantity == "growth" and len(gpus) < 2:
        raise ValueError(f"{where}: growth needs at least two GPU counts, got {gpus!r}")
    if entry.get("at_gpus") is not None and entry["at_gpus"] not in gpus:
        raise ValueError(f"{where}: at_gpus {entry['at_gpus']} is not one of gpus {gpus!r}")
    for key, known in (("model", MODELS), ("optimizer", OPTIMIZERS), ("baseline", OPTIMIZERS),
                       ("network", SITE_OF), ("baseline_network", SITE_OF)):
        if key in entry and entry[key] not in known:
            raise ValueError(f"{where}: unknown {key} {entry[key]!r}; choose one of {', '.join(known)}")
    if not 1 <= entry["batch_per_gpu"] <= MAX_BATCH_PER_GPU:
        raise ValueError(f"{where}: batch_per_gpu must be 1 to {MAX_BATCH_PER_GPU:,}, got {entry['batch_per_gpu']}")
    value, tolerance, low, high = (entry.get(k) for k in ("value", "tolerance", "low", "high"))
    if (value is None) != (tolerance is None) or (value is not None) == (low is not None or high is not None):
        raise ValueError(f"{where}: give the range as value and tolerance, or as low and/or high")
    if value is not None:
        if not (math.isfinite(value) and value > 0 and math.isfinite(tolerance) and 0 <= tolerance < 1):
            raise ValueError(f"{where}: value must be positive and tolerance in [0, 1), got {value!r}, {tolerance!r}")
        low, high = value * (1 - tolerance), value * (1 + tolerance)
    if any(b is not None and not math.isfinite(b) for b in (low, high)) or (
            low is not None and high is not None and low > high):
        raise ValueError(f"{where}: low {low!r} and high {high!r} are not a range")
    return Claim(entry["id"], tuple(lines), entry["states"], quantity, entry["model"], entry["batch_per_gpu"],
                 entry["network"], entry["optimizer"], tuple(gpus), entry.get("baseline"),
                 entry.get("baseline_network"), entry.get("at_gpus"), value, low, high)


def claims(path: str | Path | None = None) -> tuple[Claim, ...]:
    """The claims of ``path`` (default: the Birder paper's, ``CLAIMS_TOML``). ValueError naming the file and the
    claim for a file that is not TOML, holds no claims, or has a claim with a missing, unknown or ill-typed key,
    an unknown model, optimizer or network, GPU counts that are not whole nodes, or no range."""
    path = Path(path) if path is not None else CLAIMS_TOML
    if not os.path.lexists(path):
        raise ValueError(f"no claims file at {path}")
    text = read_text_bounded(path, MAX_CLAIMS_BYTES, "claims file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not TOML ({error})") from None
    entries = data.get("claim")
    if set(data) != {"claim"} or not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected [[claim]] tables and nothing else")
    out = tuple(_claim(e, f"{path}, claim {k + 1} ({e.get('id', 'no id') if isinstance(e, dict) else '?'})")
                for k, e in enumerate(entries))
    ids = [c.id for c in out]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{path}: claim ids given twice: {', '.join(repeated)}")
    return out


@dataclass(frozen=True)
class ClaimVerdict:
    """A claim beside the simulator's value of its quantity and where (GPU count) that value is reached."""

    claim: Claim
    predicted: float
    at_gpus: int
    holds: bool

    def line(self) -> str:
        c = self.claim
        return (f"claim {c.id} (paper line {', '.join(map(str, c.lines))}): stated {c.quantity} {c.stated}; "
                f"predicted {self.predicted:.3g} at {self.at_gpus} GPUs: {'holds' if self.holds else 'DOES NOT HOLD'}")

    def as_dict(self) -> dict:
        return {"id": self.claim.id, "lines": list(self.claim.lines), "states": self.claim.states,
                "quantity": self.claim.quantity, "stated": self.claim.stated, "low": self.claim.low,
                "high": self.claim.high, "predicted": self.predicted, "at_gpus": self.at_gpus, "holds": self.holds}


@dataclass(frozen=True)
class ClaimCheck:
    """The paper's claims against predictions on one basis (``BASES``), beside the order check of its rows."""

    basis: str
    verdicts: tuple[ClaimVerdict, ...]

    @property
    def held(self) -> int:
        return sum(v.holds for v in self.verdicts)

    def as_dict(self) -> dict:
        return {"basis": self.basis, "claims": len(self.verdicts), "held": self.held,
                "verdicts": [v.as_dict() for v in self.verdicts]}


def claim_prediction(table: list[Row], basis: str, model: str, batch_per_gpu: int, network: str, optimizer: str,
                     gpus: int, tweak=None) -> workload.Prediction:
    """One configuration of a claim predicted on ``basis``, calibrated by the table's single-node row of the same
    model, batch, network and optimizer where it has one (else from the GPU's FLOP rate, as a held-out row is);
    ``tweak`` changes the cluster as in ``compare`` (e.g. ``constants_tweak``: other site constants)."""
    row = Row(model, batch_per_gpu, network, optimizer, gpus, math.nan)  # the configuration; nothing measured
    c = row_cluster(row, basis_network(basis, network))
    return predict(c if tweak is None else tweak(c), model=model, batch_per_gpu=batch_per_gpu, optimizer=optimizer,
                   single_node_throughput=single_node_or_none(table, row))


def claim_quantity(claim: Claim, of) -> tuple[float, int]:
    """``claim``'s quantity and the GPU count where it is reached, from ``of(optimizer, network, gpus)``: a
    prediction (``claim_prediction``), or anything with the fields the quantity reads (``throughput`` for speed-ups
    and growth, as a published row has)."""
    values: dict[int, float] = {}
    pick = min
    for k, g in enumerate(claim.gpus):
        p = of(claim.optimizer, claim.network, g)
        if claim.quantity in SPEEDUP_QUANTITIES:
            base = of(claim.baseline, claim.baseline_network or claim.network, g)
            values[g] = p.throughput / base.throughput
            pick = max if claim.quantity == "max_speedup" else min
        elif claim.quantity == "growth" and k:
            values[g] = p.throughput / of(claim.optimizer, claim.network, claim.gpus[k - 1]).throughput
        elif claim.quantity == "compression_ms":
            values[g], pick = p.compression_s * 1e3, max
        elif claim.quantity == "comm_over_compute":
            values[g] = p.exposed_communication_s / p.compute_s
    at = pick(values, key=values.__getitem__)
    return values[at], at


def claim_verdict(claim: Claim, table: list[Row], basis: str, tweak=None) -> ClaimVerdict:
    """The value of ``claim``'s quantity on ``basis`` and whether it lies in the claim's range."""
    def of(optimizer: str, network: str, gpus: int) -> workload.Prediction:
        return claim_prediction(table, basis, claim.model, claim.batch_per_gpu, network, optimizer, gpus, tweak)

    value, at = claim_quantity(claim, of)
    return ClaimVerdict(claim, value, at, claim.holds(value, at))


def claim_check(table: list[Row], basis: str, checked: tuple[Claim, ...] | None = None, tweak=None,
                progress=None) -> ClaimCheck:
    """Every claim of ``checked`` (default: the paper's, ``claims()``) on ``basis``, calibrated by ``table``'s
    single-node rows (``tweak``: as in ``claim_prediction``); ``progress`` (a tqdm bar) counts one per claim."""
    verdicts = []
    for claim in checked or claims():
        verdicts.append(claim_verdict(claim, table, basis, tweak))
        if progress is not None:
            progress.update(1)
    return ClaimCheck(basis, tuple(verdicts))


def claims_markdown(checks: list[ClaimCheck]) -> str:
    """The claims checks as the sim README prints them (a test compares them with a fresh run): one row per claim,
    the text's range beside each basis's predicted value, where it is reached and whether it holds."""
    lines = ["| claim | paper line | quantity | stated | " + " | ".join(c.basis for c in checks) + " |",
             "|" + "---|" * (4 + len(checks))]
    for k, v in enumerate(checks[0].verdicts):
        cells = [f"{c.verdicts[k].predicted:.3g} at {c.verdicts[k].at_gpus} "
                 f"({'holds' if c.verdicts[k].holds else '**does not hold**'})" for c in checks]
        lines.append(f"| {v.claim.states} | {', '.join(map(str, v.claim.lines))} | {v.claim.quantity} | "
                     f"{v.claim.stated} | " + " | ".join(cells) + " |")
    lines.append("| | | | claims that hold | " + " | ".join(f"{c.held} of {len(c.verdicts)}" for c in checks) + " |")
    return "\n".join(lines)


def claim_check_lines(checks: list[ClaimCheck]) -> list[str]:
    """Claims checks as ``birder validate`` prints them: per basis a count, then one line per claim."""
    lines = []
    for check in checks:
        lines.append(f"the paper's stated claims on the {check.basis}: {check.held} of {len(check.verdicts)} hold")
        lines += ["  " + v.line() for v in check.verdicts]
    return lines
