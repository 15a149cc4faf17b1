"""The suite accepts the reference and an implementation written without it, through the pytest entry point
(one test per claim), and its checks behave as documented on the reference (run times, statuses)."""

from proofs_checks.pytest_plugin import claim_tests
from proofs_checks.registry import Context
from proofs_checks.runner import run_checks, select
from proofs_checks.target import load_target

# Every claim on birder_ref.algorithm1 (the default target), one test each.
test_reference_claims = claim_tests()

# Every claim on proofs_checks.independent: a dict state, float64 arithmetic, the u >= 1 - p quantizer.
test_independent_claims = claim_tests("proofs_checks.independent")


def test_parity_is_opt_in_and_separates_the_two_correct_implementations():
    assert "parity_birder_ref" not in [c.name for c in select()]
    reference = run_checks(load_target(), names=["parity_birder_ref"], progress=False)
    independent = run_checks(load_target("proofs_checks.independent"), names=["parity_birder_ref"], progress=False)
    assert reference.passed
    assert not independent.passed and "quantize differs" in independent.results[0].detail


def test_scheme_and_baseline_checks_do_not_apply_to_an_implementation_without_them():
    ctx = Context(load_target("proofs_checks.independent"))
    report = run_checks(ctx.target, names=["schemes_equal_algorithm1", "section4_volumes", "onebit_adam_identities"],
                        progress=False, ctx=ctx)
    assert [r.status for r in report.results] == ["n/a"] * 3
    assert report.passed


def test_the_torch_numerics_keep_the_identities_through_an_adapter():
    """gpu_validation.torch_birder, wrapped by proofs_checks.torch_adapter (CPU here), judged on the cheap checks;
    `birder check --impl proofs_checks.torch_adapter` runs all of them (on CUDA when there is one)."""
    names = ["interface", "line9_worker_error", "line13_server_error", "line8_worker_quantizer", "determinism",
             "parity_birder_ref"]
    report = run_checks(load_target("proofs_checks.torch_adapter"), names=names, progress=False)
    assert report.passed, [r.detail for r in report.results if not r.passed]
