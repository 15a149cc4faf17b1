"""`birder check` as a user runs it: JSON, exit statuses, bad usage in one line, and the report section."""

import json

from birder.cli import main
from proofs_checks import independent
from proofs_checks.report import PLOT, section
from proofs_checks.runner import run_checks
from proofs_checks.target import load_target


def test_json_and_exit_zero_on_the_reference(capsys):
    assert main(["check", "--json", "--only", "interface,line9_worker_error,line7_amsgrad"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is True
    assert [c["name"] for c in out["checks"]] == ["interface", "line9_worker_error", "line7_amsgrad"]
    assert all({"name", "passed", "detail"} <= set(c) for c in out["checks"])


def test_a_wrong_implementation_exits_one_naming_the_check(capsys):
    code = main(["check", "--impl", "proofs_checks.mutants:flipped_worker_error", "--only", "line9_worker_error"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL  line9_worker_error" in out and "failed: line9_worker_error" in out and "wall time" in out


def test_missing_quantize_lacks_the_interface_exit_two_reported_once(capsys):
    """CONTRACT: an implementation lacking the interface cannot be judged (exit 2), the report still says why."""
    code = main(["check", "--json", "--impl", "proofs_checks.mutants:missing_quantize", "--only",
                 "interface,eq5_support,line9_worker_error"])
    captured = capsys.readouterr()
    checks = {c["name"]: c for c in json.loads(captured.out)["checks"]}
    assert code == 2 and captured.err.count("\n") == 1 and "lacks the interface" in captured.err
    assert not checks["interface"]["passed"] and "quantize" in checks["interface"]["detail"]
    assert checks["eq5_support"]["status"] == "blocked" and "interface" in checks["eq5_support"]["detail"]
    assert checks["line9_worker_error"]["passed"]  # step alone still satisfies line 9
    assert {c["kind"] for c in checks.values()} == {"paper", "contract"}


def test_bad_usage_is_one_line_and_exit_two(capsys):
    """Not importable, not there, an unknown check, and objects that cannot be an implementation at all: a class
    whose methods need an instance, and a function with none of quantize, init, step."""
    for argv in (["check", "--impl", "no_such_module_xyz"], ["check", "--impl", "proofs_checks.mutants:nope"],
                 ["check", "--only", "no_such_check"], ["check", "--impl", "proofs_checks.independent:Birder"],
                 ["check", "--impl", "birder_ref.algorithm1:step"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("birder check: error:")
    main(["check", "--impl", "proofs_checks.independent:Birder"])
    assert "name an instance" in capsys.readouterr().err


def test_a_class_of_static_methods_is_an_implementation():
    """A class used as a namespace (quantize, init, step callable without an instance) is judged, not refused."""
    report = run_checks(load_target(StaticBirder), names=["interface", "line9_worker_error"], progress=False)
    assert report.passed, [r.detail for r in report.results]


class StaticBirder:
    quantize = staticmethod(independent.quantize)
    init = staticmethod(independent.init)
    step = staticmethod(independent.step)


def test_report_section_has_the_table_and_the_plot(tmp_path):
    markdown = section(tmp_path, quick=True)
    assert "| eq5_probability_exact |" in markdown and "| theorem1_bound |" in markdown
    assert "every check holds" in markdown
    assert (tmp_path / PLOT).stat().st_size > 10_000
