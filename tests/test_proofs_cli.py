"""`birder check` as a user runs it: JSON, exit statuses, bad usage in one line, and the report section."""

import json
from pathlib import Path

import pytest

from birder.cli import main
from proofs_checks import independent
from proofs_checks.report import PLOT
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
    out = json.loads(captured.out)
    checks = {c["name"]: c for c in out["checks"]}
    assert code == 2 and captured.err.count("\n") == 1 and "lacks the interface" in captured.err
    assert out["passed"] is False and "lacks the interface" in out["error"]
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


def test_report_section_has_the_table_and_the_plot(quick_report):
    """proofs_checks.report.section as ``birder report --quick`` writes it (conftest's ``quick_report``)."""
    markdown = quick_report.section("The paper's claims as checks")
    assert "| eq5_probability_exact | paper |" in markdown and "| theorem1_bound | paper |" in markdown
    assert "| contract_purity | contract |" in markdown
    assert "every check holds" in markdown
    assert (quick_report.folder / PLOT).stat().st_size > 10_000


GOOD = (Path(__file__).resolve().parent.parent / "proofs_checks" / "template.py").read_text()
BAD_IMPLS = {
    "exits_at_import": ("import sys\nsys.exit(0)\n", "sys.exit(0)"),
    "raises_at_import": ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    "ends_its_process": (GOOD + "\nimport os\n\n\ndef step(*args, **kwargs):\n    os._exit(0)\n",
                         "the checking process ended during check contract_calls"),
    "prints_garbage": (GOOD + "\nprint('garbage {')\n", "printed 10 bytes to stdout"),
    "hangs": (GOOD + "\n\ndef step(*args, **kwargs):\n    while True:\n        pass\n",
              "check contract_calls did not finish within 2 s"),
    "exits_in_step": (GOOD + "\nimport sys\n\n\ndef step(*args, **kwargs):\n    sys.exit(0)\n",
                      "called sys.exit(0) during check contract_calls"),
}


