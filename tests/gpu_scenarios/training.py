"""Multi-rank checks of ``Birder`` in the habits of real training loops, each against ``birder_ref`` bit for bit.

Every function here is the body of one rank (``launch.launch`` runs it; the process group is initialised). For
each case, every rank also computes its local gradient on a plain copy of the model (no DDP) and applies to it
what the training loop applies to ``.grad`` (clipping, unscaling, accumulation); rank 0 gathers those, runs
``birder_ref.algorithm1.step`` on the workers' gradients with the same draws and line 16 of
``birder_ref.update``, and counts the parameter elements that differ on any rank. No tolerance anywhere.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from birder_ref import algorithm1, schemes
from birder_ref.draws import server_uniforms, worker_uniforms
from birder_ref.update import apply_update
from gpu_validation import comm
from gpu_validation.hook import BirderState, birder_hook
from gpu_validation.optimizer import Birder
from gpu_validation.validate import batch, make_model

CASES = ("plain", "grad_scaler", "grad_scaler_unscale", "clip", "accumulate", "frozen")
LR, DECAY, SEED = 0.01, 1e-3, 3


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float() for t in tensors])


def _gather(x: torch.Tensor) -> np.ndarray:
    world = dist.get_world_size()
    return comm.all_gather_rows(x.contiguous(), dist.group.WORLD, world).numpy()


def _local_grad(model: nn.Module, trainable: list[int], case: str, step: int, rank: int) -> torch.Tensor:
    """This rank's gradient as the optimizer must see it: on a plain copy of the model, same transformations."""
    clone = make_model(0)
    clone.load_state_dict(model.state_dict())
    params = [p for i, p in enumerate(clone.parameters()) if i in trainable]
    micro = 2 if case == "accumulate" else 1
    for k in range(micro):
        x, y = batch(SEED, step * 10 + k, rank)
        nn.functional.mse_loss(clone(x), y).backward()
    if case == "clip":
        nn.utils.clip_grad_norm_(params, 0.05)
    return _flat(p.grad for p in params)


def _train_step(ddp: nn.Module, opt: Birder, scaler, case: str, step: int, rank: int, poison: bool = False) -> None:
    params = [p for p in ddp.module.parameters() if p.requires_grad]
    micro = 2 if case == "accumulate" else 1
    for k in range(micro):  # "accumulate": two backward passes without no_sync()
        x, y = batch(SEED, step * 10 + k, rank)
        if poison:
            x[0, 0] = float("inf")
        loss = nn.functional.mse_loss(ddp(x), y)
        (scaler.scale(loss) if scaler is not None else loss).backward()
    if case == "clip":
        nn.utils.clip_grad_norm_(params, 0.05)
    if scaler is not None:
        if case == "grad_scaler_unscale":
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    opt.zero_grad()


def _setup(case: str, scheme: str, gpus_per_node: int, bucket_cap_mb: float = 0.0003, **options):
    model = make_model(0)
    trainable = list(range(len(list(model.parameters()))))
    if case == "frozen":
        for p in model[0].parameters():
            p.requires_grad_(False)
        trainable = trainable[2:]
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    options.setdefault("overlap", True)  # the habits run on the overlapped path (and its fallback)
    opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, scheme=scheme, gpus_per_node=gpus_per_node, **options)
    return model, trainable, ddp, opt


