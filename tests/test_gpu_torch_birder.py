"""The torch kernels against birder_ref, bit for bit, in one process (CPU; CUDA where present)."""

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from birder_ref import algorithm1, quantize, schemes, unpack_signs
from birder_ref.draws import SERVER_STREAM, uniforms
from gpu_validation import comm, digests
from gpu_validation import torch_birder as tb

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
EDGES = np.array([-2.0, -1.0, -0.5, -0.0, 0.0, 1e-30, 0.5, 1.0, 3.0, np.float32(1) - np.float32(2**-24)], np.float32)


def _as_np(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy()


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 5, SERVER_STREAM]),
       st.integers(0, 2**32 - 200))
def test_draws_equal_the_reference_at_any_offset(seed, step, stream, offset):
    index = torch.arange(offset, offset + 200, dtype=torch.int64)
    np.testing.assert_array_equal(_as_np(tb.uniforms(seed, step, stream, index)),
                                  uniforms(seed, step, stream, 200, offset))


def test_draws_at_scattered_indices_equal_the_reference_vector():
    index = torch.tensor([7, 0, 4095, 13, 13, 2048], dtype=torch.int64)
    full = uniforms(3, 9, 2, 4096)
    np.testing.assert_array_equal(_as_np(tb.uniforms(3, 9, 2, index)), full[index.numpy()])


@given(st.lists(st.floats(-3, 3, width=32), min_size=1, max_size=64), st.integers(0, 2**31))
def test_quantize_equals_the_reference(values, seed):
    y = np.concatenate([np.array(values, np.float32), EDGES])
    u = uniforms(seed, 1, 0, y.size)
    np.testing.assert_array_equal(_as_np(tb.quantize(torch.from_numpy(y), torch.from_numpy(u))), quantize(y, u))


def test_quantize_at_the_threshold_boundary():
    """u exactly equal to (y + 1) / 2 gives -1 (strict <), as in the reference."""
    y = np.array([0.0, 0.5, -0.5], np.float32)
    u = ((y + np.float32(1)) / np.float32(2)).astype(np.float32)
    got = _as_np(tb.quantize(torch.from_numpy(y), torch.from_numpy(u)))
    np.testing.assert_array_equal(got, quantize(y, u))
    assert (got == -1).all()


@given(st.integers(1, 40).map(lambda n: 8 * n), st.integers(0, 2**31))
def test_pack_and_unpack_match_numpy(d, seed):
    q = np.where(uniforms(seed, 0, 0, d) < 0.5, np.float32(1), np.float32(-1))
    packed = tb.pack_signs(torch.from_numpy(q))
    assert packed.dtype == torch.uint8
    np.testing.assert_array_equal(_as_np(packed), np.packbits(q > 0))
    np.testing.assert_array_equal(_as_np(tb.unpack_signs(packed)), unpack_signs(np.packbits(q > 0), d))


def test_pack_refuses_a_partial_byte():
    with pytest.raises(ValueError, match="multiple of 8"):
        tb.pack_signs(torch.ones(12))


def test_count_plus_counts_every_sender():
    rows = np.array([[1, -1, 1, 1, -1, -1, 1, -1], [1, 1, -1, 1, -1, 1, 1, -1], [-1, 1, 1, 1, -1, -1, 1, 1]],
                    np.float32)
    packed = torch.stack([tb.pack_signs(torch.from_numpy(r)) for r in rows])
    np.testing.assert_array_equal(_as_np(tb.count_plus(packed)), (rows > 0).sum(axis=0))


