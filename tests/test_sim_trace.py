"""`birder predict --trace FILE.json`: the predicted step as a Chrome/Perfetto trace (Trace Event Format: complete
events, ts/dur in microseconds) whose GPU work and exposed-communication waits tile the step exactly, and
`link_utilisation` in the JSON."""

import json
import math

import pytest

from birder.cli import main

# the Trace Event Format as Perfetto's JSON importer reads it: what each event must carry
REQUIRED = {"X": {"name": str, "ph": str, "pid": int, "tid": int, "ts": (int, float), "dur": (int, float)},
            "M": {"name": str, "ph": str, "pid": int, "tid": int, "args": dict}}


def _check_schema(trace: dict) -> list[dict]:
    assert set(trace) >= {"traceEvents"} and isinstance(trace["traceEvents"], list)
    for event in trace["traceEvents"]:
        fields = REQUIRED[event["ph"]]
        assert all(isinstance(event[k], t) for k, t in fields.items()), event
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0 and math.isfinite(event["ts"] + event["dur"])
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _predict(tmp_path, capsys, *args) -> tuple[dict, dict]:
    out = tmp_path / "step.json"
    assert main(["predict", *map(str, args), "--trace", str(out), "--json"]) == 0
    return json.loads(capsys.readouterr().out), json.loads(out.read_text())


@pytest.mark.parametrize("args", [
    ("--model", "bert-large", "--nodes", 4, "--network", "25gbe", "--optimizer", "birder"),  # 4 phases per bucket
    ("--model", "resnet50", "--nodes", 2, "--network", "ib-hdr", "--accumulation-steps", 2),  # all-reduce, no_sync
])
def test_the_trace_tiles_the_predicted_step(tmp_path, capsys, args):
    result, trace = _predict(tmp_path, capsys, *args)
    events = _check_schema(trace)
    gpu = sorted((e for e in events if e["cat"] in ("gpu", "exposed")), key=lambda e: e["ts"])
    assert gpu[0]["ts"] == 0 and all(math.isclose(a["ts"] + a["dur"], b["ts"], rel_tol=1e-12, abs_tol=1e-6)
                                     for a, b in zip(gpu, gpu[1:], strict=False))  # no gap, no overlap
    step_us = result["iteration_s"] * 1e6
    assert math.isclose(gpu[-1]["ts"] + gpu[-1]["dur"], step_us, rel_tol=1e-12)
    assert max(e["ts"] + e["dur"] for e in events) <= step_us * (1 + 1e-12)
    exposed = sum(e["dur"] for e in events if e["cat"] == "exposed")
    assert math.isclose(exposed, result["exposed_communication_s"] * 1e6, rel_tol=1e-9, abs_tol=1e-3)
    network = [e for e in events if e["cat"] in ("intra", "inter")]
    assert network and all(e["args"]["algorithm"] for e in network)
    assert set(result["link_utilisation"]) == {"intra", "inter"}
    assert all(0 < share <= 1 for share in result["link_utilisation"].values())


def test_each_step_kind_is_its_own_process(tmp_path, capsys):
    """1-bit Adam's full-precision warm-up steps and compressed steps: two processes, each spanning its own step."""
    result, trace = _predict(tmp_path, capsys, "--model", "bert-base", "--nodes", 2, "--network", "10gbe",
                             "--optimizer", "onebit-adam", "--warmup-fraction", "0.2")
    events = _check_schema(trace)
    kinds = trace["otherData"]["step_kinds"]
    assert len(kinds) == 2 and math.isclose(sum(k["share"] for k in kinds.values()), 1.0)
    assert math.isclose(sum(k["share"] * k["iteration_s"] for k in kinds.values()), result["iteration_s"],
                        rel_tol=1e-12)
    for pid, kind in enumerate(kinds.values(), 1):
        mine = [e for e in events if e["pid"] == pid and e["cat"] in ("gpu", "exposed")]
        assert math.isclose(max(e["ts"] + e["dur"] for e in mine), kind["iteration_s"] * 1e6, rel_tol=1e-12)


def _overlap_us(event: dict, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(event["ts"] + event["dur"], b) - max(event["ts"], a)) for a, b in spans)


def test_gpu_work_beside_a_collective_runs_slower_by_the_sourced_factor(tmp_path, capsys):
    """GPU work overlapped by a collective is slowed by OVERLAP_COMPUTE_SLOWDOWN (Lee et al. 2025): the step's
    ``contention_s`` is s / (1 + s) of the GPU time the trace shows beside collectives, the step is compute +
    compression + contention + exposed communication, and a blocking 1-bit hook (nothing beside it) has none."""
    from sim.workload import OVERLAP_COMPUTE_SLOWDOWN as s

    result, trace = _predict(tmp_path, capsys, "--model", "bert-large", "--nodes", 4, "--network", "ib-edr",
                             "--gpu", "v100", "--single-node-throughput", 400)
    events = _check_schema(trace)
    spans = sorted({(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in ("intra", "inter")})
    beside_us = sum(_overlap_us(e, spans) for e in events if e["cat"] == "gpu")
    assert beside_us > 0.2 * result["iteration_s"] * 1e6  # much of the backward pass runs beside collectives
    assert math.isclose(result["contention_s"] * 1e6, beside_us * s / (1 + s), rel_tol=1e-6)
    parts = result["compute_s"] + result["compression_s"] + result["contention_s"] + result["exposed_communication_s"]
    assert math.isclose(parts, result["iteration_s"], rel_tol=1e-9)
    blocking, _ = _predict(tmp_path, capsys, "--model", "bert-large", "--nodes", 4, "--network", "ib-edr",
                           "--optimizer", "birder", "--hook", "blocking")
    assert blocking["contention_s"] == 0.0