def exactness(scheme: str, gpus_per_node: int, steps: int, rank: int) -> dict:
    """Every case of ``CASES`` for ``steps`` steps; returns (on rank 0) the mismatches per case, and facts."""
    world = dist.get_world_size()
    n_nodes = world // gpus_per_node if scheme == "hierarchical" else world
    out: dict = {}
    for case in CASES:
        model, trainable, ddp, opt = _setup(case, scheme, gpus_per_node)
        scaler = torch.amp.GradScaler("cpu") if case.startswith("grad_scaler") else None
        x = _flat(p for i, p in enumerate(model.parameters()) if i in trainable).numpy()
        ref = algorithm1.init(opt.topology.n_workers, opt.dim)
        mismatched = 0
        for step in range(1, steps + 1):
            grads = _gather(_local_grad(model, trainable, case, step, rank))
            _train_step(ddp, opt, scaler, case, step, rank)
            params = _gather(_flat(p for i, p in enumerate(model.parameters()) if i in trainable))
            if rank == 0:
                by_node = grads.reshape(n_nodes, world // n_nodes, -1)
                worker = schemes.worker_gradients(scheme, by_node)
                t, d = ref.t + 1, opt.dim
                u_bar, ref = algorithm1.step(ref, worker, opt.beta, opt.eps, worker_uniforms(SEED, t, ref.n_workers, d),
                                             server_uniforms(SEED, t, d))
                x = apply_update(x, u_bar, LR, DECAY)
                mismatched += int((params != x).sum())
        frozen_moved = int(not torch.equal(model[0].weight, make_model(0)[0].weight)) if case == "frozen" else 0
        out[case] = {"mismatched": mismatched + frozen_moved, "t": opt.t, "dim": opt.dim,
                     "overlapped_steps": opt.overlapped_steps, "overlap_fallbacks": opt.overlap_fallbacks,
                     "state_elements": opt.m.numel() * 3 + opt.server_error.numel()}
    out["overflow"] = _scaler_overflow(scheme, gpus_per_node, rank)
    out["node_sum_overflow"] = _node_sum_overflow(scheme, gpus_per_node, rank)
    out["skip_limit"] = _skip_limit(scheme, gpus_per_node, rank)
    return out if rank == 0 else {}


def _scaler_overflow(scheme: str, gpus_per_node: int, rank: int) -> dict:
    """An overflow on rank 1 at step 2: every rank skips, and every rank's GradScaler backs off."""
    model, trainable, ddp, opt = _setup("grad_scaler", scheme, gpus_per_node)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    scales = []
    for step in range(1, 4):
        _train_step(ddp, opt, scaler, "grad_scaler", step, rank, poison=(step == 2 and rank == 1))
        scales.append(scaler.get_scale())
    all_scales = _gather(torch.tensor(scales)).tolist()
    return {"scales": all_scales, "t": opt.t, "skipped": opt.skipped_steps, "bad_ranks": opt.last_skipped_ranks}


def _node_sum_overflow(scheme: str, gpus_per_node: int, rank: int) -> dict:
    """Node 0's ranks have finite gradients of 3e38 whose node sum overflows: every rank skips, naming them."""
    model = nn.Linear(64, 1, bias=False)  # 64 elements: both ranks of a node hold a shard of them
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=LR, seed=SEED, scheme=scheme, gpus_per_node=gpus_per_node)
    huge = rank < gpus_per_node and scheme == "hierarchical"
    x = torch.full((1, 64), 3.0e38 if huge else 1.0)
    ddp(x).sum().backward()  # d/dw of w . x is x: finite everywhere
    finite = bool(torch.isfinite(model.weight.grad).all())
    opt.step()
    return {"finite_gradients": finite, "t": opt.t, "skipped": opt.skipped_steps, "bad_ranks": opt.last_skipped_ranks}


def _skip_limit(scheme: str, gpus_per_node: int, rank: int) -> dict:
    """Rank 1 has a NaN gradient every step: with max_consecutive_skips=3 every rank raises at step 3."""
    _, _, ddp, opt = _setup("plain", scheme, gpus_per_node, max_consecutive_skips=3)
    for step in range(1, 6):
        try:
            _train_step(ddp, opt, None, "plain", step, rank, poison=(rank == 1))
        except RuntimeError as error:
            return {"raised_at": step, "message": str(error), "skipped": opt.skipped_steps}
    return {"raised_at": None, "skipped": opt.skipped_steps}


def exactness_and_checkpoint(scheme: str, gpus_per_node: int, steps: int, folder: str, rank: int) -> dict:
    """``exactness`` then ``checkpoint`` in one launch (one spawn of the ranks for both)."""
    result = exactness(scheme, gpus_per_node, steps, rank)
    result["checkpoint"] = checkpoint(scheme, gpus_per_node, folder, rank)
    return result


def checkpoint(scheme: str, gpus_per_node: int, folder: str, rank: int) -> dict:
    """Rank 0 saves ``state_dict()`` at step 3; fresh models on every rank load that one file and must end
    bit-identical to the uninterrupted run at step 6, and so must a resume from per-rank sharded files."""
    steps, at = 6, 3
    model, _, ddp, opt = _setup("plain", scheme, gpus_per_node, bucket_cap_mb=25)
    full_path, shard_path = os.path.join(folder, "full.pt"), os.path.join(folder, f"shard{rank}.pt")
    started = time.monotonic()
    for step in range(1, steps + 1):
        _train_step(ddp, opt, None, "plain", step, rank)
        if step == at:
            full = opt.state_dict()  # collective: every rank calls it
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": full}, full_path)
            torch.save({"model": model.state_dict(), "optimizer": opt.sharded_state_dict()}, shard_path)
            dist.barrier()
    save_s = time.monotonic() - started
    end = _flat(model.parameters())
    end_state = opt.state_dict()["state"]
    identical = {}
    for form, path in (("full", full_path), ("sharded", shard_path)):
        # different starting weights (make_model(100 + rank)): the checkpoint must overwrite everything
        fresh = make_model(100 + rank)
        saved = torch.load(path, weights_only=True)
        fresh.load_state_dict(saved["model"])
        fresh_ddp = nn.parallel.DistributedDataParallel(fresh, bucket_cap_mb=0.0003)  # another bucket layout too
        fresh_opt = Birder(fresh_ddp, lr=LR, weight_decay=DECAY, seed=SEED, scheme=scheme, gpus_per_node=gpus_per_node)
        fresh_opt.load_state_dict(saved["optimizer"])
        for step in range(at + 1, steps + 1):
            _train_step(fresh_ddp, fresh_opt, None, "plain", step, rank)
        after = fresh_opt.state_dict()["state"]
        same = torch.equal(_flat(fresh.parameters()), end) and after["t"] == end_state["t"] and all(
            torch.equal(after[k], end_state[k]) for k in ("m", "b_hat", "e", "server_error"))
        identical[form] = bool(_gather(torch.tensor([float(same)])).all())
    return {"identical": identical, "t": opt.t, "seconds": round(save_s, 2)} if rank == 0 else {}


