"""Run the property suite inside any project's pytest suite, one test per claim.

In your tests::

    from proofs_checks.pytest_plugin import claim_tests

    test_birder_claims = claim_tests("mypackage.birder")   # MODULE[:OBJECT], or the object itself

Each check becomes one parametrized test (``test_birder_claims[ratio_bound]``, ...): a failed claim fails with the
check's finding, a claim that does not apply (no schemes) is skipped. A check of severity "warning" (the
interface's robustness, not the algorithm) that fails passes with a ``ClaimWarning`` in pytest's warnings summary,
as ``birder check`` exits 0 on it; ``strict=True`` (or ``--birder-strict``) fails it, as ``birder check --strict``
does. ``claim_tests()`` without an argument judges the implementation named by ``--birder-impl MODULE[:OBJECT]``
when this module is loaded as a plugin (``pytest -p proofs_checks.pytest_plugin --birder-impl mypackage.birder``),
else ``birder_ref.algorithm1``.
"""

from __future__ import annotations

import warnings

import pytest

from proofs_checks.registry import Context
from proofs_checks.runner import run_one, select
from proofs_checks.target import load_target

_contexts: dict = {}  # one Context per implementation per session: checks share its trajectories


def pytest_addoption(parser) -> None:
    parser.addoption("--birder-impl", default=None, metavar="MODULE[:OBJECT]",
                     help="the Birder implementation claim_tests() judges (default birder_ref.algorithm1)")
    parser.addoption("--birder-strict", action="store_true", default=False,
                     help="claim_tests(): a failed check of severity warning fails too (birder check --strict)")


class ClaimWarning(UserWarning):
    """A check of severity "warning" failed: the implementation's interface is less robust than the reference's
    (birder check exits 0 on it, and fails it only under --strict)."""


def _context(impl) -> Context:
    key = impl if isinstance(impl, str) or impl is None else id(impl)
    if key not in _contexts:
        _contexts[key] = Context(load_target(impl))
    return _contexts[key]


def claim_tests(impl=None, names: list[str] | None = None, parity: bool = False, strict: bool = False):
    """A test function parametrized over the checks (all of them, or ``names``) for ``impl``; with ``strict``, a
    failed check of severity warning fails (else it passes with a ``ClaimWarning``, module docstring)."""
    checks = select(names, parity)

    @pytest.mark.parametrize("check", checks, ids=[c.name for c in checks])
    def test_claim(check, request) -> None:
        spec = impl if impl is not None else request.config.getoption("--birder-impl", default=None)
        result = run_one(_context(spec), check)
        if result.status == "n/a":
            pytest.skip(result.detail)
        strict_here = strict or request.config.getoption("--birder-strict", default=False)
        if not result.passed and result.severity == "warning" and not strict_here:
            if result.status == "blocked":
                pytest.skip(f"not judged: {result.detail}")
            warnings.warn(ClaimWarning(f"{check.name}: {result.detail}"), stacklevel=1)
            return
        assert result.passed, f"{check.name}: {result.detail}\n  claim: {check.claim}"

    return test_claim
