"""``torch_birder`` behind the interface `birder check` judges, so the suite can judge the torch numerics on CPU or
CUDA: ``birder check --impl gpu_validation.check_adapter`` (device from $BIRDER_CHECK_DEVICE, else CUDA when
available, else CPU). It is also a template for wrapping your own kernels: NumPy in, tensors inside, anything
``numpy.asarray`` can read (after ``.cpu()``) out.

It lives beside the code it adapts: the check suite (``proofs_checks``) knows nothing of it. torch is imported and
the device chosen on the first call, not at import.
"""

from __future__ import annotations

import functools
import os

import numpy as np

FIELDS = ("m", "b_hat", "b", "e")


@functools.cache
def _torch():
    """(torch, gpu_validation.torch_birder, the device), imported and chosen once, on first use."""
    import torch

    from gpu_validation import torch_birder

    device = torch.device(os.environ.get("BIRDER_CHECK_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
    return torch, torch_birder, device


def _tensor(a):
    torch, _, device = _torch()
    return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=device)


def quantize(y, u):
    return _torch()[1].quantize(_tensor(y), _tensor(u))


def init(n_workers: int, dim: int) -> dict:
    torch, _, device = _torch()
    zeros = torch.zeros((n_workers, dim), dtype=torch.float32, device=device)
    state = {name: zeros.clone() for name in FIELDS}
    return {**state, "server_e": torch.zeros(dim, dtype=torch.float32, device=device), "t": 0}


def step(state: dict, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
    """Lines 5-9 with torch_birder.worker_step on every worker, lines 12-13 with its server_step."""
    torch, torch_birder, _ = _torch()
    t = state["t"] + 1
    grads, u_worker = _tensor(grads), _tensor(u_worker)
    outputs, workers = [], []
    for i in range(grads.shape[0]):
        worker = torch_birder.WorkerState(*(state[name][i] for name in FIELDS))
        u, new = torch_birder.worker_step(worker, grads[i], beta, eps, u_worker[i], t, T0)
        outputs.append(u)
        workers.append(new)
    plus = (torch.stack(outputs) > 0).sum(dim=0, dtype=torch.int32)
    mean_u = torch_birder.mean_of_signs(plus, grads.shape[0])
    u_bar, server_e = torch_birder.server_step(mean_u, state["server_e"], _tensor(u_server))
    new_state = {name: torch.stack([getattr(w, name) for w in workers]) for name in FIELDS}
    return u_bar, {**new_state, "server_e": server_e, "t": t}
