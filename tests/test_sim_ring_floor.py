"""The ring floor (sim/validation/ring_floor.py): batch 9's rule, what it reads from the log, how it judges."""

from __future__ import annotations

import statistics

import pytest
from doc_text import prose

from sim.validation import first_contact as fc
from sim.validation import ring_floor

COMM, COMPUTE = "communication-bound", "compute-bound"


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _row(measured: float, predicted: float, ring: float, regime: str, source: str = "s") -> dict:
    return {"source": source, "measured": measured, "predicted": predicted, "alpha_beta": ring,
            "interval_regime": regime, "measured_regime": regime}


def test_the_docstrings_figures_are_the_logs():
    """What drew the hypothesis again, as the re-score after batch 16 (model b04731f) logged it, and batch 9's
    verdict as the log has it."""
    entries = fc.read_log()
    entry = next(e for e in entries if e["model_commit"].startswith("b04731f"))
    comm = [r for r in entry["rows"] if r["measured_regime"] == COMM]
    assert (len(comm), sum(r["predicted"] > r["measured"] for r in comm)) == (350, 325)
    ring_comm = [r for r in entry["rows"] if r["interval_regime"] == COMM]
    model = statistics.median(abs(r["predicted"] / r["measured"] - 1) for r in ring_comm)
    ring = statistics.median(abs(r["alpha_beta"] / r["measured"] - 1) for r in ring_comm)
    assert (len(ring_comm), round(ring * 100, 1), round(model * 100, 1)) == (166, 16.8, 22.0)
    doc = " ".join(ring_floor.__doc__.split())
    assert "of the 350 rows" in doc and "predicts 325 above" in doc and "(16.8% against 22.0%)" in doc
    batch_9 = ring_floor.report(entries)["batches"][0]
    assert batch_9["model"] == ring_floor.RULE_FIXED_BEFORE and batch_9["rule"] == "fails"
    assert (round(batch_9["compute_bound"]["model"] * 100, 1), round(batch_9["compute_bound"]["floor"] * 100, 1)) \
        == (2.8, 6.2) and "(compute-bound rows 2.8% to 6.2%)" in doc


@pytest.mark.parametrize("ring, compute_ring, verdict", [
    (110.0, 100.0, "holds"),  # communication-bound rows from 30% to 10%; compute-bound rows untouched
    (128.0, 100.0, "fails"),  # a gain of 2 points, short of 3
    (110.0, 99.0, "fails"),  # the floor lowers the compute-bound rows by 1%: more than 0.5 points lost
    (150.0, 100.0, "fails"),  # the ring above the model: nothing changes, no gain
])
def test_batch_9s_rule_holds_only_when_every_criterion_does(ring, compute_ring, verdict):
    rows = [_row(100.0, 130.0, ring, COMM) for _ in range(10)]
    rows += [_row(100.0, 100.0, compute_ring, COMPUTE) for _ in range(10)]
    assert ring_floor.judge(rows)["rule"] == verdict


def test_too_few_communication_bound_rows_are_not_judged_and_the_last_batch_decides_with_the_pool():
    rows = [_row(100.0, 130.0, 110.0, COMM) for _ in range(ring_floor.MIN_ROWS - 1)]
    assert ring_floor.judge(rows)["rule"] == "too few" and ring_floor.floored(rows[0]) == 110.0

    def entry(commit: str, source: str, ring: float, n: int) -> dict:
        return {"model_commit": commit, "sources": [source], "rows": [_row(100.0, 130.0, ring, COMM, source)] * n}

    fixed = ring_floor.RULE_FIXED_BEFORE
    helps, small, hurts = entry("a" * 40, "a", 110.0, 20), entry("b" * 40, "b", 110.0, 5), entry("c" * 40, "c", 160, 10)
    before = entry("0" * 40, "old", 110.0, 10)  # before batch 9: never judged
    assert [b["model"] for b in ring_floor.report([before, entry(fixed, "nine", 130.0, 10), helps])["batches"]] \
        == [fixed, "a" * 7]
    assert ring_floor.report([entry(fixed, "nine", 130.0, 10), helps, small])["adopt"]  # the last: too few alone
    # the pool holds (20 of 30 rows helped) but the last batch fails alone
    assert not ring_floor.report([entry(fixed, "nine", 130.0, 10), helps, hurts])["adopt"]
    with pytest.raises(ValueError, match="no entry of model"):
        ring_floor.report([before])


