"""Run the checks against one target, and show the verdicts as a table or JSON.

JSON: ``{"passed": bool, "checks": [{"name", "passed", "detail", "kind", ...}]}``, ``kind`` "paper" for a claim of
the paper and "contract" for a clause of the interface. Each root cause is reported once: a check that rests on
one that failed (``after``), or meets an implementation error already reported, is ``blocked`` (not judged; it
does not pass) with a pointer to the check that reported the cause.
"""

from __future__ import annotations

import json
import re
import time
import traceback
from dataclasses import asdict, dataclass

from tqdm import tqdm

from proofs_checks import (
    bounds,
    contract,
    conventions,
    identities,
    parity,
    quantizer,
    schemes,
    semantics,
    structure,
    theorem,
)
from proofs_checks.registry import CHECKS, Check, Context, Outcome
from proofs_checks.target import ImplError, Target

# Importing the check modules registered their checks. Run order: the interface and shapes first, then the paper's order
# (Eq. 5, update rules and identities, bounds, semantics, Theorem 1, Section 4), the contract's clauses, then
# the opt-in parity; the sort is stable, so each module keeps its own order. A check runs after the
# checks it rests on. The table shows the contract's clauses first.
_ORDER = [m.__name__ for m in (quantizer, identities, bounds, semantics, theorem, schemes, contract, conventions,
                                structure, parity)]
FIRST = ("interface", "contract_shapes")  # an unreadable or misshapen result is reported by the contract first
CHECKS.sort(key=lambda c: (FIRST.index(c.name) if c.name in FIRST else len(FIRST), _ORDER.index(c.run.__module__)))


def _after_first(checks: list[Check]) -> list[Check]:
    """The same order, except that a check moves after the checks it rests on (a stable topological order)."""
    placed, pending = [], list(checks)
    while pending:
        done = {c.name for c in placed}
        ready = next(c for c in pending if all(a in done for a in c.after))  # StopIteration: a cycle
        placed.append(ready)
        pending.remove(ready)
    return placed


CHECKS[:] = _after_first(CHECKS)


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
    kind: str = "paper"
    severity: str = "error"  # "error": the algorithm is wrong; "warning": the interface's robustness only


def select(names: list[str] | None = None, parity: bool = False) -> list[Check]:
    """The checks to run: all default ones (plus parity if asked), or exactly ``names`` (ValueError if unknown)."""
    if names:
        known = {c.name: c for c in CHECKS}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return [known[n] for n in names]
    return [c for c in CHECKS if parity or not c.opt_in]


def _cause(message: str) -> str:
    """An implementation error without where it happened (trajectory, step) or the sizes it met (a shape, init's
    arguments), to recognise a repeated cause."""
    return re.sub(r"\(\d+(, \d+)*,?\)", "(sizes)", re.sub(r" \((trajectory|first at)[^)]*\)$", "", message))


def run_one(ctx: Context, chk: Check) -> Result:
    """One check, never raising: a missing function, an implementation error or a crash is a failed check; a check
    resting on a failed one, or meeting an implementation error already reported, is blocked (not judged)."""
    started = time.perf_counter()
    missing = ctx.target.missing(chk.needs)
    failed_before = [name for name in chk.after if name in ctx.failed]
    if missing:
        outcome = Outcome("fail", f"the implementation has no callable {', '.join(missing)}")
        if "interface" in ctx.failed:
            outcome = Outcome("blocked", f"not judged: {outcome.detail} (reported by interface)")
    elif failed_before:
        outcome = Outcome("blocked", f"not judged: it rests on {', '.join(failed_before)}, which fails")
    else:
        try:
            outcome = chk.run(ctx)
        except ImplError as error:
            cause = _cause(str(error))
            if "interface" in ctx.failed:
                outcome = Outcome("blocked", f"not judged: the implementation lacks the interface (interface): {cause}")
            elif cause in ctx.errors:
                outcome = Outcome("blocked", f"not judged: the implementation error reported by {ctx.errors[cause]} "
                                             f"({cause})")
            else:
                if chk.severity == "error":  # a warning's cause does not silence an error check meeting it
                    ctx.errors[cause] = chk.name
                outcome = Outcome("fail", f"implementation error: {error}")
        except Exception as error:  # the target returned something the check could not use
            where = traceback.extract_tb(error.__traceback__)[-1]
            outcome = Outcome("fail", f"could not check: {type(error).__name__}: {error} "
                                      f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno}); the implementation's "
                                      "outputs may be non-finite or of an unexpected type")
    if outcome.status in ("fail", "blocked") and chk.severity == "error":  # nothing rests on a warning
        ctx.failed.add(chk.name)
    return Result(chk.name, outcome.status not in ("fail", "blocked"), outcome.status, outcome.detail, chk.claim,
                  chk.method, outcome.statistic, round(time.perf_counter() - started, 3), chk.kind, chk.severity)


