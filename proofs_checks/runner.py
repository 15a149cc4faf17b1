"""Run the checks against one target, and show the verdicts as a table or JSON (../shared/CONTRACT.md)."""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import asdict, dataclass

from tqdm import tqdm

from proofs_checks import baselines, bounds, identities, parity, quantizer, schemes, semantics, theorem
from proofs_checks.registry import CHECKS, Check, Context, Outcome
from proofs_checks.target import ImplError, Target

# Importing the check modules registered their checks. Report order: the interface first, then the paper's order
# (Eq. 5, bounds, update rules and identities, semantics, Theorem 1, Section 4), then baselines and the opt-in
# parity; the sort is stable, so each module keeps its own order.
_ORDER = [m.__name__ for m in (quantizer, bounds, identities, semantics, theorem, schemes, baselines, parity)]
CHECKS.sort(key=lambda c: (c.name != "interface", _ORDER.index(c.run.__module__)))


@dataclass(frozen=True)
class Result:
    name: str
    passed: bool
    status: str
    detail: str
    claim: str
    method: str
    statistic: str
    seconds: float


def select(names: list[str] | None = None, parity: bool = False) -> list[Check]:
    """The checks to run: all default ones (plus parity if asked), or exactly ``names`` (ValueError if unknown)."""
    if names:
        known = {c.name: c for c in CHECKS}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return [known[n] for n in names]
    return [c for c in CHECKS if parity or not c.opt_in]


def run_one(ctx: Context, chk: Check) -> Result:
    """One check, never raising: a missing function, an implementation error or a crash is a failed check."""
    started = time.perf_counter()
    missing = ctx.target.missing(chk.needs)
    if missing:
        outcome = Outcome("fail", f"the implementation has no callable {', '.join(missing)}")
    else:
        try:
            outcome = chk.run(ctx)
        except ImplError as error:
            outcome = Outcome("fail", f"implementation error: {error}")
        except Exception as error:  # the target returned something the check could not use
            where = traceback.extract_tb(error.__traceback__)[-1]
            outcome = Outcome("fail", f"could not check: {type(error).__name__}: {error} "
                                      f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")
    return Result(chk.name, outcome.status != "fail", outcome.status, outcome.detail, chk.claim, chk.method,
                  outcome.statistic, round(time.perf_counter() - started, 3))


@dataclass(frozen=True)
class Report:
    target: str
    results: list[Result]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def to_json(self) -> dict:
        return {"passed": self.passed, "impl": self.target, "wall_s": self.seconds,
                "checks": [asdict(r) for r in self.results]}


def run_checks(target: Target, names: list[str] | None = None, parity: bool = False, progress: bool = True,
               ctx: Context | None = None) -> Report:
    """Every selected check against ``target`` (sharing one Context), with a progress bar on stderr."""
    checks = select(names, parity)
    ctx = ctx or Context(target)
    started = time.perf_counter()
    results = [run_one(ctx, c) for c in tqdm(checks, desc="birder check", unit="check", disable=not progress)]
    return Report(target.name, results, round(time.perf_counter() - started, 2))


def table(report: Report, markdown: bool = False) -> str:
    """claim | how it is checked | verdict | statistic, one row per check; then the totals and the wall time."""
    verdicts = {"pass": "pass", "fail": "FAIL", "n/a": "n/a", "info": "info"}
    lines = []
    if markdown:
        lines += ["| check | claim | how it is checked | verdict | statistic |", "|---|---|---|---|---|"]
        for r in report.results:
            cells = (r.name, r.claim, r.method, verdicts[r.status], r.statistic or r.detail)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        for r in report.results:
            lines += [f"{verdicts[r.status]:<5} {r.name:<26} {r.statistic}",
                      f"      claim: {r.claim}", f"      how:   {r.method}", f"      found: {r.detail}"]
    failed = [r.name for r in report.results if not r.passed]
    counts = {s: sum(r.status == s for r in report.results) for s in ("pass", "fail", "n/a", "info")}
    lines.append("")
    lines.append(f"{report.target}: {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} not applicable, "
                 f"{counts['info']} measured; wall time {report.seconds:.1f} s"
                 + (f"; failed: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


def dumps(report: Report) -> str:
    return json.dumps(report.to_json())
