"""Multi-rank checks of what ``Birder`` refuses or survives: ranks drifting apart, a failed peer, a rank-0-only
``state_dict()``. Each function is the body of one rank (``launch.launch`` runs it in an initialised process
group); the tests in ``tests/test_gpu_birder_optimizer.py`` read what each rank reported or raised.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

from gpu_validation.optimizer import Birder
from gpu_validation.validate import batch, make_model

SEED = 3


def _step(ddp: nn.Module, opt: Birder, step: int, rank: int) -> None:
    x, y = batch(SEED, step, rank)
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    opt.zero_grad()


def _setup(gpus_per_node: int = 1):
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0003)
    return model, ddp, Birder(ddp, lr=0.01, seed=SEED, gpus_per_node=gpus_per_node)


def drift(rank: int) -> dict:
    """After step 1, each rank moves the last layer by its own local ``.grad`` (a hand-written SGD step, which no
    optimizer hook sees): step 2 must raise on every rank naming that layer's parameters."""
    model, ddp, opt = _setup()
    _step(ddp, opt, 1, rank)
    x, y = batch(SEED, 2, rank)
    nn.functional.mse_loss(ddp(x), y).backward()
    with torch.no_grad():
        for p in model[-1].parameters():
            p -= 0.1 * p.grad
    opt.zero_grad()
    try:
        _step(ddp, opt, 3, rank)
    except RuntimeError as error:
        return {"raised": str(error)}
    return {"raised": None}


def peer_fault(kind: str, faulty: int, rank: int) -> dict:
    """Rank ``faulty`` fails before the forward pass of step 3: it raises ("raise"), exits without a word
    ("exit"), or sleeps far past the timeout ("stall"). The others must raise Birder's own error naming it.
    (Step 3: DDP's own bucket rebuild, a collective of DDP's, runs in step 2's forward.)"""
    _, ddp, opt = _setup()
    for step in (1, 2):
        _step(ddp, opt, step, rank)
    if rank == faulty:
        if kind == "raise":
            raise ValueError("injected fault: this rank raised before its forward pass")
        if kind == "exit":
            os._exit(3)
        time.sleep(600)  # "stall": the launcher kills it
    started = time.monotonic()
    try:
        _step(ddp, opt, 3, rank)
    except RuntimeError as error:
        raise RuntimeError(f"after {time.monotonic() - started:.1f} s: {error}") from None
    return {"finished": True}


def rank0_state_dict(rank: int) -> dict:
    """``if rank == 0: opt.state_dict()`` after step 2 while the other ranks go on training: every rank must raise
    at once (well within the timeout) with one line saying that state_dict() is collective."""
    _, ddp, opt = _setup()
    for step in (1, 2):  # DDP rebuilds its buckets in step 2's forward (a collective of its own)
        _step(ddp, opt, step, rank)
    started = time.monotonic()
    try:
        if rank == 0:
            opt.state_dict()
        _step(ddp, opt, 3, rank)
    except RuntimeError as error:
        raise RuntimeError(f"after {time.monotonic() - started:.1f} s: {error}") from None
    return {"finished": True}
