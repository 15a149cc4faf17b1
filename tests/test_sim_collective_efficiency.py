"""The what-if share of the inter-node rate that training's collectives reach (``--collective-efficiency``) and
the pre-registered criterion that fits it (sim/validation/collective_efficiency.py)."""

import json

import pytest

from birder.cli import main
from sim.validation.collective_efficiency import GRID, fit

ARGS = ["predict", "--json", "--quiet", "--model", "bert-large", "--network", "25gbe", "--single-node-throughput",
        "300"]


def _run(capsys, extra):
    assert main(ARGS + extra) == 0
    return json.loads(capsys.readouterr().out)


def test_share_slows_only_what_crosses_nodes(capsys):
    """1 is the default exactly; a smaller share slows a communication-bound 8-node step (more exposed
    communication, the same compute) and leaves one node, which sends nothing between nodes, as it is."""
    default, one, half = (_run(capsys, ["--nodes", "8"] + x) for x in ([], ["--collective-efficiency", "1"],
                                                                       ["--collective-efficiency", "0.5"]))
    assert default["collective_efficiency"] == 1.0 and one["throughput"] == default["throughput"]
    assert half["throughput"] < 0.9 * default["throughput"]
    assert half["exposed_communication_s"] > 1.5 * default["exposed_communication_s"]
    assert half["compute_s"] == pytest.approx(default["compute_s"], rel=1e-12)
    single = [_run(capsys, ["--nodes", "1"] + x)["throughput"] for x in ([], ["--collective-efficiency", "0.5"])]
    assert single[0] == single[1]


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.2", "nan"])
def test_bad_share_is_one_error(capsys, bad):
    assert main(ARGS + ["--nodes", "8", "--collective-efficiency", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--collective-efficiency" in err[0]


def _rows(bias_at_one: dict[str, float], slope: float = 1.0) -> list[dict]:
    """Rows whose log(measured / predicted) at share s is the source's bias at 1 plus slope x log(1 / s): a
    smaller share predicts lower throughput, so raises the ratio."""
    import math

    return [{"source": s, "measured_regime": "communication-bound", "measured": 100.0,
             "predicted": {g: 100.0 / math.exp(b + slope * math.log(1 / g)) for g in GRID}}
            for s, b in bias_at_one.items() for _ in range(3)]


def test_fit_centres_the_median_source_and_counts_each_source_once():
    # three sources over-predicted by log 0.2 and one under-predicted: the median source sits at -0.2, so the
    # share that centres it is exp(-0.2) = 0.82 -> the grid's nearest, 0.8 (|-0.2 + 0.223| = 0.023 < 0.051)
    rows = _rows({"a": -0.2, "b": -0.2, "c": -0.2, "d": 0.5})
    assert fit(rows) == 0.8
    # many rows of one source do not outvote the others: the median is over sources
    assert fit(rows + _rows({"d": 0.5}) * 20) == 0.8
    # unbiased sources keep 1 (ties go to the larger share, the smaller change); compute-bound rows are ignored
    assert fit(_rows({"a": 0.0, "b": 0.0})) == 1.0
    # with a and b held out the median source (of c at -0.2 and d at +0.5) is under-predicted: 1 is closest
    assert fit(rows, frozenset({"a", "b"})) == 1.0
    with pytest.raises(ValueError):
        fit([dict(r, measured_regime="compute-bound") for r in rows])
