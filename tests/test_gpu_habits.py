"""An adopting engineer's habits with ``gpu_validation.Birder`` (``tests/gpu_scenarios/habits.py``): each pattern on
4 gloo ranks (2 x 2) and, for checkpoints saved there, on 1 rank; every row of ``habits.HABITS`` must have its outcome
(works: every step equal to birder_ref's and the ranks identical; clear error: every rank raises the named type
with the stated message), and docs/habits.md holds the table ``habits.habits_table()`` renders."""

from pathlib import Path

import pytest
from gpu_scenarios import habits

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def seen():
    return habits.observe(world=4, gpus_per_node=2)


@pytest.mark.parametrize("habit", habits.HABITS, ids=lambda h: h.name)
def test_each_habit_has_its_outcome_on_every_rank(seen, habit):
    assert set(seen[habit.name]) == ({0} if habit.name in habits.ONE_RANK else {0, 1, 2, 3})
    assert habits.verdict(habit, seen[habit.name]) is None, habits.verdict(habit, seen[habit.name])


def test_the_check_catches_a_wrong_update_and_ranks_that_differ(seen):
    """The negative control: nudged parameters fail the reference, and a rank-0-only nudge fails identity."""
    control = seen["control_nudged"]
    assert all(entry["mismatched"] > 0 and not entry["identical"] for entry in control.values())
    as_if_it_worked = habits.Habit(habits.control_nudged, "", "works", "")
    assert habits.verdict(as_if_it_worked, control) is not None


def test_what_the_working_habits_keep(seen):
    assert not any(e["frozen_moved"] for e in seen["freeze_after_steps"].values())  # frozen mid-run stays put
    assert all(e["still_tied"] for e in seen["tied_weights"].values())
    assert all(e["restored_lr"] == habits.LR for e in seen["resume_with_new_lr"].values())  # the saved lr wins
    assert all(e["returned_loss"] for e in seen["step_with_closure"].values())  # step(closure) returns its loss


def test_the_docs_hold_the_generated_habits_table():
    assert habits.habits_table() in (ROOT / "docs" / "habits.md").read_text()
