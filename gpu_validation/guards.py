"""What ``Birder`` refuses, and the checks that keep its ranks in step: one entry point per concern.

Each raises one error with one line a user can act on, before anything changes; where the ranks decide from the
same records, every rank raises alike. ``optimizer.Birder`` calls:

- ``check_arguments`` in its constructor: the model (DDP, over the default group), the numbers, the parameters
  it cannot step (complex, sparse, ignored by DDP), ``param_groups``;
- ``refuse_other_optimizers`` and ``register_hooks``, also in its constructor: another torch optimizer stepping
  Birder's parameters is refused; Birder's DDP hook is registered (a model that already has one is refused), and
  hooks around DDP's own collectives in forward (``join()`` refused; a failed peer named there);
- ``check_step`` at the top of each step(): the trainable set, the groups' settings, and what backward's records
  said (the ranks' settings or parameters differ);
- ``needs_overflow_check``, ``refuse_changed_after_backward``, ``scaler_backs_off`` and ``count_skip`` inside it:
  a node sum that could overflow, a gradient changed after backward, a skipped step and the limit on skips;
- ``check_real`` / ``check_count``: the one-line ValueError for a number (its checkpoints and ``layout`` use them
  too).

What the ranks tell each other, and the messages naming a failed or drifting rank, are ``records``.
"""

from __future__ import annotations

import itertools
import linecache
import logging
import math
import numbers
import sys
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from birder_ref import validation
from birder_ref.draws import MASK32
from gpu_validation import comm, records

if TYPE_CHECKING:
    from gpu_validation.optimizer import Birder

log = logging.getLogger("gpu_validation.optimizer")  # the skip warnings are the optimizer's
_SAFE_SUM = float(torch.finfo(torch.float32).max) / 2  # node sums of values below this / G cannot overflow


@dataclass(frozen=True)
class Arguments:
    """Birder's constructor arguments, checked."""

    lr: float
    weight_decay: float
    beta: float
    eps: float
    seed: int
    max_consecutive_skips: int
    named: list[tuple[str, torch.Tensor]]  # the trainable parameters with their names, in parameters() order
    groups: list[dict]  # torch's param groups


