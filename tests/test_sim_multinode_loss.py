"""The multi-node loss scale (presets/multinode_loss.toml, ``--multinode-loss-scale``): what the simulator does with
it, the identity its fit relies on, the pre-registered criterion, and the shipped value against its stored fit."""

import json
import math
import tomllib
from pathlib import Path

import pytest
from doc_text import prose

from birder.cli import main
from sim.hardware import MULTINODE_LOSS_FITTED, MULTINODE_LOSS_SCALE, PRESETS
from sim.validation.multinode_loss import GRID, MIN_SIMULATED_LOSS, at_scale, fit, unseen_loss_quartiles

ARGS = ["predict", "--json", "--quiet", "--model", "resnet101", "--gpus-per-node", "8", "--single-node-throughput",
        "2000"]
FIT_RECORD = Path(__file__).parents[1] / "sim" / "validation" / "multinode_loss_fit.json"


def _run(capsys, extra, network="25gbe"):
    assert main(ARGS + ["--network", network] + extra) == 0
    return json.loads(capsys.readouterr().out)


def test_scale_grows_the_step_beyond_one_node_as_the_fit_assumes(capsys, tmp_path):
    """At scale s the throughput is at_scale(throughput at 1, linear, s) (what the fit computes without running
    the simulator), the added time is its own part of the step, exposed communication and compute stay as
    simulated, one node is untouched, and the trace's events still tile the step."""
    one = _run(capsys, ["--nodes", "4", "--multinode-loss-scale", "1"])
    trace = tmp_path / "t.json"
    scaled = _run(capsys, ["--nodes", "4", "--multinode-loss-scale", "1.7", "--trace", str(trace)])
    linear = 4 * 2000
    assert one["multinode_loss_added_s"] == 0 and one["throughput"] < 0.95 * linear  # a real loss to scale
    assert scaled["throughput"] == pytest.approx(at_scale(one["throughput"], linear, 1.7), rel=1e-9)
    one_node_s = one["iteration_s"] * one["throughput"] / linear
    assert scaled["multinode_loss_added_s"] == pytest.approx(0.7 * (one["iteration_s"] - one_node_s), rel=1e-9)
    for key in ("compute_s", "exposed_communication_s", "contention_s"):
        assert scaled[key] == pytest.approx(one[key], rel=1e-9)
    assert scaled["multinode_loss_scale"] == 1.7
    assert any(d["input"] == "multinode_loss" for d in scaled["interval_drivers"])
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    added = [e for e in events if e["cat"] == "overhead"]
    assert len(added) == 1 and added[0]["dur"] == pytest.approx(scaled["multinode_loss_added_s"] * 1e6, rel=1e-9)
    tiled = sum(e["dur"] for e in events if e["cat"] in ("gpu", "exposed", "overhead"))
    assert tiled == pytest.approx(scaled["iteration_s"] * 1e6, rel=1e-6)
    single = [_run(capsys, ["--nodes", "1", "--multinode-loss-scale", s])["throughput"] for s in ("1", "3")]
    assert single[0] == single[1] == pytest.approx(2000, rel=1e-6)


def test_generic_presets_take_the_shipped_scale_and_site_profiles_one(capsys):
    generic = _run(capsys, ["--nodes", "4"])
    assert generic["multinode_loss_scale"] == MULTINODE_LOSS_SCALE == 1.0  # the fit failed its prospective test
    # the sources' spread of measured over simulated loss widens every multi-node interval, down more than up
    spread = next(d for d in generic["interval_drivers"] if d["input"] == "multinode_loss")
    low, high = spread["throughput_range"]
    assert low < generic["throughput"] < high and generic["throughput"] / low > high / generic["throughput"]
    site = _run(capsys, ["--nodes", "4"], network="birder-paper-10gbe")
    assert site["multinode_loss_scale"] == 1.0 and site["multinode_loss_added_s"] == 0


