"""What the communication-bound error target asks of any correction (sim/validation/error_floor.py): the family's
floor found where it is known, the allowance, and the figures sim/validation/README.md quotes."""

from __future__ import annotations

import numpy as np
import pytest
from doc_text import prose

from sim.uncertainty import regime_of_efficiency
from sim.validation import error_floor
from sim.validation import first_contact as fc


def _rows(a: float, b: float, c: float, loss_on_comm: float = 1.0, n: int = 60) -> list[dict]:
    """Rows whose measurement is linear / (1 + a + b ring + c model), with ring and model drawn apart (fixed seed),
    the measured communication-bound ones further times ``loss_on_comm``; ten sources."""
    rng = np.random.default_rng(27)
    rows = []
    for i in range(n):
        ring, model = rng.uniform(0.0, 0.6), rng.uniform(0.0, 0.6)
        linear = 1000.0
        measured = linear / (1 + a + b * ring + c * model)
        if regime_of_efficiency(measured / linear) == fc.REGIMES[1]:
            measured *= loss_on_comm
        rows.append({"source": f"s{i % 10}", "linear": linear, "measured": measured,
                     "predicted": linear / (1 + model), "alpha_beta": linear / (1 + ring),
                     "measured_regime": regime_of_efficiency(measured / linear),
                     "interval_regime": regime_of_efficiency(1 / (1 + ring))})
    return rows


def test_the_floor_is_the_correction_that_made_the_rows_and_left_out_it_is_found_again():
    rows = _rows(0.02, 0.3, 1.1)
    out = error_floor.family_floor(rows)
    best = out["floor_within_allowance"]
    assert (best["a"], best["b"], best["c"]) == (0.02, 0.3, 1.1)
    assert best["communication_bound"] == pytest.approx(0, abs=1e-12) and best["all"] == pytest.approx(0, abs=1e-12)
    assert out["each_source_left_out"]["all"] == pytest.approx(0, abs=1e-12)
    assert out["simulator"]["communication_bound"] > 0.05  # the simulator alone is not exact: the test can fail


@pytest.mark.parametrize("columns", [7, 8, 31])
def test_medians_read_off_the_sorted_rows_equal_numpys(columns):
    rng = np.random.default_rng(columns)
    values = rng.integers(0, 6, size=(40, columns)).astype(float)  # ties, as equal errors make
    stats = error_floor._OrderStatistics(values)
    for held_count in range(columns):
        held = np.zeros(columns, dtype=bool)
        held[rng.choice(columns, held_count, replace=False)] = True
        assert np.array_equal(stats.median_without(held), np.median(values[:, ~held], axis=1))


def test_the_allowance_keeps_the_correction_from_erring_low_everywhere():
    """Communication-bound rows 30% below what any input says: only a correction that lowers every row reaches
    them, and the allowance (batch 9's 0.5 points on the other rows) refuses it."""
    rows = _rows(0.0, 0.0, 1.0, loss_on_comm=0.7)
    out = error_floor.family_floor(rows)
    within, free = out["floor_within_allowance"], out["floor_unconstrained"]
    assert within["compute_bound"] <= out["simulator"]["compute_bound"] + error_floor.MAX_LOSS
    assert free["communication_bound"] < within["communication_bound"] - 0.05
    assert free["compute_bound"] > out["simulator"]["compute_bound"] + error_floor.MAX_LOSS


def test_rows_of_one_regime_are_refused_and_the_command_line_takes_no_argument(capsys):
    rows = [r for r in _rows(0.0, 0.0, 1.0) if r["measured_regime"] == fc.REGIMES[0]]
    with pytest.raises(ValueError, match="both measured communication-bound and compute-bound"):
        error_floor.family_floor(rows)
    assert error_floor.main(["x"]) == 2
    assert "usage: python -m sim.validation.error_floor" in capsys.readouterr().err


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _meets(floor: dict) -> str:
    """Which of issue 27's two targets (20%, 0.75 times the ring) a floor meets, in the README's words."""
    error = floor["communication_bound"] <= error_floor.TARGET_ERROR
    ratio = floor["ratio_to_ring"] <= error_floor.TARGET_RATIO
    return {(True, True): "20% and 0.75 times", (True, False): "20% but not 0.75 times",
            (False, True): "0.75 times but not 20%", (False, False): "neither"}[(error, ratio)]


def test_the_validation_readme_quotes_the_floor_as_the_log_gives_it():
    out = error_floor.report(fc.read_log())
    text = prose("sim", "validation", "README.md")
    start = text.index("What the communication-bound error target asks of any correction")
    para = text[start:text.index("`first_contact.json` is append-only", start)]
    sim, ring, best = out["simulator"], out["ring"], out["floor_within_allowance"]
    left_out, free, choices = out["each_source_left_out"], out["floor_unconstrained"], out["row_choices"]
    assert f"(model {out['model']}; {out['rows']} rows, {out['sources']} sources, " \
           f"{out['communication_bound_rows']} measured communication-bound)" in para
    assert f"the simulator has {_pct(sim['communication_bound'])} and the ring {_pct(ring['communication_bound'])}" \
           f" ({sim['communication_bound'] / ring['communication_bound']:.2f} times)" in para
    assert f"{len(error_floor.GRID[0]) * len(error_floor.GRID[1]) * len(error_floor.GRID[2]):,} corrections" in para
    assert f"(a = {best['a']:g}, b = {best['b']:g}, c = {best['c']:g}:" in para
    assert f"reaches {_pct(best['communication_bound'])}, {best['ratio_to_ring']:.2f} times the ring's" in para
    assert f"on the rows it was chosen on, it meets {_meets(best)}." in para
    assert f"it reaches {_pct(left_out['communication_bound'])}, {left_out['ratio_to_ring']:.2f} times, with the " \
           f"compute-bound rows at {_pct(left_out['compute_bound'])} (the simulator's " \
           f"{_pct(sim['compute_bound'])}): it meets {_meets(left_out)}." in para
    assert f"the best reaches {_pct(free['communication_bound'])} by erring low on every row (compute-bound rows " \
           f"{_pct(free['compute_bound'])})" in para
    by_ring, by_sim = choices["interval_regime"], choices["simulator_predicted"]
    assert choices["ring_predicted"]["rows"] == by_ring["rows"]  # the interval's regime is the ring's
    assert f"on the {by_ring['rows']} rows the ring calls communication-bound (the interval's regime) the simulator " \
           f"has {_pct(by_ring['predicted'])} against the ring's {_pct(by_ring['alpha_beta'])} " \
           f"({by_ring['ratio_to_ring']:.2f} times)" in para
    assert f"on the {by_sim['rows']} it calls so itself {_pct(by_sim['predicted'])} against " \
           f"{_pct(by_sim['alpha_beta'])} ({by_sim['ratio_to_ring']:.2f} times)" in para
    # what the paragraph concludes: chosen with each source left out, no correction reaches the ratio the issue asks
    assert "No correction of the two predictions chosen without the rows it is judged on reaches" in para
    assert left_out["ratio_to_ring"] > error_floor.TARGET_RATIO
