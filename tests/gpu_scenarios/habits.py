"""An adopting engineer's habits with ``Birder``: each pattern run on gloo ranks, its outcome classified.

Each pattern is a function of a ``Place`` (this rank, the layout, a folder; the process group is initialised by
``launch.launch``) that trains a small model for a few steps the way a DDP training loop would, and returns what
it saw. ``run`` runs the named patterns one after another and reports, per pattern, either ``works`` (how many
parameter elements differed from ``birder_ref`` fed the gradients each step() saw, over how many steps, and
whether the ranks end with identical parameters) or ``error`` (the exception's type and its one-line message).
``HABITS`` says what each pattern must give; ``observe`` runs them all, ``verdict`` judges one row,
``habits_table`` renders the table docs/habits.md holds; ``tests/test_gpu_habits.py`` checks every row and the table,
and ``python -m tests.gpu_scenarios.habits`` (from the repository root) prints each row's outcome.
(Over 600 lines: one short pattern per row of the table, 77 of them, beside the table that names them, so that a
row's pattern is found by its name in one file.)
"""
from __future__ import annotations

import copy
import math
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from birder_ref import algorithm1
from gpu_validation.optimizer import Birder
from gpu_validation.reference_check import Reference, ranks_identical
from gpu_validation.validate import batch, make_model

LR, DECAY, SEED, STEPS = 0.01, 1e-3, 3, 3


@dataclass(frozen=True)
class Place:
    """Where a pattern runs: this rank, the layout's ranks per node, a folder for checkpoint files."""

    rank: int
    gpus_per_node: int
    folder: str


def _train(ddp: nn.Module, opt: Birder, rank: int, steps: int = STEPS, first: int = 1, then=None,
           set_to_none: bool = True, between=None) -> None:
    """``steps`` training steps on this rank's batches ``first``, ``first + 1``, ...; ``between()`` after each
    backward, ``then(step)`` after each step."""
    for step in range(first, first + steps):
        x, y = batch(SEED, step, rank)
        nn.functional.mse_loss(ddp(x), y).backward()
        if between is not None:
            between()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        if then is not None:
            then(step)


def _plain(at: Place, model: nn.Module | None = None, **ddp_options):
    """``model`` (make_model(0) by default) wrapped in DDP with ``ddp_options``, its Birder and Birder's reference."""
    model = make_model(0) if model is None else model
    ddp = nn.parallel.DistributedDataParallel(model, **ddp_options)
    opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    return model, ddp, opt, Reference(opt)


def _result(model: nn.Module, ref: Reference | None) -> dict:
    return {"mismatched": None if ref is None else ref.mismatched, "steps": None if ref is None else ref.steps,
            "identical": ranks_identical(model)}


# ---- the patterns (each: Place -> _result, or it raises) ----

def lambda_lr_warmup(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / 2)  # lr 0 at the first step
    _train(ddp, opt, at.rank, then=lambda step: schedule.step())
    return _result(model, ref)


def onecycle_lr(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=STEPS)
    _train(ddp, opt, at.rank, then=lambda step: schedule.step())
    return _result(model, ref)


def onecycle_lr_no_momentum(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=STEPS, cycle_momentum=False)
    _train(ddp, opt, at.rank, then=lambda step: schedule.step())
    return _result(model, ref)


def reduce_lr_on_plateau(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    _train(ddp, opt, at.rank, then=lambda step: schedule.step(1.0))  # never improves: lr halves from the 2nd call
    assert opt.param_groups[0]["lr"] < LR
    return _result(model, ref)


def sequential_lr_warmup(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    schedule = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[2])
    _train(ddp, opt, at.rank, STEPS + 1, then=lambda step: schedule.step())
    return _result(model, ref)


def lr_below_zero(at: Place) -> dict:
    """A linear-decay LambdaLR over 1 step where the loop runs 3: lr 0 at the second step, -LR at the third."""
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s)
    _train(ddp, opt, at.rank, then=lambda step: schedule.step())
    return _result(model, ref)


def weight_decay_schedule(at: Place) -> dict:
    """The weight decay set on the groups by hand each step (a weight-decay schedule)."""
    model, ddp, opt, ref = _plain(at)

    def set_decay(step: int) -> None:
        for group in opt.param_groups:
            group["weight_decay"] = DECAY * (step + 1)

    _train(ddp, opt, at.rank, then=set_decay)
    return _result(model, ref)


def zero_grad_before_step(at: Place) -> dict:
    """zero_grad() between backward() and step() (a misplaced line)."""
    model, ddp, opt, ref = _plain(at)
    x, y = batch(SEED, 1, at.rank)
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.zero_grad()
    opt.step()
    return _result(model, ref)


