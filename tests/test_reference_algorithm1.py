"""algorithm1.step against a plain line-by-line float32 transcription of the paper's Algorithm 1, lines 5-13
(``contract_step``, the oracle), and its input checks."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from birder_ref import algorithm1, quantize


def contract_step(state, grads, beta, eps, U, V, T0):
    """The contract's pseudo-code, written as plainly as it reads (the oracle)."""
    t = state.t + 1
    m = beta * state.m + (1 - beta) * grads
    b_hat = beta * state.b_hat + (1 - beta) * abs(grads)
    b = np.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat
    r = m / (b + np.float32(eps))
    y = r + state.e
    u = np.where(U < (np.clip(y, -1, 1) + np.float32(1)) / np.float32(2), np.float32(1), np.float32(-1))
    e = y - u
    a = u.sum(axis=0) / np.float32(state.n_workers)
    z = a + state.server_e
    u_bar = np.where(V < (np.clip(z, -1, 1) + np.float32(1)) / np.float32(2), np.float32(1), np.float32(-1))
    return u_bar, algorithm1.State(m, b_hat, b, e, z - u_bar, t)


FIELDS = ("m", "b_hat", "b", "e", "server_e")
finite32 = st.floats(-1e4, 1e4, width=32, allow_subnormal=True)
draw32 = st.floats(0, 1, width=32, exclude_max=True)


@st.composite
def runs(draw):
    n, d, steps = draw(st.integers(1, 4)), draw(st.integers(1, 24)), draw(st.integers(1, 4))
    grads = draw(hnp.arrays(np.float32, (steps, n, d), elements=finite32))
    # draws near the thresholds matter most: mix grid values with exact 0.5 and arbitrary floats
    U = draw(hnp.arrays(np.float32, (steps, n, d), elements=st.one_of(draw32, st.just(np.float32(0.5)))))
    V = draw(hnp.arrays(np.float32, (steps, d), elements=st.one_of(draw32, st.just(np.float32(0.5)))))
    beta = draw(st.sampled_from([0.5, 0.9, 0.95, 0.999]))
    T0 = draw(st.sampled_from([None, 0, 1, 2]))
    return n, d, grads, U, V, beta, T0


@given(runs())
def test_step_is_the_contract_bit_for_bit(run):
    n, d, grads, U, V, beta, T0 = run
    state = oracle = algorithm1.init(n, d)
    for g, u, v in zip(grads, U, V, strict=True):
        before = {f: getattr(state, f).copy() for f in FIELDS}
        u_bar, new = algorithm1.step(state, g, beta, 1e-8, u, v, T0)
        expected, oracle = contract_step(oracle, g, beta, 1e-8, u, v, T0)
        assert u_bar.dtype == np.float32 and np.array_equal(u_bar, expected)
        for f in FIELDS:
            assert getattr(new, f).dtype == np.float32
            assert np.array_equal(getattr(new, f), getattr(oracle, f)), f
            assert np.array_equal(getattr(state, f), before[f]), f"step modified the old state's {f}"
        assert new.t == state.t + 1
        state = new


def test_quantize_threshold_is_strict_and_clipped():
    y = np.array([0.0, 0.0, 1.0, -1.0, 5.0, -5.0, 1 + 2**-23, -1 - 2**-23], np.float32)
    u = np.array([0.5, 0.5 - 2**-24, 1 - 2**-24, 0.0, 1 - 2**-24, 0.0, 1 - 2**-24, 0.0], np.float32)
    assert quantize(y, u).tolist() == [-1, 1, 1, -1, 1, -1, 1, -1]