def reshard(folder: str, rank: int) -> dict:
    """The full checkpoint saved by 2 x 2 ranks (``checkpoint``), loaded by 2 x 1 ranks: the same two workers on
    another layout, so it must load with every piece intact; a 1 x 2 layout (one worker) must refuse it."""
    saved = torch.load(os.path.join(folder, "full.pt"), weights_only=True)
    model = make_model(0)
    model.load_state_dict(saved["model"])
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, scheme="hierarchical", gpus_per_node=1)
    opt.load_state_dict(saved["optimizer"])
    back = opt.state_dict()["state"]
    intact = all(torch.equal(back[k], saved["optimizer"]["state"][k]) for k in ("m", "b_hat", "e", "server_error"))
    _train_step(ddp, opt, None, "plain", 4, rank)
    one_worker = Birder(nn.parallel.DistributedDataParallel(make_model(0)), lr=LR, seed=SEED, gpus_per_node=2)
    try:
        one_worker.load_state_dict(saved["optimizer"])
        refusal = None
    except ValueError as error:
        refusal = str(error)
    return {"intact": intact, "t": opt.t, "refusal": refusal} if rank == 0 else {}


def stall(scheme: str, gpus_per_node: int, stalled_rank: int, phase: str, rank: int) -> dict:
    """``stalled_rank`` hangs inside Birder's ``phase`` collective at step 2; the others must raise naming it."""
    model, _, ddp, opt = _setup("plain", scheme, gpus_per_node)
    if rank == stalled_rank:
        opt._fault_stall = (2, phase)
    started = time.monotonic()
    for step in range(1, 4):
        if step == 2:
            started = time.monotonic()
        try:
            _train_step(ddp, opt, None, "plain", step, rank)
        except RuntimeError as error:
            raise RuntimeError(f"after {time.monotonic() - started:.1f} s: {error}") from None
    return {"finished": True}


def overlap_under_ddp_options(rank: int) -> dict:
    """One node of all ranks: for several DDP options, 4 steps with the exchange overlapped and without; returns
    (on rank 0) per option whether the parameters agree bit for bit, and how many steps overlapped."""
    out = {}
    for name, options in (("buckets", {"bucket_cap_mb": 0.0003}), ("bucket_view", {"gradient_as_bucket_view": True,
                          "bucket_cap_mb": 0.0003}), ("static_graph", {"static_graph": True, "bucket_cap_mb": 0.0003}),
                          ("unused", {"find_unused_parameters": True, "bucket_cap_mb": 0.0003})):
        finals, overlapped = [], 0
        for overlap in (True, False):
            model = make_model(0)
            ddp = nn.parallel.DistributedDataParallel(model, **options)
            opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, gpus_per_node=dist.get_world_size(),
                         overlap=overlap)
            for step in range(1, 5):
                x, y = batch(SEED, step, rank)
                nn.functional.mse_loss(ddp(x), y).backward()
                opt.step()
                opt.zero_grad()
            finals.append(_gather(_flat(model.parameters())))
            overlapped += opt.overlapped_steps
        out[name] = {"equal": bool(np.array_equal(*finals)), "overlapped_steps": overlapped}
    return out if rank == 0 else {}


def phase_trace(scheme: str, gpus_per_node: int, rank: int) -> dict:
    """What this rank ran, phase by phase (``comm.record_phases``), in one training step through the DDP hook
    (``birder_hook``, bucket by bucket) and one through the ``Birder`` optimizer, without and with its
    overlapped exchange; ``tests/test_gpu_phases.py`` compares each with ``birder_ref.schedules.schedule``."""
    world = dist.get_world_size()
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0003)
    topology = comm.make_topology(scheme, world // gpus_per_node, gpus_per_node)
    ddp.register_comm_hook(BirderState(model.parameters(), topology, seed=SEED), birder_hook)
    x, y = batch(SEED, 1, rank)
    with comm.record_phases() as records:
        nn.functional.mse_loss(ddp(x), y).backward()
    out = {"hook": records}
    for overlap in (False, True):
        _, _, ddp, opt = _setup("plain", scheme, gpus_per_node, overlap=overlap)
        _train_step(ddp, opt, None, "plain", 1, rank)
        before = opt.overlapped_steps
        with comm.record_phases() as records:
            _train_step(ddp, opt, None, "plain", 2, rank)
        out[f"optimizer, overlap={overlap}"] = records
        out[f"overlapped, overlap={overlap}"] = opt.overlapped_steps > before
    return out
