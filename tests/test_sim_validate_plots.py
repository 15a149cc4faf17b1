"""`birder validate --out`: the corpus plot (each source left out, beside linear scaling) states the figures
`birder validate` prints, computed from the rows it draws."""

import numpy as np
import pytest
from matplotlib.image import imread

from sim import plots


def row(measured, left_out, linear, low, high):
    return {"measured": measured, "left_out": left_out, "linear": linear, "low": low, "high": high}


def test_the_corpus_plot_states_its_rows_figures_and_draws_them(tmp_path):
    rows = [row(100.0, 110.0, 200.0, 90.0, 120.0),    # +10%, linear +100%, covered
            row(50.0, 40.0, 55.0, 35.0, 60.0),        # -20%, linear +10%, covered
            row(1000.0, 1300.0, 1000.0, 1100.0, 1400.0)]  # +30%, linear 0%, not covered
    n, mape, linear, covered = plots.corpus_left_out_figures(rows)
    assert n == 3 and mape == pytest.approx(0.2) and linear == pytest.approx(1.1 / 3)
    assert covered == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        plots.corpus_left_out_figures([])
    path = plots.corpus_left_out(rows, tmp_path)
    assert path.name == "corpus_left_out.png"
    pixels = np.rint(imread(path)[..., :3] * 255).astype(int)
    blue = np.array([31, 119, 180])  # tab:blue, the simulator's markers
    assert np.abs(pixels - blue).sum(axis=2).min() < 60