@pytest.mark.parametrize("T0", [None, 0, 2])
@pytest.mark.parametrize("beta,eps", [(0.95, 1e-8), (0.9, 1e-3), (0.123456789, 1e-6)])
def test_worker_and_server_steps_equal_algorithm1_over_several_steps(beta, eps, T0):
    n, d, seed = 3, 96, 11
    ref = algorithm1.init(n, d)
    worker = tb.WorkerState(*(torch.zeros(n, d) for _ in range(4)))
    server_error = torch.zeros(d)
    index = torch.arange(d, dtype=torch.int64)
    for t in range(1, 6):
        grads = (uniforms(seed + 1, t, 0, n * d).reshape(n, d) - np.float32(0.5)) * np.float32(t)
        grads[0, :4] = 0.0  # zero gradients: m / (b + eps) = 0
        u_worker = np.stack([uniforms(seed, t, i, d) for i in range(n)])
        u_server = uniforms(seed, t, SERVER_STREAM, d)
        u_bar_ref, ref = algorithm1.step(ref, grads, beta, eps, u_worker, u_server, T0)

        assert np.array_equal(_as_np(torch.stack([tb.uniforms(seed, t, i, index) for i in range(n)])), u_worker)
        u, worker = tb.worker_step(worker, torch.from_numpy(grads), beta, eps, torch.from_numpy(u_worker), t, T0)
        counts = tb.count_plus(tb.pack_signs(u.reshape(-1)).view(n, -1))
        u_bar, server_error = tb.server_step(tb.mean_of_signs(counts, n), server_error, torch.from_numpy(u_server))
        np.testing.assert_array_equal(_as_np(u_bar), u_bar_ref)
        for name, ours in (("m", worker.m), ("b_hat", worker.b_hat), ("b", worker.b), ("e", worker.e),
                           ("server_e", server_error)):
            np.testing.assert_array_equal(_as_np(ours), getattr(ref, name), err_msg=f"{name} at step {t}")


def test_node_sum_is_the_reference_workers_gradient_in_any_order_sensitive_case():
    """Data where float32 addition order matters: the hook's node mean must equal worker_gradients' exactly."""
    g, d = 4, 8
    rows = np.array([[1e8, 1.0, -1e8, 3.0, 0.1, 1e-3, 7.0, -2.5]] * g, np.float32)
    rows[1] *= np.float32(-1.0000001)
    rows[2] = np.float32(1.5) - rows[2] / np.float32(3)
    rows[3] = rows[3] * np.float32(1e-7) + np.float32(0.3)
    ours = comm.rank_order_sum(torch.from_numpy(rows)) / float(g)
    np.testing.assert_array_equal(_as_np(ours), schemes.worker_gradients("hierarchical", rows.reshape(1, g, d))[0])
    backwards = rows[::-1].sum(axis=0, dtype=np.float32) / np.float32(g)
    assert not np.array_equal(_as_np(ours), backwards), "data too easy: the order would not matter"


@pytest.mark.parametrize("run", digests.RUNS, ids=[r["name"] for r in digests.RUNS])
def test_committed_digests_equal_torch_and_reference(run):
    committed = digests.committed()[run["name"]]
    assert committed["run"] == run
    assert digests.torch_digests(run) == {k: committed[k] for k in ("update_digests", "state_digest")}
    assert digests.reference_digests(run)["update_digests"] == committed["update_digests"]


def test_digests_catch_a_one_ulp_change_and_a_fused_multiply_add(monkeypatch):
    run, committed = digests.RUNS[0], digests.committed()[digests.RUNS[0]["name"]]
    changed = dict(run, beta=np.nextafter(np.float32(run["beta"]), np.float32(1)).item())
    assert digests.torch_digests(changed)["state_digest"] != committed["state_digest"]

    def fused_worker_step(state, grad, beta, eps, u_worker, t, T0=None):  # m by lerp: one rounding, not three
        m = torch.lerp(grad, state.m, beta)
        b_hat = torch.lerp(grad.abs(), state.b_hat, beta)
        y = m / (b_hat + eps) + state.e
        u = tb.quantize(y, u_worker)
        return u, tb.WorkerState(m, b_hat, b_hat, y - u)

    monkeypatch.setattr(tb, "worker_step", fused_worker_step)
    assert digests.torch_digests(run)["state_digest"] != committed["state_digest"]


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("run", digests.RUNS, ids=[r["name"] for r in digests.RUNS])
def test_committed_digests_on_cuda(run):
    committed = digests.committed()[run["name"]]
    assert digests.torch_digests(run, "cuda") == {k: committed[k] for k in ("update_digests", "state_digest")}


