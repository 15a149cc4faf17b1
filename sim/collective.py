"""One collective as nccl-tests reports it (``birder collective``): time, algorithm and bus bandwidth.

Sizes follow nccl-tests' size column: the per-rank buffer of all-reduce, broadcast and all-to-all, the total
output of all-gather and the total input of reduce-scatter. algbw = size / time; busbw = algbw x 2(n-1)/n for
all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 for broadcast (nccl-tests
doc/PERFORMANCE.md), n the number of ranks.
"""

from __future__ import annotations

import math

from birder_ref.schedules import Phase, Schedule, allreduce, tree_allreduce
from sim.hardware import Cluster
from sim.system import collective_ops, collective_schedule, nccl_allreduce_algorithm

OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast")
ALGORITHMS = ("auto", "ring", "tree")


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md)."""
    if ranks < 2:
        return 1.0 if op == "broadcast" else 0.0 if op != "all-reduce" else 0.0
    return {"all-reduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0}.get(op, (ranks - 1) / ranks)


def schedule_for(op: str, nbytes: int, cluster: Cluster, algorithm: str = "auto") -> tuple[Schedule, str]:
    """The schedule NCCL would run for ``op`` on ``nbytes`` (bytes as 8-bit elements), and its algorithm."""
    layout = cluster.layout
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    if algorithm == "tree" and op != "all-reduce":
        raise ValueError(f"algorithm tree exists for all-reduce only (NCCL runs {op} as a ring or point-to-point)")
    if op == "all-reduce":
        chosen = algorithm if algorithm != "auto" else nccl_allreduce_algorithm(cluster, nbytes)
        sched = tree_allreduce(layout, nbytes, 8) if chosen == "tree" else allreduce(layout, nbytes, 8)
        return sched, chosen
    if op == "broadcast":  # a pipelined chain from the root: every hop carries the whole buffer once
        p = layout.n_ranks
        if p < 2:
            return Schedule("broadcast", layout, nbytes, nbytes, ()), "ring"
        chunk = math.ceil(nbytes / (p - 1))
        phase = Phase("broadcast", "ring_all_gather", (tuple(range(p)),), chunk, (8,) * (p - 1), "copy")
        return Schedule("broadcast", layout, nbytes, chunk * (p - 1), (phase,)), "ring"
    name = {"all-gather": "all-gather", "reduce-scatter": "reduce-scatter", "all-to-all": "all-to-all"}[op]
    return collective_schedule(name, layout, nbytes, 8), "p2p" if op == "all-to-all" else "ring"


def predict_collective(op: str, nbytes: int, cluster: Cluster, algorithm: str = "auto") -> dict:
    """One collective of ``nbytes`` (nccl-tests' size) on ``cluster``: ``time_s``, ``algbw_gbytes_per_s``,
    ``busbw_gbytes_per_s`` (nccl-tests' definitions), ``algorithm``, ``protocol``."""
    if not (isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes >= 1):
        raise ValueError(f"bytes must be a positive integer, got {nbytes!r}")
    _check_bytes(nbytes, nbytes)
    sched, chosen = schedule_for(op, nbytes, cluster, algorithm)
    ops = collective_ops(sched, cluster, in_switch=algorithm == "auto")
    chosen = ops[0].algorithm if ops and ops[0].algorithm in ("nvls", "collnet") else chosen
    seconds = sum(o.seconds for o in ops)
    ranks = cluster.n_gpus
    algbw = nbytes / seconds / 1e9 if seconds > 0 else math.inf
    return {"op": op, "bytes": nbytes, "nodes": cluster.n_nodes, "gpus_per_node": cluster.gpus_per_node,
            "ranks": ranks, "network": cluster.nic.name, "nics_per_node": cluster.nic.count,
            "time_s": seconds, "algbw_gbytes_per_s": algbw, "busbw_gbytes_per_s": algbw * bus_factor(op, ranks),
            "algorithm": chosen, "protocol": "/".join(dict.fromkeys(o.protocol for o in ops)) or "none"}


def sweep_sizes(low: int, high: int) -> list[int]:
    """nccl-tests' -b low -e high -f 2: sizes doubling from ``low`` up to ``high``."""
    if not (1 <= low <= high):
        raise ValueError(f"size range must satisfy 1 <= min <= max, got {low}:{high}")
    sizes, size = [], low
    while size <= high:
        sizes.append(size)
        size *= 2
    return sizes


MAX_BYTES = 2**40  # 1 TiB per rank: more than any GPU's memory (an H200 holds 141 GB), so no collective's buffer


def _check_bytes(nbytes: int, text: object) -> None:
    if nbytes > MAX_BYTES:
        raise ValueError(f"bytes must be at most 1024G (2^40 bytes, more than any GPU's memory holds), got {text!r}")


def parse_size(text: str) -> int:
    """A size as nccl-tests takes it: a number with an optional K, M or G suffix (powers of 1024)."""
    text = text.strip()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        value = float(digits) * scale
    except ValueError:
        raise ValueError(f"bytes must be a size like 8, 64K, 8M or 1G, got {text!r}") from None
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"bytes must be a positive whole number of bytes, got {text!r}")
    _check_bytes(int(value), text)
    return int(value)