def distributed_checkpoint_state_dict(at: Place) -> dict:
    """torch.distributed.checkpoint's get_state_dict(ddp, opt) after a step."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    get_state_dict(ddp, opt)
    return _result(model, ref)


def add_param_group(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    opt.add_param_group({"params": [nn.Parameter(torch.zeros(3))]})
    return _result(model, ref)


def no_decay_on_biases(at: Place) -> dict:
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    biases = [p for name, p in model.named_parameters() if name.endswith("bias")]
    opt = Birder(ddp, lr=LR, weight_decay=0.1, seed=SEED, gpus_per_node=at.gpus_per_node,
                 param_groups=[{"params": biases, "weight_decay": 0.0}])
    ref = Reference(opt)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def zero_grad_keep_zeros(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, set_to_none=False)
    return _result(model, ref)


class _Branchy(nn.Module):
    """A trunk and a branch; the branch joins only when asked (so DDP must find unused parameters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk, self.branch, self.head = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.use_branch = True

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        if self.use_branch:
            h = h + torch.tanh(self.branch(h))
        return self.head(h)


def find_unused_branch(at: Place) -> dict:
    model = _Branchy()
    model, ddp, opt, ref = _plain(at, model, find_unused_parameters=True)
    for step in range(1, STEPS + 2):
        model.use_branch = step % 2 == 0
        _train(ddp, opt, at.rank, 1, step)
    return _result(model, ref)


def unused_branch_without_find_unused(at: Place) -> dict:
    """The branch skipped at step 2, DDP built without find_unused_parameters."""
    model = _Branchy()
    model, ddp, opt, ref = _plain(at, model)
    for step in range(1, STEPS + 1):
        model.use_branch = step != 2
        _train(ddp, opt, at.rank, 1, step)
    return _result(model, ref)


def backward_through_unwrapped_module(at: Place) -> dict:
    """loss computed from ``model(x)`` instead of ``ddp(x)`` after a first proper step."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    _train(model, opt, at.rank, 1, 2)
    return _result(model, ref)


def static_graph(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at, static_graph=True)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def bucket_view(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at, gradient_as_bucket_view=True, bucket_cap_mb=0.0003)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def no_sync_accumulation(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        with ddp.no_sync():
            x, y = batch(SEED, 10 * step, at.rank)
            nn.functional.mse_loss(ddp(x), y).backward()
        x, y = batch(SEED, 10 * step + 1, at.rank)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def no_sync_on_some_steps(at: Place) -> dict:
    """Accumulation under ``no_sync()`` on step 2 only (a micro-batch count that changes), plain steps around it."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    with ddp.no_sync():
        x, y = batch(SEED, 20, at.rank)
        nn.functional.mse_loss(ddp(x), y).backward()
    _train(ddp, opt, at.rank, 2, 2)
    return _result(model, ref)


def every_micro_batch_under_no_sync(at: Place) -> dict:
    """Accumulation with the last micro-batch inside ``no_sync()`` too: DDP never runs the hook before step()."""
    model, ddp, opt, ref = _plain(at)
    with ddp.no_sync():
        for k in range(2):
            x, y = batch(SEED, 30 + k, at.rank)
            nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    return _result(model, ref)


def two_backwards_then_step(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        for k in range(2):
            x, y = batch(SEED, 10 * step + k, at.rank)
            nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


class _Checkpointed(nn.Module):
    """make_model's middle layer recomputed in backward (activation checkpointing of an inner block)."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.inner, self.reentrant = make_model(0), reentrant

    def forward(self, x):
        h = self.inner[:2](x)
        h = torch.utils.checkpoint.checkpoint(self.inner[2:4], h, use_reentrant=self.reentrant)
        return self.inner[4:](h)


def _checkpointing(at: Place, reentrant: bool, **ddp_options) -> dict:
    model = _Checkpointed(reentrant)
    model, ddp, opt, ref = _plain(at, model, **ddp_options)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def checkpoint_non_reentrant(at: Place) -> dict:
    return _checkpointing(at, False)


def checkpoint_reentrant(at: Place) -> dict:
    return _checkpointing(at, True)


def autocast_bf16(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = ddp(x)
        nn.functional.mse_loss(out.float(), y).backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def grad_scaler_growing(at: Place) -> dict:
    """A GradScaler whose scale doubles every step, left in ``.grad`` for step() to divide (no unscale_), and a
    step of non-finite gradients it backs off from: the reference must take ``.grad`` as step() does."""
    model, ddp, opt, ref = _plain(at)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4, growth_interval=1)
    for step in range(1, STEPS + 2):
        x, y = batch(SEED, step, at.rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        scaler.scale(loss * (math.inf if step == 2 else 1.0)).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    return _result(model, ref)


def ema_averaged_model(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    _train(ddp, opt, at.rank, then=lambda step: ema.update_parameters(model))
    result = _result(model, ref)
    result["identical"] = result["identical"] and ranks_identical(ema)
    return result


def swa_lr(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    swa = torch.optim.swa_utils.AveragedModel(model)
    schedule = torch.optim.swa_utils.SWALR(opt, swa_lr=LR / 2, anneal_epochs=2)
    def average_and_schedule(step: int) -> None:
        swa.update_parameters(model)
        schedule.step()

    _train(ddp, opt, at.rank, then=average_and_schedule)
    result = _result(model, ref)
    result["identical"] = result["identical"] and ranks_identical(swa)
    return result


def _resume(at: Place, saved: dict, lr: float | None = None, schedule=None) -> dict:
    """A fresh model (other starting weights) and Birder (lr 3 x LR) loading ``saved``; with ``lr``, that lr is set
    on the groups after load_state_dict (which restores the saved lr, as every torch optimizer's does); with
    ``schedule`` (Birder, last step -> an lr scheduler), the scheduler is built after the load and stepped after
    each step. Trains STEPS more steps against the reference resumed from the saved state."""
    model = make_model(1)
    model.load_state_dict(saved["model"])
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=LR * 3, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    opt.load_state_dict(saved["optimizer"])
    restored = opt.param_groups[0]["lr"]
    for group in opt.param_groups if lr is not None else ():
        group["lr"] = lr
    ref = Reference(opt)
    state = saved["optimizer"]["state"]
    ref.state = algorithm1.State(state["m"].numpy(), state["b_hat"].numpy(), state["b_hat"].numpy(),
                                 state["e"].numpy(), state["server_error"].numpy(), state["t"])
    scheduler = None if schedule is None else schedule(opt, state["t"])
    for step in range(state["t"] + 1, state["t"] + 1 + STEPS):
        x, y = batch(SEED, step, at.rank)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
        if scheduler is not None:
            scheduler.step()
    return {**_result(model, ref), "restored_lr": restored}


def _trained_checkpoint(at: Place, gpus_per_node: int) -> tuple[dict, dict]:
    """Two steps of make_model on ``gpus_per_node`` ranks per node: the full checkpoint (every rank calls
    state_dict()) and how those steps compared with the reference."""
    model, ddp, opt, ref = _plain(Place(at.rank, gpus_per_node, at.folder))
    _train(ddp, opt, at.rank, 2)
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}, _result(model, ref)


def resume_with_new_lr(at: Place) -> dict:
    return _resume(at, _trained_checkpoint(at, at.gpus_per_node)[0], lr=LR / 4)


def scheduler_built_after_load(at: Place) -> dict:
    """Two steps under CosineAnnealingLR (which adds ``initial_lr`` to the groups), saved; resumed the usual way:
    load_state_dict, then CosineAnnealingLR(opt, T_max, last_epoch=2), which needs the saved ``initial_lr``."""
    model, ddp, opt, _ = _plain(at)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    _train(ddp, opt, at.rank, 2, then=lambda step: cosine.step())
    saved = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    return _resume(at, saved, schedule=lambda birder, last: torch.optim.lr_scheduler.CosineAnnealingLR(
        birder, T_max=10, last_epoch=last))


def _checkpoint_path(folder: str, workers: int) -> str:
    return os.path.join(folder, f"checkpoint_{workers}_workers.pt")


def save_for_another_world_size(at: Place) -> dict:
    """Rank 0 saves full checkpoints of this layout's workers and of one node of every rank (one worker), for
    ``load_*_on_one_rank`` to load in a process group of one rank."""
    world, results = dist.get_world_size(), []
    for gpus in dict.fromkeys((at.gpus_per_node, world)):
        saved, result = _trained_checkpoint(at, gpus)
        results.append(result)
        if at.rank == 0:
            torch.save(saved, _checkpoint_path(at.folder, world // gpus))
    return {"mismatched": sum(r["mismatched"] for r in results), "steps": sum(r["steps"] for r in results),
            "identical": all(r["identical"] for r in results)}


def load_same_workers_on_one_rank(at: Place) -> dict:
    """One rank (one worker) resumes the one-worker checkpoint that a larger world size saved."""
    return _resume(at, torch.load(_checkpoint_path(at.folder, 1), weights_only=True))


def load_other_workers_on_one_rank(at: Place) -> dict:
    """One rank (one worker) loads the checkpoint of a layout with several workers."""
    workers = max(int(name.split("_")[1]) for name in os.listdir(at.folder) if name.startswith("checkpoint_"))
    return _resume(at, torch.load(_checkpoint_path(at.folder, workers), weights_only=True))


def freeze_after_steps(at: Place) -> dict:
    """After 2 steps the first layer is frozen (requires_grad False; DDP finds it unused): it must stop moving."""
    model, ddp, opt, ref = _plain(at, find_unused_parameters=True)
    _train(ddp, opt, at.rank, 2)
    for p in model[0].parameters():
        p.requires_grad_(False)
    frozen = [p.detach().clone() for p in model[0].parameters()]
    _train(ddp, opt, at.rank, first=3)
    result = _result(model, ref)
    result["frozen_moved"] = not all(torch.equal(a, p) for a, p in zip(frozen, model[0].parameters(), strict=True))
    return result


def freeze_after_steps_static_ddp(at: Place) -> dict:
    """The same freeze, DDP built without find_unused_parameters."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 2)
    for p in model[0].parameters():
        p.requires_grad_(False)
    _train(ddp, opt, at.rank, first=3)
    return _result(model, ref)


def unfreeze_after_freezing(at: Place) -> dict:
    """A layer frozen after 2 steps (find_unused_parameters) for step 3, then unfrozen for step 4."""
    model, ddp, opt, ref = _plain(at, find_unused_parameters=True)
    _train(ddp, opt, at.rank, 2)
    for p in model[0].parameters():
        p.requires_grad_(False)
    _train(ddp, opt, at.rank, 1, 3)
    for p in model[0].parameters():
        p.requires_grad_(True)
    _train(ddp, opt, at.rank, 1, 4)
    return _result(model, ref)


def unfreeze_after_steps(at: Place) -> dict:
    """A layer frozen when DDP and Birder were built is unfrozen after 2 steps (fine-tuning's second phase)."""
    model = make_model(0)
    for p in model[0].parameters():
        p.requires_grad_(False)
    model, ddp, opt, ref = _plain(at, model)
    _train(ddp, opt, at.rank, 2)
    for p in model[0].parameters():
        p.requires_grad_(True)
    before = [p.detach().clone() for p in model[0].parameters()]
    _train(ddp, opt, at.rank, first=3)
    result = _result(model, ref)
    result["unfrozen_moved"] = not all(torch.equal(a, p) for a, p in zip(before, model[0].parameters(), strict=True))
    return result


class _TiedLM(nn.Module):
    """A token embedding whose weight is also the output layer's (tied weights, as in language models)."""

    def __init__(self, sparse: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(12, 8, sparse=sparse)
        self.mix = nn.Linear(8, 8)
        self.out = nn.Linear(8, 12, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens):
        return self.out(torch.tanh(self.mix(self.embed(tokens))))


def _token_batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1009 * step + rank)
    tokens = torch.randint(0, 12, (16,), generator=generator)
    return tokens, (tokens + 1) % 12


def _train_tokens(ddp: nn.Module, opt: Birder, rank: int) -> None:
    for step in range(1, STEPS + 1):
        tokens, targets = _token_batch(step, rank)
        nn.functional.cross_entropy(ddp(tokens), targets).backward()
        opt.step()
        opt.zero_grad()


def tied_weights(at: Place) -> dict:
    model = _TiedLM()
    model, ddp, opt, ref = _plain(at, model)
    _train_tokens(ddp, opt, at.rank)
    result = _result(model, ref)
    result["still_tied"] = model.out.weight is model.embed.weight
    return result


def sparse_embedding(at: Place) -> dict:
    model = _TiedLM(sparse=True)
    del model.out
    model.out = nn.Linear(8, 12)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    _train_tokens(ddp, opt, at.rank)
    return _result(model, None)


def _typed(at: Place, dtype: torch.dtype) -> dict:
    model = make_model(0).to(dtype)
    model, ddp, opt, ref = _plain(at, model)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        (ddp(x.to(dtype)) - y.to(dtype)).abs().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def complex_parameters(at: Place) -> dict:
    return _typed(at, torch.complex64)


def float64_parameters(at: Place) -> dict:
    return _typed(at, torch.float64)


class _WithEmpty(nn.Module):
    """A model holding a zero-size parameter that the forward pass uses (a layer configured with 0 features)."""

    def __init__(self):
        super().__init__()
        self.inner = make_model(0)
        self.empty = nn.Linear(0, 3)

    def forward(self, x):
        return self.inner(x) + self.empty(x[:, :0])


def zero_size_parameter(at: Place) -> dict:
    model = _WithEmpty()
    model, ddp, opt, ref = _plain(at, model)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def step_without_backward(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    opt.step()
    return _result(model, ref)


def two_steps_one_backward(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    x, y = batch(SEED, 1, at.rank)
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    opt.step()
    return _result(model, ref)


def tensor_hook_on_parameter(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    model[2].weight.register_hook(lambda g: g * 0.5)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def post_accumulate_grad_hook(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    def halve(p: torch.Tensor) -> None:
        p.grad.mul_(0.5)

    model[2].weight.register_post_accumulate_grad_hook(halve)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def loss_all_reduce_for_logging(at: Place) -> dict:
    """dist.all_reduce of the loss between backward() and step() (logging the mean loss)."""
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def clamp_after_step(at: Place) -> dict:
    """An in-place constraint on the parameters after each step (weight clipping), the same on every rank."""
    model, ddp, opt, ref = _plain(at)

    def clamp(step: int) -> None:
        with torch.no_grad():
            for p in model.parameters():
                p.clamp_(-0.3, 0.3)

    _train(ddp, opt, at.rank, then=clamp)
    return _result(model, ref)


def _gan(at: Place, toggle: bool) -> dict:
    """A GAN's loop: a generator and a discriminator, each its own DDP model and Birder. The generator's loss
    backpropagates through the discriminator; with ``toggle`` the discriminator is frozen meanwhile
    (requires_grad_(False), its DDP built with find_unused_parameters=True), else its gradients are zeroed
    before its own backward."""
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8)), nn.Sequential(nn.Linear(8, 1))
    gen_ddp = nn.parallel.DistributedDataParallel(gen)
    disc_ddp = nn.parallel.DistributedDataParallel(disc, find_unused_parameters=toggle)
    gen_opt = Birder(gen_ddp, lr=LR, seed=SEED, gpus_per_node=at.gpus_per_node)
    disc_opt = Birder(disc_ddp, lr=LR, seed=SEED + 1, gpus_per_node=at.gpus_per_node)
    refs = (Reference(gen_opt), Reference(disc_opt))
    for step in range(1, STEPS + 1):
        generator = torch.Generator().manual_seed(1009 * step + at.rank)
        noise, real = torch.randn(16, 4, generator=generator), torch.randn(16, 8, generator=generator)
        disc_opt.zero_grad()
        fake = gen_ddp(noise)
        disc_loss = nn.functional.softplus(-disc_ddp(real)).mean() + nn.functional.softplus(
            disc_ddp(fake.detach())).mean()
        disc_loss.backward()
        disc_opt.step()
        if toggle:
            disc.requires_grad_(False)
        gen_opt.zero_grad()
        nn.functional.softplus(-disc_ddp(fake)).mean().backward()
        gen_opt.step()
        if toggle:
            disc.requires_grad_(True)
    gen_result, disc_result = _result(gen, refs[0]), _result(disc, refs[1])
    return {"mismatched": gen_result["mismatched"] + disc_result["mismatched"],
            "steps": min(gen_result["steps"], disc_result["steps"]),
            "identical": gen_result["identical"] and disc_result["identical"]}


def gan_two_birders(at: Place) -> dict:
    return _gan(at, toggle=False)


def gan_frozen_discriminator(at: Place) -> dict:
    return _gan(at, toggle=True)


def parameters_ddp_ignores(at: Place) -> dict:
    """A trainable layer that DDP is told to ignore (DDP._set_params_and_buffers_to_ignore_for_model)."""
    model = make_model(0)
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ["4.weight", "4.bias"])
    model, ddp, opt, ref = _plain(at, model)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def existing_comm_hook(at: Place) -> dict:
    """The line kept from an fp16-hook script: ddp.register_comm_hook(None, fp16_compress_hook), then Birder."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    _train(ddp, opt, at.rank)
    return _result(model, None)


def second_birder_on_one_ddp(at: Place) -> dict:
    """A new Birder built on the DDP model an earlier Birder already serves (to restart with other settings)."""
    model, ddp, opt, _ = _plain(at)
    _train(ddp, opt, at.rank, 1)
    again = Birder(ddp, lr=LR / 2, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    _train(ddp, again, at.rank, 1, 2)
    return _result(model, None)


def new_ddp_while_old_birder_lives(at: Place) -> dict:
    """Lightning's lr_find then fit, or a rebuild whose old Birder a scheduler keeps alive: the same module wrapped
    in a new DDP with a new Birder, the old Birder still alive."""
    model, ddp, opt, _ = _plain(at)
    keeps_it_alive = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    _train(ddp, opt, at.rank, 1)
    again = nn.parallel.DistributedDataParallel(model)
    new = Birder(again, lr=LR, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    ref = Reference(new)
    _train(again, new, at.rank, STEPS - 1, 2)
    assert keeps_it_alive.optimizer is opt
    return _result(model, ref)


def compiled_model(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    compiled = torch.compile(ddp, backend="aot_eager")
    _train(compiled, opt, at.rank)
    return _result(model, ref)


def clip_grad_value(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, between=lambda: nn.utils.clip_grad_value_(model.parameters(), 0.01))
    return _result(model, ref)


def clip_grad_value_saturated(at: Place) -> dict:
    """clip_grad_value_ clipping every element, with the same sign on every rank (positive weights and inputs,
    targets far above the outputs): the clipped gradients are equal on every rank, though nothing averaged them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.abs_()
    model, ddp, opt, ref = _plain(at, model)
    for step in range(1, STEPS + 1):
        x, _ = batch(SEED, step, at.rank)
        nn.functional.mse_loss(ddp(x.abs()), torch.full((len(x), 3), 100.0)).backward()
        nn.utils.clip_grad_value_(model.parameters(), 0.01)
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def step_with_closure(at: Place) -> dict:
    """opt.step(closure), the closure zeroing the gradients and running forward and backward (LBFGS-style)."""
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)

        def closure(x=x, y=y) -> torch.Tensor:
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            return loss

        returned = opt.step(closure)
    return {**_result(model, ref), "returned_loss": isinstance(returned, torch.Tensor) and returned.requires_grad}


def retain_graph_second_backward(at: Place) -> dict:
    """loss.backward(retain_graph=True), then loss.backward() again through the same forward, then step()."""
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward(retain_graph=True)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def input_gradient_penalty(at: Place) -> dict:
    """A gradient penalty: torch.autograd.grad of the output with respect to the inputs (create_graph=True) in the
    loss, so backward runs through a second-order graph."""
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        x.requires_grad_(True)
        out = ddp(x)
        (slope,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        (nn.functional.mse_loss(out, y) + 0.1 * slope.pow(2).mean()).backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def one_huge_bucket(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at, bucket_cap_mb=10_000)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def channels_last_conv(at: Place) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh(), nn.Flatten(), nn.Linear(64, 3)).to(
        memory_format=torch.channels_last)
    model, ddp, opt, ref = _plain(at, model)
    for step in range(1, STEPS + 1):
        generator = torch.Generator().manual_seed(1009 * step + at.rank)
        x = torch.randn(8, 3, 6, 6, generator=generator).to(memory_format=torch.channels_last)
        nn.functional.mse_loss(ddp(x), torch.randn(8, 3, generator=generator)).backward()
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def weights_rolled_back(at: Place) -> dict:
    """model.load_state_dict(earlier weights) on every rank between steps (a rollback after a loss spike)."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    earlier = copy.deepcopy(model.state_dict())
    _train(ddp, opt, at.rank, 1, 2)
    model.load_state_dict(earlier)
    _train(ddp, opt, at.rank, 1, 3)
    return _result(model, ref)


def join_uneven_inputs(at: Place) -> dict:
    """`with ddp.join():` around the loop, rank 0 holding one more batch than the others."""
    model, ddp, opt, ref = _plain(at)
    with ddp.join():
        _train(ddp, opt, at.rank, STEPS + (at.rank == 0))
    return _result(model, ref)


def cast_after_construction(at: Place) -> dict:
    """model.to(torch.float64) after DDP and Birder were built (a precision change mid-run)."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    model.to(torch.float64)
    x, y = batch(SEED, 2, at.rank)
    nn.functional.mse_loss(ddp(x.double()), y.double()).backward()
    opt.step()
    return _result(model, ref)


def _replace_last_layer(at: Place, **ddp_options) -> dict:
    model, ddp, opt, ref = _plain(at, **ddp_options)
    _train(ddp, opt, at.rank, 1)
    torch.manual_seed(1)
    model[4] = nn.Linear(16, 3)
    _train(ddp, opt, at.rank, 1, 2)
    return _result(model, ref)


def layer_replaced_after_construction(at: Place) -> dict:
    return _replace_last_layer(at)


def layer_replaced_find_unused(at: Place) -> dict:
    return _replace_last_layer(at, find_unused_parameters=True)


def scheduler_on_rank0_only(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    _train(ddp, opt, at.rank, then=lambda step: schedule.step() if at.rank == 0 else None)
    return _result(model, ref)


def plateau_on_local_metric(at: Place) -> dict:
    """ReduceLROnPlateau fed each rank's own validation loss (rank 0's stops improving), not an all-reduced one."""
    model, ddp, opt, ref = _plain(at)
    schedule = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    _train(ddp, opt, at.rank, then=lambda step: schedule.step(1.0 if at.rank == 0 else 1.0 / step))
    return _result(model, ref)


def tensor_lr(at: Place) -> dict:
    model, ddp, opt, ref = _plain(at)
    opt.param_groups[0]["lr"] = torch.tensor(LR)
    _train(ddp, opt, at.rank)
    return _result(model, ref)


def deepcopy_optimizer(at: Place) -> dict:
    """copy.deepcopy(opt) to keep the best optimizer state in memory."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    copy.deepcopy(opt)
    return _result(model, ref)


def save_whole_objects(at: Place) -> dict:
    """torch.save({"model": model, "optimizer": opt}, path): the objects, not their state dicts."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    torch.save({"model": model, "optimizer": opt}, os.path.join(at.folder, f"whole_{at.rank}.pt"))
    return _result(model, ref)


def resume_with_other_seed(at: Place) -> dict:
    """A restart that builds Birder with another seed, then loads the saved state."""
    saved = _trained_checkpoint(at, at.gpus_per_node)[0]
    model = make_model(1)
    model.load_state_dict(saved["model"])
    opt = Birder(nn.parallel.DistributedDataParallel(model), lr=LR, weight_decay=DECAY, seed=SEED + 1,
                 gpus_per_node=at.gpus_per_node)
    opt.load_state_dict(saved["optimizer"])
    return _result(model, None)


def float64_checkpoint(at: Place) -> dict:
    """A saved state whose tensors were cast to float64 (a checkpoint converted wholesale) loaded back."""
    model, ddp, opt, ref = _plain(at)
    _train(ddp, opt, at.rank, 1)
    saved = opt.state_dict()
    saved["state"] = {k: v.double() if torch.is_tensor(v) else v for k, v in saved["state"].items()}
    opt.load_state_dict(saved)
    return _result(model, ref)


def step_skipped_on_one_rank(at: Place) -> dict:
    """`if loss_ok: opt.step()` decided on each rank's own loss: rank 1 skips step 2 (no reference here: its
    gathers in step() would be the collective that rank 1 never joins)."""
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=LR, weight_decay=DECAY, seed=SEED, gpus_per_node=at.gpus_per_node)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        nn.functional.mse_loss(ddp(x), y).backward()
        if (at.rank, step) != (1, 2):
            opt.step()
        opt.zero_grad()
    return _result(model, None)


def _evaluating(at: Place, ranks: tuple[int, ...]) -> dict:
    """A model with BatchNorm (buffers: DDP broadcasts them in every forward) evaluated through the DDP model in
    eval mode under no_grad after each step, on ``ranks``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))
    model, ddp, opt, ref = _plain(at, model)

    def evaluate(step: int) -> None:
        if at.rank in ranks:
            ddp.eval()
            with torch.no_grad():
                ddp(torch.randn(4, 8, generator=torch.Generator().manual_seed(step)))
            ddp.train()

    _train(ddp, opt, at.rank, then=evaluate)
    return _result(model, ref)


def evaluate_on_every_rank(at: Place) -> dict:
    return _evaluating(at, tuple(range(dist.get_world_size())))


def evaluate_on_rank0_only(at: Place) -> dict:
    return _evaluating(at, (0,))


def clip_error_if_nonfinite(at: Place) -> dict:
    """clip_grad_norm_(..., error_if_nonfinite=True) with a NaN loss on rank 1 at step 2."""
    model, ddp, opt, ref = _plain(at)
    for step in range(1, STEPS + 1):
        x, y = batch(SEED, step, at.rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        (loss * float("nan") if (at.rank, step) == (1, 2) else loss).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        opt.step()
        opt.zero_grad()
    return _result(model, ref)


def comm_hook_after_birder(at: Place) -> dict:
    """ddp.register_comm_hook(None, allreduce_hook) after Birder (a line from a DDP tutorial, placed after it)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model, ddp, opt, ref = _plain(at)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    return _result(model, ref)


@dataclass(frozen=True)
class Habit:
    """One row of the habits table: the pattern's function, what the engineer writes, the outcome it must have
    (``works``: every step equals birder_ref's and the ranks stay identical; ``clear error``: every rank raises
    ``error`` whose message holds ``says``), and for ``works`` what Birder does."""

    pattern: Callable[[Place], dict]
    habit: str
    outcome: str
    says: str
    error: str = ""

    @property
    def name(self) -> str:
        return self.pattern.__name__


def _works(pattern, habit: str, says: str) -> Habit:
    return Habit(pattern, habit, "works", says)


def _refused(pattern, habit: str, error: str, says: str) -> Habit:
    return Habit(pattern, habit, "clear error", says, error)


HABITS: tuple[Habit, ...] = (
    _works(lambda_lr_warmup, "`LambdaLR` warm-up from lr 0", "line 16 with each step's lr (0 at the first)"),
    _refused(onecycle_lr, "`OneCycleLR` (cycles momentum by default)", "ValueError",
             "optimizer must support momentum or beta1 with `cycle_momentum` option enabled"),
    _works(onecycle_lr_no_momentum, "`OneCycleLR(..., cycle_momentum=False)`", "the lr cycle; beta stays fixed"),
    _works(reduce_lr_on_plateau, "`ReduceLROnPlateau`", "the reduced lr from the next step"),
    _works(sequential_lr_warmup, "`SequentialLR` (`LinearLR` warm-up, then cosine)", "each step's lr"),
    _refused(lr_below_zero, "a `LambdaLR` linear decay that runs past its end (lr < 0)", "ValueError",
             "must be >= 0.0, got -0.01 (an LR schedule run past its end, or a lambda that goes negative?)"),
    _works(weight_decay_schedule, "weight decay changed on `param_groups` every step", "each step's weight decay"),
    _refused(add_param_group, "`opt.add_param_group(...)` after construction", "ValueError",
             "add_param_group is refused; give per-group lr / weight_decay as Birder(ddp_model, param_groups=[...])"),
    _works(no_decay_on_biases, "no weight decay on biases (`param_groups=[{'params': biases, 'weight_decay': 0}]`)",
           "each group's own weight decay"),
    _works(zero_grad_keep_zeros, "`zero_grad(set_to_none=False)`", "zeroed gradients, same steps"),
    _works(find_unused_branch, "`DDP(find_unused_parameters=True)`, a branch unused on odd steps",
           "an unused parameter enters Algorithm 1 with gradient 0, so its momentum and weight decay still move "
           "it (AdamW skips a parameter whose .grad is None)"),
    _refused(unused_branch_without_find_unused, "a branch unused on one step, DDP without find_unused_parameters",
             "RuntimeError", "got no gradient; DDP waits for the gradient of a parameter unused in the loss unless "
             "built with find_unused_parameters=True"),
    _refused(backward_through_unwrapped_module, "`loss = f(model(x))`: backward through the unwrapped module",
             "RuntimeError", "call loss.backward() on the DDP model's output first (not the unwrapped module's)"),
    _works(static_graph, "`DDP(static_graph=True)`", "as without it"),
    _works(bucket_view, "`DDP(gradient_as_bucket_view=True)`, several buckets", "as without it"),
    _works(no_sync_accumulation, "accumulation under `ddp.no_sync()`", "one step on the summed local gradients"),
    _works(no_sync_on_some_steps, "`no_sync()` accumulation on one step only, plain steps around it",
           "each step on the local gradients summed since the last"),
    _refused(every_micro_batch_under_no_sync, "accumulation with the last micro-batch under `no_sync()` too",
             "RuntimeError", "run the last micro-batch before step() outside ddp.no_sync()"),
    _works(two_backwards_then_step, "two `backward()` calls, then one `step()` (no `no_sync`)",
           "one step on the summed local gradients"),
    _works(checkpoint_non_reentrant, "`torch.utils.checkpoint` (`use_reentrant=False`)", "as without it"),
    _works(checkpoint_reentrant, "`torch.utils.checkpoint` (`use_reentrant=True`)", "as without it"),
    _works(autocast_bf16, "`torch.autocast('cpu', dtype=torch.bfloat16)`", "Algorithm 1 on the bf16-made gradients"),
    _works(grad_scaler_growing, "`GradScaler(growth_interval=1)`, no `unscale_`, one step of `inf` gradients",
           "step() divides by the scale left in `.grad`; the `inf` step is skipped and the scale backs off"),
    _works(ema_averaged_model, "EMA copy: `AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))`",
           "the EMA reads parameters only; identical on every rank"),
    _works(swa_lr, "SWA: `AveragedModel(model)` + `SWALR`", "the SWA lr; the average identical on every rank"),
    _works(resume_with_new_lr, "resume, then set a new lr on `param_groups` after `load_state_dict`",
           "load_state_dict restores the saved lr (as torch's optimizers do); the new lr from then on"),
    _works(scheduler_built_after_load, "resume: `load_state_dict`, then `CosineAnnealingLR(opt, T_max, "
           "last_epoch=k)`", "the saved `initial_lr` restored: the schedule goes on where it stopped"),
    _works(save_for_another_world_size, "rank 0 saves `opt.state_dict()` for a run at another world size",
           "one full checkpoint (every rank calls state_dict())"),
    _works(load_same_workers_on_one_rank, "load it on 1 rank, saved by 4 ranks in one node (1 worker both times)",
           "continues from the saved state"),
    _refused(load_other_workers_on_one_rank, "load it on 1 rank, saved by 4 ranks as 2 x 2 (2 workers)",
             "ValueError", "this run has 1 (the workers' state cannot be split or merged)"),
    _works(freeze_after_steps, "freeze a layer after 2 steps (`requires_grad_(False)`, find_unused_parameters)",
           "the frozen layer stays where it is (gradient 0 in Algorithm 1)"),
    _refused(freeze_after_steps_static_ddp, "freeze a layer after 2 steps, DDP without find_unused_parameters",
             "RuntimeError", "were frozen after DDP was built: DDP waits for the gradient of a parameter unused in "
             "the loss unless built with find_unused_parameters=True"),
    _refused(unfreeze_after_freezing, "freeze a layer after 2 steps, unfreeze it after one more", "RuntimeError",
             "were frozen after Birder was built and have requires_grad=True again: while frozen they stayed put, "
             "but Algorithm 1 kept moving their m, b and e on zero gradients"),
    _refused(unfreeze_after_steps, "unfreeze a layer that was frozen when DDP and Birder were built",
             "RuntimeError", "have requires_grad=True now; neither holds them, so they would never train"),
    _works(tied_weights, "tied weights (embedding = output layer)", "one parameter, one update; still tied"),
    _refused(sparse_embedding, "`nn.Embedding(sparse=True)`", "ValueError",
             "its gradient is sparse and Birder takes dense gradients; build it with sparse=False"),
    _refused(complex_parameters, "complex parameters", "ValueError",
             "are complex: Birder's signs are defined for real tensors only"),
    _works(float64_parameters, "float64 parameters", "Algorithm 1 in float32 on the rounded gradient; line 16 in "
           "float64"),
    _works(zero_size_parameter, "a zero-size parameter (`nn.Linear(0, 3)`)", "holds no elements, no state"),
    _refused(zero_grad_before_step, "`zero_grad()` between `backward()` and `step()`", "RuntimeError",
             "every gradient is None now: zero_grad() between backward() and step()?"),
    _refused(distributed_checkpoint_state_dict, "`torch.distributed.checkpoint.state_dict.get_state_dict(ddp, opt)`",
             "RuntimeError", "Birder does not support them: every rank calls opt.state_dict()"),
    _refused(step_without_backward, "`step()` without a backward", "RuntimeError",
             "no backward pass through the DDP model since the last step"),
    _refused(two_steps_one_backward, "two `step()` calls after one backward", "RuntimeError",
             "no backward pass through the DDP model since the last step"),
    _works(tensor_hook_on_parameter, "`p.register_hook(lambda g: g * 0.5)`", "the hooked gradient, as AdamW would"),
    _works(post_accumulate_grad_hook, "`p.register_post_accumulate_grad_hook(...)` scaling `p.grad`",
           "`.grad` as step() finds it"),
    _works(loss_all_reduce_for_logging, "`dist.all_reduce` of the loss between `backward()` and `step()`",
           "as without it"),
    _works(clamp_after_step, "an in-place constraint after each step (`p.clamp_(-0.3, 0.3)`)",
           "the constrained parameters, the same on every rank"),
    _works(gan_two_birders, "a GAN: generator and discriminator, each its own DDP model and Birder",
           "each Birder its own model's steps"),
    _works(gan_frozen_discriminator, "the same GAN, discriminator frozen (`requires_grad_(False)`) during the "
           "generator's step", "the discriminator stays put during the generator's step"),
    _refused(parameters_ddp_ignores, "trainable parameters DDP is told to ignore "
             "(`_set_params_and_buffers_to_ignore_for_model`)", "ValueError", "are trainable but DDP ignores them"),
    _refused(existing_comm_hook, "a `register_comm_hook` line kept from an fp16/PowerSGD script", "ValueError",
             "this DDP model already has a communication hook"),
    _refused(second_birder_on_one_ddp, "a second `Birder` on the same DDP model (to restart with new settings)",
             "ValueError", "wrap the model in a new DistributedDataParallel for a new Birder"),
    _works(new_ddp_while_old_birder_lives, "a new DDP wrapper of the same model and a new `Birder`, the old one "
           "still alive (Lightning's `lr_find`, then `fit`)", "Algorithm 1 from a fresh state; the old Birder's "
           "`step()` is refused"),
    _works(compiled_model, "`torch.compile(ddp, backend='aot_eager')`", "the compiled model's gradients"),
    _works(clip_grad_value, "`clip_grad_value_(model.parameters(), 0.01)` before `step()`",
           "Algorithm 1 on the clipped local gradients"),
    _works(clip_grad_value_saturated, "`clip_grad_value_` clipping every element to the same value on every rank "
           "(early training)", "Algorithm 1 on the clipped gradients; not taken for an outer all-reduce"),
    _works(step_with_closure, "`opt.step(closure)`, the closure zeroing, running forward and backward",
           "the gradients the closure leaves; returns its loss"),
    _works(retain_graph_second_backward, "`loss.backward(retain_graph=True)`, then `loss.backward()` again, one "
           "`step()`", "one step on what `.grad` holds: both backwards' local gradients summed"),
    _works(input_gradient_penalty, "a gradient penalty (`autograd.grad(out.sum(), x, create_graph=True)` in the "
           "loss)", "the penalised loss's gradients"),
    _works(one_huge_bucket, "`DDP(bucket_cap_mb=10000)` (one bucket)", "as without it"),
    _works(channels_last_conv, "a conv model in `channels_last` memory format", "the same element order "
           "(`parameters()`), whatever the strides"),
    _works(weights_rolled_back, "`model.load_state_dict(earlier)` on every rank between steps (a rollback)",
           "steps on from the loaded weights; Birder's own state is not rolled back"),
    _refused(join_uneven_inputs, "`with ddp.join():` with uneven inputs (rank 0 one batch more)", "ValueError",
             "DDP's join() / Join([...]) for uneven inputs is refused"),
    _refused(cast_after_construction, "`model.to(torch.float64)` after DDP and Birder were built", "RuntimeError",
             "were cast or moved after DDP and Birder were built (model.to(...), .double(), .half()?)"),
    _refused(layer_replaced_after_construction, "a layer replaced (`model[4] = nn.Linear(...)`) after Birder was "
             "built", "RuntimeError", "are not the ones DDP and Birder were built with (a layer replaced after the "
             "model was wrapped?)"),
    _refused(layer_replaced_find_unused, "the same replacement, DDP with find_unused_parameters=True",
             "RuntimeError", "are not the ones DDP and Birder were built with"),
    _refused(scheduler_on_rank0_only, "an LR scheduler stepped under `if rank == 0:`", "RuntimeError",
             "the ranks' settings differ before the update: param_groups[0]['lr'] 0.005 on rank(s) [0], 0.01 on "
             "rank(s) [1, 2, 3]"),
    _refused(plateau_on_local_metric, "`ReduceLROnPlateau` fed each rank's own validation loss", "RuntimeError",
             "give ReduceLROnPlateau a metric all-reduced across the ranks"),
    _refused(tensor_lr, "a tensor lr (`param_groups[0]['lr'] = torch.tensor(0.01)`)", "ValueError",
             "must be a finite real number, got tensor(0.0100) (set a Python float; a tensor lr is not taken)"),
    _refused(deepcopy_optimizer, "`copy.deepcopy(opt)`", "ValueError", "Birder cannot be pickled or copied"),
    _refused(save_whole_objects, "`torch.save({'model': model, 'optimizer': opt}, path)` (the objects)",
             "ValueError", "Save opt.state_dict() (every rank calls it) and restore it with opt.load_state_dict()"),
    _refused(resume_with_other_seed, "resume into a Birder built with another seed", "ValueError",
             "saved with seed=3, this run has 4 (build Birder with seed=3 to resume this state"),
    _refused(float64_checkpoint, "load a checkpoint whose tensors were cast to float64", "ValueError",
             "must be a dense float32 tensor of shape"),
    _refused(step_skipped_on_one_rank, "`opt.step()` skipped on one rank (a rank-local `if loss.isfinite():`)",
             "RuntimeError", "rank(s) [0, 2, 3] called step(); rank(s) [1] called backward. step() is collective"),
    _works(evaluate_on_every_rank, "a BatchNorm model evaluated through `ddp` (eval mode, `no_grad`) on every "
           "rank after each step", "as without it"),
    _refused(evaluate_on_rank0_only, "the same evaluation under `if rank == 0:` (DDP broadcasts buffers in it)",
             "RuntimeError", "rank(s) [0] called an evaluation forward (eval mode or no_grad); rank(s) [1, 2, 3] "
             "called forward"),
    _refused(clip_error_if_nonfinite, "`clip_grad_norm_(..., error_if_nonfinite=True)`, a NaN loss on rank 1",
             "RuntimeError", "The total norm of order 2.0 for gradients from `parameters` is non-finite"),
    _refused(comm_hook_after_birder, "`ddp.register_comm_hook(...)` after Birder was built", "RuntimeError",
             "register_comm_hook or register_builtin_comm_hook can only be called once"),
)


def control_nudged(at: Place) -> dict:
    """Not a habit: the check's negative control. Before each step every rank moves one element by 1e-3 (so the
    update is not the reference's), and after the last step rank 0 alone moves another (so the ranks differ)."""
    model, ddp, opt, ref = _plain(at)

    def nudge(optimizer, args, kwargs) -> None:
        with torch.no_grad():
            model[0].weight[0, 0] += 1e-3

    opt.register_step_pre_hook(nudge)
    _train(ddp, opt, at.rank)
    if at.rank == 0:
        with torch.no_grad():
            model[0].bias[0] += 1e-3
    return _result(model, ref)


PATTERNS: dict[str, Callable[[Place], dict]] = {**{h.name: h.pattern for h in HABITS}, "control_nudged": control_nudged}
ONE_RANK = ("load_same_workers_on_one_rank", "load_other_workers_on_one_rank")  # after the multi-rank run


def run(names: list[str], gpus_per_node: int, folder: str, rank: int) -> dict:
    """Each named pattern in turn on this rank: {name: {"outcome": "works", ...} or {"outcome": "error", ...}}."""
    at, out = Place(rank, gpus_per_node, folder), {}
    for name in names:
        try:
            out[name] = {"outcome": "works", **PATTERNS[name](at)}
        except Exception as error:  # the outcome being classified: whatever the pattern raised
            out[name] = {"outcome": "error", "type": type(error).__name__,
                         "message": " ".join(str(error).split())[:400]}
    return out


def verdict(habit: Habit, seen: dict) -> str | None:
    """None if what the pattern did on every rank (``seen``: rank -> its run() entry) is the row's outcome, else
    what differed."""
    for rank, got in sorted(seen.items()):
        if habit.outcome == "works":
            if got["outcome"] != "works":
                return f"rank {rank} raised {got['type']}: {got['message']}"
            if not got["identical"] or got["mismatched"] != 0 or not got["steps"]:
                return f"rank {rank}: {got}"
        elif got["outcome"] != "error" or got["type"] != habit.error or habit.says not in got["message"]:
            return f"rank {rank}: expected {habit.error} saying {habit.says!r}, got {got}"
    return None


def habits_table() -> str:
    """The markdown table the READMEs hold (``tests/test_gpu_habits.py`` checks both it and every row's outcome)."""
    rows = ["| habit | outcome | what Birder does, or its error (excerpt) |", "|---|---|---|"]
    for h in HABITS:
        said = h.says if h.outcome == "works" else f"`{h.error}`: ...{h.says}..."
        rows.append(f"| {h.habit} | {'**works**, = birder_ref' if h.outcome == 'works' else 'clear error'} | "
                    f"{said} |")
    return "\n".join(rows)


def observe(world: int = 4, gpus_per_node: int = 2, timeout_s: float = 90) -> dict[str, dict[int, dict]]:
    """Every pattern on ``world`` gloo ranks (``gpus_per_node`` per node), then the ``ONE_RANK`` loads on one
    rank: {pattern: {rank: its run() entry}}. Raises if a launch itself fails (a rank died or hung)."""
    from gpu_validation import launch

    out: dict[str, dict[int, dict]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for names, ranks, gpus in (([n for n in PATTERNS if n not in ONE_RANK], world, gpus_per_node),
                                   (list(ONE_RANK), 1, 1)):
            outcome = launch.launch(run, (names, gpus, folder), ranks, "gloo", timeout_s, 300)
            if outcome.describe_failures():
                raise RuntimeError(f"habits launch on {ranks} rank(s) failed: {outcome.describe_failures()}")
            for rank, report in outcome.reports.items():
                for name, entry in report["result"].items():
                    out.setdefault(name, {})[rank] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.gpu_scenarios.habits``: run every pattern, print each row's outcome; exit 1 if one differs.
    ``--table``: print the README's table instead (no run)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--table"]:
        print(habits_table())
        return 0
    if argv:
        print("usage: python -m tests.gpu_scenarios.habits [--table]", file=sys.stderr)
        return 2
    seen = observe()
    wrong = {h.name: verdict(h, seen[h.name]) for h in HABITS if verdict(h, seen[h.name])}
    for h in HABITS:
        print(f"{h.name:38s} {h.outcome:12s} {'as expected' if h.name not in wrong else wrong[h.name]}")
    print(f"{len(HABITS) - len(wrong)} of {len(HABITS)} habits as the table says")
    return 1 if wrong else 0


if __name__ == "__main__":
    import importlib

    raise SystemExit(importlib.import_module(__spec__.name).main())  # by its own name, so the ranks can unpickle run
