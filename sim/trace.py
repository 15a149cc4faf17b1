"""A predicted training step as a timeline (``birder predict --trace FILE.json``) and the links' busy shares.

The simulated step (``sim.workload._step``) records what it does as it does it: each piece of GPU work (forward,
each layer's backward, the 1-bit compression kernels, the optimizer step) and each NCCL operation of each bucket's
collective on the link classes it crosses (``intra``: the node's NVLink or PCIe fabric; ``inter``: the NICs; a
pipelined all-reduce crosses both at once and appears on both). ``chrome_trace`` writes those events in the Trace
Event Format that Perfetto and chrome://tracing open (``{"traceEvents": [...]}``, complete events ``"ph": "X"``
with ``ts``/``dur`` in microseconds), one process per step kind (1-bit Adam's full-precision warm-up steps and its
compressed steps are two), plus ``exposed communication``: the stretches where the GPU waits for the network.
The GPU's events, those waits and the multi-node loss scale's added time (``overhead``, at the step's end) tile
the step from 0 to its iteration time exactly.
"""

from __future__ import annotations

TRACKS = {"gpu": (1, "GPU (compute, compression kernels, optimizer)"), "exposed": (2, "exposed communication"),
          "intra": (3, "intra-node links (NVLink / PCIe)"), "inter": (4, "inter-node links (NICs)"),
          "host": (5, "host memory (an MPI backend's copies and CPU sums)"),
          "overhead": (6, "multi-node loss beyond the simulated (multinode_loss_scale)")}


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def exposed_spans(events: list[tuple], iteration_s: float) -> list[tuple[float, float]]:
    """The stretches of [0, iteration_s] in which the GPU does nothing: the step waits for communication (the
    multi-node loss scale's added time, its own track, is not counted as a wait)."""
    out, now = [], 0.0
    for start, end in _union([(e[2], e[2] + e[3]) for e in events if e[0] in ("gpu", "overhead")]):
        if start > now:
            out.append((now, start))
        now = max(now, end)
    if iteration_s > now:
        out.append((now, iteration_s))
    return out


def link_utilisation(events: list[tuple], iteration_s: float) -> dict[str, float]:
    """Each link class's busy share of the step: the union of the operations that cross it over the step's time."""
    return {track: sum(b - a for a, b in _union([(e[2], e[2] + e[3]) for e in events if e[0] == track]))
            / iteration_s for track in ("intra", "inter")}


def chrome_trace(traces: dict[str, list[tuple]], step_times: dict[str, float], shares: dict[str, float],
                 title: str) -> dict:
    """The Trace Event Format object of the step kinds' events (``traces``: kind -> events; ``step_times``: kind ->
    its iteration time in seconds; ``shares``: kind -> its share of the steps)."""
    events = []
    for pid, (kind, recorded) in enumerate(traces.items(), 1):
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
                       "args": {"name": f"{title}: {kind} step ({shares[kind]:.0%} of steps, "
                                        f"{step_times[kind] * 1e3:.3f} ms)"}})
        for tid, label in TRACKS.values():
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": label}})
        waits = [("exposed", "exposed communication", a, b - a, {}) for a, b in
                 exposed_spans(recorded, step_times[kind])]
        for track, name, start, seconds, args in sorted(recorded + waits, key=lambda e: (e[2], TRACKS[e[0]][0])):
            events.append({"ph": "X", "pid": pid, "tid": TRACKS[track][0], "name": name, "cat": track,
                           "ts": start * 1e6, "dur": seconds * 1e6, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"title": title, "step_kinds": {k: {"share": shares[k], "iteration_s": step_times[k]}
                                                          for k in traces}}}
