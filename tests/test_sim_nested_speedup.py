"""The corpus figures stay out of sample: the speed-up interval method judged on sources it was not chosen on, and
no row predicted without a measured node from a GPU compute figure its own source supplied."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from birder.report_words import speedup_words
from sim.validation import corpus_setup, figures
from sim.validation import leave_one_source_out as loso
from sim.validation import pairs as speedup_pairs
from sim.validation.corpus import load_corpus


def _pair(source: str, paired_covered: bool) -> speedup_pairs.PairPrediction:
    """A compute-bound pair predicted 1.2, measured 1.2 or 2.0: the paired interval 1.1-1.3 (narrow) covers the
    first only, the naive 1.0-2.5 (wide) both."""
    return speedup_pairs.PairPrediction(source, "t", "m", 2, "a", "b", "compute-bound", 1.2 if paired_covered else 2.0,
                                   1.2, 1.1, 1.3, 1.0, 2.5)


def test_the_speedup_method_is_judged_on_sources_it_was_not_chosen_on():
    """s0 and s1: the paired interval covers and is narrower; s2: only the naive one covers. On all three the
    paired one covers 2/3 < 80%, so the naive one is chosen and covers all: 100%, post-selection. Chosen without
    each source, s2 gets the paired one (s0 and s1 support it) and is missed: 2/3. Held out with s0, s2 and s0
    are both judged on s1 alone."""
    pairs = [_pair(s, paired_covered=s != "s2") for s in ("s0", "s1", "s2") for _ in range(5)]
    assert speedup_pairs.speedup_method(speedup_pairs.pair_figures(pairs)) == "naive"
    assert speedup_pairs.pair_figures(pairs)["naive_coverage"] == 1.0
    nested = speedup_pairs.nested_speedup_figures(pairs)
    assert nested["pairs"] == 15 and nested["coverage"] == pytest.approx(2 / 3)
    assert nested["paired_share"] == pytest.approx(1 / 3)  # s2's only
    assert nested["by_regime"]["communication-bound"]["pairs"] == 0
    groups = {"s0": frozenset({"s0", "s2"}), "s2": frozenset({"s0", "s2"}), "s1": frozenset({"s1"})}
    grouped = speedup_pairs.nested_speedup_figures(pairs, groups)
    assert grouped["coverage"] == pytest.approx(2 / 3) and grouped["paired_share"] == pytest.approx(2 / 3)


def test_a_source_that_set_its_gpus_compute_is_left_out_of_the_unmeasured_node_figures():
    """The K80's compute figure is tf-benchmarks-2017's: its rows leave the figures without a measured node
    (counted, by source) while the same rows under another source's name enter them."""
    assert corpus_setup.gpu_calibrated_on("k80", "resnet50") == "tf-benchmarks-2017"
    assert corpus_setup.gpu_calibrated_on("a100", "resnet50") == corpus_setup.PAPER_SOURCE
    assert corpus_setup.gpu_calibrated_on("k80", "no-such-model") is None
    k80 = tuple(r for r in load_corpus() if r.source == "tf-benchmarks-2017")[:3]
    assert k80 and {r.gpu for r in k80} == {"k80"}
    own = loso.corpus_validation(k80, "test")
    renamed = loso.corpus_validation(tuple(replace(r, source="other") for r in k80), "test")
    assert len(own.rows) == len(renamed.rows) == len(k80)
    assert own.unmeasured_rows == () and own.summary()["unmeasured_node"]["rows_excluded"] == len(k80)
    assert own.summary()["unmeasured_node"]["excluded_by_source"] == {"tf-benchmarks-2017": len(k80)}
    assert len(renamed.unmeasured_rows) == len(k80) and renamed.unmeasured_excluded == ()


def test_a_share_of_nothing_prints_as_a_dash():
    assert figures.percent(None) == "-" and figures.percent(0.9166) == "91.7%"
    assert figures.percent(0.5, 0) == "50%"
    corpus = {"interval_level": 0.8, "speedup": {"pairs": 4, "coverage": 1.0, "median_half_width": 0.1,
                                                 "naive_coverage": 1.0, "naive_median_half_width": 0.3,
                                                 "decided": 0.0, "decided_right": None}}
    words = speedup_words(SimpleNamespace(summary={"corpus_validation": {"summary": corpus}}))
    assert "named the faster as measured in - of cases" in words
