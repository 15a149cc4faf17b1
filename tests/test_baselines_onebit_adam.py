"""1-bit Adam: the contract's compressed all-reduce, its error-feedback identity, and warm-up == Adam."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from birder_ref import driver, onebit_adam
from birder_ref.onebit_adam import OneBitAdam, compressed_allreduce
from birder_ref.optimizers import Adam
from birder_ref.schedules import Layout

EPS32 = float(np.finfo(np.float32).eps)


def zeros(n, d):
    return np.zeros((n, d), np.float32), np.zeros((n, d // n), np.float32)


def direct(buffers, worker_error, server_error, scale="l2"):
    """The contract's formula written straight down, without messages (same float32 operation order)."""
    n, d = buffers.shape
    c = buffers + worker_error
    s = [onebit_adam.compress(row, scale)[0] for row in c]
    q = np.where(c >= 0, np.float32(1), np.float32(-1))
    new_worker = np.stack([c[i] - s[i] * q[i] for i in range(n)])
    chunks = d // n
    out, new_server = np.empty(d, np.float32), np.empty_like(server_error)
    for j in range(n):
        a = np.zeros(chunks, np.float32)
        for k in range(n):
            a = a + q[k, j * chunks:(j + 1) * chunks] * (s[k] * np.float32(1.0 / n))
        z = a + server_error[j]
        sj = onebit_adam.compress(z, scale)[0]
        qj = np.where(z >= 0, np.float32(1), np.float32(-1))
        new_server[j] = z - sj * qj
        out[j * chunks:(j + 1) * chunks] = sj * qj
    return out, new_worker, new_server


def combined_error(worker_error, server_error):
    """delta_bar = mean_i worker_error_i + concat_j server_error_j (0/1 Adam paper, proof of Theorem 2)."""
    return worker_error.astype(np.float64).mean(axis=0) + server_error.astype(np.float64).reshape(-1)


@given(st.integers(1, 5), st.integers(1, 4), st.sampled_from(["l2", "mean_abs"]), st.integers(0, 2**31))
def test_messages_deliver_the_formula_bit_for_bit(n, units, scale, seed):
    rng = np.random.default_rng(seed)
    d = 8 * n * units
    state = (rng.standard_normal((n, d)).astype(np.float32), *zeros(n, d))
    for _ in range(3):
        buffers = rng.standard_normal((n, d)).astype(np.float32)
        got = compressed_allreduce(buffers, *state[1:], scale=scale)
        want = direct(buffers, *state[1:], scale=scale)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)
        state = (buffers, got[1], got[2])


def test_l2_scale_keeps_the_norm_and_zero_sends_plus_one():
    x = np.array([0.0, -3.0, 4.0, 0.0, 1.0, -1.0, 2.0, 0.5], np.float32)
    s, q = onebit_adam.compress(x)
    assert q.tolist() == [1, -1, 1, 1, 1, -1, 1, 1]
    assert float(np.linalg.norm(s * q)) == pytest.approx(float(np.linalg.norm(x)), rel=1e-6)
    s_abs, _ = onebit_adam.compress(x, "mean_abs")
    assert float(s_abs) == pytest.approx(np.abs(x).mean())
    out, worker_error, _ = compressed_allreduce(x.reshape(1, 8), *zeros(1, 8))
    assert worker_error[0, 0] == -s  # x = 0 went out as +s


@given(st.integers(2, 4), st.integers(0, 2**31))
def test_error_feedback_telescopes(n, seed):
    """Sum_t out_t + delta_bar_T = Sum_t mean_i z_t^(i) (delta_bar_0 = 0), to float32 rounding."""
    rng = np.random.default_rng(seed)
    d, steps = 8 * n * 3, 40
    worker_error, server_error = zeros(n, d)
    sent, received, magnitude = np.zeros(d), np.zeros(d), np.zeros(d)
    for _ in range(steps):
        z = (rng.standard_normal((n, d)) * rng.uniform(0.1, 3)).astype(np.float32)
        out, worker_error, server_error = compressed_allreduce(z, worker_error, server_error)
        sent += z.astype(np.float64).mean(axis=0)
        received += out
        magnitude += np.abs(z).max(axis=0) + np.abs(out) + np.abs(worker_error).max(axis=0)
    residual = received + combined_error(worker_error, server_error) - sent
    assert np.all(np.abs(residual) <= 4 * n * EPS32 * magnitude)
    assert np.abs(combined_error(worker_error, server_error)).max() > 1e-3  # the errors are really carried


def test_bad_shapes_raise_one_value_error():
    b = np.zeros((2, 16), np.float32)
    with pytest.raises(ValueError, match="multiple of 8"):
        compressed_allreduce(np.zeros((2, 12), np.float32), np.zeros((2, 12), np.float32), np.zeros((2, 6), np.float32))
    with pytest.raises(ValueError, match="server_error"):
        compressed_allreduce(b, b.copy(), np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match="scale"):
        compressed_allreduce(b, b.copy(), np.zeros((2, 8), np.float32), scale="max")
    with pytest.raises(ValueError, match="warmup_steps"):
        OneBitAdam(warmup_steps=0)


def test_warmup_is_adam_bit_for_bit_then_compression_differs():
    layout, steps, warmup = Layout(2, 4), 30, 12
    problem = driver.logistic()
    adam = driver.train(problem, Adam(weight_decay=0.01), layout, steps, 0.05, seed=3)
    onebit = driver.train(problem, OneBitAdam(warmup, weight_decay=0.01), layout, steps, 0.05, seed=3)
    for t in range(warmup + 1):
        assert np.array_equal(adam.params[t], onebit.params[t])
    assert not np.array_equal(adam.params[warmup + 1], onebit.params[warmup + 1])
    assert onebit.losses[-1] < 0.9 * onebit.losses[0]


def test_compression_stage_momentum_telescopes_and_variance_stays_frozen():
    """In the compression stage, Sum_t m_t + delta_bar_T = Sum_t mean_i m_t^(i) (blog eqs. 1-5)."""
    layout, d, warmup, steps = Layout(2, 2), 21, 3, 25
    opt = OneBitAdam(warmup)
    rng = np.random.default_rng(5)
    state = opt.init(layout, d)
    params = np.zeros((4, d), np.float32)
    synced, local_mean, magnitude = np.zeros(d), np.zeros(d), np.zeros(d)
    for t in range(1, steps + 1):
        grads = rng.standard_normal((2, 2, d)).astype(np.float32)
        local = opt.beta1 * state.adam.m + (1 - opt.beta1) * grads.reshape(4, d)
        previous_v = state.adam.v
        params, state = opt.step(state, params, grads, 0.01, t)
        if t > warmup:
            assert np.array_equal(state.adam.v, previous_v)
            synced += state.adam.m
            local_mean += local.astype(np.float64).mean(axis=0)
            magnitude += np.abs(local).max(axis=0) + np.abs(state.adam.m) + np.abs(state.worker_error[:, :d]).max(0)
    residual = synced + combined_error(state.worker_error, state.server_error)[:d] - local_mean
    assert np.all(np.abs(residual) <= 16 * EPS32 * magnitude)
    assert np.all(params == params[0])  # every replica identical


def test_warmup_steps_for_uses_the_default_fraction():
    assert onebit_adam.warmup_steps_for(1000) == 150
    with pytest.raises(ValueError):
        onebit_adam.warmup_steps_for(100, 1.5)
