"""Communication schedules of the 1-bit baselines, as data, and the closed forms of their bytes per GPU.

One builder per schedule family, each with its closed form; which optimizer runs which family (and with which
options) is said once, by its spec in ``birder_ref.registry``. The builders use the same ``Phase`` patterns as
Birder's schemes, so ``sim`` times the messages the reference moves (``onebit_adam.compressed_allreduce``,
``marsit.sign_allreduce``).

* ``compressed_allreduce``: the 1-bit all-reduce as DeepSpeed runs it (``NcclBackend.compressed_allreduce`` in
  https://github.com/microsoft/DeepSpeed/blob/master/deepspeed/runtime/comm/nccl.py, the implementation behind
  the blog post "DeepSpeed with 1-bit Adam: 5x less communication and 3.4x faster training", 2020): a 1-bit
  all-to-all of every rank's packed signs, chunk j to rank j, then a 1-bit all-gather of each rank's
  server-compressed chunk; every message carries one float32 scale (``header_bytes`` = 4). 1-bit Adam's
  compressed steps and 0/1 Adam's 1-bit sync steps run it (DeepSpeed runs one backend for both); their
  full-precision steps (1-bit Adam's warm-up, 0/1 Adam's variance updates) run the fp32 ring
  ``birder_ref.schedules.allreduce``. Local steps send nothing.
* ``marsit_schedule``: Marsit's sign all-reduce (Wu, He, Guo, Qu, Wang, Zhuang and Zhang, "Sign Bit is Enough: A
  Learning Synchronization Framework for Multi-hop All-reduce with Ultimate Compression", DAC 2022,
  doi:10.1145/3489517.3530417). ``topology="ring"`` (RAR): reduce-scatter with the bitwise merge at every hop,
  then all-gather, 1 bit per element and no scale; ``topology="torus"`` (TAR, Mikami et al., "Massively
  distributed SGD: ImageNet/ResNet-50 training in a flash", arXiv:1811.05233) with rows = the GPUs of a node and
  columns = the GPUs of equal local rank: row reduce-scatter, column reduce-scatter, column all-gather, row
  all-gather. ``full_precision=True``: the K-periodic fp32 round along the same phases. The merge is
  stochastic, not a sum: ``op="reduce"`` only tells the simulator data is combined there.
"""

from __future__ import annotations

from birder_ref.schedules import Layout, Phase, Schedule, check_layout, padded_dim
from birder_ref.validation import check_int

TOPOLOGIES = ("ring", "torus")
SCALE_BYTES = 4  # one float32 scale per 1-bit message of 1-bit Adam / 0/1 Adam


def check_topology(topology: str) -> str:
    """Marsit's ``topology``, or a ValueError naming the choices."""
    if not isinstance(topology, str) or topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")
    return topology


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
    check_topology(topology)
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


def _ranks_and_padded_dim(layout: Layout, dim: int) -> tuple[int, int]:
    p = check_layout(layout).n_ranks
    check_int("dim", dim, 1)
    return p, padded_dim(dim, p)


def compressed_allreduce_bytes_per_gpu(layout: Layout, dim: int) -> dict[str, int]:
    """Closed form of the bytes one GPU sends per phase of ``compressed_allreduce``, P = padded dim, p ranks:
    (p-1)(P/(8p) + 4) in the all-to-all and again in the all-gather: 2(p-1)/p * P bits in all, 16 times less
    than an fp16 ring all-reduce (the DeepSpeed blog's "16x" of the compression stage), plus one float32 scale
    per message."""
    p, P = _ranks_and_padded_dim(layout, dim)
    per_phase = (p - 1) * (P // (8 * p) + SCALE_BYTES)
    return {"all_to_all": per_phase, "all_gather": per_phase}


def allreduce_bytes_per_gpu(layout: Layout, dim: int, bits: int = 32) -> dict[str, int]:
    """Closed form of the bytes one GPU sends per phase of ``birder_ref.schedules.allreduce`` (the ring
    all-reduce of the baselines' full-precision steps): (p-1) * bits * P/(8p) per phase, P = padded dim."""
    p, P = _ranks_and_padded_dim(layout, dim)
    check_int("bits", bits, 1)
    per_phase = (p - 1) * bits * P // (8 * p)
    return {"reduce_scatter": per_phase, "all_gather": per_phase}


def marsit_bytes_per_gpu(layout: Layout, dim: int, topology: str = "ring", full_precision: bool = False
                         ) -> dict[str, int]:
    """Closed form of the bytes one GPU sends per phase of ``marsit_schedule``, P = padded dim, p = n*m ranks
    (n nodes of m GPUs), w = 1 bit per element or 32 in a full-precision round. Ring: (p-1) * wP/(8p) per
    phase (summed over the M = p workers, the Marsit paper's RAR total of 2(M-1)D elements, Section 3.1);
    torus: (m-1) wP/(8m) in each row phase and (n-1) wP/(8p) in each column phase."""
    p, P = _ranks_and_padded_dim(layout, dim)
    n, m = layout.n_nodes, layout.gpus_per_node
    w = 32 if full_precision else 1
    suffix = "_full_precision" if full_precision else ""
    if check_topology(topology) == "ring":
        ring = (p - 1) * w * P // (8 * p)
        return {"ring_reduce_scatter" + suffix: ring, "ring_all_gather" + suffix: ring}
    row, column = (m - 1) * w * P // (8 * m), (n - 1) * w * P // (8 * p)
    return {"row_reduce_scatter" + suffix: row, "column_reduce_scatter" + suffix: column,
            "column_all_gather" + suffix: column, "row_all_gather" + suffix: row}


def marsit_bits_per_element(K: int | None) -> float:
    """Amortized bits per element of Marsit-K (full precision every K rounds): 1 + 31/K; K=None: 1.

    Marsit paper Fig. 3b: 32, 1.62, 1.31, 1.16, 1 for K = 1, 50, 100, 200, inf (1 + 31/200 = 1.155, printed 1.16).
    """
    if K is None:
        return 1.0
    check_int("K", K, 1)
    return 1 + 31 / int(K)