@cuda
@pytest.mark.cuda
def test_draws_on_cuda_equal_the_reference():
    index = torch.arange(2**32 - 4096, 2**32, dtype=torch.int64, device="cuda")
    np.testing.assert_array_equal(_as_np(tb.uniforms(1, 2, SERVER_STREAM, index)),
                                  uniforms(1, 2, SERVER_STREAM, 4096, 2**32 - 4096))


def test_draws_over_many_cpu_pieces_equal_the_reference():
    n = 3 * 2**16 + 5
    index = torch.arange(2**32 - n, 2**32, dtype=torch.int64).reshape(1, -1)
    draws = tb.uniforms(9, 4, 1, index)
    assert draws.shape == (1, n)
    np.testing.assert_array_equal(_as_np(draws)[0], uniforms(9, 4, 1, n, 2**32 - n))


DEVICES = ["cpu", pytest.param("cuda", marks=[cuda, pytest.mark.cuda])]


@pytest.mark.parametrize("device", DEVICES)
def test_divisions_are_correctly_rounded_like_numpy(device):
    """The node mean (sum / float32(G)) and line 12's mean (2c - n) / float32(n) for every divisor up to 300.

    On CUDA, dividing by a Python number multiplies by its reciprocal and misses the last bit (for G = 3 on a
    third of the elements): ``true_divide`` must not."""
    rng = np.random.default_rng(5)
    sums = rng.standard_normal(4096).astype(np.float32) * np.float32(7)
    for divisor in range(1, 301):
        got = _as_np(tb.true_divide(torch.from_numpy(sums).to(device), float(divisor)))
        np.testing.assert_array_equal(got, sums / np.float32(divisor))
        counts = np.arange(divisor + 1)
        got = _as_np(tb.mean_of_signs(torch.from_numpy(counts).to(device), divisor))
        np.testing.assert_array_equal(got, algorithm1.mean_of_signs(counts, divisor))


