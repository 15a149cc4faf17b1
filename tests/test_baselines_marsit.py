"""Marsit: the merge's exact distribution (computed, not sampled), the ring and torus as executed, and the
global compensation's identity with plain averaged SGD."""

from fractions import Fraction
from itertools import product

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from birder_ref import draws, driver, marsit
from birder_ref.marsit import Marsit, merge, sign_allreduce, transient_probability
from birder_ref.schedules import Layout

GRID = 2**24  # draws lie on k / 2**24


def test_merge_is_bitwise_majority_of_incoming_local_and_transient():
    for a, b, v in product((0, 1), repeat=3):
        out = merge(np.array([a]), np.array([b]), np.array([v]))[0]
        assert out == int(a + b + v >= 2)


def chain_probability(local_bits, merge_rule=merge, probability=transient_probability, positions=None):
    """Exact P(final bit = 1) of a chain merging ``local_bits`` in order: at each hop the incoming bit is 1
    with the probability so far, independent of the local bit and the transient bit."""
    q = Fraction(local_bits[0])
    for hop, local in enumerate(local_bits[1:], start=2):
        position = hop if positions is None else positions[hop - 1]
        p_v = probability(position, local)
        q = sum(
            (q if incoming else 1 - q) * (p_v if v else 1 - p_v)
            for incoming in (0, 1) for v in (0, 1)
            if merge_rule(np.array([incoming]), np.array([local]), np.array([v]))[0]
        )
    return q


@pytest.mark.parametrize("M", range(1, 7))
def test_chain_gives_plus_one_with_probability_exactly_the_share_of_workers_holding_plus_one(M):
    for bits in product((0, 1), repeat=M):
        assert chain_probability(bits) == Fraction(sum(bits), M)


def test_the_exact_computation_catches_the_precedence_trap_and_global_ranks():
    """Guards that the test above can fail: `in XOR (l AND v)` (C precedence) and probabilities set by the
    global rank (here a chain starting at rank 2 of 4) are both biased."""
    def c_precedence(incoming, local, v):
        return (incoming & local) | (incoming ^ (local & v))

    bits = (0, 1, 0, 0)
    assert chain_probability(bits, c_precedence) != Fraction(1, 4)
    assert chain_probability(bits, positions=[3, 4, 1, 2]) != Fraction(1, 4)