def check_arguments(ddp_model: nn.Module, *, lr: float, weight_decay: float, beta: float, eps: float, seed: int,
                    scheme: str, max_consecutive_skips: int, overlap: bool,
                    param_groups: list[dict] | None) -> Arguments:
    """One ValueError, before any collective, for anything Birder's constructor cannot take; else the arguments
    checked, the trainable parameters and torch's param groups."""
    if not isinstance(ddp_model, nn.parallel.DistributedDataParallel):
        raise ValueError(f"ddp_model must be a torch.nn.parallel.DistributedDataParallel, got "
                         f"{type(ddp_model).__name__}; the wrapped model is where the client keeps it: {RECIPES}")
    _refuse_other_process_group(ddp_model)
    lr = check_real("lr", lr, 0.0, True)
    weight_decay = check_real("weight_decay", weight_decay, 0.0, False)
    beta = check_real("beta", beta, 0.0, True, 1.0, float32=True)
    eps = check_real("eps", eps, 0.0, True, float32=True)
    checked_seed = check_count("seed", seed)
    if checked_seed > MASK32:
        raise ValueError(f"seed must be below 2**32, got {seed}")
    if scheme not in comm.PIPELINE_SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(comm.PIPELINE_SCHEMES)}, got {scheme!r}")
    max_consecutive_skips = check_count("max_consecutive_skips", max_consecutive_skips, 1)
    if not isinstance(overlap, bool):
        raise ValueError(f"overlap must be True or False, got {overlap!r}")
    named = [(name, p) for name, p in ddp_model.module.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    if not params:
        raise ValueError("ddp_model has no trainable parameters (none with requires_grad)")
    if any(p.is_sparse for p in params) or len({p.device for p in params}) != 1:
        raise ValueError("Birder needs dense parameters on one device")
    _refuse_what_cannot_be_stepped(ddp_model, named)
    groups = _param_groups(param_groups, named, lr, weight_decay)
    return Arguments(lr, weight_decay, beta, eps, checked_seed, max_consecutive_skips, named, groups)


_BIRDERS_BUILT = itertools.count()  # each Birder's place in the order of construction (``_built``)


def refuse_other_optimizers(opt: Birder) -> None:
    """For as long as ``opt`` lives, any other torch optimizer's step() on its parameters raises, naming them,
    except a Birder built after it: a newer Birder on the same parameters (a new DDP wrapper of the same module, as
    Lightning's lr_find then fit builds) supersedes ``opt``, whose own step() then raises."""
    opt._built = next(_BIRDERS_BUILT)
    handle = register_optimizer_step_pre_hook(_other_optimizers_refused(weakref.ref(opt)))
    weakref.finalize(opt, handle.remove)


def register_hooks(opt: Birder, ddp_model: nn.parallel.DistributedDataParallel) -> None:
    """Birder's DDP communication hook (``records.local_gradient_hook``; one ValueError if the model already has
    one), then the hooks around DDP's own collectives in forward (``_ddp_forward_hooks``), for as long as ``opt``
    lives."""
    try:
        ddp_model.register_comm_hook(opt._hook_state, records.local_gradient_hook)
    except RuntimeError as error:
        if "only be called once" not in str(error):
            raise
        raise ValueError("this DDP model already has a communication hook (a register_comm_hook line kept from "
                         "an fp16/PowerSGD script, or an earlier Birder on it): Birder registers its own, so drop "
                         "that line, or wrap the model in a new DistributedDataParallel for a new Birder") from None
    before, after = _ddp_forward_hooks(weakref.ref(opt))
    for handle in (ddp_model.register_forward_pre_hook(before),
                   ddp_model.register_forward_hook(after, always_call=True)):
        weakref.finalize(opt, handle.remove)


@dataclass(frozen=True)
class Backward:
    """What the hook's records of the last backward said (the same on every rank)."""

    nonfinite_ranks: list[int]  # ranks whose local gradient held a NaN or an infinity: every rank skips the step
    largest: float  # the largest |gradient| over every rank (a bound on every node sum)


def check_step(opt: Birder) -> Backward:
    """At the top of step(): one error if step() cannot mean what the loop intends (``_check_trainable_set``), a
    group's lr or weight decay is unusable (``_check_group_settings``), or backward's records said that the ranks'
    settings or parameters differ (every rank raises alike, before any update); else what those records said,
    forgotten from the hook's state (the next step() needs a new backward)."""
    _check_trainable_set(opt)
    _check_group_settings(opt)
    hook = opt._hook_state
    backward = Backward(sorted(hook.nonfinite_ranks), max(hook.largest.values(), default=0.0))
    drifted, settings_differ = bool(hook.drifted), hook.settings_differ
    opt._gradients_differed = hook.gradients_differ  # in backward: then step()'s must differ too
    opt._backward_sample = hook.backward_sample  # what the sample held in backward (reset() starts a new list)
    hook.reset()
    if settings_differ:  # every rank saw the same records: all raise here, together, before any update
        raise RuntimeError(records.settings_message(opt))
    if drifted:  # every rank saw the same records: all raise here, together
        raise RuntimeError(records.drift_message(opt))
    return backward


def needs_overflow_check(grad: torch.Tensor, largest: float, shards_per_worker: int) -> bool:
    """Whether this step must check its node sums for float32 overflow (the same decision on every rank: from
    ``largest``, the hook's bound on every rank's |gradient|). When G x largest stays below float32's maximum / 2
    no node sum can overflow; then this rank's own |gradient| now (it may have grown since backward: a second
    backward through a retained graph, a hook) must keep G x it below that bound too, else one RuntimeError."""
    checked = not largest * shards_per_worker < _SAFE_SUM
    if not checked:
        low, high = torch.aminmax(grad)  # one vectorised pass, no temporary
        now = max(-float(low), float(high))
        if not now * shards_per_worker < _SAFE_SUM:
            raise RuntimeError(f"Birder.step(): this rank's gradient changed after backward to a largest "
                               f"|value| of {now:g} (a NaN/inf, or too large for a float32 sum over "
                               f"{shards_per_worker} ranks), but the ranks agreed in backward that no "
                               "overflow check was needed: change .grad before backward ends (a tensor "
                               "hook), not after it")
    return checked


def refuse_changed_after_backward(found_inf) -> None:
    """One RuntimeError if a GradScaler found a non-finite gradient that the hook's records in backward did not
    (something changed .grad after backward): this rank would skip where the others step."""
    if found_inf is not None and float(found_inf) > 0:
        raise RuntimeError("Birder.step(): GradScaler found a non-finite gradient on this rank that was finite "
                           "in backward (something changed .grad after backward); the ranks would disagree")


def scaler_backs_off(opt: Birder, scale, found_inf) -> bool:
    """Whether a step skipped for a non-finite gradient is a GradScaler's back-off (not counted towards
    ``max_consecutive_skips``): only while the scale it used is above 1 (at most 1, the gradient itself
    overflows: a NaN from the model, say). The scale is GradScaler's ``grad_scale``, or, after ``unscale_``, read
    from the calling ``GradScaler.step`` (``_calling_scaler_scale``)."""
    used = None if found_inf is None else float(scale) if scale is not None else _calling_scaler_scale(opt)
    return used is not None and used > 1.0


def count_skip(opt: Birder, bad_ranks: list[int], why: str = "a non-finite gradient on", backoff: bool = False) -> None:
    """Count a step every rank skips; ``backoff``: a GradScaler's (not counted towards the limit)."""
    opt.skipped_steps += 1
    opt.consecutive_skips += 0 if backoff else 1
    opt.last_skipped_ranks = bad_ranks
    log.warning("Birder: step %d skipped on every rank: %s rank(s) %s (%d skipped in all, %d in a row%s)",
                opt.t + 1, why, bad_ranks, opt.skipped_steps, opt.consecutive_skips,
                "; a GradScaler back-off, not counted towards max_consecutive_skips" if backoff else "")
    if opt.consecutive_skips >= opt.max_consecutive_skips:
        raise RuntimeError(f"Birder: {opt.consecutive_skips} consecutive steps skipped (limit "
                           f"max_consecutive_skips={opt.max_consecutive_skips}): {why} rank(s) {bad_ranks} "
                           "(a GradScaler's back-offs count only once its scale is at most 1)")


# ---- the checks behind the entry points ----


def check_real(name: str, value, low: float, low_open: bool, high: float | None = None, float32: bool = False
               ) -> float:
    """``value`` as a float if it is a finite real number above ``low`` (or at it, unless ``low_open``) and below
    ``high``, and with ``float32`` still so once rounded to float32, as the update computes with it (beta = 1 - 1e-9
    is 1.0 there, eps = 1e-50 is 0: the reference's rule); else one ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    v = float(value)
    if (v <= low if low_open else v < low) or (high is not None and not v < high):
        bound = f"{'>' if low_open else '>='} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    if float32:
        validation.check_real(name, v, low, high, low_open=low_open, high_open=high is not None, float32=True)
    return v


def check_count(name: str, value, low: int = 0) -> int:
    """``value`` as an int if it is an integer >= ``low``; else one ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


RECIPES = ("Lightning: Birder(self.trainer.strategy.model, ...) in configure_optimizers; Accelerate: "
           "model = accelerator.prepare(model) first, then Birder(model, ...), then prepare the rest "
           "(docs/adoption.md)")


def _refuse_other_process_group(ddp_model: nn.parallel.DistributedDataParallel) -> None:
    """One ValueError, before any collective, for a DDP model over a subgroup (``DDP(..., process_group=g)``):
    Birder's groups and records span every rank of the default group, which ranks outside ``g`` never join."""
    group = getattr(ddp_model, "process_group", None)
    if group is None or group == dist.group.WORLD:
        return
    members, world = dist.get_process_group_ranks(group), dist.get_world_size()
    if members != list(range(world)):
        raise ValueError(f"Birder: this DDP model runs over a process group of ranks "
                         f"{_names([str(r) for r in members])} out of {world} (DDP(..., process_group=...)); "
                         "Birder's exchange spans every rank of the default group, which the others would never "
                         "join: build the DDP model over the default group, or run one job per group")


def _param_groups(given, named: list[tuple[str, torch.Tensor]], lr: float, weight_decay: float) -> list[dict]:
    """torch's param groups from Birder's ``param_groups`` argument: each given group (its trainable parameters,
    its own lr / weight_decay or the defaults), then one group of the trainable parameters no group named."""
    if given is None:
        return [{"params": [p for _, p in named], "lr": lr, "weight_decay": weight_decay}]
    if not isinstance(given, (list, tuple)) or not all(isinstance(g, dict) for g in given):
        raise ValueError("param_groups must be a list of dicts, each with 'params' and optionally 'lr', "
                         "'weight_decay'")
    name_of = {id(p): name for name, p in named}
    groups, taken = [], set()
    for i, group in enumerate(given):
        unknown = sorted(set(group) - {"params", "lr", "weight_decay"})
        if "params" not in group or unknown:
            raise ValueError(f"param_groups[{i}] needs 'params' and takes only 'lr' and 'weight_decay' besides; "
                             f"got {sorted(group)}")
        members = [group["params"]] if isinstance(group["params"], torch.Tensor) else list(group["params"])
        for p in members:
            if id(p) not in name_of:
                raise ValueError(f"param_groups[{i}] holds a tensor that is not a trainable parameter of the DDP "
                                 f"model (frozen, or another model's)")
            if id(p) in taken:
                raise ValueError(f"parameter {name_of[id(p)]!r} is in two of param_groups")
            taken.add(id(p))
        if not members:
            raise ValueError(f"param_groups[{i}] holds no parameters")
        groups.append({"params": members,
                       "lr": check_real(f"param_groups[{i}]['lr']", group.get("lr", lr), 0.0, True),
                       "weight_decay": check_real(f"param_groups[{i}]['weight_decay']",
                                                  group.get("weight_decay", weight_decay), 0.0, False)})
    rest = [p for _, p in named if id(p) not in taken]
    if rest:
        groups.append({"params": rest, "lr": lr, "weight_decay": weight_decay})
    return groups


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")


def _refuse_what_cannot_be_stepped(ddp_model: nn.parallel.DistributedDataParallel,
                                   named: list[tuple[str, torch.Tensor]]) -> None:
    """One ValueError for trainable parameters Birder cannot step: complex ones (the signs of a complex number are
    undefined; the imaginary part would be dropped), sparse embeddings, and ones DDP was told to ignore (their
    gradients never pass Birder's hook, which checks them for NaN and across ranks); and a warning for embeddings'
    padding rows, which line 16 moves though their gradient is always 0."""
    complex_ = [name for name, p in named if p.is_complex()]
    if complex_:
        raise ValueError(f"parameter(s) {_names(complex_)} are complex: Birder's signs are defined for real tensors "
                         "only; keep such a parameter as a real tensor with a last dimension of 2 "
                         "(torch.view_as_complex in forward)")
    ignored = sorted(set(getattr(ddp_model, "parameters_to_ignore", ())) & {name for name, _ in named})
    if ignored:
        raise ValueError(f"parameter(s) {_names(ignored)} are trainable but DDP ignores them: Birder steps every "
                         "trainable parameter and needs its gradient in DDP's buckets; freeze them "
                         "(requires_grad_(False)) or stop ignoring them")
    padded = []
    for name, child in ddp_model.module.named_modules():
        if not isinstance(child, (nn.Embedding, nn.EmbeddingBag)) or not child.weight.requires_grad:
            continue
        if child.sparse:
            raise ValueError(f"module {name!r} is {type(child).__name__}(sparse=True): its gradient is sparse and "
                             "Birder takes dense gradients; build it with sparse=False")
        if child.padding_idx is not None:
            padded.append(f"{name or 'the model'} (padding_idx={child.padding_idx})")
    if padded:  # Algorithm 1 as it is, said aloud: PyTorch documents the padding row as not updated
        warnings.warn(f"Birder moves every element of a trainable parameter by lr each step, the padding rows of "
                      f"{', '.join(padded)} too: line 16 steps by the 1-bit signs, and the sign of a zero gradient "
                      "is a fair coin (Eq. 5), so a padding row jitters by +-lr where AdamW leaves it. Mask the "
                      "padding positions (as attention masks do), or restore the row after step() (docs/habits.md)",
                      UserWarning, stacklevel=4)


def _other_optimizers_refused(birder_ref):
    """A pre-step hook for every torch optimizer: one that holds parameters of a live Birder raises, naming them.
    .grad holds each rank's local gradient under Birder, so any other optimizer's step on those parameters
    would move each rank's copy differently."""
    def pre_step(optimizer, args, kwargs):
        birder = birder_ref()
        if birder is None or optimizer is birder:
            return None
        mine = birder._name_of_id
        shared = [mine[id(p)] for g in optimizer.param_groups for p in g["params"] if id(p) in mine]
        if not shared:
            return None
        built = getattr(optimizer, "_built", None)  # set on Birders only
        if built is not None and built > birder._built:
            return None  # a newer Birder: it supersedes this one
        if built is not None:
            raise ValueError(f"Birder.step(): a newer Birder was built on {len(shared)} of its parameter(s) "
                             f"({_names(shared)}), which supersedes this one (each Birder follows its own DDP "
                             "wrapper and state); step the newer one (or delete it to go on with this one)")
        raise ValueError(f"{type(optimizer).__name__}.step(): it holds {len(shared)} parameter(s) that Birder "
                         f"also updates ({_names(shared)}); under "
                         "Birder .grad holds each rank's LOCAL gradient, so this step would make the ranks "
                         "drift apart. Give those parameters to Birder (param_groups=[...] for their own lr), "
                         "or wrap them in a separate DDP model for the other optimizer")

    return pre_step


def _ddp_forward_communicates(ddp: nn.parallel.DistributedDataParallel, backward_seen: bool) -> bool:
    """Whether this forward of ``ddp`` runs a collective of DDP's own before the module's forward (as its
    ``_pre_forward`` decides): the broadcast of the module's buffers, or the one bucket rebuild, in the first
    forward with gradients after a backward. Every rank gets the same answer; a yes where DDP then runs none
    costs one small exchange and nothing else (once per step: ``_ddp_forward_hooks``)."""
    if ddp.will_sync_module_buffers():
        return True
    return (torch.is_grad_enabled() and backward_seen and not getattr(ddp, "_has_rebuilt_buckets", True)
            and (ddp.static_graph or not ddp.find_unused_parameters))


_DDP_FORWARD_CALLS = ("_rebuild_buckets", "_broadcast_coalesced")  # DDP's own collectives in _pre_forward


def _failed_in_ddp_collective(error: BaseException) -> bool:
    """Whether ``error`` was raised by one of DDP's own collectives in forward: the innermost Python frame of its
    traceback is DDP's, on a line calling its bucket rebuild or its buffer broadcast (torch raises a plain
    RuntimeError from both, so the type alone cannot tell a failed peer from a bug in the model)."""
    tb = error.__traceback__
    if not isinstance(error, RuntimeError) or tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    line = linecache.getline(code.co_filename, tb.tb_lineno)
    return code.co_filename == nn.parallel.distributed.__file__ and any(call in line for call in _DDP_FORWARD_CALLS)


def _ddp_forward_hooks(birder_ref):
    """Forward hooks on the DDP model around DDP's own collectives. Before them (``before``), in the first forward
    since Birder was built, stepped or loaded that runs one of them, the ranks exchange a record on Birder's group:
    a rank that called state_dict() alone between steps meets it and every rank raises at once, and a peer that
    failed before this forward is named by Birder's fault message. Later forwards (a model with buffers
    broadcasts them in every one; accumulation's micro-batches) exchange nothing: an all-gather and a host sync
    per forward would cost every BatchNorm or Hugging Face model, and a peer failing there is named by ``after``.
    If one of DDP's collectives fails (a peer died inside it, or before a forward with no record), ``after``
    (called by torch while that error propagates) rewrites the error's message into Birder's, naming the ranks
    that never reported; the error keeps its type and traceback."""
    def before(ddp, args):
        birder = birder_ref()
        if birder is not None and ddp._join_config.enable:  # set on every DDP model by Join's constructor
            raise ValueError("DDP's join() / Join([...]) for uneven inputs is refused: Birder's step() and hook are "
                             "collectives that a rank which has run out of batches cannot shadow. Give every rank "
                             "the same number of batches (DistributedSampler(drop_last=True), or stop all ranks at "
                             "the smallest count: all_reduce(count, MIN))")
        if birder is not None and birder._forward_record_due and not torch.compiler.is_compiling() and \
                _ddp_forward_communicates(ddp, birder._hook_state.backward_seen):
            birder._forward_record_due = False
            birder._exchange_record(records.FORWARD if ddp.training and torch.is_grad_enabled() else records.EVALUATION)

    def after(ddp, args, output):
        birder, error = birder_ref(), sys.exc_info()[1]
        if birder is None or output is not None or error is None or not _failed_in_ddp_collective(error):
            return None  # a forward that returned, or an error that is not from DDP's collectives
        error.args = (records.fault_message(
            birder, "bucket rebuild or buffer broadcast (DDP's own collective in forward)", ddp.process_group, error),)
        return None

    return before, after


def _check_trainable_set(opt: Birder) -> None:
    """Raise one RuntimeError (on every rank alike) if step() cannot mean what the loop intends: a parameter
    frozen when Birder was built and unfrozen since (neither DDP nor Birder holds it: it would never train); one
    frozen after Birder was built, through at least one update, and unfrozen since (its state drifted); no
    backward since the last step (named as torch.distributed.checkpoint's state initialisation when it looks
    like one); a bucket whose hook never ran (a parameter that got no gradient, or was frozen after DDP was
    built, which DDP without find_unused_parameters waits for); or every gradient gone (zero_grad() before
    step())."""
    unfrozen = [name for name, p in opt._frozen_at_start if p.requires_grad]
    if unfrozen:
        raise RuntimeError(f"Birder.step(): parameter(s) {_names(unfrozen)} were frozen when DDP and Birder were "
                           "built and have requires_grad=True now; neither holds them, so they would never train: "
                           "wrap the model in a new DistributedDataParallel and build a new Birder after "
                           "unfreezing (its state starts afresh)")
    refrozen = [name for p, name in zip(opt._params, opt.param_names, strict=True)
                if p.requires_grad and id(p) in opt._stepped_while_frozen]
    if refrozen:
        raise RuntimeError(f"Birder.step(): parameter(s) {_names(refrozen)} were frozen after Birder was built "
                           "and have requires_grad=True again: while frozen they stayed put, but Algorithm 1 kept "
                           "moving their m, b and e on zero gradients, so their next update would start from "
                           "that drifted state. To pause and resume a parameter's training, give it its own "
                           "param group and set that group's lr to 0 meanwhile (its state keeps following its "
                           "gradient); or build a new DDP model and Birder after unfreezing (state starts afresh)")
    hook, ran = opt._hook_state, opt._hook_state.backward_ran
    missing = [name for p, name in zip(opt._params, opt.param_names, strict=True) if id(p) not in hook.seen]
    if ran and not missing:
        if any(p.grad is not None for p in opt._params):
            if any(p.grad is None and p.requires_grad for p in opt._params):  # unused, or replaced?
                _refuse_changed_model(opt)
            return
        hook.reset()
        raise RuntimeError("Birder.step(): backward ran, but every gradient is None now: zero_grad() between "
                           "backward() and step()? Call zero_grad() after step() (or before backward())")
    hook.reset()
    _refuse_changed_model(opt)
    frozen = [name for p, name in zip(opt._params, opt.param_names, strict=True) if not p.requires_grad]
    gradless = [name for p, name in zip(opt._params, opt.param_names, strict=True) if p.grad is None]
    unused = ("DDP waits for the gradient of a parameter unused in the loss unless built with "
              "find_unused_parameters=True")
    if frozen:
        what, why = (f"DDP's hook did not run for the bucket(s) of {_names(missing)}",
                     f"parameter(s) {_names(frozen)} were frozen after DDP was built: {unused} (then Birder "
                     "keeps frozen parameters in place)")
    elif ran or 0 < len(gradless) < len(opt._params):
        what = (f"DDP's hook did not run for the bucket(s) of {_names(missing)}" if ran else
                f"DDP's hook did not run, and parameter(s) {_names(gradless)} got no gradient")
        why = unused
    elif not gradless and all(g["lr"] == 0 for g in opt.param_groups) and not any(
            bool(p.grad.any()) for p in opt._params):
        what, why = ("no backward since the last step, zero gradients and lr 0: the way torch.distributed."
                     "checkpoint's get_state_dict / set_state_dict initialise an optimizer", "Birder does not "
                     "support them: every rank calls opt.state_dict(), rank 0 saves it, every rank loads it with "
                     "opt.load_state_dict()")
    else:
        what, why = ("no backward pass through the DDP model since the last step (its communication hook did "
                     "not run)", "call loss.backward() on the DDP model's output first (not the unwrapped "
                     "module's), and run the last micro-batch before step() outside ddp.no_sync() (under it DDP "
                     f"skips the hook); or, if a parameter was left out of the loss: {unused}")
    raise RuntimeError(f"Birder.step(): {what}; {why}")


def _refuse_changed_model(opt: Birder) -> None:
    """Raise one RuntimeError if the model's parameters are no longer the ones DDP and Birder were built with:
    one cast or moved (``model.to(torch.float64)``, ``.half()``: DDP's hooks stop seeing its gradient), or a
    layer replaced (its new parameters belong to neither). Run only when a parameter got no gradient, so it
    costs a normal step nothing."""
    cast = [f"{name} ({kind[0]} -> {p.dtype})" if p.dtype != kind[0] else f"{name} ({kind[1]} -> {p.device})"
            for name, p, kind in zip(opt.param_names, opt._params, opt._kinds, strict=True)
            if (p.dtype, p.device) != kind]
    if cast:
        raise RuntimeError(f"Birder.step(): parameter(s) {_names(cast)} were cast or moved after DDP and Birder "
                           "were built (model.to(...), .double(), .half()?): DDP's buckets no longer receive their "
                           "gradients. Cast or move the model before wrapping it in DistributedDataParallel "
                           "(torch.autocast for mixed precision)")
    held = {id(p) for p in opt._params} | {id(p) for _, p in opt._frozen_at_start}
    new = [name for name, p in opt._module.named_parameters() if id(p) not in held]
    if new:
        raise RuntimeError(f"Birder.step(): parameter(s) {_names(new)} are not the ones DDP and Birder were built "
                           "with (a layer replaced after the model was wrapped?): neither DDP nor Birder holds "
                           "them. Build a new DistributedDataParallel and Birder after changing the model")


def _check_group_settings(opt: Birder) -> None:
    """Each group's lr and weight decay as step() is about to use them (a scheduler may have set them): finite
    and >= 0, else one ValueError (every rank's scheduler computes the same, so every rank raises)."""
    for i, group in enumerate(opt.param_groups):
        for key in ("lr", "weight_decay"):
            try:
                check_real(f"param_groups[{i}][{key!r}]", group[key], 0.0, False)
            except ValueError as error:
                why = ("an LR schedule run past its end, or a lambda that goes negative?"
                       if isinstance(group[key], numbers.Real) else "set a Python float; a tensor lr is not taken")
                raise ValueError(f"Birder.step(): {error} ({why})") from None


def _calling_scaler_scale(optimizer: torch.optim.Optimizer) -> float | None:
    """The scale of the ``torch.amp.GradScaler`` (or ``torch.cuda.amp.GradScaler``) whose step() is calling
    ``optimizer.step()``, read from that call on the stack (after ``scaler.unscale_(optimizer)`` the scaler passes
    the optimizer no scale): a frame running ``GradScaler.step``'s code, or any frame of a function named ``step``
    whose ``self`` is a GradScaler (a subclass's override, a renamed or rewrapped torch), holding ``optimizer`` in
    a local; None if no GradScaler is calling it."""
    # Fails safe: a frame not recognised (torch renamed step() or its locals) gives None, and then every skip
    # counts towards max_consecutive_skips: a loop may stop early, never run on without a limit.
    frame = sys._getframe(1)
    while frame is not None:
        code, local = frame.f_code, frame.f_locals
        scaler = local.get("self")
        if ((code is torch.amp.GradScaler.step.__code__ or code.co_name == "step"
             and isinstance(scaler, (torch.amp.GradScaler, torch.cuda.amp.GradScaler)))
                and any(value is optimizer for value in local.values())):
            get_scale = getattr(scaler, "get_scale", None)
            return float(get_scale()) if callable(get_scale) else None
        frame = frame.f_back
    return None