@dataclass(frozen=True)
class Report:
    target: str
    results: list[Result]
    seconds: float

    strict: bool = False  # warnings fail too
    processes_ended: tuple[int, ...] = ()  # processes the implementation left running, ended by `birder check`

    @property
    def passed(self) -> bool:
        """No check of severity "error" fails (under ``strict``, no check fails at all)."""
        return all(r.passed for r in self.results if self.strict or r.severity == "error")

    @property
    def warnings(self) -> list[str]:
        """The checks of severity "warning" that fail: the interface's robustness, not the algorithm (one not
        judged, resting on a failure, is counted with those, not as a warning)."""
        return [r.name for r in self.results if r.severity == "warning" and r.status == "fail"]

    @property
    def interface_broken(self) -> str | None:
        """Why the implementation cannot be judged (its interface check failed), or None."""
        for r in self.results:
            if r.name == "interface" and not r.passed:
                return r.detail
        return None

    def to_json(self) -> dict:
        return {"passed": self.passed, "impl": self.target, "wall_s": self.seconds, "strict": self.strict,
                "warnings": self.warnings, "processes_ended": list(self.processes_ended),
                "checks": [asdict(r) for r in self.results]}


def run_checks(target: Target, names: list[str] | None = None, parity: bool = False, progress: bool = True,
               ctx: Context | None = None) -> Report:
    """Every selected check against ``target`` (sharing one Context), with a progress bar on stderr (a terminal
    only)."""
    checks = select(names, parity)
    ctx = ctx or Context(target)
    started = time.perf_counter()
    results = [run_one(ctx, c) for c in tqdm(checks, desc="birder check", unit="check",
                                             disable=None if progress else True)]
    return Report(target.name, results, round(time.perf_counter() - started, 2))


GROUPS = (("contract", "Contract clauses (the interface: dtypes, shapes, purity, aliasing, eps, float32)"),
          ("paper", "Paper claims"))
VERDICTS = {"pass": "pass", "fail": "FAIL", "n/a": "n/a", "info": "info", "blocked": "BLOCK"}


def _verdict(r: Result) -> str:
    return "WARN" if r.status == "fail" and r.severity == "warning" else VERDICTS[r.status]


def table(report: Report, markdown: bool = False) -> str:
    """The contract's clauses, then the paper's claims: claim | how it is checked | verdict | statistic, one row per
    check; then the totals, the root causes and the wall time."""
    lines = []
    if markdown:
        lines += ["| check | kind | claim | how it is checked | verdict | statistic |", "|---|---|---|---|---|---|"]
        for r in report.results:
            cells = (r.name, r.kind, r.claim, r.method, _verdict(r), r.statistic or r.detail)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        for kind, title in GROUPS:
            group = [r for r in report.results if r.kind == kind]
            if group:
                lines += [f"== {title} ==", ""] if not lines else ["", f"== {title} ==", ""]
            for r in group:
                lines += [f"{_verdict(r):<5} {r.name:<30} {r.statistic}",
                          f"      claim: {r.claim}", f"      how:   {r.method}", f"      found: {r.detail}"]
    failed = [r.name for r in report.results if r.status == "fail" and r.severity == "error"]
    warned = report.warnings
    blocked = [r.name for r in report.results if r.status == "blocked"]
    counts = {s: sum(r.status == s for r in report.results) for s in VERDICTS}
    lines.append("")
    lines.append(f"{report.target}: {counts['pass']} pass, {len(failed)} fail, {len(warned)} warnings, "
                 f"{counts['blocked']} not judged, {counts['n/a']} not applicable, {counts['info']} measured; wall "
                 f"time {report.seconds:.1f} s"
                 + (f"; failed: {', '.join(failed)}" if failed else "")
                 + (f"; warnings (the interface's robustness, not the algorithm; they fail only under --strict): "
                    f"{', '.join(warned)}" if warned else "")
                 + (f"; not judged (rest on a failure): {', '.join(blocked)}" if blocked else ""))
    return "\n".join(lines)


def dumps(report: Report) -> str:
    return json.dumps(report.to_json())
