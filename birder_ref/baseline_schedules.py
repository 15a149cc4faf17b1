"""Communication schedules of the 1-bit baselines, as data, and closed forms of their bytes per GPU.

``schedule(optimizer, layout, dim, **options)`` returns the ``birder_ref.schedules.Schedule`` of one
communicating step, built from the same ``Phase`` patterns Birder's schemes use, so ``sim`` times the same
messages the reference moves (``onebit_adam.compressed_allreduce``, ``marsit.sign_allreduce``).

* ``onebit-adam``: the compressed all-reduce as DeepSpeed lays it out (../shared/notes/seed_1bitadam_01adam.md
  §1.4): a 1-bit all-to-all of every rank's packed signs, chunk j to rank j, then a 1-bit all-gather of each
  rank's server-compressed chunk; every message carries one float32 scale (``header_bytes`` = 4).
  ``full_precision=True``: the warm-up stage's fp32 ring all-reduce of the gradients.
* ``zero-one-adam``: the same 1-bit all-reduce on its communicating steps (DeepSpeed runs one backend for both);
  ``full_precision=True``: the fp32 ring all-reduce of its variance-update steps. Local steps send nothing.
* ``marsit``: ``topology="ring"`` (RAR) reduce-scatter with the bitwise merge at every hop, then all-gather,
  1 bit per element and no scale; ``topology="torus"`` (TAR, Mikami et al. 2018) with rows = the GPUs of a
  node and columns = the GPUs of equal local rank: row reduce-scatter, column reduce-scatter, column
  all-gather, row all-gather. ``full_precision=True``: the K-periodic fp32 round along the same phases.
  The merge is stochastic, not a sum: ``op="reduce"`` only tells the simulator data is combined there.
"""

from __future__ import annotations

from birder_ref.schedules import Layout, Phase, Schedule, allreduce, padded_dim
from birder_ref.validation import check_int

BASELINES = ("onebit-adam", "zero-one-adam", "marsit")
TOPOLOGIES = ("ring", "torus")
SCALE_BYTES = 4  # one float32 scale per 1-bit message of 1-bit Adam / 0/1 Adam


def _check(optimizer: str, layout: Layout, dim: int, options: dict) -> None:
    if optimizer not in BASELINES:
        raise ValueError(f"unknown baseline {optimizer!r}; choose one of {', '.join(BASELINES)}")
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a birder_ref.schedules.Layout, got {type(layout).__name__}")
    check_int("dim", dim, 1)
    allowed = {"full_precision", "topology"} if optimizer == "marsit" else {"full_precision"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"{optimizer} takes the options {', '.join(sorted(allowed))}, not {', '.join(unknown)}")
    if options.get("topology", "ring") not in TOPOLOGIES:
        raise ValueError(f"unknown topology {options['topology']!r}; choose one of {', '.join(TOPOLOGIES)}")


