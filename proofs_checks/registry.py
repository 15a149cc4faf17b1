"""One named check per claim of the paper: what it claims, how it is checked, and the function that checks it.

A check function takes a ``Context`` (the target plus a cache of trajectories shared between checks) and returns
an ``Outcome``: ``pass`` or ``fail``, ``n/a`` (the target does not offer what the claim is about) or ``info``
(a measurement the paper does not bound, reported, never failing). The runner adds ``blocked``: not judged,
because a check it rests on (``after``) failed or the same implementation error was already reported, so each
root cause is reported once.

Every check has a ``kind``: ``"paper"`` for a claim of the paper, ``"contract"`` for a clause of the interface
(dtypes, shapes, purity, aliasing, the eps convention, float32 |m| <= b): a user sees "your u_bar is float64", not
a paper claim failing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proofs_checks.target import Target

STATUSES = ("pass", "fail", "n/a", "info", "blocked")
KINDS = ("paper", "contract")
SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class Outcome:
    status: str
    detail: str
    statistic: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


def verdict(ok: bool, detail: str, statistic: str = "") -> Outcome:
    return Outcome("pass" if ok else "fail", detail, statistic)


@dataclass(frozen=True)
class Check:
    name: str
    claim: str  # the paper's statement, with its equation / lemma / line
    method: str  # how it is checked, in a few words
    run: Callable[[Context], Outcome]
    needs: tuple[str, ...] = ("init", "step")  # the interface functions it drives
    opt_in: bool = False  # run only when asked for (parity with birder_ref)
    kind: str = "paper"  # "paper" (a claim of the paper) or "contract" (a clause of the interface)
    after: tuple[str, ...] = ()  # checks it rests on: when one of them fails, this one is not judged
    severity: str = "error"  # "error": the algorithm is wrong (exit 1); "warning": the interface's robustness only


@dataclass
class Context:
    """The target under test and the computations several checks share (trajectories, the Theorem 1 run)."""

    target: Target
    cache: dict = field(default_factory=dict)
    failed: set = field(default_factory=set)  # names of the checks that failed or were not judged so far
    errors: dict = field(default_factory=dict)  # implementation error message -> the first check that met it
    settings: tuple | None = None  # the trajectories' settings (None: trajectories.SETTINGS)

    def shared(self, key, compute: Callable):
        """``compute()`` once per key; an exception is cached too and raised again for every check that asks."""
        if key not in self.cache:
            try:
                self.cache[key] = (True, compute())
            except Exception as error:  # re-raised below, to each check that depends on it
                self.cache[key] = (False, error)
        ok, value = self.cache[key]
        if not ok:
            raise value
        return value


CHECKS: list[Check] = []


def check(name: str, claim: str, method: str, needs: tuple[str, ...] = ("init", "step"), opt_in: bool = False,
          kind: str = "paper", after: tuple[str, ...] = (), severity: str = "error"):
    """Register the decorated function as the check ``name`` (report order is registration order)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    if severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}")

    def register(function: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        if any(c.name == name for c in CHECKS):
            raise ValueError(f"check {name!r} registered twice")
        CHECKS.append(Check(name, claim, method, function, needs, opt_in, kind, after, severity))
        return function

    return register