@pytest.mark.parametrize("case", list(BAD_IMPLS))
def test_an_implementation_that_escapes_the_checks_exits_two_with_one_line_and_one_json_object(case, tmp_path,
                                                                                                capsys):
    """The verdict is one a CI job can trust: never exit 0 when the implementation exits, raises, ends its
    process, prints or hangs; stdout stays one JSON object; stderr one line."""
    source, expected = BAD_IMPLS[case]
    path = tmp_path / f"{case}.py"
    path.write_text(source)
    code = main(["check", "--json", "--impl", str(path), "--only", "interface,contract_calls", "--timeout", "2"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1 and captured.err.startswith("birder check: error:")
    assert expected in captured.err
    out = json.loads(captured.out)
    assert out["passed"] is False and expected in out["error"]


def test_impl_as_a_module_of_the_current_directory_a_file_path_and_a_package(tmp_path, capsys, monkeypatch):
    (tmp_path / "mybirder.py").write_text(GOOD)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text(GOOD)
    (tmp_path / "pkg" / "__init__.py").write_text("from .core import init, quantize, step\n")
    monkeypatch.chdir(tmp_path)
    for impl in ("mybirder", "mybirder.py", str(tmp_path / "mybirder.py"), "pkg/__init__.py", "pkg"):
        assert main(["check", "--impl", impl, "--only", "interface,contract_calls"]) == 0, impl
    assert "2 pass" in capsys.readouterr().out


def test_a_step_without_T0_fails_the_interface_once(tmp_path, capsys):
    """The README-era implementation without T0: the interface check names it, every other check is not judged
    for the same cause (not 19 copies of one TypeError), and the verdict is exit 2."""
    path = tmp_path / "old.py"
    path.write_text(GOOD.replace(", T0=None):", "):").replace("if T0 is not None and t > T0 else b_hat", ""))
    code = main(["check", "--json", "--impl", str(path), "--only",
                 "interface,line5_6_moments,line9_worker_error,contract_dtypes"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert code == 2
    assert [c["status"] for c in checks] == ["fail", "blocked", "blocked", "blocked"]
    assert "T0" in checks[0]["detail"]


def test_template_prints_the_file_and_help_carries_the_interface(capsys):
    assert main(["check", "--template"]) == 0
    assert capsys.readouterr().out == GOOD
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = capsys.readouterr().out
    for needle in ("step(state, grads, beta, eps, u_worker, u_server, T0=None)", "b_hat", "server_e", "float32",
                   "contract", "--template"):
        assert needle in text
    assert "../shared" not in text and "CONTRACT.md" not in text


def test_empty_only_and_bad_timeout_are_bad_usage(capsys):
    for argv in (["check", "--only", ""], ["check", "--only", " , "], ["check", "--timeout", "0"],
                 ["check", "--timeout", "1e308"], ["check", "--import-timeout", "inf"],
                 ["check", "--import-timeout", "-1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("birder check: error:") and "Traceback" not in err
    main(["check", "--timeout", "1e308"])
    assert "at most 86400" in capsys.readouterr().err


def test_an_import_that_never_finishes_is_reported_within_the_import_limit(tmp_path, capsys):
    """The import has its own limit, well under a minute by default, apart from --timeout (per check)."""
    import time

    from proofs_checks.cli import DEFAULT_IMPORT_TIMEOUT_S

    assert DEFAULT_IMPORT_TIMEOUT_S < 30
    path = tmp_path / "slow_import.py"
    path.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    started = time.monotonic()
    code = main(["check", "--impl", str(path), "--import-timeout", "1", "--timeout", "600"])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < 60
    assert err.count("\n") == 1 and "importing the implementation did not finish within 1 s" in err


@pytest.mark.parametrize("name", ["u_bar_keeps_worker_axis", "counter_never_advances"])
def test_an_implementation_with_the_interface_and_a_wrong_result_is_a_verdict_exit_one(name, capsys):
    """A wrong shape or a t that never advances is a failed check (exit 1), never "cannot be judged" (exit 2)."""
    from proofs_checks.mutants_sampled import MUTANTS

    clause = MUTANTS[name][1]
    code = main(["check", "--json", "--impl", f"proofs_checks.mutants_sampled:{name}", "--only", f"interface,{clause}"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and "error" not in out
    assert [c["status"] for c in out["checks"]] == ["pass", "fail"]


def test_check_ends_every_process_the_implementation_started_and_says_so(tmp_path, capsys):
    """An implementation that forks a long-lived child and starts one in a session of its own (out of the process
    group): both are ended before the verdict, named on stderr and in the JSON."""
    import os
    import time

    pids = tmp_path / "pids"
    path = tmp_path / "forking_impl.py"
    path.write_text(
        "import os, subprocess, sys, time\n"
        "from birder_ref.algorithm1 import init, quantize, step\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(300)\n"
        "    os._exit(0)\n"
        "escaped = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True,\n"
        "                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"open({str(pids)!r}, 'w').write(f'{{child}} {{escaped.pid}}')\n")
    code = main(["check", "--json", "--impl", str(path), "--only", "interface,line1_init"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    started = [int(p) for p in pids.read_text().split()]
    assert code == 0 and sorted(out["processes_ended"]) == sorted(started), (out.get("processes_ended"), started)
    assert "ended 2 processes the implementation started and left running" in captured.err

    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    deadline = time.monotonic() + 10
    while any(running(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(p) for p in started)
    assert os.getpid() not in started


def test_warnings_exit_zero_and_fail_under_strict_with_severity_in_the_json(capsys):
    """A port that refuses a layout (np.frombuffer of a Fortran-ordered array) gets a warning: exit 0, exit 1 under
    --strict; every check carries its severity."""
    argv = ["check", "--json", "--impl", "proofs_checks.mutants_sampled:zero_copy_gradients", "--only",
            "interface,contract_input_layouts,contract_layouts_same_result"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is True and out["warnings"] == ["contract_input_layouts"]
    assert {c["name"]: c["severity"] for c in out["checks"]} == {
        "interface": "error", "contract_input_layouts": "warning", "contract_layouts_same_result": "error"}
    assert main([a for a in argv if a != "--json"] + ["--strict"]) == 1
    assert "WARN  contract_input_layouts" in capsys.readouterr().out
