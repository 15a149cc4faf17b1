"""Marsit (Wu, He, Guo, Qu, Wang, Zhuang and Zhang, "Sign Bit is Enough: A Learning Synchronization Framework
for Multi-hop All-reduce with Ultimate Compression", DAC 2022, doi:10.1145/3489517.3530417): sign bits merged hop
by hop along a ring or 2D torus with an unbiased bitwise operator, one global compensation, and a full-precision
round every K. Section numbers below are the paper's.

* Eq. (2) and the operator (Sec. 4.1.1): a worker holding local bit l and receiving bit b draws a
  transient bit v = 1 with probability 1/p if l = 1 and (p-1)/p if l = 0, and sends
  (b AND l) OR ((b XOR l) AND v). The paper writes p as "worker m"; for the merge to be unbiased it must be the
  worker's position in the merge chain of that segment (with a global rank every segment but one is biased),
  and here it is: p = 1 + (workers already merged into the incoming bits) / (workers the local bit stands for),
  counted from the schedule. Then P(bit = 1) = (1/M) #{workers holding +1} exactly, whatever the ring order
  (``tests/test_baselines_marsit.py`` computes it with exact fractions).
* Algorithm 1 / 2, t = 0-based round = driver step - 1: g_hat_m = lr g_m + c_m;
  if t mod K == 0: G = mean_m g_hat_m over the fp32 all-reduce and c_m = 0; else
  G = eta_s u with u the merged +-1 vector ("the union" of Algorithm 1's line 10 read as the concatenation of the
  +-1 segments: a {0, 1} vector times eta_s would be a biased, non-negative step) and c_m = g_hat_m - G; every
  replica does x -= G.
* K = None is the paper's "Marsit" (K beyond the last round, Fig. 3): literally mod(0, K) = 0, so only t = 0 is a
  full-precision round.
* eta_s = ``sign_scale`` * lr, so both follow the driver's lr schedule; ``sign_scale=None`` takes the ratio of
  Theorem 1's step sizes, eta_s / eta_l = (1/sqrt(TD)) / sqrt(M/T) = 1/sqrt(M D).
* Torus (TAR): rows = the GPUs of a node, columns = the GPUs of equal local rank (``baseline_schedules``); a
  column hop merges bits that each stand for a whole row, so its position counts rows (the paper does not give
  the torus merge rule; this is the ring's, with rows as the units merged).
* Bits: 1 means +1; sgn(0) is unspecified in the paper, we send +1 for g_hat >= 0.

Draws: the hop of worker ``rank`` uses ``draws.uniforms(seed, t, stream, D)`` at the coordinates it merges,
stream ``RING_STREAM + rank`` in ring and row phases and ``COLUMN_STREAM + rank`` in column phases; both lie
apart from Birder's streams (0 .. n-1 and ``draws.SERVER_STREAM``) and the driver's noise (2**30 + worker).
v = 1 iff u < float32(probability); u lies on the grid k / 2**24, so each hop's probability is off by at most
2**-24 from the exact one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from birder_ref import draws
from birder_ref.baseline_schedules import check_topology, marsit_schedule
from birder_ref.execute import ByteLog, deliver, run_phase
from birder_ref.optimizers import check_state_fields, check_step_arguments
from birder_ref.schedules import Layout, Phase, Schedule, check_layout, padded_dim
from birder_ref.validation import check_array, check_draws, check_int, check_real, native, same_values, scalar

RING_STREAM = 2**29
COLUMN_STREAM = 2**29 + 2**28


def merge(incoming: np.ndarray, local: np.ndarray, transient: np.ndarray) -> np.ndarray:
    """Sec. 4.1.1: incoming (.) local = (in AND l) OR ((in XOR l) AND v), elementwise on 0/1 integers."""
    return (incoming & local) | ((incoming ^ local) & transient)


def transient_probability(position: int, local_bit: int) -> Fraction:
    """Eq. (2): P(v = 1) = 1/p where the local bit is 1, (p-1)/p where it is 0; p = chain position."""
    position = check_int("position", position, 1)
    if isinstance(local_bit, bool) or local_bit not in (0, 1):
        raise ValueError(f"local_bit must be 0 or 1, got {local_bit!r}")
    return Fraction(1, position) if local_bit else Fraction(position - 1, position)


def transient_bits(position: int, local: np.ndarray, u: np.ndarray) -> np.ndarray:
    """v = 1 iff u < float32(transient_probability(position, l)), elementwise (u in [0, 1))."""
    one = np.float32(float(transient_probability(position, 1)))
    zero = np.float32(float(transient_probability(position, 0)))
    return (u < np.where(local == 1, one, zero)).astype(np.int64)


def _merge_phase(phase: Phase, bits: dict[int, np.ndarray], u: dict[int, np.ndarray], log: ByteLog) -> None:
    """A ring reduce-scatter whose hop merges instead of adding: ``bits[rank]`` is (group size, chunk) 0/1,
    ``u[rank]`` the draws for the same coordinates. Every local bit stands for the same number of workers
    (one GPU in a ring or row, one row in a column), so a receiver's chain position is 1 + the number of
    local vectors merged into the incoming bits, which the schedule fixes (it is counted, not sent)."""
    merged = {rank: np.ones(len(phase.groups[0]), np.int64) for rank in bits}  # local vectors merged per chunk

    def encode(msg, _bits):
        return np.packbits(bits[msg.src][msg.chunk].astype(bool), bitorder="big")

    def receive(msg, payload, _bits):
        incoming = np.unpackbits(payload, count=phase.chunk_elements, bitorder="big").astype(np.int64)
        local = bits[msg.dst][msg.chunk]
        # in a ring reduce-scatter no rank receives, in a round, the chunk it sends: the count is as sent
        position = int(merged[msg.src][msg.chunk]) + 1
        v = transient_bits(position, local, u[msg.dst][msg.chunk])
        bits[msg.dst][msg.chunk] = merge(incoming, local, v)
        merged[msg.dst][msg.chunk] = position

    deliver(phase, encode, receive, log)


def _execute(sched: Schedule, layout: Layout, vectors: np.ndarray, reduce_scatter, log: ByteLog) -> np.ndarray:
    """Run a Marsit schedule on every rank's padded vector (p, D): its reduce-scatter phases through
    ``reduce_scatter(phase, buffers, coordinates, stage)``, its all-gathers by copying; returns the vector every
    rank ends with. ``coordinates[rank]`` gives each buffer element's index in the padded vector, ``stage`` is
    "ring" (ring or row phase) or "column". In the torus, GPU (k, j) owns shard j of its row after the row
    reduce-scatter and chunk k of that shard after the column reduce-scatter."""
    p, D = vectors.shape
    index = np.arange(D)
    if len(sched.phases) == 2:
        ring_rs, ring_ag = sched.phases
        buffers = {r: vectors[r].reshape(p, -1).copy() for r in range(p)}
        reduce_scatter(ring_rs, buffers, {r: index.reshape(p, -1) for r in range(p)}, "ring")
        run_phase(ring_ag, buffers, log)
    else:
        row_rs, column_rs, column_ag, row_ag = sched.phases
        n, g = layout.n_nodes, layout.gpus_per_node
        shard = D // g
        buffers = {r: vectors[r].reshape(g, -1).copy() for r in range(p)}
        reduce_scatter(row_rs, buffers, {r: index.reshape(g, -1) for r in range(p)}, "ring")
        columns = {r: buffers[r][r % g].reshape(n, -1).copy() for r in range(p)}
        owned = {r: index[(r % g) * shard:(r % g + 1) * shard].reshape(n, -1) for r in range(p)}
        reduce_scatter(column_rs, columns, owned, "column")
        run_phase(column_ag, columns, log)
        for r in range(p):
            buffers[r][r % g] = columns[r].reshape(-1)
        run_phase(row_ag, buffers, log)
    for r in range(1, p):
        if not same_values(buffers[r], buffers[0]):
            raise AssertionError(f"rank {r} ended {sched.scheme} with a different vector than rank 0")
    return buffers[0].reshape(-1)


def sign_allreduce(values: np.ndarray, layout: Layout, u_ring: np.ndarray, u_column: np.ndarray | None = None,
                   topology: str = "ring", log: ByteLog | None = None) -> np.ndarray:
    """Marsit's one-bit synchronization (Algorithm 1 lines 4-10) of every rank's ``values`` (p, d).

    ``u_ring`` (p, d): each rank's draws for the ring / row hops, ``u_column`` (p, d) for the torus column hops.
    Executes ``baseline_schedules.marsit_schedule`` hop by hop (reduce-scatter with ``merge``, all-gather by
    copying) on the padded vectors and returns the +-1 float32 vector u (d,) every rank ends with.
    """
    check_topology(topology)
    p, d = check_layout(layout).n_ranks, values.shape[-1] if isinstance(values, np.ndarray) else 0
    check_array("values", values, (p, d), worker_axes=1)
    check_draws("u_ring", u_ring, (p, d), worker_axes=1)
    if topology == "torus":
        check_draws("u_column", u_column, (p, d), worker_axes=1)
    log = ByteLog() if log is None else log
    sched = marsit_schedule(layout, d, topology)
    pad = ((0, 0), (0, sched.padded_dim - d))
    plus = np.pad((values >= 0).astype(np.int64), pad, constant_values=1)
    u = {"ring": np.pad(u_ring, pad), "column": np.pad(u_column, pad) if topology == "torus" else None}

    def merge_hops(phase, buffers, coordinates, stage):
        _merge_phase(phase, buffers, {r: u[stage][r][coordinates[r]] for r in buffers}, log)

    bits = _execute(sched, layout, plus, merge_hops, log)
    return np.where(bits[:d] == 1, np.float32(1.0), np.float32(-1.0))


def full_precision_mean(values: np.ndarray, layout: Layout, topology: str = "ring",
                        log: ByteLog | None = None) -> np.ndarray:
    """The K-periodic round (Algorithm 1 line 14): fp32 sum along the same ring or torus, divided by
    float32(p); returns the mean (d,) every rank ends with."""
    p = check_layout(layout).n_ranks
    d = values.shape[-1] if isinstance(values, np.ndarray) and values.ndim == 2 else 0
    check_array("values", values, (p, d), worker_axes=1)
    log = ByteLog() if log is None else log
    sched = marsit_schedule(layout, d, topology, full_precision=True)
    padded = np.pad(values, ((0, 0), (0, sched.padded_dim - d)))
    total = _execute(sched, layout, padded, lambda phase, buffers, coordinates, stage: run_phase(phase, buffers, log),
                     log)
    return total[:d] / np.float32(p)


@dataclass(frozen=True)
class MarsitState:
    """Every rank's compensation vector c_m (p, d), float32, zero at the start (Algorithm 2 line 1)."""

    compensation: np.ndarray


