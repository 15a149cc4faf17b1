"""0/1 Adam: its policies against the paper's numbers, the fixes to the printed Algorithm 1, error feedback."""

import numpy as np
import pytest

from birder_ref.schedules import Layout
from birder_ref.zero_one_adam import Policy, ZeroOneAdam, communication_profile

EPS32 = float(np.finfo(np.float32).eps)


def test_variance_updates_follow_k_j_plus_one_minus_k_j_equals_two_to_floor_j_over_kappa():
    steps = Policy(10_000, 1).variance_steps()
    gaps = np.diff(steps)
    assert steps[0] == 1 and list(gaps[:16]) == [1] * 16 and list(gaps[16:32]) == [2] * 16
    assert list(gaps[32:48]) == [4] * 16
    # the paper's §6 policy, counted: 153 updates below 12.5K steps (BERT), 185 below 50050 (ImageNet)
    assert len(Policy(12_500, 1).variance_steps()) == 153
    assert len(Policy.paper_bert().variance_steps()) == 153  # the preset has the same freeze step
    assert len(Policy(50_050, 1).variance_steps()) == 185


def test_sync_interval_is_one_after_the_freeze_doubles_every_scaler_steps_and_is_clipped_at_16():
    policy = Policy(var_freeze_step=20, local_step_scaler=50)
    kinds = policy.kinds(2000)
    assert "local" not in kinds[:20] and set(kinds[:20]) == {"variance", "onebit"}
    syncs = [t for t, k in enumerate(kinds, start=1) if t > 20 and k == "onebit"]
    gaps = np.diff(syncs)
    assert syncs[0] == 21 and set(gaps[:49]) == {1}
    assert set(gaps) == {1, 2, 4, 8, 16} and set(gaps[-50:]) == {16}


def test_imagenet_policy_gives_the_papers_87_percent_less_volume_than_onebit_adam():
    """Abstract: "reduce up to 87% of data volume ... compared to 1-bit Adam", reproduced when the sync interval
    first doubles S steps after the freeze (as DeepSpeed's zoadam.py does): rounds/T = 0.347 and 0.353 bits per
    parameter per step with fp16 full-precision rounds."""
    T = 450_450
    profile = communication_profile(T, Policy.paper_imagenet())
    assert profile.communicating_fraction == pytest.approx(0.347, abs=5e-4)
    fp16_bits = profile.bits_per_parameter(full_precision_bits=16)
    assert fp16_bits == pytest.approx(0.353, abs=5e-4)
    onebit_adam_bits = (16 * 50_050 + (T - 50_050)) / T  # 1-bit Adam with its 10-epoch full-precision stage
    assert 1 - fp16_bits / onebit_adam_bits == pytest.approx(0.867, abs=1e-3)
    assert profile.total_steps == profile.full_precision_rounds + profile.onebit_rounds + profile.local_steps


def test_policy_rejects_nonpositive_settings():
    with pytest.raises(ValueError, match="var_freeze_step"):
        Policy(0, 10)
    with pytest.raises(ValueError, match="scale"):
        ZeroOneAdam(Policy(3, 3), scale="max")