def _good(n=2, d=3):
    rng = np.random.default_rng(1)
    return (algorithm1.init(n, d), rng.standard_normal((n, d)).astype(np.float32),
            rng.random((n, d), dtype=np.float32), rng.random(d, dtype=np.float32))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda g, U, V: (g.astype(np.float64), U, V), "grads must be float32"),
        (lambda g, U, V: (g[:, :2], U, V), "grads must have shape (2, 3)"),
        (lambda g, U, V: (g.tolist(), U, V), "grads must be a NumPy float32 array"),
        (lambda g, U, V: (_set(g, (1, 2), np.nan), U, V), "grads: worker 1, element (2,) is nan"),
        (lambda g, U, V: (_set(g, (0, 1), np.inf), U, V), "grads: worker 0, element (1,) is inf"),
        (lambda g, U, V: (g, _set(U, (1, 0), 1.0), V), "u_worker: worker 1, element (0,) is 1.0, outside [0, 1)"),
        (lambda g, U, V: (g, _set(U, (0, 2), -0.25), V), "u_worker: worker 0, element (2,) is -0.25"),
        (lambda g, U, V: (g, U, _set(V, (2,), np.nan)), "u_server: element 2 is nan"),
        (lambda g, U, V: (g, U, None), "u_server must be a NumPy float32 array"),
    ],
)
def test_bad_input_is_one_clear_error_and_the_state_is_untouched(mutate, message):
    state, g, U, V = _good()
    state = algorithm1.State(*(a + 0.25 for a in (state.m, state.b_hat, state.b, state.e, state.server_e)), 3)
    before = {f: getattr(state, f).copy() for f in FIELDS}
    bad_g, bad_U, bad_V = mutate(g, U, V)
    with pytest.raises(ValueError) as error:
        algorithm1.step(state, bad_g, 0.95, 1e-8, bad_U, bad_V)
    assert message in str(error.value)
    assert all(np.array_equal(getattr(state, f), before[f]) for f in FIELDS) and state.t == 3


@pytest.mark.parametrize("beta, eps", [(0.0, 1e-8), (1.0, 1e-8), (-0.5, 1e-8), (0.9, 0.0), (0.9, -1e-8),
                                       (0.9, float("nan")), (float("nan"), 1e-8),
                                       # inside the bounds, outside once float32, where lines 5-9 compute
                                       (1 - 1e-9, 1e-8), (1e-50, 1e-8), (0.9, 1e-50), (0.9, 1e39)])
def test_coefficients_outside_their_ranges_are_rejected(beta, eps):
    state, g, U, V = _good()
    with pytest.raises(ValueError, match="beta must|eps must be|(beta|eps)=.* in float32"):
        algorithm1.step(state, g, beta, eps, u_worker=U, u_server=V)
    # the most extreme values float32 holds inside the bounds are taken
    algorithm1.step(state, g, 1 - 2**-24, 1e-45, u_worker=U, u_server=V)
    algorithm1.step(state, g, 2**-149, 1e-8, u_worker=U, u_server=V)


def test_a_server_error_of_another_dtype_is_refused_not_computed_in_it():
    """Trial t9: a float64 server error (np.zeros(d) without a dtype) moved the server stage to float64, where a
    decision can differ from float32's."""
    state = algorithm1.init(3, 1)
    server_e = np.array([0.012954925], np.float32)
    g, U, V = np.zeros((3, 1), np.float32), np.zeros((3, 1), np.float32), np.array([0.6731441], np.float32)
    for dtype in (np.float64, np.float16):
        with pytest.raises(ValueError, match=f"state.server_e must be float32, got {np.dtype(dtype)}"):
            algorithm1.step(dataclasses.replace(state, server_e=server_e.astype(dtype)), g, u_worker=U, u_server=V)


def test_a_numpy_scalar_is_named_and_a_0_d_array_is_quantized():
    with pytest.raises(ValueError, match="got a NumPy float32 scalar"):
        quantize(np.float32(0.3), np.float32(0.5))
    got = quantize(np.asarray(np.float32(0.3)), np.asarray(np.float32(0.5)))
    assert got.shape == () and got.dtype == np.float32 and got == 1.0


@pytest.mark.parametrize("T0", [-1, 1.5, "3", True])
def test_T0_must_be_a_non_negative_integer(T0):
    state, g, U, V = _good()
    with pytest.raises(ValueError, match="T0 must be"):
        algorithm1.step(state, g, u_worker=U, u_server=V, T0=T0)


def test_init_rejects_empty_shapes():
    with pytest.raises(ValueError, match="n_workers must be >= 1"):
        algorithm1.init(0, 4)
    with pytest.raises(ValueError, match="dim must be >= 1"):
        algorithm1.init(2, 0)


def _set(a, index, value):
    a = a.copy()
    a[index] = value
    return a
