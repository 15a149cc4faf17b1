"""Issue 28's corpus (proofs_checks/mutants_structure.py, written before the suite was extended and run against it
first): each wrong port is rejected by the check that names its cause, on the regime of that check that shows it
(the whole check runs in `birder check`); each correct port - torch with lerp, torch without copies, draws counted
from the top, moments rounded once - passes, with at most warnings."""

from dataclasses import replace

import pytest

from proofs_checks import mutants_structure, structure
from proofs_checks.registry import Context
from proofs_checks.runner import run_checks
from proofs_checks.target import load_target
from proofs_checks.trajectories import BY_NAME

# uint16_counter (65,536 steps) and chunked_server_error (2 x 2^20 elements) cost seconds each: `birder check` shows
# them rejected (the report's figures); here the long run is shown to pass on a correct port instead.
IN_CI = [name for name in mutants_structure.MUTANTS if name not in ("uint16_counter", "chunked_server_error")]


@pytest.mark.parametrize("name", IN_CI)
def test_structure_mutant_is_rejected_by_the_check_naming_its_cause(name):
    impl, check, regime, _ = mutants_structure.MUTANTS[name]
    outcome = structure.judge_in(Context(load_target(impl)), check, regime)
    assert outcome.status == "fail", outcome.detail


# A regime of each structural check (the whole suite on these ports is `birder check`, in the report's figures).
REGIMES = (("structure_shapes", "n_equals_d_12"), ("structure_shapes", "workers_16_d_1024"),
           ("contract_history", "settings_every_call"), ("contract_history", "same_state_twice"),
           ("contract_history", "numpy_scalars"), ("contract_history", "T0_numpy_int32"),
           ("step_draws_anywhere", None), ("metamorphic_relations", "32 x 768"))


@pytest.mark.parametrize("name", list(mutants_structure.CORRECT))
def test_correct_port_passes_the_structural_checks(name):
    ctx = Context(load_target(mutants_structure.CORRECT[name]))
    for check, regime in REGIMES:
        outcome = structure.judge_in(ctx, check, regime)
        assert outcome.status == "pass", (check, regime, outcome.detail)


def test_torch_ports_get_warnings_only_and_fail_only_under_strict():
    """torch.from_numpy (and torch.tensor) refuse negative strides; torch's lerp overflows g - m where |m| + |g| nears
    the largest float32: warnings, exit 0; each identity downstream of that overflow is left to the warning."""
    names = ["interface", "line5_6_moments", "contract_float32_extremes", "line9_worker_error", "eq14_decomposition",
             "telescoping_sums", "contract_input_layouts", "contract_layouts_same_result"]
    lerp = Context(load_target(mutants_structure.CORRECT["torch_lerp"]), settings=(BY_NAME["float32_max"],))
    report = run_checks(lerp.target, names=names, progress=False, ctx=lerp)
    assert report.passed and report.warnings == ["contract_float32_extremes", "contract_input_layouts"], \
        [(r.name, r.detail) for r in report.results if not r.passed]
    assert not replace(report, strict=True).passed
    assert {r.name: r.severity for r in report.results}["contract_layouts_same_result"] == "error"


def test_the_long_run_passes_a_correct_port_and_stops_at_a_stopped_counter():
    plain = structure.judge_in(Context(load_target("proofs_checks.mutants_regimes:plain")), "line2_long_run")
    assert plain.status == "pass", plain.detail
    stopped = structure.judge_in(Context(load_target(mutants_structure.MUTANTS["float16_counter"][0])),
                                 "line2_long_run")
    assert stopped.status == "fail" and "after step 2049 the state's t is 2048" in stopped.detail, stopped.detail