def draw_classes(max_position):
    """The draw values that matter: the [0, 1) intervals cut at every threshold the merge can use, each as
    (number of grid points in it, one grid point in it)."""
    cuts = {0.0, 1.0}
    for q in range(1, max_position + 1):
        for bit in (0, 1):
            cuts.add(float(np.float32(float(transient_probability(q, bit)))))
    cuts = sorted(cuts)
    classes = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        first, end = -(-Fraction(lo) * GRID // 1), -(-Fraction(hi) * GRID // 1)
        if end > first:
            classes.append((int(end - first), np.float32(int(first) / GRID)))
    return classes


def exact_output_probabilities(layout, topology, bits):
    """For local bits ``bits`` (one per rank), the exact probability of a +1 at every chain position of the
    vector, over the draws, of the implementation as executed: each coordinate carries one combination of
    draw classes for every draw it uses, so one call covers every outcome."""
    p = layout.n_ranks
    classes = draw_classes(max(layout.n_nodes, layout.gpus_per_node) if topology == "torus" else p)
    n_draws = 2 * p if topology == "torus" else p
    combos = list(product(range(len(classes)), repeat=n_draws))
    block = -(-len(combos) // 8) * 8
    blocks = p
    d = block * blocks
    u = np.zeros((n_draws, d), np.float32)
    weights = np.zeros(d, dtype=object)
    for i, combo in enumerate(combos):
        for b in range(blocks):
            c = b * block + i
            weights[c] = 1
            for k, cls in enumerate(combo):
                u[k, c] = classes[cls][1]
                weights[c] *= classes[cls][0]
    values = np.where(np.array(bits)[:, None] == 1, np.float32(1), np.float32(-1)) * np.ones((p, d), np.float32)
    out = sign_allreduce(values, layout, u[:p], u[p:] if topology == "torus" else None, topology)
    total = GRID**n_draws
    return [Fraction(int(sum(w for w, o in zip(weights[b * block:(b + 1) * block], out[b * block:(b + 1) * block],
                                                strict=True) if o > 0)), total) for b in range(blocks)]


@pytest.mark.parametrize("layout, topology", [(Layout(1, 3), "ring"), (Layout(2, 2), "ring"), (Layout(2, 2), "torus")])
def test_ring_and_torus_as_executed_are_unbiased_for_the_share_of_plus_ones(layout, topology):
    """Exact over the draws; each hop's probability is off by under 2**-24 from grid rounding, so the
    bound is (hops) * 2**-23. A merge probability set by global rank would be off by at least 1/12."""
    p = layout.n_ranks
    for bits in product((0, 1), repeat=p):
        for probability in exact_output_probabilities(layout, topology, bits):
            assert abs(probability - Fraction(sum(bits), p)) <= Fraction(p, 2**23)


def test_streams_stay_apart_from_birder_and_the_driver():
    assert marsit.RING_STREAM + 2**28 <= marsit.COLUMN_STREAM and marsit.COLUMN_STREAM + 2**28 <= 2**30
    assert marsit.RING_STREAM > 2**20 and draws.SERVER_STREAM > 2**30 + 2**28


def test_compensation_and_consensus_per_round():
    layout, d, lr = Layout(2, 2), 19, 0.1
    opt = Marsit(K=3, sign_scale=0.25)
    rng = np.random.default_rng(4)
    state, params = opt.init(layout, d), np.zeros((4, d), np.float32)
    for t in range(1, 8):
        grads = rng.standard_normal((2, 2, d)).astype(np.float32)
        compensated = np.float32(lr) * grads.reshape(4, d) + state.compensation
        before = params[0].copy()
        params, state = opt.step(state, params, grads, lr, t)
        assert np.all(params == params[0])  # every replica identical
        update = before - params[0]
        if t in (1, 4, 7):  # mod(t - 1, 3) == 0: full precision, compensation reset
            np.testing.assert_allclose(update, compensated.mean(axis=0), rtol=1e-5, atol=1e-7)
            assert not state.compensation.any()
        else:
            assert set(np.round(np.abs(update) / np.float32(0.25 * lr), 4)) == {1.0}
            np.testing.assert_allclose(state.compensation, compensated - (before - params[0]), atol=1e-7)


@pytest.mark.parametrize("topology", ["ring", "torus"])
def test_model_minus_mean_compensation_is_plain_averaged_sgd(topology):
    """Appendix B eqs. (4)-(5): x_t - mean_m c_t = x_0 - lr Sum_{tau<t} mean_m g_tau, every step; exact here
    (gradients on the 2**-16 grid, power-of-two step sizes, small magnitudes: every float32 sum is exact)."""
    layout, problem, lr = Layout(2, 4), driver.quadratic(dim=40, condition=4, noise=0.5), 2.0**-5
    opt = Marsit(K=4, sign_scale=2.0**-3, topology=topology)
    state = opt.init(layout, problem.dim)
    params = np.tile(problem.x0, (layout.n_ranks, 1))
    sgd = problem.x0.astype(np.float64)
    for t in range(1, 16):  # t = 15 is a sign round
        grads = problem.gradients(params, layout, t, seed=1)
        sgd = sgd - lr * grads.reshape(layout.n_ranks, -1).astype(np.float64).mean(axis=0)
        params, state = opt.step(state, params, grads, lr, t)
        assert np.array_equal(params[0] - state.compensation.astype(np.float64).mean(axis=0), sgd)
    assert np.abs(state.compensation).max() > 0


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="K"):
        Marsit(K=0)
    with pytest.raises(ValueError, match="topology"):
        Marsit(topology="tree")
    with pytest.raises(ValueError, match="position"):
        transient_probability(0, 1)


@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 70), st.sampled_from(["ring", "torus"]),
       st.integers(0, 2**31))
def test_agreeing_workers_keep_their_sign_and_the_result_is_always_a_held_sign(n_nodes, gpus, d, topology, seed):
    """Deterministic for any draws: where every worker holds the same sign it comes out; elsewhere the
    merged sign is one some worker holds (the operator is a bitwise majority with the incoming bit)."""
    layout = Layout(n_nodes, gpus)
    p = layout.n_ranks
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((p, d)).astype(np.float32)
    values[:, : d // 2] = np.abs(values[:, : d // 2]) * np.where(np.arange(d // 2) % 2, 1, -1).astype(np.float32)
    u = rng.random((2, p, d), dtype=np.float32)
    out = sign_allreduce(values, layout, u[0], u[1], topology)
    held = np.where(values >= 0, 1, -1)
    assert np.all((out == held.max(axis=0)) | (out == held.min(axis=0)))
    agree = held.min(axis=0) == held.max(axis=0)
    assert np.array_equal(out[agree], held[0, agree])
