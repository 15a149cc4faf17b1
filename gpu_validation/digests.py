"""Committed per-step digests of Birder's update, so that a changed kernel is caught on any machine.

Each run feeds Algorithm 1 synthetic gradients that NumPy computes exactly from the counter-based hash (so
they are the same bits everywhere, unlike a model's backward pass) and records, per step, the SHA-256 of the
packed u_bar bits, and at the end the SHA-256 of the whole state. ``torch_digests`` computes them with the torch
kernels (``torch_birder``: draws, quantizer, pack, count, worker and server steps) on any device,
``reference_digests`` with ``birder_ref.algorithm1``; both must equal ``digests.json``.

Regenerate (only after a deliberate change of the numerics): ``python -m gpu_validation.digests --write``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from birder_ref import algorithm1
from birder_ref.draws import server_uniforms, uniforms, worker_uniforms
from gpu_validation import torch_birder as tb

PATH = Path(__file__).with_name("digests.json")
DATA_SEED_OFFSET = 0x5EED  # gradients use seed + this, so they are independent of the quantizer's draws

RUNS = (
    {"name": "four-workers", "n_workers": 4, "dim": 1024, "steps": 12, "seed": 0, "beta": 0.95, "eps": 1e-8,
     "T0": None},
    {"name": "three-workers-amsgrad", "n_workers": 3, "dim": 520, "steps": 10, "seed": 7, "beta": 0.9,
     "eps": 1e-8, "T0": 4},
    {"name": "one-worker", "n_workers": 1, "dim": 64, "steps": 8, "seed": 2**32 - 1, "beta": 0.5, "eps": 1e-3,
     "T0": None},
)


def synthetic_gradients(run: dict, step: int) -> np.ndarray:
    """(n_workers, dim) float32 gradients: a shared drift plus per-worker noise, exact on the 2**-24 grid."""
    seed, d = (run["seed"] + DATA_SEED_OFFSET) % 2**32, run["dim"]
    drift = uniforms(seed, 0, 2**31 - 2, d) - np.float32(0.5)
    noise = np.stack([uniforms(seed, step, i, d) for i in range(run["n_workers"])]) - np.float32(0.5)
    return (drift * np.float32(0.25) + noise * np.float32(step % 3 + 1)).astype(np.float32)


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()[:16]


def _update_digest(u_bar: np.ndarray) -> str:
    return _digest(np.packbits(u_bar > 0))


def reference_digests(run: dict) -> dict:
    """The digests from ``birder_ref.algorithm1.step``."""
    n, d = run["n_workers"], run["dim"]
    state, updates = algorithm1.init(n, d), []
    for t in range(1, run["steps"] + 1):
        u_bar, state = algorithm1.step(state, synthetic_gradients(run, t), run["beta"], run["eps"],
                                       worker_uniforms(run["seed"], t, n, d), server_uniforms(run["seed"], t, d),
                                       run["T0"])
        updates.append(_update_digest(u_bar))
    return {"update_digests": updates,
            "state_digest": _digest(state.m, state.b_hat, state.b, state.e, state.server_e)}


def torch_digests(run: dict, device: str | torch.device = "cpu") -> dict:
    """The digests from the torch kernels on ``device``: workers vectorised, signs packed and counted."""
    n, d = run["n_workers"], run["dim"]
    index = torch.arange(d, dtype=torch.int64, device=device)
    worker = tb.WorkerState(*(torch.zeros(n, d, device=device) for _ in range(4)))
    server_error = torch.zeros(d, device=device)
    updates = []
    for t in range(1, run["steps"] + 1):
        grads = torch.from_numpy(synthetic_gradients(run, t)).to(device)
        u_worker = torch.stack([tb.uniforms(run["seed"], t, i, index) for i in range(n)])
        u, worker = tb.worker_step(worker, grads, run["beta"], run["eps"], u_worker, t, run["T0"])
        counts = tb.count_plus(tb.pack_signs(u.reshape(-1)).view(n, -1))
        u_server = tb.uniforms(run["seed"], t, tb.SERVER_STREAM, index)
        u_bar, server_error = tb.server_step(tb.mean_of_signs(counts, n), server_error, u_server)
        updates.append(_digest(tb.pack_signs(u_bar).cpu().numpy()))
    arrays = [x.cpu().numpy() for x in (worker.m, worker.b_hat, worker.b, worker.e, server_error)]
    return {"update_digests": updates, "state_digest": _digest(*arrays)}


def committed() -> dict[str, dict]:
    """``digests.json`` by run name."""
    return {entry["run"]["name"]: entry for entry in json.loads(PATH.read_text())["runs"]}


def write() -> Path:
    """Recompute from the reference, check the torch kernels agree, and write ``digests.json``."""
    runs = []
    for run in RUNS:
        ref = reference_digests(run)
        if torch_digests(run) != ref:
            raise AssertionError(f"torch kernels disagree with birder_ref on run {run['name']}; not writing")
        runs.append({"run": run, **ref})
    PATH.write_text(json.dumps({"what": __doc__.splitlines()[0], "runs": runs}, indent=1) + "\n")
    return PATH


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate digests.json from birder_ref")
    if parser.parse_args().write:
        print(f"wrote {write()}")
    else:
        stale = [r["name"] for r in RUNS if committed()[r["name"]]["update_digests"] != torch_digests(r)[
            "update_digests"]]
        print("digests match" if not stale else f"digests differ for {stale}")
