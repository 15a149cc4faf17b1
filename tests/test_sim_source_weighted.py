"""The source-weighted conformal bounds of the experiment sim/validation/source_weighted.py: with one weight per
row they are the shipped split-conformal quantiles, and with each source weighing 1 a source counts once however
many rows it has."""

import random

from sim.uncertainty import log_ratio_quantiles
from sim.validation.source_weighted import weighted_bounds


def test_one_weight_per_row_gives_the_shipped_quantiles():
    draws = random.Random(27)
    for n in (3, 8, 9, 10, 19, 20, 37, 100):
        xs = [draws.gauss(0, 1) for _ in range(n)]
        assert weighted_bounds(xs, [1.0] * n) == log_ratio_quantiles(xs)


def test_a_source_counts_once_however_many_rows_it_has():
    draws = random.Random(28)
    sources = {f"s{k}": [draws.gauss(0, 0.2) for _ in range(draws.randint(1, 6))] for k in range(12)}
    sources["big"] = [draws.gauss(0.8, 0.05) for _ in range(5)]

    def bounds(by_source):
        xs = [x for v in by_source.values() for x in v]
        return weighted_bounds(xs, [1 / len(v) for v in by_source.values() for _ in v])

    repeated = {**sources, "big": sources["big"] * 10}  # the same source, its rows ten times over
    assert bounds(repeated) == bounds(sources)
    xs = [x for v in sources.values() for x in v]
    rows = [x for v in repeated.values() for x in v]
    assert log_ratio_quantiles(rows)[1] > log_ratio_quantiles(xs)[1]  # weighted by row, the big source moves it