@pytest.mark.parametrize("gpus", [1, 3])
def test_fused_in_place_stages_equal_the_plain_steps_across_pieces(gpus):
    """The optimizer's piecewise, in-place worker and server stages give the bits of worker_step / server_step
    and pack_signs (and the node mean of comm), over a length that crosses piece boundaries at an offset."""
    from birder_ref.draws import stream_key

    n, start, generator = 2 * tb.PIECE + 24, 8 * 1001, torch.Generator().manual_seed(1)
    rows = torch.randn(gpus, n, generator=generator) * torch.logspace(-6, 2, n)
    m, b_hat = torch.randn(n, generator=generator) * 0.01, torch.rand(n, generator=generator) * 0.02
    e = torch.rand(n, generator=generator) * 2 - 1
    index = torch.arange(start, start + n)
    grad = comm.rank_order_sum(rows) / torch.tensor(float(gpus)) if gpus > 1 else rows[0]
    u, new = tb.worker_step(tb.WorkerState(m, b_hat, b_hat, e), grad, 0.9, 1e-8, tb.uniforms(4, 2, 1, index), 2)
    m2, b2, e2 = m.clone(), b_hat.clone(), e.clone()
    packed = tb.worker_step_packed_(m2, b2, e2, rows, 0.9, 1e-8, stream_key(4, 2, 1), start)
    assert torch.equal(packed, tb.pack_signs(u)) and torch.equal(m2, new.m) and torch.equal(b2, new.b_hat)
    assert torch.equal(e2, new.e)
    strided = [torch.zeros(2 * n)[::2].copy_(v) for v in (m, b_hat, e)]  # not contiguous: the torch form (CUDA's)
    assert torch.equal(tb.worker_step_packed_(*strided, rows, 0.9, 1e-8, stream_key(4, 2, 1), start), packed)
    assert all(torch.equal(got, want) for got, want in zip(strided, (new.m, new.b_hat, new.e), strict=True))
    received = torch.stack([packed, tb.pack_signs(-u), packed])  # three workers' packed signs
    server_error = torch.rand(n, generator=generator) - 0.5
    u_bar, new_error = tb.server_step(tb.mean_of_signs(tb.count_plus(received), 3), server_error,
                                      tb.uniforms(4, 2, tb.SERVER_STREAM, index))
    fused_error = server_error.clone()
    fused = tb.server_step_packed_(received, fused_error, stream_key(4, 2, tb.SERVER_STREAM), start, n_workers=3)
    assert torch.equal(fused, tb.pack_signs(u_bar)) and torch.equal(fused_error, new_error)
    mean = tb.mean_of_signs(tb.count_plus(received), 3)
    for error in (server_error.clone(), torch.zeros(2 * n)[::2].copy_(server_error)):  # NumPy form; torch form
        again = tb.server_step_packed_(mean, error, stream_key(4, 2, tb.SERVER_STREAM), start)
        assert torch.equal(again, fused) and torch.equal(error, new_error)
    strided = torch.zeros(2 * n)[::2].copy_(server_error)
    assert torch.equal(tb.server_step_packed_(received, strided, stream_key(4, 2, tb.SERVER_STREAM), start,
                                              n_workers=3), fused) and torch.equal(strided, new_error)
    assert torch.equal(tb.unpack_range(fused, 13, 1000, torch.float32), u_bar[13:1013])


def test_gpu_sized_pieces_hash_whole_blocks_in_one_launch(monkeypatch):
    """A GPU's pieces span many aligned blocks of 2**16 indices, whose hash inputs are formed in one broadcast XOR
    (``_block_constants_torch``): with CPU pieces made that large, the torch (CUDA) form gives ``uniforms``' bits
    with a partial block at either end, with whole blocks only, and up to index 2**32 - 1; and so do the fused
    worker and server stages' torch forms (strided state) across pieces of that size."""
    from birder_ref.draws import stream_key

    monkeypatch.setattr(tb, "PIECE", 3 * 2**16)
    key = stream_key(9, 3, 2)
    for start, n in ((8 * 1001, 3 * 2**16), (0, 2**17), (2**32 - 2**17 - 40, 2**17 + 40)):
        ws = dataclasses.replace(tb._Workspace.make(n, torch.device("cpu")), cpu=False)
        expected = tb.uniforms(9, 3, 2, torch.arange(start, start + n, dtype=torch.int64))
        assert torch.equal(tb._grid_into(key, start, n, ws) * 2.0**-24, expected), start
    n, start, generator = 4 * 2**16, 8 * 1001, torch.Generator().manual_seed(3)
    grad = torch.randn(n, generator=generator)
    state = [torch.randn(n, generator=generator) * 0.01, torch.rand(n, generator=generator), torch.zeros(n)]
    strided = [torch.zeros(2 * n)[::2].copy_(v) for v in state]
    packed = tb.worker_step_packed_(*state, grad, 0.9, 1e-8, key, start)
    assert torch.equal(tb.worker_step_packed_(*strided, grad, 0.9, 1e-8, key, start), packed)
    assert all(torch.equal(a, b) for a, b in zip(state, strided, strict=True))
    received = torch.stack([packed, packed.flip(0)])
    error, strided_error = torch.zeros(n), torch.zeros(2 * n)[::2]
    assert torch.equal(tb.server_step_packed_(received, error, key, start, n_workers=2),
                       tb.server_step_packed_(received, strided_error, key, start, n_workers=2))
    assert torch.equal(error, strided_error)


