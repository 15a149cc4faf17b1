"""A collective slowed by the GPU work beside it (``--collective-pace``, ``Cluster.collective_pace``): a what-if
input, tested against the times it must give, and off by default."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import simpy

from birder.cli import main
from birder_ref.schedules import allreduce
from sim.hardware import MIN_COLLECTIVE_PACE, cluster
from sim.system import Fabric

ARGS = ["predict", "--json", "--quiet", "--model", "resnet50", "--gpus-per-node", "8", "--batch-per-gpu", "32",
        "--single-node-throughput", "2800"]


def _collective_end(pace: float, busy: list[tuple[float, float]]) -> tuple[float, float]:
    """(its time alone, when it ends) of one all-reduce started at 0 on 4 nodes of 10 GbE, with the GPU busy in
    the ``busy`` windows (start, end)."""
    c = replace(cluster("10gbe", 4), collective_pace=pace)
    schedule = allreduce(c.layout, 4_000_000)
    env = simpy.Environment()
    alone = Fabric(env, replace(c, collective_pace=1.0))
    env.process(alone.run(schedule))
    env.run()
    seconds = env.now
    env = simpy.Environment()
    fabric = Fabric(env, c)

    def gpu():
        for start, end in busy:
            yield env.timeout(start - env.now)
            fabric.set_gpu_busy(True)
            yield env.timeout(end - env.now)
            fabric.set_gpu_busy(False)

    env.process(gpu())
    done = env.process(fabric.run(schedule))
    env.run(until=done)
    return seconds, env.now


def test_a_collective_keeps_its_pace_share_while_the_gpu_works_and_all_of_it_otherwise():
    seconds, end = _collective_end(1.0, [(0.0, 1e3)])
    assert end == pytest.approx(seconds, rel=1e-12)  # the default: never slowed
    seconds, end = _collective_end(0.25, [(0.0, 1e3)])
    assert end == pytest.approx(seconds / 0.25, rel=1e-9)  # beside GPU work throughout
    # busy for the first 40% of its own time: 0.4 s of its time passes at a quarter of its pace (1.6 s of wall
    # time would be needed; the GPU stops at 0.4 x seconds), then the rest at full pace
    window = 0.4 * seconds
    _, end = _collective_end(0.25, [(0.0, window)])
    assert end == pytest.approx(window + (seconds - 0.25 * window), rel=1e-9)
    # two windows: idle, busy, idle, busy until it ends
    a, b = 0.1 * seconds, 0.3 * seconds
    _, end = _collective_end(0.5, [(a, b), (0.5 * seconds, 1e3)])
    done_by_half = a + 0.5 * (b - a) + (0.5 * seconds - b)
    assert end == pytest.approx(0.5 * seconds + (seconds - done_by_half) / 0.5, rel=1e-9)


def _run(capsys, extra, nodes="4"):
    assert main(ARGS + ["--nodes", nodes] + extra) == 0
    return json.loads(capsys.readouterr().out)


def test_a_slower_pace_exposes_more_where_the_collectives_overlap_the_backward_and_nothing_where_they_do_not(capsys):
    by_pace = {p: _run(capsys, ["--network", "10gbe", "--collective-pace", p]) for p in ("1", "0.5", "0.3")}
    assert by_pace["1"]["collective_pace"] == 1.0 and by_pace["0.3"]["collective_pace"] == 0.3
    assert by_pace["1"]["throughput"] == _run(capsys, ["--network", "10gbe"])["throughput"]  # 1 is the default
    assert by_pace["1"]["throughput"] > by_pace["0.5"]["throughput"] > by_pace["0.3"]["throughput"]
    assert by_pace["0.3"]["exposed_communication_s"] > by_pace["1"]["exposed_communication_s"]
    # DeepSpeed's all-reduce waits for the whole backward: nothing runs beside it, so the pace changes nothing
    after = [_run(capsys, ["--network", "10gbe", "--framework", "deepspeed", "--optimizer", "adam",
                           "--collective-pace", p])["throughput"] for p in ("1", "0.3")]
    assert after[0] == pytest.approx(after[1], rel=1e-9)
    # one measured node is its measurement at any pace
    one = _run(capsys, ["--network", "10gbe", "--collective-pace", "0.3"], nodes="1")
    assert one["throughput"] == pytest.approx(2800, rel=1e-6)


@pytest.mark.parametrize("bad", ["0", str(MIN_COLLECTIVE_PACE / 2), "1.01", "nan", "-1"])
def test_a_pace_out_of_range_is_one_error(capsys, bad):
    assert main(ARGS + ["--nodes", "4", "--network", "10gbe", "--collective-pace", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--collective-pace" in err[0]
