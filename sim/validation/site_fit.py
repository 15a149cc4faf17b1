"""The site profiles' FITTED constants (``presets/sites.toml``) refitted on the public multi-node rows of each
site, minimising the mean absolute percentage error with Nelder-Mead in log space (the incast onset of the socket
site: the best bracket of consecutive bursts of the rows), and ``group_cross_validation``, which leaves out whole
groups (an optimizer, a GPU count, a network, a model, a batch size, where the rows hold more than one), refits on
the rest and predicts the group left out.

``python -m sim.validation.site_fit [SITE ...]`` refits and prints the constants (``--claims``: the claims check).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sim.hardware import (
    SITES,
    Cluster,
    network_spec,
)
from sim.models import model_profile
from sim.system import burst_bytes, phase_load, step_schedule
from sim.workload import ddp_buckets, policy

if TYPE_CHECKING:

    pass
from sim.validation.claims import claim_check, claim_check_lines
from sim.validation.order import BASES
from sim.validation.paper import GPUS_PER_NODE, Prediction, Row, compare, mape, row_cluster, rows, site_of

# the FITTED constants of each site (sites.toml keys) and the Nic field and unit factor each sets
FITTED = {"birder-paper-10gbe": ("message_overhead_us", "step_overhead_us", "share_at_8_gpus"),
          "birder-paper-ib": ("message_overhead_us", "efficiency", "step_overhead_us")}
_NIC_FIELD = {"message_overhead_us": ("message_overhead", 1e-6), "step_overhead_us": ("step_overhead", 1e-6),
              "efficiency": ("efficiency", 1.0), "share_at_8_gpus": ("share_at_8_gpus", 1.0),
              "incast_onset_bytes": ("incast_onset_bytes", 1.0), "incast_certain_bytes": ("incast_certain_bytes", 1.0)}


MAX_LOG_CONSTANT = 50.0  # |log| of a fitted constant in sites.toml's units: e^50 us or a share of e^-50 is no cluster
GRID_STARTS = {"efficiency": (0.05, 0.1, 0.2, 0.4, 0.8), "step_overhead_us": (1.0, 10.0, 30.0, 100.0),
               "share_at_8_gpus": (0.64, 0.8, 1.0)}


def constants_tweak(fitted: dict[str, dict[str, float]]):
    """A cluster tweak that puts fitted constants (per site, in sites.toml's units) on its NIC."""
    def tweak(c: Cluster) -> Cluster:
        values = fitted.get(c.nic.name, {})
        fields = {_NIC_FIELD[k][0]: v * _NIC_FIELD[k][1] for k, v in values.items() if k in _NIC_FIELD}
        for share in ("efficiency", "share_at_8_gpus"):  # shares of a link: at most all of it
            if share in fields:
                fields[share] = min(1.0, fields[share])
        return replace(c, nic=replace(c.nic, **fields))

    return tweak


def row_bursts(row: Row) -> set[float]:
    """The bursts (``sim.system.burst_bytes``) into one NIC of every many-to-one phase the row's collectives
    run: where the onset of incast can lie."""
    c = row_cluster(row)
    profile = model_profile(row.model)
    out = set()
    for kind in policy(row.optimizer, row.model):
        if kind.comm == "none":
            continue
        sizes = {profile.n_params} if kind.comm == "after_backward" else {b.elements for b in ddp_buckets(profile)}
        for elements in sizes:
            sched = step_schedule(row.optimizer, c, elements, "hierarchical", kind.full_precision)
            for phase in sched.phases:
                load = phase_load(phase, sched.layout, c.rails)
                if load.nic_rx > 1 and not phase.pattern.is_ring and phase.n_rounds:
                    out.add(burst_bytes(load, phase.message_bytes(0)))
    return out


def fit(site: str, path: str | Path | None = None, train: list[Row] | None = None) -> dict[str, float]:
    """Refit ``site``'s FITTED constants on its multi-node rows (``train``: only those rows). Returns them in
    sites.toml's units, with the fit's ``mape``."""
    from scipy.optimize import minimize

    if site not in FITTED:
        raise ValueError(f"no fitted constants for {site!r}; sites: {', '.join(FITTED)}")
    table = rows(path)
    mine = [r for r in (train if train is not None else table) if site_of(r.network) == site
            and r.gpus > GPUS_PER_NODE]
    if not mine:
        raise ValueError(f"no multi-node rows of {site} to fit on")
    names = FITTED[site]
    spec = network_spec(site)

    def error(log_values, incast=()):
        if any(abs(v) > MAX_LOG_CONSTANT for v in log_values):  # a constant the rows do not bound drifts off
            return math.inf
        fitted = dict(zip(names, (math.exp(v) for v in log_values), strict=True)) | dict(incast)
        return mape(compare(mine, tweak=constants_tweak({site: fitted}), table=table))

    start = [math.log(max(spec.get(n, 1.0), 1e-3)) for n in names]
    # the efficiency and the per-step overhead trade against each other (a slow link or a slow step), and the
    # error surface has a basin for each: Nelder-Mead starts from the best two of the profile's values and a grid
    # over those two constants
    grid = [start]
    for n in (n for n in names if n in GRID_STARTS):
        k = names.index(n)
        grid = [p[:k] + [math.log(v)] + p[k + 1:] for p in grid for v in GRID_STARTS[n]]
    starts = sorted(map(list, dict.fromkeys(tuple(p) for p in [start, *grid])), key=error)[:2]
    start = starts[0]
    brackets: list[tuple] = [()]
    if network_spec(site)["transport"] == "socket":
        # the onset of incast lies between two consecutive bursts of the rows, none of which tells where inside;
        # no incast at all comes first so that it wins ties; the three best brackets at the start are refined
        bursts = sorted(set().union(*(row_bursts(r) for r in mine)))
        brackets = [(("incast_onset_bytes", math.inf), ("incast_certain_bytes", math.inf))]
        brackets += [(("incast_onset_bytes", a), ("incast_certain_bytes", b))
                     for a, b in zip(bursts, bursts[1:], strict=False)]
        scores = [error(start, incast) for incast in brackets]
        brackets = [brackets[i] for i in sorted(range(len(brackets)), key=lambda i: (scores[i], i))[:3]]
    best = None
    for begin, incast in ((b, i) for b in starts for i in brackets):
        res = minimize(error, begin, args=(incast,), method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-4})
        if best is None or res.fun < best[0] - 1e-9:
            best = (res.fun, res.x, incast)
    values = dict(zip(names, (math.exp(v) for v in best[1]), strict=True)) | dict(best[2])
    values |= {n: min(1.0, values[n]) for n in ("efficiency", "share_at_8_gpus") if n in values}  # as applied
    values["mape"] = float(best[0])
    return values


