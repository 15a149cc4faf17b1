"""One named check per claim of the paper: what it claims, how it is checked, and the function that checks it.

A check function takes a ``Context`` (the target plus a cache of trajectories shared between checks) and returns
an ``Outcome``: ``pass`` or ``fail``, ``n/a`` (the target does not offer what the claim is about) or ``info``
(a measurement the paper does not bound, reported, never failing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proofs_checks.target import Target

STATUSES = ("pass", "fail", "n/a", "info")


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


@dataclass
class Context:
    """The target under test and the computations several checks share (trajectories, the Theorem 1 run)."""

    target: Target
    cache: dict = field(default_factory=dict)

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


def check(name: str, claim: str, method: str, needs: tuple[str, ...] = ("init", "step"), opt_in: bool = False):
    """Register the decorated function as the check ``name`` (report order is registration order)."""

    def register(function: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        if any(c.name == name for c in CHECKS):
            raise ValueError(f"check {name!r} registered twice")
        CHECKS.append(Check(name, claim, method, function, needs, opt_in))
        return function

    return register
