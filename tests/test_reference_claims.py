"""Claims about birder_ref alone, judged here rather than by `birder check`: the check suite judges any
implementation through its interface and knows none of them, so what only the reference has (its schedules as
data, its 1-bit Adam baseline) is tested against birder_ref directly."""

import numpy as np
import pytest

from birder_ref.onebit_adam import compressed_allreduce
from birder_ref.schedules import Layout, padded_dim, schedule

SCHEDULE_DIM = 1_000_003


@pytest.mark.parametrize("n_nodes, gpus", [(2, 2), (4, 8), (3, 4), (8, 8), (16, 8)])
def test_the_schedules_cross_nodes_with_section4s_totals(n_nodes, gpus):
    """Section 4: in one step the hierarchical scheme sends 2(n-1)P/32 bytes between nodes (all GPUs together),
    a plain All-Gather of the 1-bit vectors m^2 n(n-1)P/32; summed from the schedules' own messages."""
    layout = Layout(n_nodes, gpus)
    P = 4 * padded_dim(SCHEDULE_DIM, layout.n_ranks)
    totals = [sum(msg.nbytes for phase in schedule(scheme, layout, SCHEDULE_DIM).phases
                  for messages in phase.rounds() for msg in messages
                  if layout.node_of(msg.src) != layout.node_of(msg.dst))
              for scheme in ("hierarchical", "allgather")]
    assert totals == [2 * (n_nodes - 1) * P // 32, gpus * gpus * n_nodes * (n_nodes - 1) * P // 32]


REL_TOL = 2.0**-18  # float32 sums over up to 96 elements, norms accumulated in float32 or wider


def _one_bit(c: np.ndarray) -> np.ndarray:
    """What the compressor must send for c: ||c||_2 / sqrt(numel) times sign(c), sign(0) = +1 (float64)."""
    c = c.astype(np.float64)
    return np.sqrt(np.dot(c, c) / c.size) * np.where(c >= 0, 1.0, -1.0)


def _close(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    return bool(np.all(np.abs(a - b) <= REL_TOL * (scale + 1e-30)))


@pytest.mark.parametrize("N, d", [(2, 64), (4, 96), (3, 48)])
def test_onebit_adam_compressed_allreduce_keeps_its_identities_over_chained_calls(N, d):
    """1-bit Adam as DeepSpeed implements it, recomputed in float64 (not re-run): each worker sends
    ||c_i|| / sqrt(d) sign(c_i) with c_i = buffer_i + e_i and keeps the rest as its error; server chunk j
    compresses the mean of the received chunks plus its error the same way; every rank receives the same vector;
    hence out = mean_i c_i - mean_i e_i' + e_s - e_s'."""
    rng = np.random.default_rng(N * d)
    worker_error, server_error = np.zeros((N, d), np.float32), np.zeros((N, d // N), np.float32)
    for call in range(5):
        buffers = (rng.standard_normal((N, d)) * rng.uniform(0.1, 10, (N, 1))).astype(np.float32)
        buffers[0, :3] = 0.0  # sign(0) = +1 must hold
        out, new_worker, new_server = (np.asarray(a) for a in compressed_allreduce(buffers, worker_error,
                                                                                 server_error))
        if out.ndim == 2:
            assert all(np.array_equal(row, out[0]) for row in out), f"call {call}: ranks received different vectors"
            out = out[0]
        c = buffers.astype(np.float64) + worker_error
        sent = c - new_worker
        scale = float(np.abs(c).max())
        for i in range(N):
            assert _close(sent[i], _one_bit(c[i]), scale), f"call {call}: worker {i} did not send ||c||/sqrt(d) sign(c)"
        chunk = d // N
        for j in range(N):
            cols = slice(j * chunk, (j + 1) * chunk)
            z = sent[:, cols].mean(axis=0) + server_error[j]
            assert _close(out[cols], _one_bit(z), scale), f"call {call}: server chunk {j} breaks its compression"
            assert _close(new_server[j], z - out[cols], scale), f"call {call}: server chunk {j} breaks its error"
        telescoped = c.mean(axis=0) - new_worker.astype(np.float64).mean(axis=0) + (
            server_error.astype(np.float64) - new_server).reshape(-1)
        assert _close(out, telescoped, scale), f"call {call}: out != mean c - mean e' + e_s - e_s'"
        worker_error, server_error = new_worker.astype(np.float32), new_server.astype(np.float32)