def _groups(table: list[Row]) -> list[tuple[str, object]]:
    """The groups a cross-validation can leave out: every value of a column that has more than one value."""
    multi = [r for r in table if r.gpus > GPUS_PER_NODE]
    out = []
    for column in ("model", "batch_per_gpu", "network", "optimizer", "gpus"):
        values = sorted({getattr(r, column) for r in multi}, key=str)
        if len(values) > 1:
            out += [(column, v) for v in values]
    return out


@dataclass(frozen=True)
class HeldOutGroup:
    """One group of a cross-validation: the rows of one value of one column, predicted after a refit without them."""

    left_out: str  # the column held out
    value: object  # its value (a str or an int, as in the rows)
    rows: int  # how many rows it held
    mape: float  # over those rows
    constants: dict[str, dict[str, float]]  # per site, the constants refitted without the group (sites.toml units)
    unfitted_sites: tuple[str, ...]  # sites left with no row to fit on: predicted with their generic base preset

    def as_dict(self) -> dict:
        return {"left_out": self.left_out, "value": self.value, "rows": self.rows, "mape": self.mape,
                "constants": self.constants, "unfitted_sites": list(self.unfitted_sites)}


@dataclass(frozen=True)
class CrossValidation:
    """A group cross-validation: the MAPE over every held-out prediction, per column, per group, and the rows."""

    mape: float  # over every held-out prediction
    by_column: dict[str, float]  # per column with several values: the MAPE of its groups' rows
    groups: tuple[HeldOutGroup, ...]
    rows: tuple[Prediction, ...]  # each with ``left_out``
    untestable_columns: tuple[str, ...]  # columns with one value only in the rows: nothing to hold out

    def as_dict(self) -> dict:
        return {"mape": self.mape, "by_column": dict(self.by_column), "groups": [g.as_dict() for g in self.groups],
                "rows": [r.as_dict() for r in self.rows], "untestable_columns": list(self.untestable_columns)}

    @classmethod
    def from_dict(cls, stored: dict) -> CrossValidation:
        """The inverse of ``as_dict``, for a stored measurement (sim/presets/cross_validation.json)."""
        groups = tuple(HeldOutGroup(**{**g, "unfitted_sites": tuple(g["unfitted_sites"])}) for g in stored["groups"])
        return cls(stored["mape"], dict(stored["by_column"]), groups,
                   tuple(Prediction(**r) for r in stored["rows"]), tuple(stored["untestable_columns"]))