def compressed_allreduce(layout: Layout, dim: int, name: str = "onebit-adam") -> Schedule:
    """DeepSpeed's 1-bit all-reduce: 1-bit all-to-all (chunk j to rank j, ``all_to_all_single``) then a 1-bit
    all-gather (``torch.distributed.all_gather``, which NCCL runs as a ring), each message ``padded/(8p)`` bytes
    of signs plus a float32 scale."""
    p = layout.n_ranks
    D = padded_dim(dim, p)
    everyone = (tuple(range(p)),)
    one = (1,) if p > 1 else ()
    phases = (
        Phase("all_to_all", "all_to_all", everyone, D // p, one, "reduce", SCALE_BYTES),
        Phase("all_gather", "ring_all_gather", everyone, D // p, (1,) * (p - 1), "copy", SCALE_BYTES),
    )
    return Schedule(name, layout, int(dim), D, phases)


def marsit_schedule(layout: Layout, dim: int, topology: str = "ring", full_precision: bool = False) -> Schedule:
    """Marsit's ring (RAR) or 2D-torus (TAR) all-reduce; 1 bit per element, or 32 in full-precision rounds."""
    p, n, g = layout.n_ranks, layout.n_nodes, layout.gpus_per_node
    D = padded_dim(dim, p)
    w = 32 if full_precision else 1
    suffix = "_full_precision" if full_precision else ""
    if topology == "ring":
        everyone = (tuple(range(p)),)
        phases = (
            Phase("ring_reduce_scatter" + suffix, "ring_reduce_scatter", everyone, D // p, (w,) * (p - 1), "reduce"),
            Phase("ring_all_gather" + suffix, "ring_all_gather", everyone, D // p, (w,) * (p - 1), "copy"),
        )
    else:
        rows = tuple(layout.node_ranks(k) for k in range(n))
        columns = tuple(layout.local_rank_group(j) for j in range(g))
        phases = (
            Phase("row_reduce_scatter" + suffix, "ring_reduce_scatter", rows, D // g, (w,) * (g - 1), "reduce"),
            Phase("column_reduce_scatter" + suffix, "ring_reduce_scatter", columns, D // p, (w,) * (n - 1), "reduce"),
            Phase("column_all_gather" + suffix, "ring_all_gather", columns, D // p, (w,) * (n - 1), "copy"),
            Phase("row_all_gather" + suffix, "ring_all_gather", rows, D // g, (w,) * (g - 1), "copy"),
        )
    return Schedule(f"marsit-{topology}" + suffix.replace("_", "-"), layout, int(dim), D, phases)


def schedule(optimizer: str, layout: Layout, dim: int, **options) -> Schedule:
    """The schedule of one communicating step of a 1-bit baseline (see the module docstring for options)."""
    _check(optimizer, layout, dim, options)
    full = bool(options.get("full_precision", False))
    if optimizer == "marsit":
        return marsit_schedule(layout, dim, options.get("topology", "ring"), full)
    if full:
        return allreduce(layout, dim, name=f"{optimizer}-full-precision")
    return compressed_allreduce(layout, dim, name=optimizer)


def paper_bytes_per_gpu(optimizer: str, layout: Layout, dim: int, **options) -> dict[str, int]:
    """Closed forms of the bytes one GPU sends per phase, P = padded dim, p = n*m ranks (n nodes of m GPUs).

    1-bit all-reduce (onebit-adam, zero-one-adam): (p-1)(P/(8p) + 4) in the all-to-all and again in the
    all-gather (seed notes §1.4: 2(p-1)/p * P bits in all, plus the scales). Full precision: the fp32 ring,
    (p-1) * 4P/p per phase. Marsit ring: (p-1) * wP/(8p) per phase, w = 1 or 32 (notes §5.2; the paper's
    RAR total 2(M-1)D); torus: (m-1) wP/(8m) in each row phase and (n-1) wP/(8p) in each column phase.
    """
    _check(optimizer, layout, dim, options)
    n, m, p = layout.n_nodes, layout.gpus_per_node, layout.n_ranks
    P = padded_dim(dim, p)
    full = bool(options.get("full_precision", False))
    if optimizer != "marsit":
        if full:
            return {"reduce_scatter": (p - 1) * 4 * P // p, "all_gather": (p - 1) * 4 * P // p}
        per_phase = (p - 1) * (P // (8 * p) + SCALE_BYTES)
        return {"all_to_all": per_phase, "all_gather": per_phase}
    w = 32 if full else 1
    suffix = "_full_precision" if full else ""
    if options.get("topology", "ring") == "ring":
        ring = (p - 1) * w * P // (8 * p)
        return {"ring_reduce_scatter" + suffix: ring, "ring_all_gather" + suffix: ring}
    row, column = (m - 1) * w * P // (8 * m), (n - 1) * w * P // (8 * p)
    return {"row_reduce_scatter" + suffix: row, "column_reduce_scatter" + suffix: column,
            "column_all_gather" + suffix: column, "row_all_gather" + suffix: row}


def marsit_bits_per_element(K: int | None) -> float:
    """Amortized bits per element of Marsit-K (full precision every K rounds): 1 + 31/K; K=None: 1.

    Marsit paper Fig. 3b: 32, 1.62, 1.31, 1.16, 1 for K = 1, 50, 100, 200, inf (notes §3.3 item 11).
    """
    if K is None:
        return 1.0
    check_int("K", K, 1)
    return 1 + 31 / int(K)