@pytest.mark.parametrize("bad", ["0.9", "0", "11", "nan"])
def test_bad_scale_is_one_error(capsys, bad):
    assert main(ARGS + ["--network", "25gbe", "--nodes", "4", "--multinode-loss-scale", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--multinode-loss-scale" in err[0]


def _rows(bias_at_one: dict[str, float], loss: float = 0.3) -> list[dict]:
    """Three rows per source with a simulated loss ``loss`` (linear = 1.3 x predicted) whose log(measured /
    predicted at scale 1) is the source's bias."""
    return [{"source": s, "measured": 100.0 * math.exp(b), "predicted": 100.0, "linear": 100.0 * (1 + loss)}
            for s, b in bias_at_one.items() for _ in range(3)]


def test_fit_centres_the_median_source_on_rows_chosen_by_the_prediction():
    # at scale s the prediction is 130 / (1 + 0.3 s): the median source (bias log(130 / 1.45 / 100) = -0.109,
    # i.e. measured 89.66) is centred by s = 1.5 exactly
    bias = math.log(130 / 1.45 / 100)
    rows = _rows({"a": bias, "b": bias, "c": bias, "d": 0.4})
    assert fit(rows) == 1.5
    assert fit(rows + _rows({"d": 0.4}) * 20) == 1.5  # a source with many rows counts once
    # rows whose simulated loss is under MIN_SIMULATED_LOSS do not vote, however biased
    assert fit(rows + _rows({f"x{i}": -1.0 for i in range(9)}, loss=MIN_SIMULATED_LOSS / 2)) == 1.5
    assert fit(_rows({"a": 0.0, "b": 0.05})) == 1.0  # under-predicted or unbiased: as simulated (the grid's floor)
    assert fit(rows, frozenset({"a", "b"})) == 1.0  # held out, the median of c and d is above its prediction


def test_the_loss_range_is_the_recorded_sources_quartiles_rounded_out():
    from sim.input_ranges import input_ranges

    spread = json.loads((FIT_RECORD.parent / "multinode_loss_spread.json").read_text())["source_factor_quartiles"]
    r = input_ranges()["multinode_loss"]
    assert (r.low, r.high) == (math.floor(spread[0] * 10) / 10, math.ceil(spread[2] * 10) / 10)


def test_the_unseen_loss_is_measured_on_rows_the_prediction_says_lose_little_each_source_once():
    low = MIN_SIMULATED_LOSS / 2
    rows = _rows({"a": -0.1, "b": 0.0, "c": 0.0, "d": 0.05, "e": 0.1}, loss=low)
    assert unseen_loss_quartiles(rows) == pytest.approx([-0.05, 0.0, 0.075])
    # rows the simulator sees losing 5% or more are the multi-node loss's, however far off; a source with many
    # rows counts once
    assert unseen_loss_quartiles(rows + _rows({"x": -2.0, "y": -2.0}, loss=MIN_SIMULATED_LOSS)) == \
        unseen_loss_quartiles(rows) == unseen_loss_quartiles(rows + _rows({"e": 0.1}, loss=low) * 30)


def test_the_unseen_loss_range_is_the_recorded_sources_quartiles_on_the_step_rounded_out():
    from sim.input_ranges import input_ranges

    record = json.loads((FIT_RECORD.parent / "unseen_loss_spread.json").read_text())
    q = record["unseen_loss_quartiles"]
    r = input_ranges()["multinode_unseen"]
    # measured below the prediction (a negative log ratio) is a longer step: the factor is exp(-log ratio)
    assert (r.low, r.high) == (math.floor(math.exp(-q[2]) * 100) / 100, math.ceil(math.exp(-q[0]) * 100) / 100)
    assert r.on == "step" and f"{record['unseen_loss_sources']} sources" in r.source


def test_recorded_fit_is_the_stored_one_and_its_criterion_is_the_modules():
    record = json.loads(FIT_RECORD.read_text())
    fitted = tomllib.loads((PRESETS / "multinode_loss.toml").read_text())["multinode_loss"]["fitted"]
    assert fitted == record["fitted_on_all"] == MULTINODE_LOSS_FITTED
    assert tuple(record["grid"]) == GRID
    from sim.validation import multinode_loss

    assert record["criterion"] in multinode_loss.__doc__


PROSPECTIVE = Path(__file__).parents[1] / "sim" / "validation" / "multinode_loss_prospective.json"


def _figures(rows: list[dict]) -> dict[str, tuple]:
    """Per row set of the README's table: n, median error, alpha-beta's, coverage, median half-width."""
    from statistics import median

    out = {}
    for name, regime in (("all", None), ("communication-bound (measured)", "communication-bound"),
                         ("compute-bound (measured)", "compute-bound")):
        chosen = [r for r in rows if regime in (None, r["measured_regime"])]
        out[name] = (len(chosen), median(abs(r["predicted"] - r["measured"]) / r["measured"] for r in chosen),
                     median(abs(r["alpha_beta"] - r["measured"]) / r["measured"] for r in chosen),
                     sum(r["low"] <= r["measured"] <= r["high"] for r in chosen) / len(chosen),
                     median((r["high"] - r["low"]) / 2 / r["predicted"] for r in chosen))
    return out


def _is_logged_first_contact(rows: list[dict], fields: tuple[str, ...]) -> bool:
    """Whether each of ``rows`` carries the ``fields`` its logged first contact holds (a record, not a re-run)."""
    from sim.validation import first_contact as fc

    logged = {(r["source"], r["table"], r["nodes"], r["measured"]): tuple(r[f] for f in fields)
              for r in fc.first_contact_rows(fc.read_log(fc.LOG_PATH))}
    return all(logged[(r["source"], r["table"], r["nodes"], r["measured"])] == tuple(r[f] for f in fields)
               for r in rows)




def test_the_prospective_test_is_the_logged_first_contact_and_the_readme_quotes_it():
    """The 'with the scale' rows are the logged first contact of batch 6 (not a re-run), the README's table is
    computed from the record, and the verdict follows the pre-registered rule."""
    record = json.loads(PROSPECTIVE.read_text())["batch_6"]
    with_scale, without = record["with_scale"]["rows"], record["without_scale"]["rows"]
    assert len(with_scale) == len(without) == 120
    assert _is_logged_first_contact(with_scale, ("predicted",))
    a, b = _figures(with_scale), _figures(without)
    readme = (Path(__file__).parents[1] / "sim" / "README.md").read_text()
    for name in a:
        n, err, ab, cov, hw = a[name]
        line = (f"| {name} | {n} | {err:.1%} | {b[name][1]:.1%} | {ab:.1%} | {cov:.1%} / {b[name][3]:.1%} | "
                f"{hw:.1%} / {b[name][4]:.1%} |")
        assert line in readme, line
    comm = "communication-bound (measured)"
    top = prose("README.md")
    assert (f"({a[comm][1]:.1%} error against {b[comm][1]:.1%} without it) but all rows moved away "
            f"({a['all'][1]:.1%} against {b['all'][1]:.1%})") in top
    kept = a[comm][1] < b[comm][1] and a["all"][1] <= b["all"][1] + 0.01
    assert kept == (MULTINODE_LOSS_SCALE != 1.0)


def test_the_loss_ranges_test_is_the_logged_first_contact_and_the_readme_quotes_it():
    """Batch 7: the rows with the loss range are its logged first contact, the README's table is computed from the
    record (beside the multi-node loss scale's second look), and the verdict follows the pre-registered rule."""
    from sim.input_ranges import input_ranges

    record = json.loads(PROSPECTIVE.read_text())["batch_7"]
    with_range, without, scaled = (record[k]["rows"] for k in ("with_range", "without_range", "scale_1_5"))
    assert len(with_range) == len(without) == len(scaled) == 82
    assert _is_logged_first_contact(with_range, ("predicted", "low", "high"))
    a, b, c = _figures(with_range), _figures(without), _figures(scaled)
    readme = (Path(__file__).parents[1] / "sim" / "README.md").read_text()
    for name in a:
        n, err, ab, cov, hw = a[name]
        line = (f"| {name} | {n} | {err:.1%} | {ab:.1%} | {cov:.1%} / {b[name][3]:.1%} | {hw:.1%} / {b[name][4]:.1%} "
                f"| {c[name][1]:.1%} |")
        assert line in readme, line
    comm, compute = "communication-bound (measured)", "compute-bound (measured)"
    top = prose("README.md")
    assert (f"it covered {a[comm][3]:.0%} of the rows measured communication-bound against {b[comm][3]:.0%} "
            f"without it") in top
    assert f"error ({a[comm][1]:.1%}) was worse than a plain alpha-beta ring's ({a[comm][2]:.1%})" in top
    kept = a[comm][3] > b[comm][3] and a[compute][4] <= 0.15
    assert kept == ("multinode_loss" in input_ranges())