def group_cross_validation(path: str | Path | None = None, progress=None) -> CrossValidation:
    """Leave out whole groups of the multi-node rows: for each value of each column with several values, refit
    every site on the other rows and predict the rows left out. A site left with no rows to fit on (a network
    left out) is predicted with its generic base preset, unfitted: a cluster nobody fitted. Returns the MAPE over
    every held-out prediction, per column, and the rows; columns with one value only are listed as untestable."""
    table = rows(path)
    multi = [r for r in table if r.gpus > GPUS_PER_NODE]
    detail, results = [], []
    groups = _groups(table)
    for column, value in groups:
        held = [r for r in multi if getattr(r, column) == value]
        train = [r for r in multi if getattr(r, column) != value]
        fitted, unfitted = {}, set()
        for site in sorted({site_of(r.network) for r in held}):
            if site in FITTED and any(site_of(r.network) == site for r in train):
                fitted[site] = fit(site, path, train)
            elif site in FITTED:
                unfitted.add(site)
        out = []
        for r in held:
            site = site_of(r.network)
            base = SITES[site]["base"] if site in unfitted else None
            out += [replace(p, left_out=f"{column}={value}")
                    for p in compare([r], tweak=constants_tweak(fitted), table=table, network=base)]
        detail.append(HeldOutGroup(column, value, len(out), mape(out), fitted, tuple(sorted(unfitted))))
        results += out
        if progress is not None:
            progress.update(1)
    by_column = {}
    for column in dict.fromkeys(c for c, _ in groups):
        rs = [r for r in results if r.left_out.startswith(column + "=")]
        by_column[column] = mape(rs)
    constant = tuple(c for c in ("model", "batch_per_gpu", "network", "optimizer", "gpus") if c not in by_column)
    return CrossValidation(mape(results), by_column, tuple(detail), tuple(results), constant)


def cross_validation_groups(path: str | Path | None = None) -> int:
    return len(_groups(rows(path)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.validation.site_fit",
                                     description="Refit the site profiles' FITTED constants on the public rows "
                                                 "and print them (sites.toml units) with the fit's MAPE.")
    parser.add_argument("sites", nargs="*", choices=[[], *FITTED], metavar="SITE",
                        help=f"site profiles to refit (default all: {', '.join(FITTED)})")
    parser.add_argument("--csv", default=None, help="measurements file (default: the public rows)")
    parser.add_argument("--claims", action="store_true",
                        help="print the check of the paper's stated claims (birder_paper_claims.toml) instead")
    args = parser.parse_args(argv)
    try:
        if args.claims:
            table = rows(args.csv)
            print("\n".join(claim_check_lines([claim_check(table, basis) for basis in BASES])))
            return 0
        for site in args.sites or FITTED:
            print(site, fit(site, args.csv))
    except ValueError as error:
        print(f"python -m sim.validation.site_fit: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
