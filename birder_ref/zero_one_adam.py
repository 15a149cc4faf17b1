"""0/1 Adam (Lu, Li, Zhang, De Sa and He, "Maximizing Communication Efficiency for Large-scale Training via 0/1
Adam", ICLR 2023, arXiv:2202.06009): adaptive variance freezing, 1-bit all-reduce with error feedback, and local
steps whose momentum is re-estimated at every sync.

The printed Algorithm 1 is cut off and wrong in two places; this follows the paper's proofs (Lemma 8, Theorem 2),
its Algorithms 2 and 4 (appendices A and D.1) and DeepSpeed's ``zoadam.py`` (the authors' code,
https://github.com/microsoft/DeepSpeed/blob/master/deepspeed/runtime/fp16/onebit/zoadam.py). Deviations from the
printed text, one by one:

1. Lines 4-5 use m_{t+1/2}, not m_t: x_{t+1/2} = x_t - gamma_t m_{t+1/2} / (sqrt(v) + eps) and
   u_{t+1/2} = u_t + gamma_t m_{t+1/2}. As printed, line 8 overwrites the only quantity holding g_t on a sync
   step, so every sync step's gradient is lost (with T_u = all steps x never moves).
2. Off-by-one in lines 8, 9, 11: the momentum estimate divides by the sum of gamma over the steps actually
   accumulated in u (those after the last sync, not including it), and line 9 restarts from the model right
   after the last sync, x_{t'+1}, not x_{t'} (the proof of Lemma 8 and DeepSpeed's ``lrs`` agree).
3. The missing tail (lines 14-20) is reconstructed from Theorem 2's proof: v is updated only on steps of T_v.
4. Before the variance freezes (1-based steps t <= ``var_freeze_step``) the run is Algorithm 4 as DeepSpeed
   runs it (footnote 8): on a step of T_v one fp32 all-reduce of the gradients feeds both m and v; on the
   other steps the gradients go through the 1-bit all-reduce and only m is updated. After the freeze, v is
   fixed, the sync steps T_u follow the learning-rate policy and the other steps are local (no traffic).
5. The freeze is at a fixed step (DeepSpeed's ``var_freeze_step``; the paper: "stop updating variance when
   t_{j+1} - t_j > 1", which the fixed step precedes). The worker and server errors are reset to zero there,
   as DeepSpeed does: before it they hold gradient residuals, after it residuals of u.
6. Bias correction, as ``optimizers.Adam``: gamma_t = lr / (1 - beta1^t) folds m's correction into the step
   size (so u, the estimate u / sum gamma and the model stay consistent), and v is divided by
   1 - beta2^(number of variance updates so far). The paper's Eq. 3 and DeepSpeed correct neither.
7. The 1-bit compressor is DeepSpeed's (scale ||x||_2 / sqrt(numel)); ``scale="mean_abs"`` is the paper's
   Eq. 4. Weight decay is not offered.

Policies (paper §6), in 0-based rounds tau = t - 1: variance updates at k_0 = 0,
k_{j+1} = k_j + 2^floor(j / kappa), kappa = 16, while tau < var_freeze_step; after the freeze the sync interval
is 1, doubles every ``local_step_scaler`` steps and is clipped at H = 16.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from birder_ref.onebit_adam import SCALES, compressed_allreduce
from birder_ref.optimizers import check_adam_coefficients, check_state_fields, check_step_arguments, ring_allreduce_mean
from birder_ref.schedules import Layout, check_layout, padded_dim
from birder_ref.validation import check_int, native, scalar


@dataclass(frozen=True)
class Policy:
    """When 0/1 Adam updates its variance and when it syncs (the paper's "learning-rate based" policy).

    ``var_freeze_step``: the last 1-based step before the variance freezes (the end of the learning-rate
    warm-up in the paper's BERT runs); ``local_step_scaler``: steps between doublings of the sync interval
    after the freeze; ``var_update_scaler`` = kappa and ``local_step_clipper`` = H, both 16 in the paper.
    """

    var_freeze_step: int
    local_step_scaler: int
    var_update_scaler: int = 16
    local_step_clipper: int = 16

    def __post_init__(self) -> None:
        for name in ("var_freeze_step", "local_step_scaler", "var_update_scaler", "local_step_clipper"):
            check_int(name, getattr(self, name), 1)

    @classmethod
    def paper_bert(cls) -> Policy:
        """BERT pre-training (§6): interval 1 for the first 12.5K steps, then x2 every 32678 steps, clip 16."""
        return cls(12_500, 32_678)

    @classmethod
    def paper_imagenet(cls) -> Policy:
        """ImageNet ResNet-18 (§6): interval 1 for 50050 steps (10 epochs), then x2 every 50050 steps."""
        return cls(50_050, 50_050)

    @classmethod
    def scaled(cls, total_steps: int) -> Policy:
        """The ImageNet policy scaled to ``total_steps``: 50050 of its 450450 steps (10 of 90 epochs) is 1/9,
        both for the freeze and for the doubling period."""
        ninth = max(1, round(check_int("total_steps", total_steps, 0) / 9))
        return cls(ninth, ninth)

    def variance_steps(self) -> list[int]:
        """The 1-based steps of T_v: k_{j+1} - k_j = 2^floor(j / kappa) from k_0 = 0, up to the freeze."""
        steps, k, j = [], 0, 0
        while k < self.var_freeze_step:
            steps.append(k + 1)
            k += 2 ** (j // self.var_update_scaler)
            j += 1
        return steps

    def is_variance_step(self, t: int) -> bool:
        return t <= self.var_freeze_step and t in self.variance_steps()

    def sync_interval(self, t: int) -> int:
        """The sync interval in force at 1-based step t after the freeze."""
        doublings = (t - self.var_freeze_step - 1) // self.local_step_scaler
        return min(self.local_step_clipper, 2 ** min(doublings, self.local_step_clipper.bit_length()))

    def kinds(self, total_steps: int) -> list[str]:
        """Per 1-based step 1 .. total_steps: ``variance`` (fp32 all-reduce, v updated), ``onebit`` (1-bit
        all-reduce) or ``local`` (nothing sent)."""
        total_steps = check_int("total_steps", total_steps, 0)
        variance = set(self.variance_steps())
        kinds, next_sync = [], self.var_freeze_step + 1  # the first step after the freeze syncs
        for t in range(1, int(total_steps) + 1):
            if t <= self.var_freeze_step:
                kinds.append("variance" if t in variance else "onebit")
            elif t == next_sync:
                kinds.append("onebit")
                next_sync = t + self.sync_interval(t)  # as ZeroOneAdam.step
            else:
                kinds.append("local")
        return kinds


@dataclass(frozen=True)
class CommunicationProfile:
    """Counts over a run: full-precision rounds, 1-bit rounds, silent steps; the share of steps that
    communicate and the average bits per parameter per step."""

    total_steps: int
    full_precision_rounds: int
    onebit_rounds: int
    local_steps: int

    @property
    def communicating_fraction(self) -> float:
        return (self.full_precision_rounds + self.onebit_rounds) / max(1, self.total_steps)

    def bits_per_parameter(self, full_precision_bits: int = 32) -> float:
        """Average bits per parameter per step: full-precision rounds at ``full_precision_bits``, 1-bit rounds 1."""
        return (full_precision_bits * self.full_precision_rounds + self.onebit_rounds) / max(1, self.total_steps)


def communication_profile(total_steps: int, policy: Policy | None = None) -> CommunicationProfile:
    """How many steps of a ``total_steps`` run communicate, and how (``Policy.scaled`` when none given)."""
    kinds = (policy or Policy.scaled(total_steps)).kinds(total_steps)
    return CommunicationProfile(len(kinds), kinds.count("variance"), kinds.count("onebit"), kinds.count("local"))


@dataclass(frozen=True)
class ZeroOneAdamState:
    """Per-GPU momentum m (p, d) and buffer u (p, d); the shared variance v (d,) and its update count; the sum
    of gamma since the last sync; the model right after the last sync (d,); the 1-bit all-reduce's worker
    (p, D) and server (p, D/p) errors over the padded length D."""

    m: np.ndarray
    v: np.ndarray
    variance_updates: int
    buffer: np.ndarray
    gamma_sum: float
    anchor: np.ndarray
    next_sync: int
    worker_error: np.ndarray
    server_error: np.ndarray


@dataclass(frozen=True)
class ZeroOneAdam:
    """0/1 Adam on the driver protocol (per-GPU replicas diverge between syncs); see the module docstring."""

    policy: Policy
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    scale: str = "l2"
    name: str = "zero-one-adam"

    def __post_init__(self) -> None:
        if not isinstance(self.policy, Policy):
            raise ValueError(f"policy must be a zero_one_adam.Policy, got {type(self.policy).__name__}")
        if not isinstance(self.scale, str) or self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; choose one of {', '.join(SCALES)}")
        check_adam_coefficients(self.beta1, self.beta2, self.eps)

    def init(self, layout: Layout, dim: int) -> ZeroOneAdamState:
        dim = check_int("dim", dim, 1)
        p, D = check_layout(layout).n_ranks, padded_dim(dim, layout.n_ranks)
        zeros = np.zeros((p, dim), np.float32)
        return ZeroOneAdamState(m=zeros, v=np.zeros(dim, np.float32), variance_updates=0, buffer=zeros.copy(),
                                gamma_sum=0.0, anchor=np.zeros(dim, np.float32),
                                next_sync=self.policy.var_freeze_step + 1,
                                worker_error=np.zeros((p, D), np.float32),
                                server_error=np.zeros((p, D // p), np.float32))

    def _allreduce(self, state: ZeroOneAdamState, values: np.ndarray):
        D = state.worker_error.shape[1]
        padded = np.pad(values, ((0, 0), (0, D - values.shape[1])))
        out, worker_error, server_error = compressed_allreduce(padded, state.worker_error, state.server_error,
                                                               self.scale)
        return out[: values.shape[1]], worker_error, server_error

    def step(self, state: ZeroOneAdamState, params: np.ndarray, grads: np.ndarray, lr: float, t: int):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        n, g, d = check_step_arguments(params, grads, lr, t)
        p, D = n * g, padded_dim(d, n * g)
        check_state_fields(state, ZeroOneAdamState, {"m": (p, d), "v": (d,), "buffer": (p, d), "anchor": (d,),
                                                     "worker_error": (p, D), "server_error": (p, D // p)})
        if state.v.min() < 0:
            raise ValueError(f"state.v must be >= 0 (an EMA of g^2), got {state.v.min()}")
        gamma = lr / (1 - self.beta1**t)
        if t <= self.policy.var_freeze_step:  # Algorithm 4: one all-reduce of the gradients per step
            v, count, errors = state.v, state.variance_updates, (state.worker_error, state.server_error)
            if self.policy.is_variance_step(t):
                mean_grad = ring_allreduce_mean(grads)
                v, count = self.beta2 * v + (1 - self.beta2) * mean_grad * mean_grad, count + 1
            else:
                mean_grad, *errors = self._allreduce(state, grads.reshape(n * g, d))
            m = self.beta1 * state.m + (1 - self.beta1) * mean_grad
            step = np.float32(gamma) * m / self.denominator(v, count)
            worker_error, server_error = errors
            new = replace(state, m=m, v=v, variance_updates=count, gamma_sum=0.0, worker_error=worker_error,
                          server_error=server_error)
            return params - step, new
        if t == self.policy.var_freeze_step + 1:  # the freeze: start the first local interval
            state = replace(state, buffer=np.zeros_like(state.buffer), gamma_sum=0.0, anchor=params[0].copy(),
                            next_sync=t, worker_error=np.zeros_like(state.worker_error),
                            server_error=np.zeros_like(state.server_error))
        denominator = self.denominator(state.v, state.variance_updates)
        m = self.beta1 * state.m + (1 - self.beta1) * grads.reshape(n * g, d)  # line 3, per GPU
        params = params - np.float32(gamma) * m / denominator  # line 4 with m_{t+1/2}
        buffer = state.buffer + np.float32(gamma) * m  # line 5 with m_{t+1/2}
        gamma_sum = state.gamma_sum + gamma
        if t != state.next_sync:  # line 13: a local step
            return params, replace(state, m=m, buffer=buffer, gamma_sum=gamma_sum)
        u_bar, worker_error, server_error = self._allreduce(state, buffer)  # line 7
        m = np.tile(u_bar / np.float32(gamma_sum), (n * g, 1))  # line 8, sum over the accumulated steps
        synced = state.anchor - u_bar / denominator  # line 9, from the model right after the last sync
        params = np.tile(synced, (n * g, 1))
        return params, replace(state, m=m, buffer=np.zeros_like(buffer), gamma_sum=0.0, anchor=synced,  # lines 10-11
                               next_sync=t + self.policy.sync_interval(t), worker_error=worker_error,
                               server_error=server_error)

    def denominator(self, v: np.ndarray, count: int) -> np.ndarray:
        """sqrt(v / (1 - beta2^count)) + eps: Adam's denominator after ``count`` variance updates."""
        return np.sqrt(v / (1 - self.beta2**count)) + np.float32(self.eps)