def test_fused_draws_and_packing_equal_the_reference_forms():
    """The in-place draws (k kept unscaled; NumPy uint32 on CPU, torch int32 elsewhere) are ``uniforms``'
    k / 2**24 bit for bit, also for indices at and past 2**31 and across blocks of 2**16, and the multiply-based
    packing equals ``pack_signs`` on arbitrary masks."""
    from birder_ref.draws import stream_key

    key = stream_key(9, 3, 2)
    ws = tb._Workspace.make(tb.PIECE, torch.device("cpu"))
    for start, n in ((0, tb.PIECE), (77_777, 1000), (tb.PIECE - 300, tb.PIECE), (2**31 - 500, 1000),
                     (2**32 - 1000, 1000)):  # one spans two aligned blocks of 2**16 indices
        expected = tb.uniforms(9, 3, 2, torch.arange(start, start + n, dtype=torch.int64))
        for form in (ws, dataclasses.replace(ws, cpu=False)):  # CPU's NumPy form; CUDA's torch one, run on CPU
            assert torch.equal(tb._grid_into(key, start, n, form) * 2.0**-24, expected), (start, form.cpu)
    plus = torch.rand(8 * 4096, generator=torch.Generator().manual_seed(2)) < 0.5
    plus[:64] = torch.tensor([True] * 8 + [False] * 8 + [True, False] * 24)  # all-ones and all-zero bytes
    out = torch.empty(4096, dtype=torch.uint8)
    tb._pack_into(plus, ws, out)
    assert torch.equal(out, tb.pack_signs(plus.to(torch.float32) * 2 - 1))


def test_fused_server_stage_decides_like_the_clipped_quantizer_at_the_extremes():
    """The fused stages compare k < fl(z + 1) * 2**23 without clipping z: at and just past +-1, at +-inf, a
    float32 overflow (z + 1 then times 2**23) and NaN, the bits and the error are the plain step's."""
    from birder_ref.draws import stream_key

    edge = [1.0, -1.0, 1.0 + 2**-23, -1.0 - 2**-23, 1.0 - 2**-24, -1.0 + 2**-24, 3e38, -3e38, float("inf"),
            float("-inf"), float("nan"), 0.0, -0.0, 5.0, -5.0, 2.0**-30]
    mean = torch.tensor(edge * 64, dtype=torch.float32)  # 1024 elements, several draws per value
    error = torch.zeros_like(mean)
    u_bar, new_error = tb.server_step(mean, error, tb.uniforms(6, 1, tb.SERVER_STREAM, torch.arange(mean.numel())))
    for fused_error in (error.clone(), torch.zeros(2 * mean.numel())[::2]):  # NumPy form; torch form (CUDA's)
        fused = tb.server_step_packed_(mean, fused_error, stream_key(6, 1, tb.SERVER_STREAM), 0)
        assert torch.equal(fused, tb.pack_signs(u_bar))
        torch.testing.assert_close(fused_error, new_error, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("n_workers", [2, 300])
def test_fused_server_stage_counts_any_number_of_workers(n_workers):
    """Line 12's mean from the unpacked counts (uint8 up to 255 workers, wider beyond) equals mean_of_signs."""
    from birder_ref.draws import stream_key

    generator = torch.Generator().manual_seed(n_workers)
    received = torch.randint(0, 256, (n_workers, 128), dtype=torch.uint8, generator=generator)
    received[:, 0] = 255  # every worker +1: a count of n_workers
    error = torch.rand(1024, generator=generator) - 0.5
    u_bar, new_error = tb.server_step(tb.mean_of_signs(tb.count_plus(received), n_workers), error,
                                      tb.uniforms(3, 5, tb.SERVER_STREAM, torch.arange(1024)))
    fused = tb.server_step_packed_(received, error, stream_key(3, 5, tb.SERVER_STREAM), 0, n_workers=n_workers)
    assert torch.equal(fused, tb.pack_signs(u_bar)) and torch.equal(error, new_error)
