"""Baselines' identities: 1-bit Adam's compressed all-reduce as DeepSpeed implements it (``birder_ref.onebit_adam``).

Judged by its properties, not by re-running it: each worker sends s_i sign(c_i) with c_i = buffer_i + e_i,
s_i = ||c_i||_2 / sqrt(d) and sign(0) = +1, keeping the rest as its new error; each server chunk j compresses
z_j = mean_i of the received chunks + its error the same way; every rank receives the concatenated chunks.
Hence the two-level error-feedback identity out = mean_i c_i - mean_i e_i' + e_server - e_server' (flattened).
"""

from __future__ import annotations

import importlib.util

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict

SHAPES = ((2, 64), (4, 96), (3, 48))
ITERATIONS = 5
REL_TOL = 2.0**-18  # float32 sums over up to 96 elements, norms accumulated in float32 or wider


def _one_bit(c: np.ndarray) -> np.ndarray:
    """What the compressor must send for c: ||c||_2 / sqrt(numel) times sign(c), sign(0) = +1 (float64)."""
    c = c.astype(np.float64)
    return np.sqrt(np.dot(c, c) / c.size) * np.where(c >= 0, 1.0, -1.0)


def _close(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    return bool(np.all(np.abs(a - b) <= REL_TOL * (scale + 1e-30)))


@check(
    "onebit_adam_identities",
    "1-bit Adam (baseline): worker and server send ||c||/sqrt(numel) sign(c) and keep c minus it as error; every "
    "rank receives the same vector; out = mean_i c_i - mean_i e_i' + e_s - e_s'",
    f"birder_ref.onebit_adam.compressed_allreduce on {len(SHAPES)} shapes x {ITERATIONS} chained calls, float64 "
    "recomputation, relative tolerance 2^-18",
    needs=(),
)
def onebit_adam(ctx: Context) -> Outcome:
    if not ctx.target.is_reference:
        return Outcome("n/a", "judges birder_ref's baseline: run without --impl")
    if importlib.util.find_spec("birder_ref.onebit_adam") is None:
        return Outcome("n/a", "birder_ref.onebit_adam is not present")
    from birder_ref.onebit_adam import compressed_allreduce

    wrong, calls = [], 0
    for N, d in SHAPES:
        rng = np.random.default_rng(N * d)
        worker_error = np.zeros((N, d), np.float32)
        server_error = np.zeros((N, d // N), np.float32)
        for it in range(ITERATIONS):
            buffers = (rng.standard_normal((N, d)) * rng.uniform(0.1, 10, (N, 1))).astype(np.float32)
            buffers[0, :3] = 0.0  # sign(0) = +1 must hold
            out, new_worker, new_server = (np.asarray(a) for a in compressed_allreduce(buffers, worker_error,
                                                                                     server_error))
            out = out.reshape(-1) if out.ndim == 1 else out
            if out.ndim == 2:
                if not all(np.array_equal(row, out[0]) for row in out):
                    wrong.append(f"N={N}: ranks received different vectors")
                out = out[0]
            c = buffers.astype(np.float64) + worker_error
            sent = c - new_worker
            scale = float(np.abs(c).max())
            if not all(_close(sent[i], _one_bit(c[i]), scale) for i in range(N)):
                wrong.append(f"N={N}, call {it}: a worker did not send ||c||/sqrt(d) sign(c)")
            chunk = d // N
            for j in range(N):
                cols = slice(j * chunk, (j + 1) * chunk)
                z = sent[:, cols].mean(axis=0) + server_error[j]
                if not (_close(out[cols], _one_bit(z), scale) and _close(new_server[j], z - out[cols], scale)):
                    wrong.append(f"N={N}, call {it}: server chunk {j} breaks its compression or error")
            telescoped = c.mean(axis=0) - new_worker.astype(np.float64).mean(axis=0) + (
                server_error.astype(np.float64) - new_server).reshape(-1)
            if not _close(out, telescoped, scale):
                wrong.append(f"N={N}, call {it}: out != mean c - mean e' + e_s - e_s'")
            worker_error, server_error = new_worker.astype(np.float32), new_server.astype(np.float32)
            calls += 1
    return verdict(not wrong, f"{calls} chained calls hold every identity" if not wrong else "; ".join(wrong[:3]),
                   f"{len(wrong)} violations")
