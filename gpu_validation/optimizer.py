"""``Birder``: Algorithm 1 as a torch optimizer over a DDP model, adopted in one line.

    opt = Birder(ddp_model, lr=1e-3)          # registers its own DDP communication hook
    loss.backward(); opt.step(); opt.zero_grad()

``Birder.step`` reads as Algorithm 1, top to bottom, in one screen. Around it: ``guards`` (what Birder refuses, and
the checks that keep its ranks in step: one entry point per concern), ``records`` (what the ranks tell each other
besides the algorithm's bits; the fault messages), ``checkpoint`` (its state dicts, checked on loading),
``overlap`` (``overlap=True``), ``torch_birder`` (the kernels) and ``comm`` (the 1-bit all-reduce's phases).

Where the work happens, and why:

- **During backward**, the hook Birder registers leaves every bucket as it is (``.grad`` holds this rank's own
  local gradient, as under ``no_sync``) and starts one asynchronous all-gather per bucket of a 4-word record
  (``records.local_gradient_hook``): this rank's largest |gradient| and a checksum of the bucket's parameters among
  them. If any rank's gradient is non-finite, every rank's bucket is filled with NaN, so ``GradScaler`` sees the
  same overflow on every rank and backs off everywhere; if the ranks' parameters differ, step() raises naming
  them. Since ``.grad`` is local, any other optimizer stepping Birder's parameters is refused
  (``guards.refuse_other_optimizers``).
- **In step()**, the gradients of the trainable parameters are flattened (in ``parameters()`` order: that order
  gives every element its draw index), divided by the ``GradScaler``'s scale when one passed it, and go through
  Birder's 1-bit all-reduce (``comm``'s hierarchical or flat pipeline). The state is updated in place by the
  piecewise kernels of ``torch_birder``; u_bar comes back packed (1 bit per element) and the parameters move by
  line 16, x -= lr * (u_bar + weight_decay * x). The update never travels in ``.grad``.

With ``overlap=True`` the node's all-to-all of each bucket starts in the hook instead, and step() uses it only if
every rank of the node finds ``.grad`` bit-identical to what it sent (else it exchanges again): see
``overlap.Overlap``.

So whatever a training loop does to ``.grad`` between backward and step acts on the raw gradient *before* m and
b, as it would before AdamW: ``clip_grad_norm_`` clips this rank's local gradient, ``GradScaler.unscale_``
unscales it (or, without unscale_, step() divides by the scale the scaler passes: with its default power-of-two
scales both are exact, and the update equals Algorithm 1's on the unscaled gradients bit for bit), and
micro-batch accumulation without ``no_sync`` sums local gradients into one Birder step.

Faults: every collective has the process group's timeout (``comm.make_topology``); when one fails, the rank
waits briefly for the others to report the same iteration through the default store and raises one
``RuntimeError`` naming the ranks that did not: dead if their heartbeat (``records.start_heartbeat``) stopped, else
hung; so does backward when the hook's all-gather fails.
Before DDP's own collectives in the first forward after construction, step() or load_state_dict() (its bucket
rebuild, its buffer broadcast) the ranks exchange a record on Birder's group (``guards.register_hooks``): a peer
that failed is named there, a rank that called state_dict() alone meets it, and an error from inside DDP's collectives
in any forward gets the same message.
A step skipped for a non-finite gradient names the ranks that had one, is counted (``skipped_steps``) and
logged; ``max_consecutive_skips`` in a row raise (a GradScaler's back-offs do not count while the scale it used is
above 1, only once it is at most 1; the scale is read from the calling ``GradScaler.step`` after ``unscale_``).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.autograd.graph import increment_version

from birder_ref.draws import SERVER_STREAM, stream_key
from gpu_validation import checkpoint, comm, guards, layout, records
from gpu_validation import torch_birder as tb
from gpu_validation.checkpoint import FULL_FORMAT, SHARD_FORMAT
from gpu_validation.overlap import Overlap

__all__ = ["Birder", "apply_update_", "FULL_FORMAT", "SHARD_FORMAT"]


def apply_update_(p: torch.Tensor, u_bar: torch.Tensor, lr: float, weight_decay: float) -> None:
    """Line 16 in place: p -= lr * (u_bar + weight_decay * p), the operations of ``birder_ref.update``."""
    p.sub_(lr * (u_bar + weight_decay * p))


def _apply_packed_update_(piece: torch.Tensor, bits: torch.Tensor, start: int, lr: float, weight_decay: float,
                          work: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    """``apply_update_`` on a contiguous piece (at most ``torch_birder.piece_elements`` of its device) whose u_bar
    is signs start .. start + n - 1 of the packed ``bits``, in preallocated buffers: the same operations, in the same
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
        checked = guards.check_arguments(ddp_model, lr=lr, weight_decay=weight_decay, beta=beta, eps=eps, seed=seed,
                                         scheme=scheme, max_consecutive_skips=max_consecutive_skips, overlap=overlap,
                                         param_groups=param_groups)
        self.beta, self.eps, self.seed = checked.beta, checked.eps, checked.seed
        self.max_consecutive_skips = checked.max_consecutive_skips
        named = checked.named
        params = [p for _, p in named]
        n_nodes, gpus = layout.nodes_and_gpus(scheme, gpus_per_node, params[0].device)
        super().__init__(checked.groups, {"lr": checked.lr, "weight_decay": checked.weight_decay})
        self._sealed = True
        self.param_names = [name for name, _ in named]  # in element order: the draws' index order
        self._params = params
        self._sample = records.gradient_sample(params)
        self._name_of_id = {id(p): name for name, p in named}
        self._frozen_at_start = [(name, p) for name, p in ddp_model.module.named_parameters() if not p.requires_grad]
        self._module = ddp_model.module  # to name parameters replaced, cast or moved since (``guards.check_step``)
        self._kinds = [(p.dtype, p.device) for p in params]
        self._stepped_while_frozen: set[int] = set()  # ids of parameters an update found frozen: their state moved
        group_of = {id(p): i for i, g in enumerate(self.param_groups) for p in g["params"]}
        self._group_of = [group_of[id(p)] for p in params]
        guards.refuse_other_optimizers(self)
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
        if dist.get_world_size() > 1:
            records.start_heartbeat()  # lets a rank whose collective fails tell a dead peer from a slow one
        self._gradients_differed = False
        self._backward_sample: list[torch.Tensor | None] = [None] * len(self._sample)
        shard = comm.shard_slice(self.topology, self.length)
        chunk = comm.chunk_slice(self.topology, self.length)
        n_shard, n_chunk = shard.stop - shard.start, chunk.stop - chunk.start
        self.m, self.b_hat, self.e = (torch.zeros(n_shard, dtype=torch.float32, device=self.device)
                                      for _ in checkpoint.VECTORS)
        self.server_error = torch.zeros(n_chunk, dtype=torch.float32, device=self.device)
        self.t = 0
        self.skipped_steps = 0
        self.consecutive_skips = 0
        self.last_skipped_ranks: list[int] = []
        self.overlapped_steps = 0  # steps whose intra-node exchange started during backward and was used
        self.overlap_fallbacks = 0  # steps whose .grad changed after backward (clip, unscale_): exchanged again
        self._hook_state = records.HookState(dist.get_world_size(), self.topology.world_group, lambda: self.t + 1,
                                             functools.partial(records.fault_message, self),
                                             lambda: records.settings_checksum(self.param_groups), self._sample)
        self._overlap = Overlap(self) if overlap and self.topology.worker_group is not None else None
        if self._overlap is not None:
            self._hook_state.on_bucket = self._overlap.on_bucket
        guards.register_hooks(self, ddp_model)
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
        """One iteration of the paper's Algorithm 1 (the comments cite its lines, as numbered there) from the
        gradients in ``.grad``; collective: every rank calls it once per backward. Returns the closure's loss, if any.

        Line 4's g_t is what backward left in ``.grad`` (Birder's hook keeps it local); a worker is a node, whose
        g_t is its ranks' mean, each rank holding one shard of it. Lines 5-9 run on that shard, lines 10-14 are
        the 1-bit exchange with the servers (each rank serves one chunk; u and u_bar travel packed, 1 bit per
        element), line 16 moves the parameters. The guards run first; where the ranks' records decide, every rank
        raises or skips alike.
        """
        self._forward_record_due = True
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        backward = guards.check_step(self)  # the refusals, then what backward's records said (alike on every rank)
        record = records.start(self, records.STEP)  # finished once .grad is flattened: its latency overlaps that
        scale = getattr(self, "grad_scale", None)  # set by GradScaler.step: the scale still in .grad
        found_inf = getattr(self, "found_inf", None)
        grad, largest, overlap = self._buffer("grad"), backward.largest, self._overlap  # largest bounds every |g_t|
        if overlap is None or not overlap.used(record, backward.nonfinite_ranks, scale, found_inf):
            self._flatten_gradients(grad)  # line 4: this rank's g_t
            records.finish(self, record)
            if scale is not None:
                grad.div_(scale.to(device=self.device, dtype=torch.float32))  # exact for powers of two
            if backward.nonfinite_ranks:  # every rank knows it from the hook: all skip, no collective needed
                guards.count_skip(self, backward.nonfinite_ranks,
                                  backoff=guards.scaler_backs_off(self, scale, found_inf))
                return loss
            guards.refuse_changed_after_backward(found_inf)
            largest = largest if scale is None else largest / float(scale)
            if overlap is not None:
                overlap.frontier, overlap.sent = self.length, False  # nothing sent matches: exchange it all now
        topo, t = self.topology, self.t + 1
        shard, chunk = comm.shard_slice(topo, self.length), comm.chunk_slice(topo, self.length)
        phases = comm.pipeline_phases(topo, self.length)
        rows = self._node_rows(grad, largest, phases)  # the node's g_t on this shard, one row per rank of the node
        if rows is None:  # a node sum overflowed float32: every rank skips the step
            return loss
        # lines 5-9 on this shard: m, b = b_hat (T0 off), u = Q(m / b + e), e; the node mean taken piece by piece
        u = tb.worker_step_packed_(self.m, self.b_hat, self.e, rows, self.beta, self.eps,
                                   stream_key(self.seed, t, topo.worker), shard.start)
        # line 10: every worker's u of this rank's chunk reaches this rank, its server
        received = self._collective("inter-node all-to-all", topo.server_group,
                                    lambda: comm.run_phase(phases.inter_all_to_all, u, topo.server_group))
        # lines 12-13 on this chunk: u_bar = Q(the workers' mean u + e_bar), e_bar
        u_bar_chunk = tb.server_step_packed_(received, self.server_error, stream_key(self.seed, t, SERVER_STREAM),
                                             chunk.start, n_workers=topo.n_workers)
        # line 14: u_bar back to every worker (the servers' all-gather), then to every rank of the node
        u_bar_shard = self._collective("inter-node all-gather", topo.server_group, lambda: comm.run_phase(
            phases.inter_all_gather, u_bar_chunk, topo.server_group))
        u_bar = self._collective("intra-node all-gather", topo.worker_group, lambda: comm.run_phase(
            phases.intra_all_gather, u_bar_shard.reshape(-1), topo.worker_group)).reshape(-1)
        self.t, self.consecutive_skips = t, 0
        self._apply_update(u_bar)  # line 16: x -= lr * (u_bar + weight_decay * x), each group's lr and decay
        return loss

    def _flatten_gradients(self, grad: torch.Tensor) -> None:
        """This rank's g_t into ``grad``: each trainable parameter's ``.grad`` in parameters() order (that order
        gives every element its draw index); a parameter frozen since Birder was built contributes zeros."""
        for p, start in zip(self._params, self.offsets, strict=True):
            if p.grad is None or not p.requires_grad:  # frozen since Birder was built: gradient 0, and it stays put
                grad[start:start + p.numel()] = 0.0
            elif p.grad.is_sparse:
                raise ValueError("Birder takes dense gradients")
            else:
                grad[start:start + p.numel()] = p.grad.reshape(-1)

    def _node_rows(self, grad: torch.Tensor, largest: float, phases) -> torch.Tensor | None:
        """The intra-node reduce-scatter: this rank's shard of every rank of its node's g_t, (G, shard) (from what
        the overlap delivered during backward, if it did); None if a node sum overflowed float32 on some rank's
        shard, which every rank learns from one all-gather, run only where ``largest`` (the hook's bound on every
        rank's |g_t|) cannot rule an overflow out (``guards.needs_overflow_check``)."""
        topo, overlap = self.topology, self._overlap
        checked = guards.needs_overflow_check(grad, largest, topo.shards_per_worker)
        rows = self._collective("intra-node reduce-scatter", topo.worker_group, lambda: comm.run_phase(
            phases.intra_reduce_scatter, grad, topo.worker_group, None if topo.worker_group is None
            else self._buffer("rows")) if overlap is None else overlap.rows(self._buffer("rows")))
        if checked:
            worker_grad = tb._node_mean(rows)
            bad = torch.tensor([float(not bool(torch.isfinite(worker_grad).all()))], device=self.device)
            flags = self._collective("node-sum overflow check", dist.group.WORLD,
                                     lambda: comm.all_gather_rows(bad, dist.group.WORLD, dist.get_world_size()))
            bad_ranks = [r for r, f in enumerate(flags.reshape(-1).tolist()) if f > 0]
            if bad_ranks:
                guards.count_skip(self, bad_ranks, "a node sum overflowed float32 on the shard of")
                return None
        return rows

    def _apply_update(self, u_bar: torch.Tensor) -> None:
        """Line 16 on every trainable parameter, from the packed u_bar, with its group's lr and weight decay; a
        parameter frozen since Birder was built stays put (its m, b and e moved on a zero gradient, so it cannot
        be unfrozen: ``guards.check_step``)."""
        work = self.__dict__.setdefault("_update_work", {})
        for p, start, g in zip(self._params, self.offsets, self._group_of, strict=True):
            if not p.requires_grad:
                self._stepped_while_frozen.add(id(p))
                continue
            lr, decay = self.param_groups[g]["lr"], self.param_groups[g]["weight_decay"]
            if p.is_contiguous():  # piece by piece, so the temporaries stay in cache (element-wise: same bits)
                size = tb.piece_elements(p.device)
                if p.dtype not in work:  # (signs, decay term, byte indices), reused for every piece and step
                    work[p.dtype] = (torch.empty(size + 16, dtype=p.dtype, device=p.device),
                                     torch.empty(size, dtype=p.dtype, device=p.device),
                                     torch.empty(size // 8 + 2, dtype=torch.int64, device=p.device))
                flat = p.view(-1)
                for lo in range(0, flat.numel(), size):
                    piece = flat[lo:lo + size]
                    _apply_packed_update_(piece, u_bar, start + lo, lr, decay, work[p.dtype])
                increment_version(p)  # NumPy writes bypass autograd's check that saved tensors are unchanged
            else:
                apply_update_(p, tb.unpack_range(u_bar, start, p.numel(), p.dtype).view_as(p), lr, decay)

    def _buffer(self, name: str) -> torch.Tensor:
        """A padded float32 work vector kept between steps (its tail, the padding, stays zero)."""
        buffers = self.__dict__.setdefault("_buffers", {})
        if name not in buffers:
            buffers[name] = torch.zeros(self.length, dtype=torch.float32, device=self.device)
        return buffers[name]


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

    # ---- checkpoints (``checkpoint``) ----

    def state_dict(self) -> dict:
        """The full state: every worker's m, b_hat, e and the whole server error, in element order (collective).

        Issues two all-gathers over Birder's group of all ranks (a record saying "state_dict()", then every rank's
        shards, concatenated); every rank must call it. If only some do (``if rank == 0: opt.state_dict()``), the
        record meets the others' backward record and every rank raises one clear error at once;
        and every rank gets the same dict, so rank 0 can save it and every rank can load that one file. Loads on
        any layout with the same number of workers (nodes in hierarchical, ranks in flat).
        """
        return checkpoint.full_state(self)

    def sharded_state_dict(self) -> dict:
        """This rank's shard only (no collective): each rank saves its own file; loads on the same layout only."""
        return checkpoint.shard_state(self)

    def to_adamw_state_dict(self, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> dict:
        """A ``torch.optim.AdamW`` state dict that continues from this Birder (collective: every rank calls it, as
        ``state_dict()``), to leave Birder for AdamW. Load it into ``AdamW([{"params": g["params"]} for g in
        opt.param_groups])`` (the trainable parameters in Birder's groups, in the same order; without
        ``param_groups``, ``[p for p in model.parameters() if p.requires_grad]``): each group keeps its lr and
        weight decay (line 16's decay is AdamW's decoupled one), ``step`` is Birder's t, ``exp_avg`` the workers'
        mean m (both are moving averages of the gradient) and ``exp_avg_sq`` the square of the workers' mean b
        (Birder tracks the mean of |g|, AdamW of g^2: an estimate, low by the gradient's variance), each scaled so
        that AdamW's bias correction gives Birder's bias-corrected estimates (``checkpoint.adamw_state``)."""
        return checkpoint.adamw_state(self, betas, eps)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore ``state_dict()``'s (or ``sharded_state_dict()``'s) output. Everything is checked first: any
        problem raises one ValueError and leaves the optimizer unchanged."""
        checkpoint.load(self, state_dict)


