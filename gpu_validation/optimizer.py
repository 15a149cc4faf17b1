"""``Birder``: Algorithm 1 as a torch optimizer over a DDP model, adopted in one line.

    opt = Birder(ddp_model, lr=1e-3)          # registers its own DDP communication hook
    loss.backward(); opt.step(); opt.zero_grad()

Where the work happens, and why:

- **During backward**, the hook Birder registers leaves every bucket as it is (``.grad`` holds this rank's own
  local gradient, as under ``no_sync``) and starts one asynchronous all-gather per bucket of a 4-word record
  (``records.local_gradient_hook``): this rank's largest |gradient| and a checksum of the bucket's parameters among
  them. If any rank's gradient is non-finite, every rank's bucket is filled with NaN, so ``GradScaler`` sees the
  same overflow on every rank and backs off everywhere; if the ranks' parameters differ, step() raises naming
  them. Since ``.grad`` is local, any other optimizer stepping Birder's parameters is refused
  (``_refuse_other_optimizers``).
- **In step()**, the gradients of the trainable parameters are flattened (in ``parameters()`` order: that order
  gives every element its draw index), divided by the ``GradScaler``'s scale when one passed it, and go through
  Birder's 1-bit all-reduce (``comm``'s hierarchical or flat pipeline). The state is updated in place by the
  piecewise kernels of ``torch_birder``; u_bar comes back packed (1 bit per element) and the parameters move by
  line 16, x -= lr * (u_bar + weight_decay * x). The update never travels in ``.grad``.

With ``overlap=True`` the node's all-to-all of each bucket starts in the hook instead, and step() uses it only if
every rank of the node finds ``.grad`` bit-identical to what it sent (else it exchanges again): see ``overlap.Overlap``.

So whatever a training loop does to ``.grad`` between backward and step acts on the raw gradient *before* m and
b, as it would before AdamW: ``clip_grad_norm_`` clips this rank's local gradient, ``GradScaler.unscale_``
unscales it (or, without unscale_, step() divides by the scale the scaler passes: with its default power-of-two
scales both are exact, and the update equals Algorithm 1's on the unscaled gradients bit for bit), and
micro-batch accumulation without ``no_sync`` sums local gradients into one Birder step.

Faults: every collective has the process group's timeout (``comm.make_topology``); when one fails, the rank
waits briefly for the others to report the same iteration through the default store and raises one
``RuntimeError`` naming the ranks that did not (hung or dead); so does backward when the hook's all-gather fails.
Before DDP's own collectives in the first forward after construction, step() or load_state_dict() (its bucket
rebuild, its buffer broadcast) the ranks exchange a record on Birder's group (``_guard_ddp_forward``): a peer that
failed is named there, a rank that called state_dict() alone meets it, and an error from inside DDP's collectives
in any forward gets the same message.
A step skipped for a non-finite gradient names the ranks that had one, is counted (``skipped_steps``) and
logged; ``max_consecutive_skips`` in a row raise (a GradScaler's back-offs do not count while the scale it used is
above 1, only once it is at most 1; the scale is read from the calling ``GradScaler.step`` after ``unscale_``).
"""

from __future__ import annotations

import functools
import linecache
import logging
import math
import numbers
import os
import sys
import time
import weakref

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.autograd.graph import increment_version
from torch.optim.optimizer import register_optimizer_step_pre_hook

from birder_ref.draws import MASK32, SERVER_STREAM, stream_key
from gpu_validation import comm, layout, records
from gpu_validation import torch_birder as tb
from gpu_validation.overlap import Overlap

__all__ = ["Birder", "apply_update_", "FULL_FORMAT", "SHARD_FORMAT"]

log = logging.getLogger(__name__)

FULL_FORMAT = "birder-optimizer-full/1"
SHARD_FORMAT = "birder-optimizer-shard/1"
# In every state dict Birder saves: parameter 0's "step" as bytes, which torch's Adam-family optimizers convert with
# float() while loading (__setstate__), so AdamW.load_state_dict(birder_state) fails at once with this line.
FOREIGN_LOAD_GUARD = {0: {"step": b"gpu_validation.Birder's optimizer state: torch optimizers cannot load it; "
                                  b"convert it with Birder.to_adamw_state_dict() (docs/adoption.md), or start the new "
                                  b"optimizer afresh"}}
_VECTORS = ("m", "b_hat", "e")  # per worker; b = b_hat (T0 off, as the paper runs it)
_SAFE_SUM = float(torch.finfo(torch.float32).max) / 2  # node sums of values below this / G cannot overflow


def apply_update_(p: torch.Tensor, u_bar: torch.Tensor, lr: float, weight_decay: float) -> None:
    """Line 16 in place: p -= lr * (u_bar + weight_decay * p), the operations of ``birder_ref.update``."""
    p.sub_(lr * (u_bar + weight_decay * p))