def test_the_command_line_takes_no_argument(capsys):
    assert ring_floor.main(["x"]) == 2
    assert "usage: python -m sim.validation.ring_floor" in capsys.readouterr().err


def test_the_validation_readme_quotes_the_rings_floor_before_batch_17_as_logged():
    """sim/validation/README.md's paragraph: each batch's verdict from 9 to 16 and the pool of 10 to 16, as
    ``report`` draws them from the log up to batch 16's entry (model cfcec8b)."""
    entries = fc.read_log()
    last = max(i for i, e in enumerate(entries) if e["model_commit"].startswith("cfcec8b"))
    out = ring_floor.report(entries[:last + 1])
    batch = dict(zip(["9", "10", "11", "12", "13", "15", "16"], (b["rule"] for b in out["batches"]), strict=True))
    pool = out["pooled_after_batch_9"]
    text = prose("sim", "validation", "README.md")
    said = {"holds": ["11", "15"], "fails": ["9", "12", "16"], "too few": ["10", "13"]}
    assert {v: sorted(k for k in batch if batch[k] == v) for v in said} == {v: sorted(k) for v, k in said.items()}
    assert "held on batches 11 and 15, failed on 9, 12 and 16, and batches 10 and 13 had too few" in text

    def pct(group: str, key: str) -> str:
        return _pct(pool[group][key])

    assert (f"over batches 10 to 16 ({pool['all']['rows']} rows) it held: communication-bound rows "
            f"{pct('communication_bound', 'model')} to {pct('communication_bound', 'floor')}, compute-bound "
            f"{pct('compute_bound', 'model')} to {pct('compute_bound', 'floor')}, all rows {pct('all', 'model')} to "
            f"{pct('all', 'floor')}") in text and pool["rule"] == "holds"


def test_the_validation_readme_says_what_batch_17_decided_as_logged():
    """The rule as written says adopt after batch 17 (batch 17 alone too few; the pool holds), batch 17 alone shows
    the losses the README gives, and the README says that the floor was not adopted regardless."""
    entries = fc.read_log()
    last = max(i for i, e in enumerate(entries) if e["model_commit"].startswith("47f8163"))
    out = ring_floor.report(entries[:last + 1])
    batch_17, pool = out["batches"][-1], out["pooled_after_batch_9"]
    assert batch_17["model"] == "47f8163" and batch_17["rule"] == "too few" and out["adopt"]
    assert "not adopted after batch 17" in out["decision"]
    text = prose("sim", "validation", "README.md")

    assert (f"the pool of batches 10 to 17 ({pool['all']['rows']} rows), where it holds: measured "
            f"communication-bound rows {_pct(pool['communication_bound']['model'])} to "
            f"{_pct(pool['communication_bound']['floor'])}, compute-bound {_pct(pool['compute_bound']['model'])} to "
            f"{_pct(pool['compute_bound']['floor'])}, all rows {_pct(pool['all']['model'])} to "
            f"{_pct(pool['all']['floor'])}. The rule says adopt. It is not adopted.") in text
    assert (f"On batch 17 alone the floor raised all rows' median error from {_pct(batch_17['all']['model'])} to "
            f"{_pct(batch_17['all']['floor'])} and the compute-bound rows' from "
            f"{_pct(batch_17['compute_bound']['model'])} to {_pct(batch_17['compute_bound']['floor'])}") in text
    assert f"batch 17 alone has {batch_17['communication_bound']['rows']} communication-bound rows" in text
