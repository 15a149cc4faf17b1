"""1-bit Adam (Tang, Gan, Awan, Rajbhandari, Li, Lian, Liu, Zhang and He, "1-bit Adam: Communication Efficient
Large-Scale Training with Adam's Convergence Speed", ICML 2021; as described in the DeepSpeed blog post "DeepSpeed
with 1-bit Adam: 5x less communication and 3.4x faster training", 2020, whose markdown source with the equations is
https://github.com/microsoft/DeepSpeed/blob/master/docs/_posts/2020-09-09-onebit-adam-blog-post.md).

Two stages (the blog's sections 1.2 and 2.1):

* warm-up, steps t <= ``warmup_steps``: plain Adam on the fp32 ring all-reduce; this is ``optimizers.Adam``
  itself, so the two agree bit for bit;
* compression, t > ``warmup_steps``: the variance is frozen at its last bias-corrected warm-up value and the
  momentum goes through the error-feedback compressed all-reduce, blog eqs. (1)-(6):
  m_i = beta1 m + (1 - beta1) g_i on every GPU, m = CompressedAllReduce(m_i), x -= lr m_hat / (sqrt(v_hat) + eps).

The blog's eq. (4) prints the server error as e_{t+1} = (m_hat + e_t) - m_hat, which never changes; we use
e_{t+1} = (m_ave + e_t) - C(m_ave + e_t) as DeepSpeed does (``server_error`` in ``NcclBackend.compressed_allreduce``,
https://github.com/microsoft/DeepSpeed/blob/master/deepspeed/runtime/comm/nccl.py).
Bias correction: ``optimizers.Adam`` corrects both moments; in the compression stage m is corrected by
1 - beta1^t and the frozen v by 1 - beta2^warmup_steps, i.e. the denominator of the last warm-up step is kept.
DeepSpeed corrects neither; with warmup_steps of hundreds the difference in m's factor is below 1e-40.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from birder_ref.baseline_schedules import compressed_allreduce as compressed_allreduce_schedule
from birder_ref.execute import ByteLog, deliver
from birder_ref.optimizers import Adam, AdamState, check_adam_coefficients, check_adam_state, check_step_arguments
from birder_ref.quantize import pack_signs, unpack_signs
from birder_ref.schedules import Layout, check_layout, padded_dim
from birder_ref.validation import check_array, check_int, check_real, native, same_values, scalar

DEFAULT_WARMUP_FRACTION = 0.15
"""Share of steps 1-bit Adam runs as plain Adam: the blog's BERT-Large setting ("warmup stage to be just 15%";
"only 15-20% of the overall training steps are needed"); the communication ratio vs Adam is then
1 / (0.15 + 0.85 / 16) = 4.92 with fp16 (the blog's "5x")."""

SCALES = ("l2", "mean_abs")


def warmup_steps_for(total_steps: int, fraction: float = DEFAULT_WARMUP_FRACTION) -> int:
    """The number of warm-up steps for a run of ``total_steps`` steps (rounded to the nearest step)."""
    total_steps = check_int("total_steps", total_steps, 0)
    fraction = check_real("fraction", fraction, 0.0, 1.0)
    return int(round(fraction * total_steps))


def compress(x: np.ndarray, scale: str = "l2") -> tuple[np.float32, np.ndarray]:
    """The 1-bit compressor: (s, signs) with signs +1 where x >= 0, else -1, and s

    * ``l2`` (blog, DeepSpeed): ||x||_2 / sqrt(numel), so ||s signs||_2 = ||x||_2;
    * ``mean_abs`` (0/1 Adam paper Eq. 4): ||x||_1 / numel, the least-squares scale for the signs.

    The norm is accumulated in float64 and the scale rounded to float32 once.
    """
    if not isinstance(scale, str) or scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    if not isinstance(x, np.ndarray) or x.ndim != 1 or x.size == 0:
        raise ValueError(f"x must be a non-empty 1-D float32 array, got {getattr(x, 'shape', type(x).__name__)}")
    check_array("x", x, x.shape)
    wide = x.astype(np.float64)
    s = np.sqrt(np.dot(wide, wide) / x.size) if scale == "l2" else np.abs(wide).sum() / x.size
    return np.float32(s), np.where(x >= 0, np.float32(1.0), np.float32(-1.0))


def _message(signs: np.ndarray, s: np.float32) -> np.ndarray:
    """One message: the packed signs followed by the float32 scale (4 bytes, native order)."""
    return np.concatenate([pack_signs(signs), np.frombuffer(np.float32(s).tobytes(), np.uint8)])


def _read(payload: np.ndarray, n: int) -> tuple[np.float32, np.ndarray]:
    """Decode a message into its scale and its n signs."""
    return np.frombuffer(payload[-4:].tobytes(), np.float32)[0], unpack_signs(payload[:-4], n)


def compressed_allreduce(
    buffers: np.ndarray,
    worker_error: np.ndarray,
    server_error: np.ndarray,
    scale: str = "l2",
    log: ByteLog | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DeepSpeed's compressed all-reduce, executed message by message along its schedule.

    buffers, worker_error: (N, d); server_error: (N, d // N); d divisible by 8 * N. Returns
    (out (d,), new worker_error, new server_error); ``out`` is what every rank receives.

    1. worker i: c_i = buffers[i] + worker_error[i]; (s_i, signs_i) = compress(c_i) over the whole buffer;
       worker_error[i] = c_i - s_i signs_i.
    2. all-to-all: chunk j of every rank's packed signs, with its scale, goes to rank j.
    3. server j (sharded on every rank): a = sum_k signs_k[chunk j] * (s_k * float32(1/N)), summed over
       k = 0 .. N-1 in order (DeepSpeed multiplies the scales by 1/N before summing); c = a + server_error[j];
       (s, signs) = compress(c) over the chunk; server_error[j] = c - s signs.
    4. all-gather of every server chunk's packed signs and scale; out = concat_j s^(j) signs^(j).

    ``log`` (optional) receives the bytes each rank really sent, phase by phase.
    """
    if not isinstance(scale, str) or scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    if log is not None and not isinstance(log, ByteLog):
        raise ValueError(f"log must be None or a birder_ref.execute.ByteLog, got {type(log).__name__}")
    buffers, worker_error, server_error = native(buffers), native(worker_error), native(server_error)
    if not isinstance(buffers, np.ndarray) or buffers.ndim != 2:
        raise ValueError(f"buffers must be an (N, d) float32 array, got {getattr(buffers, 'shape', buffers)}")
    N, d = buffers.shape
    if N < 1 or d < 1 or d % (8 * N):
        raise ValueError(f"buffers of shape {buffers.shape}: d must be a positive multiple of 8 * N = {8 * N}")
    check_array("buffers", buffers, (N, d), worker_axes=1)
    check_array("worker_error", worker_error, (N, d), worker_axes=1)
    check_array("server_error", server_error, (N, d // N), worker_axes=1)
    log = ByteLog() if log is None else log
    chunk = d // N
    all_to_all, all_gather = compressed_allreduce_schedule(Layout(1, N), d).phases

    compensated = buffers + worker_error
    worker_scales, worker_signs = zip(*(compress(c, scale) for c in compensated), strict=True)
    new_worker_error = np.stack([c - s * q for c, s, q in zip(compensated, worker_scales, worker_signs, strict=True)])

    own = [(worker_scales[j], worker_signs[j][j * chunk:(j + 1) * chunk]) for j in range(N)]
    received = {j: {j: own[j]} for j in range(N)}  # server j keeps its own chunk; the others arrive as bytes

    def send_worker_chunk(m, _bits):
        return _message(worker_signs[m.src][m.chunk * chunk:(m.chunk + 1) * chunk], worker_scales[m.src])

    def receive_worker_chunk(m, payload, _bits):
        received[m.dst][m.src] = _read(payload, chunk)

    deliver(all_to_all, send_worker_chunk, receive_worker_chunk, log)

    new_server_error = np.empty_like(server_error)
    server = []
    inverse_n = np.float32(1.0 / N)
    for j in range(N):
        average = np.zeros(chunk, np.float32)
        for k in range(N):
            s_k, signs_k = received[j][k]
            average = average + signs_k * (s_k * inverse_n)
        compensated_server = average + server_error[j]
        s, q = compress(compensated_server, scale)
        new_server_error[j] = compensated_server - s * q
        server.append((s, q))

    gathered = {i: {i: server[i]} for i in range(N)}

    def receive_server_chunk(m, payload, _bits):
        gathered[m.dst][m.chunk] = _read(payload, chunk)

    def send_server_chunk(m, _bits):  # a ring forwards the chunks it has gathered so far
        s, q = gathered[m.src][m.chunk]
        return _message(q, s)

    deliver(all_gather, send_server_chunk, receive_server_chunk, log)
    outs = [np.concatenate([s * q for s, q in (gathered[i][j] for j in range(N))]) for i in range(N)]
    for i in range(1, N):
        if not same_values(outs[i], outs[0]):
            raise AssertionError(f"rank {i} received a different all-reduce result than rank 0")
    return outs[0], new_worker_error, new_server_error


@dataclass(frozen=True)
class OneBitAdamState:
    """Adam's m, v (shared by all GPUs); the compressed all-reduce's worker (p, D) and server (p, D/p) errors
    over the padded length D = ``schedules.padded_dim(d, p)``."""

    adam: AdamState
    worker_error: np.ndarray
    server_error: np.ndarray


@dataclass(frozen=True)
class OneBitAdam:
    """1-bit Adam on the driver protocol (``birder_ref.driver.DistributedOptimizer``); see the module docstring.

    Usage: ``driver.train(problem, OneBitAdam(warmup_steps=warmup_steps_for(T)), layout, T, lr)``.
    """

    warmup_steps: int
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    scale: str = "l2"
    name: str = "onebit-adam"

    def __post_init__(self) -> None:
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int | np.integer) \
                or self.warmup_steps < 1:
            raise ValueError(f"warmup_steps must be an integer >= 1 (the variance must be estimated), got "
                             f"{self.warmup_steps!r}")
        if not isinstance(self.scale, str) or self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; choose one of {', '.join(SCALES)}")
        check_adam_coefficients(self.beta1, self.beta2, self.eps)
        check_real("weight_decay", self.weight_decay, 0.0)

    @property
    def adam(self) -> Adam:
        return Adam(self.beta1, self.beta2, self.eps, self.weight_decay)

    def init(self, layout: Layout, dim: int) -> OneBitAdamState:
        p = check_layout(layout).n_ranks
        dim = check_int("dim", dim, 1)
        D = padded_dim(dim, p)
        return OneBitAdamState(self.adam.init(layout, dim), np.zeros((p, D), np.float32),
                               np.zeros((p, D // p), np.float32))

    def step(self, state: OneBitAdamState, params: np.ndarray, grads: np.ndarray, lr: float, t: int):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        n, g, d = check_step_arguments(params, grads, lr, t)
        if not isinstance(state, OneBitAdamState):
            raise ValueError(f"state must be a OneBitAdamState (from OneBitAdam.init), got {type(state).__name__}")
        check_adam_state(state.adam, d)
        p, D = n * g, padded_dim(d, n * g)
        check_array("state.worker_error", state.worker_error, (p, D), worker_axes=1)
        check_array("state.server_error", state.server_error, (p, D // p), worker_axes=1)
        if t <= self.warmup_steps:
            params, adam = self.adam.step(state.adam, params, grads, lr, t)
            return params, OneBitAdamState(adam, state.worker_error, state.server_error)
        n, g, d = grads.shape
        D = state.worker_error.shape[1]
        local_momentum = self.beta1 * state.adam.m + (1 - self.beta1) * grads.reshape(n * g, d)
        buffers = np.pad(local_momentum, ((0, 0), (0, D - d)))
        m, worker_error, server_error = compressed_allreduce(buffers, state.worker_error, state.server_error,
                                                             self.scale)
        m, v = m[:d], state.adam.v
        update = (m / (1 - self.beta1**t)) / (np.sqrt(v / (1 - self.beta2**self.warmup_steps)) + np.float32(self.eps))
        decay = np.float32(lr * self.weight_decay) * params
        return params - np.float32(lr) * update - decay, OneBitAdamState(AdamState(m, v), worker_error, server_error)