def _apply_packed_update_(piece: torch.Tensor, bits: torch.Tensor, start: int, lr: float, weight_decay: float,
                          work: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    """``apply_update_`` on a contiguous piece (at most ``torch_birder.PIECE`` elements) whose u_bar is signs
    start .. start + n - 1 of the packed ``bits``, in preallocated buffers: the same operations, in the same
    order (weight_decay * p, + u_bar, * lr, subtracted), so the same bits. A float32 piece on CPU runs them on
    NumPy views (the coefficients rounded to float32 as torch rounds a Python scalar for a float32 tensor), with
    less per-call overhead than torch's eager dispatch on pieces this small; such writes do not advance the
    parameter's autograd version counter: the caller does (``increment_version``)."""
    n = piece.numel()
    first, last = start // 8, -(-(start + n) // 8)
    signs_all, term, index = work
    if piece.device.type == "cpu" and piece.dtype == torch.float32 and signs_all.dtype == torch.float32:
        f32 = np.float32
        signs, p, t = signs_all.numpy()[:8 * (last - first)], piece.detach().numpy(), term.numpy()[:n]
        bit = np.unpackbits(bits.numpy()[first:last])  # 0/1 bytes, most significant bit first
        bit += bit
        bit -= np.uint8(1)  # 2 b - 1: 255 (-1 as int8) or 1
        np.copyto(signs, bit.view(np.int8))  # +-1 exactly, the table's values
        np.multiply(p, f32(weight_decay), out=t)
        np.add(signs[start - 8 * first: start - 8 * first + n], t, out=t)
        t *= f32(lr)
        p -= t
        return
    index = index[:last - first]
    index.copy_(bits[first:last])
    table = tb._sign_table(piece.dtype, piece.device)
    torch.index_select(table, 0, index, out=signs_all[:8 * (last - first)].view(-1, 8))
    u_bar, term = signs_all[start - 8 * first: start - 8 * first + n], term[:n]
    torch.mul(piece, weight_decay, out=term)
    torch.add(u_bar, term, out=term)
    term.mul_(lr)
    piece.sub_(term)


def _check_real(name: str, value, low: float, low_open: bool, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    v = float(value)
    if (v <= low if low_open else v < low) or (high is not None and not v < high):
        bound = f"{'>' if low_open else '>='} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return v


def _check_count(name: str, value, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _layout(scheme: str, gpus_per_node, device: torch.device) -> tuple[int, int]:
    """(nodes, GPUs per node): in ``hierarchical``, from where the ranks really run (``layout``: host names
    exchanged once), ``gpus_per_node`` or torchrun's LOCAL_WORLD_SIZE checked against them; in ``flat``, every rank
    is a worker."""
    world = dist.get_world_size()
    env_world = os.environ.get("WORLD_SIZE")
    if env_world is not None and env_world.isdigit() and int(env_world) != world:
        raise ValueError(f"WORLD_SIZE={env_world} in the environment, but the process group has {world} ranks")
    if gpus_per_node is not None:
        gpus_per_node = _check_count("gpus_per_node", gpus_per_node, 1)
    if scheme != "hierarchical":
        return 1, world
    hosts = layout.exchange_hosts(device) if world > 1 else [layout.this_host()]
    g = layout.verified_gpus_per_node(hosts, gpus_per_node, os.environ.get("LOCAL_WORLD_SIZE"))
    if world % g:
        raise ValueError(f"gpus_per_node={g} does not divide the world size {world}")
    return world // g, g


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
        groups.append({"params": members, "lr": _check_real(f"param_groups[{i}]['lr']", group.get("lr", lr), 0.0,
                                                             True),
                       "weight_decay": _check_real(f"param_groups[{i}]['weight_decay']",
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
    gradients never pass Birder's hook, which checks them for NaN and across ranks)."""
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
    for name, child in ddp_model.module.named_modules():
        if isinstance(child, (nn.Embedding, nn.EmbeddingBag)) and child.sparse and child.weight.requires_grad:
            raise ValueError(f"module {name!r} is {type(child).__name__}(sparse=True): its gradient is sparse and "
                             "Birder takes dense gradients; build it with sparse=False")


def _refuse_other_optimizers(birder_ref):
    """A pre-step hook for every torch optimizer: one that holds parameters of a live Birder raises, naming them.
    .grad holds each rank's local gradient under Birder, so any other optimizer's step on those parameters
    would move each rank's copy differently."""
    def pre_step(optimizer, args, kwargs):
        birder = birder_ref()
        if birder is None or optimizer is birder:
            return None
        mine = birder._name_of_id
        shared = [mine[id(p)] for g in optimizer.param_groups for p in g["params"] if id(p) in mine]
        if shared:
            raise ValueError(f"{type(optimizer).__name__}.step(): it holds {len(shared)} parameter(s) that Birder "
                             f"also updates ({_names(shared)}); under "
                             "Birder .grad holds each rank's LOCAL gradient, so this step would make the ranks "
                             "drift apart. Give those parameters to Birder (param_groups=[...] for their own lr), "
                             "or wrap them in a separate DDP model for the other optimizer")
        return None

    return pre_step


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


def _ddp_forward_communicates(ddp: nn.parallel.DistributedDataParallel, backward_seen: bool) -> bool:
    """Whether this forward of ``ddp`` runs a collective of DDP's own before the module's forward (as its
    ``_pre_forward`` decides): the broadcast of the module's buffers, or the one bucket rebuild, in the first
    forward with gradients after a backward. Every rank gets the same answer; a yes where DDP then runs none
    costs one small exchange and nothing else (once per step: ``_guard_ddp_forward``)."""
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


def _guard_ddp_forward(birder_ref):
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


class Birder(torch.optim.Optimizer):
    """Birder (Algorithm 1 with Section 4's hierarchical 1-bit all-reduce) for a ``DistributedDataParallel`` model.

    Args:
        ddp_model: the DDP-wrapped model; Birder registers its communication hook on it (before the first
            backward). Only parameters with ``requires_grad`` carry state; frozen ones cost nothing.
        lr, weight_decay: line 16, x -= lr * (u_bar + weight_decay * x) (an LR scheduler may change ``lr``).
        beta, eps: Algorithm 1's moving-average factor and the constant added to b.
        seed: the draws' seed, the same on every rank (a non-negative integer below 2**32).
        scheme: "hierarchical" (a worker is a node; Section 4) or "flat" (every rank a worker).
        gpus_per_node: ranks per node. On several hosts it comes from the hosts (exchanged once; ``layout``) and
            a value or a ``LOCAL_WORLD_SIZE`` that disagrees is refused; on one host, default torchrun's
            LOCAL_WORLD_SIZE, else one node of all ranks (simulated nodes).
        param_groups: optional groups of the DDP model's trainable parameters, each with its own "lr" and
            "weight_decay" (default: the arguments above); parameters no group names form a last group.
        max_consecutive_skips: this many steps in a row skipped for non-finite gradients raise RuntimeError
            (skips while a GradScaler's scale is above 1 are its back-offs, not counted).
        overlap: start the intra-node exchange of each bucket during backward (``overlap.Overlap``); step() uses it only
            when .grad is bit-identical to what was sent on every rank of the node, else exchanges again. Off by
            default: on gloo/CPU it measured slower (benchmarks/hook_speed.py --hooks birder birder_no_overlap).

    ``step()`` is collective (every rank calls it once per backward); so are ``state_dict()`` (a record, then one
    all-gather of every rank's shard, over Birder's group of all ranks) and ``to_adamw_state_dict()``; nothing else
    is. A DDP model over a subgroup is refused; so are gradients all-reduced between backward and step()
    (``records.refuse_reduced_gradients``).
    """

    _step_supports_amp_scaling = True  # GradScaler passes grad_scale / found_inf instead of unscaling for us

    def __init__(self, ddp_model: nn.parallel.DistributedDataParallel, lr: float = 1e-3, weight_decay: float = 0.0,
                 beta: float = 0.95, eps: float = 1e-8, seed: int = 0, scheme: str = "hierarchical",
                 gpus_per_node: int | None = None, *, param_groups: list[dict] | None = None,
                 max_consecutive_skips: int = 20, overlap: bool = False):
        if not isinstance(ddp_model, nn.parallel.DistributedDataParallel):
            raise ValueError(f"ddp_model must be a torch.nn.parallel.DistributedDataParallel, got "
                             f"{type(ddp_model).__name__}; the wrapped model is where the client keeps it: {RECIPES}")
        _refuse_other_process_group(ddp_model)
        lr = _check_real("lr", lr, 0.0, True)
        weight_decay = _check_real("weight_decay", weight_decay, 0.0, False)
        self.beta = _check_real("beta", beta, 0.0, True, 1.0)
        self.eps = _check_real("eps", eps, 0.0, True)
        self.seed = _check_count("seed", seed)
        if self.seed > MASK32:
            raise ValueError(f"seed must be below 2**32, got {seed}")
        if scheme not in comm.PIPELINE_SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(comm.PIPELINE_SCHEMES)}, got {scheme!r}")
        self.max_consecutive_skips = _check_count("max_consecutive_skips", max_consecutive_skips, 1)
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
        n_nodes, gpus = _layout(scheme, gpus_per_node, params[0].device)
        super().__init__(groups, {"lr": lr, "weight_decay": weight_decay})
        self._sealed = True
        self.param_names = [name for name, _ in named]  # in element order: the draws' index order
        self._params = params
        self._sample = records.gradient_sample(params)
        self._name_of_id = {id(p): name for name, p in named}
        self._frozen_at_start = [(name, p) for name, p in ddp_model.module.named_parameters() if not p.requires_grad]
        self._module = ddp_model.module  # to name parameters replaced, cast or moved since (``_refuse_changed_model``)
        self._kinds = [(p.dtype, p.device) for p in params]
        self._stepped_while_frozen: set[int] = set()  # ids of parameters an update found frozen: their state moved
        group_of = {id(p): i for i, g in enumerate(self.param_groups) for p in g["params"]}
        self._group_of = [group_of[id(p)] for p in params]
        handle = register_optimizer_step_pre_hook(_refuse_other_optimizers(weakref.ref(self)))
        weakref.finalize(self, handle.remove)
        self.device = params[0].device
        self.offsets = []
        offset = 0
        for p in params:
            self.offsets.append(offset)
            offset += p.numel()
        self.dim = offset
        self.topology = comm.make_topology(scheme, n_nodes, gpus)
        self.length = comm.padded_length(self.topology, self.dim)
        if self.length > 2**32:
            raise ValueError(f"element indices must fit in 32 bits; the model has {self.dim} trainable elements")
        self.timeout_s = comm.process_group_timeout().total_seconds()
        self._gradients_differed = False
        shard = comm.shard_slice(self.topology, self.length)
        chunk = comm.chunk_slice(self.topology, self.length)
        n_shard, n_chunk = shard.stop - shard.start, chunk.stop - chunk.start
        self.m, self.b_hat, self.e = (torch.zeros(n_shard, dtype=torch.float32, device=self.device) for _ in _VECTORS)
        self.server_error = torch.zeros(n_chunk, dtype=torch.float32, device=self.device)
        self.t = 0
        self.skipped_steps = 0
        self.consecutive_skips = 0
        self.last_skipped_ranks: list[int] = []
        self.overlapped_steps = 0  # steps whose intra-node exchange started during backward and was used
        self.overlap_fallbacks = 0  # steps whose .grad changed after backward (clip, unscale_): exchanged again
        self._hook_state = records.HookState(dist.get_world_size(), self.topology.world_group, lambda: self.t + 1,
                                             functools.partial(records.fault_message, self),
                                             lambda: records.settings_checksum(self.param_groups))
        self._overlap = Overlap(self) if overlap and self.topology.worker_group is not None else None
        if self._overlap is not None:
            self._hook_state.on_bucket = self._overlap.on_bucket
        try:
            ddp_model.register_comm_hook(self._hook_state, records.local_gradient_hook)
        except RuntimeError as error:
            if "only be called once" not in str(error):
                raise
            raise ValueError("this DDP model already has a communication hook (a register_comm_hook line kept from "
                             "an fp16/PowerSGD script, or an earlier Birder on it): Birder registers its own, so drop "
                             "that line, or wrap the model in a new DistributedDataParallel for a new Birder") from None
        before, after = _guard_ddp_forward(weakref.ref(self))
        for handle in (ddp_model.register_forward_pre_hook(before),
                       ddp_model.register_forward_hook(after, always_call=True)):
            weakref.finalize(self, handle.remove)
        self._fault_stall: tuple[int, str] | None = None  # (step, phase): a test stalls here (fault injection)
        self._forward_record_due = True  # the next forward running a collective of DDP's exchanges a record first

    def __getstate__(self):
        raise ValueError("Birder cannot be pickled or copied (torch.save(opt), copy.deepcopy(opt)): it holds process "
                         "groups and the hook it registered on its DDP model, which a copy would not be attached "
                         "to. Save opt.state_dict() (every rank calls it) and restore it with opt.load_state_dict() "
                         "into a Birder built on the new DDP model")

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_sealed", False):
            raise ValueError("Birder's parameters are the DDP model's trainable ones: add_param_group is refused; "
                             "give per-group lr / weight_decay as Birder(ddp_model, param_groups=[...])")
        super().add_param_group(param_group)

    # ---- the step ----

    @torch.no_grad()
    def step(self, closure=None):
        """One Birder step from the gradients in ``.grad`` (collective). Returns the closure's loss, if any."""
        self._forward_record_due = True
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_trainable_set()
        self._check_group_settings()
        hook_bad = sorted(self._hook_state.nonfinite_ranks)
        largest = max(self._hook_state.largest.values(), default=0.0)
        drifted, settings_differ = bool(self._hook_state.drifted), self._hook_state.settings_differ
        self._gradients_differed = self._hook_state.gradients_differ  # in backward: then step()'s must differ too
        self._hook_state.reset()
        if settings_differ:  # every rank saw the same records: all raise here, together, before any update
            raise RuntimeError(records.settings_message(self))
        if drifted:  # every rank saw the same records: all raise here, together
            raise RuntimeError(records.drift_message(self))
        record = records.start(self, records.STEP)  # waited for once the gradients are flattened: overlaps that
        scale = getattr(self, "grad_scale", None)  # set by GradScaler.step: the scale still in .grad
        found_inf = getattr(self, "found_inf", None)
        grad = self._buffer("grad")  # reused: a fresh 4 B/element allocation each step costs page faults
        overlap = self._overlap
        if overlap is not None and (hook_bad or found_inf is not None and float(found_inf) > 0):
            overlap.drain()
        elif overlap is not None and overlap.sent:
            topo = self.topology
            records.finish(self, record)
            record = None
            changed = torch.tensor([float(not overlap.unchanged(scale))], device=self.device)
            agreed = self._collective("intra-node overlap check", topo.worker_group, lambda: comm.all_gather_rows(
                changed, topo.worker_group, topo.shards_per_worker))
            if not bool(agreed.any()):
                self.overlapped_steps += 1
                return self._finish_step(loss, grad, largest, overlap)
            self.overlap_fallbacks += 1
            overlap.drain()
            overlap.frontier, overlap.sent = self.length, False
        for p, start in zip(self._params, self.offsets, strict=True):
            if p.grad is None or not p.requires_grad:  # frozen since Birder was built: gradient 0, and it stays put
                grad[start:start + p.numel()] = 0.0
            elif p.grad.is_sparse:
                raise ValueError("Birder takes dense gradients")
            else:
                grad[start:start + p.numel()] = p.grad.reshape(-1)
        records.finish(self, record)
        if scale is not None:
            grad.div_(scale.to(device=self.device, dtype=torch.float32))  # exact for powers of two
        local_bad = bool(found_inf is not None and float(found_inf) > 0)
        if hook_bad:  # every rank knows it from the hook: all skip, no collective needed
            # a GradScaler backs off after this step: its skips count towards the limit only once the scale it used
            # is at most 1 (then the gradient itself overflows, a NaN from the model, say)
            used = None if found_inf is None else float(scale) if scale is not None else _calling_scaler_scale(self)
            self._skip(hook_bad, backoff=used is not None and used > 1.0)
            return loss
        if local_bad:
            raise RuntimeError("Birder.step(): GradScaler found a non-finite gradient on this rank that was finite "
                               "in backward (something changed .grad after backward); the ranks would disagree")
        if scale is not None:
            largest = largest / float(scale)
        if overlap is not None:
            overlap.frontier, overlap.sent = self.length, False  # nothing sent matches: exchange it all now
        return self._finish_step(loss, grad, largest, overlap)

    def _check_trainable_set(self) -> None:
        """Raise one RuntimeError (on every rank alike) if step() cannot mean what the loop intends: a parameter
        frozen when Birder was built and unfrozen since (neither DDP nor Birder holds it: it would never train); one
        frozen after Birder was built, through at least one update, and unfrozen since (its state drifted); no
        backward since the last step (named as torch.distributed.checkpoint's state initialisation when it looks
        like one); a bucket whose hook never ran (a parameter that got no gradient, or was frozen after DDP was
        built, which DDP without find_unused_parameters waits for); or every gradient gone (zero_grad() before
        step())."""
        unfrozen = [name for name, p in self._frozen_at_start if p.requires_grad]
        if unfrozen:
            raise RuntimeError(f"Birder.step(): parameter(s) {_names(unfrozen)} were frozen when DDP and Birder were "
                               "built and have requires_grad=True now; neither holds them, so they would never train: "
                               "wrap the model in a new DistributedDataParallel and build a new Birder after "
                               "unfreezing (its state starts afresh)")
        refrozen = [name for p, name in zip(self._params, self.param_names, strict=True)
                    if p.requires_grad and id(p) in self._stepped_while_frozen]
        if refrozen:
            raise RuntimeError(f"Birder.step(): parameter(s) {_names(refrozen)} were frozen after Birder was built "
                               "and have requires_grad=True again: while frozen they stayed put, but Algorithm 1 kept "
                               "moving their m, b and e on zero gradients, so their next update would start from "
                               "that drifted state. To pause and resume a parameter's training, give it its own "
                               "param group and set that group's lr to 0 meanwhile (its state keeps following its "
                               "gradient); or build a new DDP model and Birder after unfreezing (state starts afresh)")
        hook, ran = self._hook_state, self._hook_state.backward_ran
        missing = [name for p, name in zip(self._params, self.param_names, strict=True) if id(p) not in hook.seen]
        if ran and not missing:
            if any(p.grad is not None for p in self._params):
                if any(p.grad is None and p.requires_grad for p in self._params):  # unused, or replaced?
                    self._refuse_changed_model()
                return
            hook.reset()
            raise RuntimeError("Birder.step(): backward ran, but every gradient is None now: zero_grad() between "
                               "backward() and step()? Call zero_grad() after step() (or before backward())")
        hook.reset()
        self._refuse_changed_model()
        frozen = [name for p, name in zip(self._params, self.param_names, strict=True) if not p.requires_grad]
        gradless = [name for p, name in zip(self._params, self.param_names, strict=True) if p.grad is None]
        unused = ("DDP waits for the gradient of a parameter unused in the loss unless built with "
                  "find_unused_parameters=True")
        if frozen:
            what, why = (f"DDP's hook did not run for the bucket(s) of {_names(missing)}",
                         f"parameter(s) {_names(frozen)} were frozen after DDP was built: {unused} (then Birder "
                         "keeps frozen parameters in place)")
        elif ran or 0 < len(gradless) < len(self._params):
            what = (f"DDP's hook did not run for the bucket(s) of {_names(missing)}" if ran else
                    f"DDP's hook did not run, and parameter(s) {_names(gradless)} got no gradient")
            why = unused
        elif not gradless and all(g["lr"] == 0 for g in self.param_groups) and not any(
                bool(p.grad.any()) for p in self._params):
            what, why = ("no backward since the last step, zero gradients and lr 0: the way torch.distributed."
                         "checkpoint's get_state_dict / set_state_dict initialise an optimizer", "Birder does not "
                         "support them: every rank calls opt.state_dict(), rank 0 saves it, every rank loads it with "
                         "opt.load_state_dict()")
        else:
            what, why = ("no backward pass through the DDP model since the last step (its communication hook did "
                         "not run)", "call loss.backward() on the DDP model's output first (not the unwrapped "
                         f"module's); or, if a parameter was left out of the loss: {unused}")
        raise RuntimeError(f"Birder.step(): {what}; {why}")

    def _refuse_changed_model(self) -> None:
        """Raise one RuntimeError if the model's parameters are no longer the ones DDP and Birder were built with:
        one cast or moved (``model.to(torch.float64)``, ``.half()``: DDP's hooks stop seeing its gradient), or a
        layer replaced (its new parameters belong to neither). Run only when a parameter got no gradient, so it
        costs a normal step nothing."""
        cast = [f"{name} ({kind[0]} -> {p.dtype})" if p.dtype != kind[0] else f"{name} ({kind[1]} -> {p.device})"
                for name, p, kind in zip(self.param_names, self._params, self._kinds, strict=True)
                if (p.dtype, p.device) != kind]
        if cast:
            raise RuntimeError(f"Birder.step(): parameter(s) {_names(cast)} were cast or moved after DDP and Birder "
                               "were built (model.to(...), .double(), .half()?): DDP's buckets no longer receive their "
                               "gradients. Cast or move the model before wrapping it in DistributedDataParallel "
                               "(torch.autocast for mixed precision)")
        held = {id(p) for p in self._params} | {id(p) for _, p in self._frozen_at_start}
        new = [name for name, p in self._module.named_parameters() if id(p) not in held]
        if new:
            raise RuntimeError(f"Birder.step(): parameter(s) {_names(new)} are not the ones DDP and Birder were built "
                               "with (a layer replaced after the model was wrapped?): neither DDP nor Birder holds "
                               "them. Build a new DistributedDataParallel and Birder after changing the model")

    def _check_group_settings(self) -> None:
        """Each group's lr and weight decay as step() is about to use them (a scheduler may have set them): finite
        and >= 0, else one ValueError (every rank's scheduler computes the same, so every rank raises)."""
        for i, group in enumerate(self.param_groups):
            for key in ("lr", "weight_decay"):
                try:
                    _check_real(f"param_groups[{i}][{key!r}]", group[key], 0.0, False)
                except ValueError as error:
                    why = ("an LR schedule run past its end, or a lambda that goes negative?"
                           if isinstance(group[key], numbers.Real) else "set a Python float; a tensor lr is not taken")
                    raise ValueError(f"Birder.step(): {error} ({why})") from None

    def _finish_step(self, loss, grad: torch.Tensor, largest: float, overlap: Overlap | None):
        bits = self._one_bit_allreduce(grad, largest, overlap)
        del grad
        if bits is None:
            return loss
        work = self.__dict__.setdefault("_update_work", {})
        for p, start, g in zip(self._params, self.offsets, self._group_of, strict=True):
            if not p.requires_grad:  # stays put, but its m, b and e moved on a zero gradient: no unfreezing it now
                self._stepped_while_frozen.add(id(p))
                continue
            lr, decay = self.param_groups[g]["lr"], self.param_groups[g]["weight_decay"]
            if p.is_contiguous():  # piece by piece, so the temporaries stay in cache (element-wise: same bits)
                if p.dtype not in work:  # (signs, decay term, byte indices), reused for every piece and step
                    work[p.dtype] = (torch.empty(tb.PIECE + 16, dtype=p.dtype, device=p.device),
                                     torch.empty(tb.PIECE, dtype=p.dtype, device=p.device),
                                     torch.empty(tb.PIECE // 8 + 2, dtype=torch.int64, device=p.device))
                flat = p.view(-1)
                for lo in range(0, flat.numel(), tb.PIECE):
                    piece = flat[lo:lo + tb.PIECE]
                    _apply_packed_update_(piece, bits, start + lo, lr, decay, work[p.dtype])
                increment_version(p)  # NumPy writes bypass autograd's check that saved tensors are unchanged
            else:
                apply_update_(p, tb.unpack_range(bits, start, p.numel(), p.dtype).view_as(p), lr, decay)
        return loss

    def _one_bit_allreduce(self, grad: torch.Tensor, largest: float,
                           overlap: Overlap | None = None) -> torch.Tensor | None:
        """The pipeline of ``comm.one_bit_allreduce`` with in-place state; None if the step is skipped.

        ``largest`` bounds every rank's |gradient| (from the hook's all-gather, so every rank has the same
        value): when G x largest stays below float32's maximum / 2, and so does G x each rank's own largest
        |gradient| now (each rank checks its own), no node sum can overflow and the step counts without a check;
        otherwise every rank checks its shard of the node mean and all agree by an all-gather.
        """
        topo, t = self.topology, self.t + 1
        shard, chunk = comm.shard_slice(topo, self.length), comm.chunk_slice(topo, self.length)
        servers = topo.n_workers
        checked = not largest * topo.shards_per_worker < _SAFE_SUM  # the same decision on every rank
        if not checked:  # then each rank's own |gradient| now (it may have grown since backward: a second backward
            # through a retained graph, a hook) must keep G x it below the bound, which bounds every node sum
            low, high = torch.aminmax(grad)  # one vectorised pass, no temporary
            now = max(-float(low), float(high))
            if not now * topo.shards_per_worker < _SAFE_SUM:
                raise RuntimeError(f"Birder.step(): this rank's gradient changed after backward to a largest "
                                   f"|value| of {now:g} (a NaN/inf, or too large for a float32 sum over "
                                   f"{topo.shards_per_worker} ranks), but the ranks agreed in backward that no "
                                   "overflow check was needed: change .grad before backward ends (a tensor "
                                   "hook), not after it")
        phases = comm.pipeline_phases(topo, self.length)
        rows = self._collective("intra-node reduce-scatter", topo.worker_group, lambda: comm.run_phase(
            phases.intra_reduce_scatter, grad, topo.worker_group, None if topo.worker_group is None
            else self._buffer("rows")) if overlap is None else overlap.rows(self._buffer("rows"))
        )  # (G, shard): the node mean is taken piece by piece
        if checked:
            worker_grad = tb._node_mean(rows)
            bad = torch.tensor([float(not bool(torch.isfinite(worker_grad).all()))], device=self.device)
            flags = self._collective("node-sum overflow check", dist.group.WORLD,
                                     lambda: comm.all_gather_rows(bad, dist.group.WORLD, dist.get_world_size()))
            bad_ranks = [r for r, f in enumerate(flags.reshape(-1).tolist()) if f > 0]
            if bad_ranks:
                self._skip(bad_ranks, "a node sum overflowed float32 on the shard of")
                return None
        packed = tb.worker_step_packed_(self.m, self.b_hat, self.e, rows, self.beta, self.eps,
                                        stream_key(self.seed, t, topo.worker), shard.start)
        received = self._collective("inter-node all-to-all", topo.server_group,
                                    lambda: comm.run_phase(phases.inter_all_to_all, packed, topo.server_group))
        packed_chunk = tb.server_step_packed_(received, self.server_error, stream_key(self.seed, t, SERVER_STREAM),
                                              chunk.start, n_workers=servers)
        shard_bits = self._collective("inter-node all-gather", topo.server_group,
                                      lambda: comm.run_phase(phases.inter_all_gather, packed_chunk, topo.server_group))
        bits = self._collective("intra-node all-gather", topo.worker_group, lambda: comm.run_phase(
            phases.intra_all_gather, shard_bits.reshape(-1), topo.worker_group))
        self.t = t
        self.consecutive_skips = 0
        return bits.reshape(-1)

    def _buffer(self, name: str) -> torch.Tensor:
        """A padded float32 work vector kept between steps (its tail, the padding, stays zero)."""
        buffers = self.__dict__.setdefault("_buffers", {})
        if name not in buffers:
            buffers[name] = torch.zeros(self.length, dtype=torch.float32, device=self.device)
        return buffers[name]

    def _skip(self, bad_ranks: list[int], why: str = "a non-finite gradient on", backoff: bool = False) -> None:
        """Count a step every rank skips; ``backoff``: a GradScaler's (not counted towards the limit)."""
        self.skipped_steps += 1
        self.consecutive_skips += 0 if backoff else 1
        self.last_skipped_ranks = bad_ranks
        log.warning("Birder: step %d skipped on every rank: %s rank(s) %s (%d skipped in all, %d in a row%s)",
                    self.t + 1, why, bad_ranks, self.skipped_steps, self.consecutive_skips,
                    "; a GradScaler back-off, not counted towards max_consecutive_skips" if backoff else "")
        if self.consecutive_skips >= self.max_consecutive_skips:
            raise RuntimeError(f"Birder: {self.consecutive_skips} consecutive steps skipped (limit "
                               f"max_consecutive_skips={self.max_consecutive_skips}): {why} rank(s) {bad_ranks} "
                               "(a GradScaler's back-offs count only once its scale is at most 1)")

    def _exchange_record(self, doing: int) -> None:
        """One all-gather over Birder's group of all ranks of what this rank is doing at which step (a record, as the
        hook's): raises at once on every rank unless all do the same (``records.check_records``)."""
        records.finish(self, records.start(self, doing))

    def _collective(self, phase: str, group, run):
        """Run one collective; on failure (timeout, dead peer) raise one error naming the ranks that went silent."""
        if group is None:
            return run()
        if self._fault_stall == (self.t + 1, phase):
            time.sleep(1e6)  # fault injection for the tests: a rank stuck inside Birder's collectives
        try:
            return run()
        except RuntimeError as error:
            raise RuntimeError(records.fault_message(self, phase, group, error)) from error

    # ---- checkpoints ----

    def _config(self) -> dict:
        topo = self.topology
        return {"scheme": topo.scheme, "n_workers": topo.n_workers, "dim": self.dim, "seed": self.seed,
                "beta": self.beta, "eps": self.eps}

    def _groups(self) -> list[dict]:
        """Each group's lr, weight_decay and parameters (as positions in element order), as torch saves them."""
        position = {id(p): i for i, p in enumerate(self._params)}
        return [{"lr": g["lr"], "weight_decay": g["weight_decay"], "params": [position[id(p)] for p in g["params"]]}
                for g in self.param_groups]

    def _counters(self) -> dict:
        return {"t": self.t, "skipped_steps": self.skipped_steps, "consecutive_skips": self.consecutive_skips}

    def state_dict(self) -> dict:
        """The full state: every worker's m, b_hat, e and the whole server error, in element order (collective).

        Issues two all-gathers over Birder's group of all ranks (a record saying "state_dict()", then every rank's
        shards, concatenated); every rank must call it. If only some do (``if rank == 0: opt.state_dict()``), the
        record meets the others' backward record and every rank raises one clear error at once;
        and every rank gets the same dict, so rank 0 can save it and every rank can load that one file. Loads on
        any layout with the same number of workers (nodes in hierarchical, ranks in flat).
        """
        topo, world, group = self.topology, dist.get_world_size(), self.topology.world_group
        self._exchange_record(records.STATE_DICT)  # a rank in backward or forward meets it: both sides raise at once
        mine = torch.cat([self.m, self.b_hat, self.e, self.server_error])
        rows = self._collective("state_dict all-gather", group,
                                lambda: comm.all_gather_rows(mine, group, world)).cpu()
        n_shard = self.m.numel()
        full = {name: torch.zeros(topo.n_workers, self.length) for name in _VECTORS}
        server = torch.zeros(self.length)
        for rank in range(world):
            worker, shard = topo.worker_of(rank), comm.shard_slice(topo, self.length, rank)
            for i, name in enumerate(_VECTORS):
                full[name][worker, shard] = rows[rank, i * n_shard:(i + 1) * n_shard]
            server[comm.chunk_slice(topo, self.length, rank)] = rows[rank, 3 * n_shard:]
        state = {"format": FULL_FORMAT, **self._config(), **self._counters(),
                 **{name: full[name][:, :self.dim].clone() for name in _VECTORS},
                 "server_error": server[:self.dim].clone(), **FOREIGN_LOAD_GUARD}
        return {"state": state, "param_groups": self._groups()}

    def sharded_state_dict(self) -> dict:
        """This rank's shard only (no collective): each rank saves its own file; loads on the same layout only."""
        topo = self.topology
        state = {"format": SHARD_FORMAT, **self._config(), "rank": topo.rank, "n_nodes": topo.n_nodes,
                 "gpus_per_node": topo.gpus_per_node, **self._counters(),
                 **{name: getattr(self, name).detach().cpu().clone() for name in (*_VECTORS, "server_error")},
                 **FOREIGN_LOAD_GUARD}
        return {"state": state, "param_groups": self._groups()}

    def to_adamw_state_dict(self, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> dict:
        """A ``torch.optim.AdamW`` state dict that continues from this Birder (collective: every rank calls it, as
        ``state_dict()``), to leave Birder for AdamW. Load it into ``AdamW([{"params": g["params"]} for g in
        opt.param_groups])`` (the trainable parameters in Birder's groups, in the same order; without
        ``param_groups``, ``[p for p in model.parameters() if p.requires_grad]``): each group keeps its lr and
        weight decay (line 16's decay is AdamW's decoupled one), ``step`` is Birder's t, ``exp_avg`` the workers'
        mean m (both are moving averages of the gradient) and ``exp_avg_sq`` the square of the workers' mean b
        (Birder tracks the mean of |g|, AdamW of g^2: an estimate, low by the gradient's variance)."""
        full = self.state_dict()["state"]
        m, b = full["m"].mean(dim=0), full["b_hat"].mean(dim=0)
        adamw = torch.optim.AdamW([{"params": g["params"], "lr": g["lr"], "weight_decay": g["weight_decay"]}
                                   for g in self.param_groups], betas=betas, eps=eps)
        layout = adamw.state_dict()  # torch's own group format, numbering the parameters group by group
        index = {id(p): i for i, p in enumerate(p for g in adamw.param_groups for p in g["params"])}
        state = {}
        for p, start in zip(self._params, self.offsets, strict=True):
            span = slice(start, start + p.numel())
            state[index[id(p)]] = {"step": torch.tensor(float(self.t)), "exp_avg": m[span].view_as(p).to(p.dtype),
                                   "exp_avg_sq": b[span].square().view_as(p).to(p.dtype)}
        return {"state": state, "param_groups": layout["param_groups"]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore ``state_dict()``'s (or ``sharded_state_dict()``'s) output. Everything is checked first: any
        problem raises one ValueError and leaves the optimizer unchanged."""
        state, groups = self._check_envelope(state_dict)
        fmt = state.get("format")
        if fmt == FULL_FORMAT:
            shapes = {**{name: (self.topology.n_workers, self.dim) for name in _VECTORS}, "server_error": (self.dim,)}
            extra = ()
        elif fmt == SHARD_FORMAT:
            shapes = {**{name: tuple(self.m.shape) for name in _VECTORS},
                      "server_error": tuple(self.server_error.shape)}
            extra = ("rank", "n_nodes", "gpus_per_node")
        else:
            raise ValueError(f"Birder state format {fmt!r}: expected {FULL_FORMAT!r} or {SHARD_FORMAT!r}")
        expected = {"format", *self._config(), *self._counters(), *shapes, *extra, *FOREIGN_LOAD_GUARD}
        missing, unknown = sorted(map(str, expected - set(state))), sorted(map(str, set(state) - expected))
        if missing or unknown:
            raise ValueError(f"Birder state: missing keys {missing}, unknown keys {unknown}")
        mine = self._config()
        if extra:
            topo = self.topology
            mine.update(rank=topo.rank, n_nodes=topo.n_nodes, gpus_per_node=topo.gpus_per_node)
        for key, value in mine.items():
            if type(state[key]) is not type(value) or state[key] != value:
                hint = (" (a sharded checkpoint loads only on the layout that saved it: save state_dict()'s full form "
                        "to change layouts)" if key in extra else
                        " (the workers' state cannot be split or merged)" if key == "n_workers" else
                        f" (build Birder with {key}={state[key]!r} to resume this state; the draws and m, b, e "
                        "belong to it)" if key in ("seed", "beta", "eps") else "")
                raise ValueError(f"Birder state was saved with {key}={state[key]!r}, this run has {value!r}{hint}")
        t = _check_count("Birder state 't'", state["t"])
        skipped = _check_count("Birder state 'skipped_steps'", state["skipped_steps"])
        consecutive = _check_count("Birder state 'consecutive_skips'", state["consecutive_skips"])
        if consecutive > skipped:
            raise ValueError(f"Birder state: consecutive_skips={consecutive} exceeds skipped_steps={skipped}")
        for name, shape in shapes.items():
            v = state[name]
            if not isinstance(v, torch.Tensor) or v.dtype != torch.float32 or tuple(v.shape) != shape or v.is_sparse:
                got = f"{v.dtype} {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(f"Birder state {name!r} must be a dense float32 tensor of shape {shape}, got {got}")
            if not bool(torch.isfinite(v).all()):
                raise ValueError(f"Birder state {name!r} holds a NaN or an infinity")
        if bool((state["b_hat"] < 0).any()):
            raise ValueError("Birder state 'b_hat' (b) holds a negative value; it is a mean of |g|")
        for name in ("e", "server_error"):  # |y| <= 3 and Q(y) = sign(y) beyond [-1, 1] keep every error in [-2, 2]
            if bool((state[name].abs() > 2).any()):
                raise ValueError(f"Birder state {name!r} holds a value outside [-2, 2], which Algorithm 1 never makes")
        # everything checked: now change the optimizer
        if fmt == FULL_FORMAT:
            topo, n = self.topology, self.dim
            shard, chunk = comm.shard_slice(topo, self.length), comm.chunk_slice(topo, self.length)
            for name in _VECTORS:
                row = torch.zeros(self.length)
                row[:n] = state[name][topo.worker]
                getattr(self, name).copy_(row[shard])
            server = torch.zeros(self.length)
            server[:n] = state["server_error"]
            self.server_error.copy_(server[chunk])
        else:
            for name in (*_VECTORS, "server_error"):
                getattr(self, name).copy_(state[name])
        self.t, self.skipped_steps, self.consecutive_skips = t, skipped, consecutive
        for group, saved in zip(self.param_groups, groups, strict=True):
            group["lr"], group["weight_decay"] = float(saved["lr"]), float(saved["weight_decay"])
        self._hook_state.reset()
        self._forward_record_due = True

    def _check_envelope(self, state_dict) -> tuple[dict, list]:
        if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
            raise ValueError("Birder state_dict must be a dict with exactly the keys 'state' and 'param_groups'")
        state, groups = state_dict["state"], state_dict["param_groups"]
        if not isinstance(state, dict):
            raise ValueError(f"Birder state_dict['state'] must be a dict, got {type(state).__name__}")
        mine = self._groups()
        if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
            raise ValueError("Birder state_dict['param_groups'] must be a non-empty list of dicts")
        for i, group in enumerate(groups):
            if set(group) != {"lr", "weight_decay", "params"}:
                raise ValueError(f"Birder param group keys must be lr, weight_decay, params; got {sorted(group)}")
            _check_real(f"param_groups[{i}]['lr']", group["lr"], 0.0, True)
            _check_real(f"param_groups[{i}]['weight_decay']", group["weight_decay"], 0.0, False)
        saved = [g["params"] for g in groups]
        if saved != [g["params"] for g in mine]:
            count = sum(len(p) for p in saved if isinstance(p, list))
            raise ValueError(f"Birder state holds {count} parameters in {len(saved)} group(s) {saved}; this model "
                             f"has {len(self._params)} trainable ones in {len(mine)} group(s) "
                             f"{[g['params'] for g in mine]}")
        return state, groups
