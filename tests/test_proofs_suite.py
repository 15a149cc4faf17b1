"""The suite accepts the reference and an implementation written without it, through the pytest entry point
(one test per claim), and its checks behave as documented on the reference (run times, statuses)."""

import subprocess
import sys

from proofs_checks import structure
from proofs_checks.pytest_plugin import claim_tests
from proofs_checks.registry import Context
from proofs_checks.runner import run_checks, select
from proofs_checks.target import load_target

# Every claim on birder_ref.algorithm1 (the default target), one test each; the 65,600-step run (10 s here) is judged on
# a faster correct port and on the counters' mutants in test_proofs_structure_mutants.py (and by `birder check`).
test_reference_claims = claim_tests(names=[c.name for c in select() if c.name != "line2_long_run"])

# Every claim on proofs_checks.independent: a dict state, float64 arithmetic, the u >= 1 - p quantizer (the structural
# checks, seconds each, are run on the reference above and on correct ports in test_proofs_structure_mutants.py).
test_independent_claims = claim_tests("proofs_checks.independent",
                                      names=[c.name for c in select() if c.name not in structure.SLOW])


def test_parity_is_opt_in_and_separates_the_two_correct_implementations():
    assert "parity_birder_ref" not in [c.name for c in select()]
    reference = run_checks(load_target(), names=["parity_birder_ref"], progress=False)
    independent = run_checks(load_target("proofs_checks.independent"), names=["parity_birder_ref"], progress=False)
    assert reference.passed
    assert not independent.passed and "quantize differs" in independent.results[0].detail


def test_scheme_checks_do_not_apply_to_an_implementation_without_schemes():
    ctx = Context(load_target("proofs_checks.independent"))
    report = run_checks(ctx.target, names=["schemes_equal_algorithm1", "section4_volumes"], progress=False, ctx=ctx)
    assert [r.status for r in report.results] == ["n/a"] * 2
    assert report.passed


def test_the_torch_numerics_keep_the_identities_through_an_adapter():
    """gpu_validation.torch_birder, wrapped by gpu_validation.check_adapter (CPU here), judged on a few checks: the
    interface, line 9's error feedback, determinism, and bit parity with birder_ref over whole steps (which carries
    every identity birder_ref is checked on to the adapter on those steps); `birder check --impl
    gpu_validation.check_adapter` runs all of them (on CUDA when there is one: `make gpu-check`)."""
    names = ["interface", "line9_worker_error", "determinism", "parity_birder_ref"]
    report = run_checks(load_target("gpu_validation.check_adapter"), names=names, progress=False)
    assert report.passed, [r.detail for r in report.results if not r.passed]


def test_the_torch_adapter_lives_beside_torch_and_importing_it_neither_imports_torch_nor_picks_a_device():
    """The suite (every check registered) imports no implementation; the adapter imports torch and picks its device
    on the first call."""
    code = ("import sys, proofs_checks.runner; "
            "assert not [m for m in sys.modules if m.startswith(('birder_ref', 'gpu_validation', 'torch'))]; "
            "import gpu_validation.check_adapter as a; "
            "assert 'torch' not in sys.modules and 'gpu_validation.torch_birder' not in sys.modules, 'imported'; "
            "assert a._torch.cache_info().currsize == 0; a.init(2, 3); "
            "assert 'torch' in sys.modules and a._torch.cache_info().currsize == 1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_failed_warning_passes_with_a_claim_warning_unless_strict():
    """A check of severity warning that fails (LerpMomentum: contract_float32_extremes) passes in the plugin with a
    ClaimWarning, as `birder check` exits 0 on it, and fails under strict, as `birder check --strict` does."""
    import warnings

    import pytest

    from proofs_checks import mutants
    from proofs_checks.pytest_plugin import ClaimWarning

    class Config:
        @staticmethod
        def getoption(name, default=None):
            return default

    request = type("Request", (), {"config": Config()})()
    [check] = select(["contract_float32_extremes"])
    lenient = claim_tests(mutants.MUTANTS["lerp_momentum"][0], names=[check.name])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lenient(check, request)
    assert [type(w.message) for w in caught] == [ClaimWarning] and check.name in str(caught[0].message)
    strict = claim_tests(mutants.MUTANTS["lerp_momentum"][0], names=[check.name], strict=True)
    with pytest.raises(AssertionError, match="contract_float32_extremes"):
        strict(check, request)


def test_the_float64_implementation_is_accepted_with_the_operation_order_warning_alone():
    names = ["interface", "line5_6_moments", "line9_worker_error", "line13_server_error", "contract_eps_convention",
             "contract_operation_order"]
    report = run_checks(load_target("proofs_checks.independent"), names=names, progress=False)
    assert report.passed and report.warnings == ["contract_operation_order"]
    assert "line 5 (m)" in report.results[-1].detail and "line 13 (server_e)" in report.results[-1].detail