@dataclass(frozen=True)
class Marsit:
    """Marsit-driven SGD (Algorithm 2) on the driver protocol; K = full-precision period (None: only t = 0)."""

    K: int | None = 100
    sign_scale: float | None = None
    topology: str = "ring"
    seed: int = 0
    name: str = "marsit"

    def __post_init__(self) -> None:
        if self.K is not None:
            check_int("K", self.K, 1)
        check_topology(self.topology)
        if self.sign_scale is not None:
            check_real("sign_scale", self.sign_scale, 0.0, low_open=True, float32=True)
        check_int("seed", self.seed, 0, 2**32 - 1)

    def init(self, layout: Layout, dim: int) -> MarsitState:
        check_layout(layout)
        return MarsitState(np.zeros((layout.n_ranks, check_int("dim", dim, 1)), np.float32))

    def is_full_precision(self, t: int) -> bool:
        """Algorithm 1 line 3 with the paper's 0-based round t - 1: mod(t - 1, K) == 0."""
        return t == 1 if self.K is None else (t - 1) % int(self.K) == 0

    def step(self, state: MarsitState, params: np.ndarray, grads: np.ndarray, lr: float, t: int):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        n, g, d = check_step_arguments(params, grads, lr, t)
        check_int("t", t, 1, 2**32 - 1)  # the draws' step counter is 32 bits
        check_state_fields(state, MarsitState, {"compensation": (n * g, d)})
        layout, p = Layout(n, g), n * g
        compensated = np.float32(lr) * grads.reshape(p, d) + state.compensation  # Algorithm 1 line 1
        if not np.isfinite(compensated).all():
            raise ValueError(f"lr * grads + compensation overflows float32 at step {t} (lr={lr!r} too large?)")
        if self.is_full_precision(t):
            update = full_precision_mean(compensated, layout, self.topology)
            return params - update, MarsitState(np.zeros_like(state.compensation))
        ratio = 1 / np.sqrt(p * d) if self.sign_scale is None else self.sign_scale
        D = padded_dim(d, p)
        u_ring = np.stack([draws.uniforms(self.seed, t, RING_STREAM + r, D)[:d] for r in range(p)])
        u_column = None
        if self.topology == "torus":
            u_column = np.stack([draws.uniforms(self.seed, t, COLUMN_STREAM + r, D)[:d] for r in range(p)])
        signs = sign_allreduce(compensated, layout, u_ring, u_column, self.topology)
        update = np.float32(ratio * lr) * signs  # Algorithm 1 line 10: g_t = eta_s * u
        return params - update, MarsitState(compensated - update)  # line 11; Algorithm 2 line 6
