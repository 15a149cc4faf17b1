"""How much communication runs hide (sim/validation/overlap_evidence.py): the rows it chooses, the figures the
validation README quotes, the hypothesis it judges."""

from __future__ import annotations

from doc_text import prose

from sim.validation import first_contact as fc
from sim.validation import overlap_evidence as oe

BEFORE_BATCH_18 = "e1579db"  # the re-score after batch 17: the log's last entry when the hypothesis was written


def _row(measured: float, predicted: float, ring: float, source: str = "s", framework: str = "ddp") -> dict:
    """A logged row of linear scaling 100."""
    return {"source": source, "measured": measured, "predicted": predicted, "alpha_beta": ring, "linear": 100.0,
            "argv": ["predict", "--framework", framework]}


def test_rows_are_chosen_by_what_is_known_before_measuring():
    # a ring of 20% of the step (100 / 120 - 1 = 0.2) is chosen whatever the measurement; one of 5% never is
    for measured in (50.0, 99.0, 100.0):
        chosen = oe.added_over_ring(_row(measured, 90.0, 100 / 1.2))
        assert chosen is not None and abs(chosen["ring"] - 0.2) < 1e-12
        assert abs(chosen["measured_over_ring"] - (100 / measured - 1) / 0.2) < 1e-12
        assert oe.added_over_ring(_row(measured, 90.0, 100 / 1.05)) is None
    # frameworks that do not all-reduce during the backward pass are left out
    for framework in ("fsdp", "byteps", "tf-parameter-server", "deepspeed"):
        assert oe.added_over_ring(_row(80.0, 90.0, 80.0, framework=framework)) is None
    for framework in ("ddp", "horovod", "horovod-0.20", "oneflow"):
        assert oe.added_over_ring(_row(80.0, 90.0, 80.0, framework=framework)) is not None


def test_each_source_counts_once_and_the_hypothesis_needs_three_sources():
    ring = 100 / 1.5  # the ring adds 0.5 of the step
    # source a: three rows adding 0.75 (1.5 rings) measured, 0.25 (0.5 rings) simulated; b and c one row each
    rows = [_row(100 / 1.75, 100 / 1.25, ring, "a") for _ in range(3)]
    rows += [_row(100 / 1.5, 100 / 1.2, ring, "b"), _row(100 / 1.25, 100 / 1.45, ring, "c")]
    s = oe.summary(rows)
    assert (s["rows"], s["sources"], s["sources_measured_above_model"]) == (5, 3, 2)
    assert abs(s["measured_over_ring"] - 1.0) < 1e-9 and abs(s["model_over_ring"] - 0.5) < 1e-9
    assert oe.judged(s) == "holds"
    assert oe.judged(oe.summary(rows[:4])) == "too few"
    worse = rows + [_row(100 / 1.25, 100 / 1.5, ring, "d"), _row(100 / 1.25, 100 / 1.5, ring, "e")]
    assert oe.judged(oe.summary(worse)) == "fails"  # d and e add half a ring: the median of 5 sources is 0.5


def test_the_validation_readme_quotes_the_log_as_it_stood_before_batch_18():
    entries = fc.read_log()
    last = next(i for i, e in enumerate(entries) if e["model_commit"].startswith(BEFORE_BATCH_18))
    r = oe.report(entries[:last + 1])
    first, latest = r["first_contact"], r["latest_rescore"]
    judged = [b["hypothesis"] for b in r["batches"] if b["hypothesis"] != "too few"]
    text = prose("sim/validation/README.md")
    assert (f"On the 206 such rows of 42 sources as first scored, the runs added a median of "
            f"{first['measured_over_ring']:.2f} times the ring's time, and the simulator "
            f"{first['model_over_ring']:.2f} "
            f"times ({first['sources_measured_above_model']} of the {first['sources']} sources added more than the "
            f"simulator said); in the re-score after batch 17 the simulator adds {latest['model_over_ring']:.2f} "
            "times.") in text
    assert (first["rows"], first["sources"], latest["model"]) == (206, 42, BEFORE_BATCH_18)
    assert judged == ["holds"] * 8 and "(8 of 8)" in text
    assert (f"at least {oe.MEASURED_AT_LEAST:.1f} and the simulator's, as first scored, at most "
            f"{oe.MODEL_AT_MOST}") in text


def test_the_command_line_takes_no_argument_or_a_corpus_pace(capsys):
    for argv in (["x"], ["--corpus-pace"], ["--corpus-pace", "0.3", "x"]):
        assert oe.main(argv) == 2
        assert "usage: python -m sim.validation.overlap_evidence" in capsys.readouterr().err
    for bad in ("nan", "0", "2", "fast"):
        assert oe.main(["--corpus-pace", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("overlap_evidence: ")


def test_the_validation_readme_quotes_the_corpus_at_the_pace_tried():
    at = oe.corpus_at_pace(0.3)
    text = prose("sim/validation/README.md")

    def pct(x):
        return f"{x * 100:.1f}%"

    quoted = (f"{at['all']['rows']} rows, predicted as the corpus's left-out generic predictions are), it is worse "
              f"everywhere: all rows' median error from {pct(at['all']['median_error_at_1'])} to "
              f"{pct(at['all']['median_error_at_0.3'])}, the compute-bound rows' from "
              f"{pct(at['compute-bound']['median_error_at_1'])} to {pct(at['compute-bound']['median_error_at_0.3'])}, "
              f"the communication-bound rows' from {pct(at['communication-bound']['median_error_at_1'])} to "
              f"{pct(at['communication-bound']['median_error_at_0.3'])}.")
    assert quoted in text