def one_worker_zero_one_adam(policy, g_of_t, steps, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """The intended 0/1 Adam for one worker with an exact compressor, in float64 scalars: v updated on T_v
    until the freeze; after it, each sync replaces m by the gamma-weighted mean of the momenta of the steps
    since the previous sync (those after it, up to and including this one) and moves x by their sum."""
    x, m, v, count = 0.0, 0.0, 0.0, 0
    variance, kinds = set(policy.variance_steps()), policy.kinds(steps)
    weighted, gammas = 0.0, 0.0
    for t in range(1, steps + 1):
        g, gamma = g_of_t(t), lr / (1 - beta1**t)
        if t <= policy.var_freeze_step and t in variance:
            v, count = beta2 * v + (1 - beta2) * g * g, count + 1
        m = beta1 * m + (1 - beta1) * g
        x = x - gamma * m / (np.sqrt(v / (1 - beta2**count)) + eps)
        if t > policy.var_freeze_step:
            weighted, gammas = weighted + gamma * m, gammas + gamma
            if kinds[t - 1] == "onebit":
                m, weighted, gammas = weighted / gammas, 0.0, 0.0
    return x


def test_sync_steps_keep_their_gradient_and_the_momentum_estimate_has_no_off_by_one():
    """Identical workers, gradients c_t * s with a fixed sign vector s: every 1-bit compression is exact, so
    0/1 Adam must follow the one-worker algorithm. The printed Algorithm 1 (gradient of each sync step lost;
    sum of gamma from t'; model restarted from x_t') drifts away from it."""
    layout, d, steps, lr = Layout(2, 2), 32, 80, 0.01
    policy = Policy(var_freeze_step=10, local_step_scaler=12)
    signs = np.where(np.arange(d) % 3 == 0, -1.0, 1.0)

    def g_of_t(t):
        return 1.0 + 0.5 * np.sin(t)

    opt = ZeroOneAdam(policy)
    state, params = opt.init(layout, d), np.zeros((4, d), np.float32)
    for t in range(1, steps + 1):
        grads = np.broadcast_to(np.float32(g_of_t(t)) * signs.astype(np.float32), (2, 2, d)).copy()
        params, state = opt.step(state, params, grads, lr, t)
    want = one_worker_zero_one_adam(policy, g_of_t, steps, lr) * signs
    np.testing.assert_allclose(params, np.broadcast_to(want, params.shape), rtol=2e-5)
    assert {2, 4, 8} <= set(np.diff([t for t, k in enumerate(policy.kinds(steps), 1) if k == "onebit" and t > 10]))


def test_replicas_diverge_between_syncs_and_agree_after_each_and_error_feedback_telescopes():
    """After the freeze: x_S - delta_bar_S / denom = x_freeze - Sum_s mean_i u_s^(i) / denom (paper, proof of
    Theorem 1: u_bar = u_tilde + delta_bar_t - delta_bar_{t+1}), to float32 rounding."""
    layout, d, steps, lr = Layout(2, 2), 24, 60, 0.01
    policy = Policy(var_freeze_step=8, local_step_scaler=6)
    kinds = policy.kinds(steps)
    opt = ZeroOneAdam(policy)
    rng = np.random.default_rng(11)
    state, params = opt.init(layout, d), np.zeros((4, d), np.float32)
    sent, magnitude = np.zeros(d), np.zeros(d)
    start = None
    for t in range(1, steps + 1):
        grads = (rng.standard_normal((2, 2, d)) + 0.3).astype(np.float32)
        if t == policy.var_freeze_step + 1:
            start = params[0].astype(np.float64)
        gamma = lr / (1 - opt.beta1**t)
        buffer = state.buffer + np.float32(gamma) * (opt.beta1 * state.m + (1 - opt.beta1) * grads.reshape(4, d))
        params, state = opt.step(state, params, grads, lr, t)
        if t > policy.var_freeze_step and kinds[t - 1] == "onebit":
            sent += buffer.astype(np.float64).mean(axis=0)
            magnitude += np.abs(buffer).max(axis=0)
            assert np.all(params == params[0]) and np.array_equal(state.anchor, params[0])
        elif t > policy.var_freeze_step:
            assert not np.all(params == params[0])
    denominator = opt.denominator(state.v, state.variance_updates).astype(np.float64)
    delta = state.worker_error.astype(np.float64).mean(axis=0) + state.server_error.astype(np.float64).reshape(-1)
    anchor_then = state.anchor.astype(np.float64) - delta[:d] / denominator
    np.testing.assert_allclose(anchor_then, start - sent / denominator,
                               atol=float(64 * EPS32 * (magnitude / denominator).max()))
    assert np.abs(delta).max() > 1e-4  # the errors are really carried


def test_syncing_every_step_with_frozen_variance_is_onebit_adams_compression_stage():
    """A regression test of deviation 1 in birder_ref.zero_one_adam's docstring (m_{t+1/2} in lines 4-5): with
    T_u = every step and v frozen, 0/1 Adam compresses gamma * m_{t+1/2} each step,
    which is 1-bit Adam's momentum exchange scaled by gamma (both compressors are positively homogeneous).
    From the same m, v and model, the two trajectories agree to float32 rounding."""
    from birder_ref.onebit_adam import OneBitAdam, OneBitAdamState
    from birder_ref.optimizers import AdamState

    layout, d, warm, steps, lr = Layout(2, 2), 40, 300, 30, 0.01  # t > 300: gamma_t = lr in float32
    rng = np.random.default_rng(8)
    m0 = rng.standard_normal(d).astype(np.float32)
    v0 = (rng.random(d, dtype=np.float32) + 0.5) * np.float32(1e-2)
    x0 = rng.standard_normal(d).astype(np.float32)
    onebit = OneBitAdam(warmup_steps=warm)
    zero_one = ZeroOneAdam(Policy(var_freeze_step=warm, local_step_scaler=10**9))
    s1 = onebit.init(layout, d)
    s1 = OneBitAdamState(AdamState(m0, v0), s1.worker_error, s1.server_error)
    s2 = zero_one.init(layout, d)
    s2 = type(s2)(np.tile(m0, (4, 1)), v0, warm, s2.buffer, 0.0, s2.anchor, s2.next_sync, s2.worker_error,
                  s2.server_error)
    p1 = p2 = np.tile(x0, (4, 1))
    for t in range(warm + 1, warm + steps + 1):
        grads = rng.standard_normal((2, 2, d)).astype(np.float32)
        p1, s1 = onebit.step(s1, p1, grads, lr, t)
        p2, s2 = zero_one.step(s2, p2, grads, lr, t)
    moved = np.abs(p1 - x0).max()
    assert moved > 10 * lr
    np.testing.assert_allclose(p2 - x0, p1 - x0, atol=1e-4 * moved)
    np.testing.assert_allclose(s2.m, np.tile(s1.adam.m, (4, 1)), rtol=1e-4, atol=1e-6)
