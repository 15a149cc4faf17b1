"""The torch pipeline runs the schedule: its collectives, groups and bytes are the schedule's, phase by phase.

Real ranks over gloo run one training step through the DDP hook and through the ``Birder`` optimizer, with
``comm.record_phases`` on; the bytes come from the tensors each torch call was given, the ranks from the torch
process group it ran on, and both are compared with ``birder_ref.schedules.schedule`` for the same layout.
"""

from dataclasses import replace

import pytest
from gpu_scenarios import training

from birder_ref.schedules import Layout, schedule
from gpu_validation import comm, launch

LAYOUTS = [("hierarchical", 2, 3), ("hierarchical", 1, 2), ("flat", 2, 2)]


def _check_trace(records, scheme: str, layout: Layout, rank: int) -> int:
    """Assert the records ran the schedule; returns how many steps they hold."""
    topology = comm.Topology(scheme, layout, rank, None, None)
    assert comm.trace_mismatches(records, topology) == []
    live = comm.phases_of_rank(schedule(scheme, layout, 8 * layout.n_ranks).phases, rank)
    assert len(records) % len(live) == 0
    return len(records) // len(live)


@pytest.mark.parametrize("scheme, n_nodes, gpus", LAYOUTS)
def test_the_torch_pipeline_runs_the_schedule_phase_by_phase(scheme, n_nodes, gpus):
    world = n_nodes * gpus
    outcome = launch.launch(training.phase_trace, (scheme, gpus), world, "gloo", 30, 180)
    assert not outcome.errors and not outcome.lost, outcome.describe_failures()
    layout = Layout(n_nodes, gpus)
    for rank in range(world):
        trace = outcome.reports[rank]["result"]
        assert _check_trace(trace["hook"], scheme, layout, rank) >= 1  # one step per bucket
        assert _check_trace(trace["optimizer, overlap=False"], scheme, layout, rank) == 1
        overlapped = trace["optimizer, overlap=True"]
        if scheme == "hierarchical" and gpus > 1:  # the exchange starts during backward, range by range
            assert trace["overlapped, overlap=True"]
            intra = [r for r in overlapped if r.phase.name == "intra_reduce_scatter"]
            assert len(intra) >= 2 and overlapped[:len(intra)] == intra
            whole = replace(intra[0], bytes_sent=sum(r.bytes_sent for r in intra))  # the ranges add up to the phase
            overlapped = [whole, *overlapped[len(intra):]]
        assert _check_trace(overlapped, scheme, layout, rank) == 1


def test_the_trace_check_names_a_phase_that_moved_other_bytes_or_ran_another_collective():
    layout = Layout(2, 2)
    topology = comm.Topology("hierarchical", layout, 1, None, None)
    phases = schedule("hierarchical", layout, 64).phases
    right = [comm.PhaseRecord(ph, ph.pattern.collective, next(g for g in ph.groups if 1 in g), ph.bytes_sent()[1])
             for ph in phases]
    assert comm.trace_mismatches(right, topology) == []
    assert "bytes" in comm.trace_mismatches([*right[:2], replace(right[2], bytes_sent=3), right[3]], topology)[0]
    assert "intra_all_gather" in comm.trace_mismatches(
        [*right[:3], replace(right[3], collective="all_to_all_single")], topology)[0]
    assert "the schedule runs" in comm.trace_mismatches(right[1:], topology)[0]


def test_a_pattern_without_a_torch_collective_is_refused():
    direct = schedule("allgather", Layout(1, 2), 16).phases[0]
    with pytest.raises(ValueError, match="runs no"):
        comm.run_phase(direct, None, object())
