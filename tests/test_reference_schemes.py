"""Every scheme equals Algorithm 1 bit for bit, and every byte log equals its closed form."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from birder_ref import algorithm1, draws, hierarchical, schemes
from birder_ref.execute import ByteLog, run_phase
from birder_ref.schedules import SCHEMES, Layout, Phase, allreduce, paper_bytes_per_gpu, schedule

FIELDS = ("m", "b_hat", "b", "e", "server_e")


def exact_grads(seed, n, g, d, steps):
    """Gradients on a 2**-10 grid of small magnitude: every sum over GPUs is exact in float32."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-4096, 4097, (steps, n, g, d)) / 1024).astype(np.float32)


def inexact_grads(seed, n, g, d, steps):
    """float32 gradients over many binades, whose sums over GPUs round: the order of a sum shows in its bits."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((steps, n, g, d)) * 10.0 ** rng.integers(-6, 7, (steps, n, g, d))).astype(np.float32)


def run_and_compare(scheme, n, g, d, steps, seed, T0=None, make_grads=exact_grads):
    grads = make_grads(seed, n, g, d, steps)
    n_workers = schemes.worker_gradients(scheme, grads[0]).shape[0]
    state = oracle = algorithm1.init(n_workers, d)
    for t in range(1, steps + 1):
        U, V = draws.worker_uniforms(seed, t, n_workers, d), draws.server_uniforms(seed, t, d)
        u_bar, state, log = schemes.step(scheme, state, grads[t - 1], 0.9, 1e-8, U, V, T0)
        expected, oracle = algorithm1.step(oracle, schemes.worker_gradients(scheme, grads[t - 1]), 0.9, 1e-8, U, V, T0)
        assert np.array_equal(u_bar, expected), (scheme, t)
        for f in FIELDS:
            assert np.array_equal(getattr(state, f), getattr(oracle, f)), (scheme, t, f)
        layout = Layout(n, g)
        assert log.bytes_per_gpu == paper_bytes_per_gpu(scheme, layout, d)
        for phase in log.schedule.phases:  # the pattern's own count equals what was moved, endpoint by endpoint
            moved = {ep: b for ep, b in log.bytes_sent[phase.name].items() if b}
            assert moved == {ep: b for ep, b in phase.bytes_sent().items() if b}, phase.name
    return log


@settings(max_examples=150)
@given(st.sampled_from(SCHEMES), st.integers(1, 4), st.integers(1, 4), st.integers(1, 70), st.integers(1, 3),
       st.integers(0, 2**32 - 1), st.sampled_from([None, 1]))
def test_every_scheme_is_algorithm1(scheme, n, g, d, steps, seed, T0):
    run_and_compare(scheme, n, g, d, steps, seed, T0)


@settings(max_examples=60)
@given(st.integers(1, 4), st.integers(2, 5), st.integers(1, 90), st.integers(1, 2), st.integers(0, 2**32 - 1))
def test_hierarchical_is_algorithm1_on_node_means_for_any_float32_data(n, g, d, steps, seed):
    """The intra-node phase sums each shard in local-rank order, as ``worker_gradients`` (and the GPU) does."""
    run_and_compare("hierarchical", n, g, d, steps, seed, make_grads=inexact_grads)


def test_those_data_tell_a_ring_order_sum_from_a_rank_order_one():
    """A ring reduce-scatter adds in an order that depends on the chunk: on these data it differs from the
    rank-order sum, so the test above would catch a scheme that reduced along a ring."""
    n, g, d = 1, 4, 32 * 8
    grads = inexact_grads(3, n, g, d, 1)[0].reshape(g, d)
    ring = Phase("ring", "ring_reduce_scatter", (tuple(range(g)),), d // g, (32,) * (g - 1), "reduce")
    to_all = Phase("a2a", "all_to_all", (tuple(range(g)),), d // g, (32,), "reduce")
    results = []
    for phase in (ring, to_all):
        buffers = {r: grads[r].reshape(g, -1).copy() for r in range(g)}
        run_phase(phase, buffers, ByteLog())
        results.append(np.concatenate([buffers[r][r] for r in range(g)]))
    rank_order = grads.sum(axis=0, dtype=np.float32)
    assert np.array_equal(results[1], rank_order)
    assert not np.array_equal(results[0], rank_order)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("d", [1, 7, 9, 10007])
def test_dimensions_not_divisible_by_8_ranks_are_padded(scheme, d):
    run_and_compare(scheme, 2, 3, d, 2, seed=d)


def test_hierarchical_interface_and_the_papers_four_volumes():
    n, g, d = 3, 4, 96 * 5
    grads = exact_grads(1, n, g, d, 1)[0]
    state = hierarchical.init(n, g, d)
    U, V = draws.worker_uniforms(1, 1, n, d), draws.server_uniforms(1, 1, d)
    u_bar, new, log = hierarchical.step(state, grads, u_worker=U, u_server=V)
    expected, _ = algorithm1.step(state, grads.sum(axis=1) / np.float32(g), u_worker=U, u_server=V)
    assert np.array_equal(u_bar, expected)
    P = 4 * d  # d is a multiple of 8 * n * g here, so nothing is padded
    assert log.bytes_per_gpu == {
        "intra_reduce_scatter": (g - 1) * P // g, "inter_all_to_all": (n - 1) * P // (32 * g * n),
        "inter_all_gather": (n - 1) * P // (32 * g * n), "intra_all_gather": (g - 1) * P // (32 * g)}
    inter = sum(b for ph in ("inter_all_to_all", "inter_all_gather") for b in log.bytes_sent[ph].values())
    assert inter == 2 * (n - 1) * P // 32  # Section 4: about 2(n-1)P/32 across nodes, all GPUs together


@pytest.mark.parametrize("scheme", [*SCHEMES, "allreduce"])
def test_bytes_sent_equal_bytes_received(scheme):
    layout = Layout(3, 2)
    sched = allreduce(layout, 100) if scheme == "allreduce" else schedule(scheme, layout, 100)
    for phase in sched.phases:
        sent, received = {}, {}
        for messages in phase.rounds():
            for m in messages:
                sent[m.src] = sent.get(m.src, 0) + m.nbytes
                received[m.dst] = received.get(m.dst, 0) + m.nbytes
        assert sum(sent.values()) == sum(received.values())
        assert sent == {ep: b for ep, b in phase.bytes_sent().items() if b}


def test_a_count_too_wide_for_its_declared_bits_is_caught():
    phase = Phase("too_narrow", "ring_reduce_scatter", ((0, 1, 2),), 8, (1, 1), "reduce")
    buffers = {r: np.ones((3, 8), np.int64) for r in range(3)}
    with pytest.raises(ValueError, match="does not fit in 1 bits"):
        run_phase(phase, buffers, ByteLog())


@pytest.mark.parametrize("call, message", [
    (lambda: schedule("tree", Layout(2, 2), 8), "unknown scheme 'tree'"),
    (lambda: Layout(0, 8), "n_nodes must be >= 1"),
    (lambda: schedule("ring", Layout(2, 2), 0), "dim must be >= 1"),
    (lambda: schemes.step("ring", algorithm1.init(4, 3), np.zeros((4, 3), np.float32)), "(n_nodes, gpus_per_node, d)"),
])
def test_bad_schedule_requests_are_rejected(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_scheme_rejects_a_nan_gradient_naming_the_gpu_and_keeps_the_state():
    state = algorithm1.init(2, 5)
    grads = np.zeros((1, 2, 5), np.float32)
    grads[0, 1, 3] = np.nan
    U, V = draws.worker_uniforms(0, 1, 2, 5), draws.server_uniforms(0, 1, 5)
    with pytest.raises(ValueError, match=r"grads: worker \(0, 1\), element \(3,\) is nan"):
        schemes.step("flat", state, grads, u_worker=U, u_server=V)
    assert state.t == 0 and not state.m.any()


def test_a_node_sum_that_overflows_float32_is_refused_naming_it_not_called_inf():
    """Trial t9: two GPUs of one node both at 3e38, whose float32 sum (the reduce-scatter's) is inf, were told
    their gradient 'is inf', with a NumPy overflow warning first."""
    state = hierarchical.init(2, 2, 4)
    grads = np.ones((2, 2, 4), np.float32)
    grads[1, :, 2] = 3e38
    U, V = draws.worker_uniforms(0, 1, 2, 4), draws.server_uniforms(0, 1, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning before the error
        with pytest.raises(ValueError, match=r"grads: node 1, element \(2,\): the sum over the node's 2 GPUs "
                                             "overflows float32"):
            hierarchical.step(state, grads, u_worker=U, u_server=V)
    assert state.t == 0 and not state.m.any()
