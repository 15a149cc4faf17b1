"""The torch pipeline runs the schedule: its collectives, groups and bytes are the schedule's, phase by phase.

Real ranks over gloo run one training step through the DDP hook and through the ``Birder`` optimizer, with
``comm.record_phases`` on; the bytes come from the tensors each torch call was given, the ranks from the torch
process group it ran on, and both are compared with ``birder_ref.schedules.schedule`` for the same layout.
"""

from dataclasses import replace

import pytest

from birder_ref.schedules import Layout, schedule
from gpu_validation import comm, launch, scenarios

LAYOUTS = [("hierarchical", 2, 3), ("hierarchical", 1, 2), ("flat", 2, 2)]


def _expected_steps(records, scheme: str, layout: Layout, rank: int):
    """Cut a rank's records into steps; yields (records of the step, the schedule's live phases for this rank)."""
    i = 0
    while i < len(records):
        phase = records[i].phase
        candidates = [schedule(scheme, layout, phase.chunk_elements * k)
                      for k in {layout.gpus_per_node, layout.n_ranks}]
        matches = [s for s in candidates if phase in s.phases]
        assert matches, f"record {i}: {phase.name} is no phase of the {scheme} schedule"
        live = [ph for ph in matches[0].phases if any(rank in g and len(g) > 1 for g in ph.groups)]
        yield records[i:i + len(live)], live
        i += len(live)


def _check_trace(records, scheme: str, layout: Layout, rank: int) -> int:
    steps = 0
    for step_records, live in _expected_steps(records, scheme, layout, rank):
        assert [r.phase for r in step_records] == live, "phases out of the schedule's order"
        for record, phase in zip(step_records, live, strict=True):
            group = next(g for g in phase.groups if rank in g)
            assert record.collective == phase.pattern.collective, phase.name
            assert record.ranks == group, phase.name
            assert record.bytes_sent == phase.bytes_sent()[rank], phase.name
        steps += 1
    return steps


@pytest.mark.parametrize("scheme, n_nodes, gpus", LAYOUTS)
def test_the_torch_pipeline_runs_the_schedule_phase_by_phase(scheme, n_nodes, gpus):
    world = n_nodes * gpus
    outcome = launch.launch(scenarios.phase_trace, (scheme, gpus), world, "gloo", 30, 180)
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


def test_a_pattern_without_a_torch_collective_is_refused():
    direct = schedule("allgather", Layout(1, 2), 16).phases[0]
    with pytest.raises(ValueError, match="runs no"):
        comm.run_phase(direct, None, object())
