"""Birder as a DDP communication hook: ``BirderState`` + ``birder_hook``, and the update ``BirderUpdate``.

Read like PyTorch's ``powerSGD_hook``: one state object shared by every bucket (per-bucket state keyed by
``bucket.index()``, created lazily), one hook function, one usage example (``birder_hook``'s docstring).
"""

import logging
import math
import numbers
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_pre_hook

from gpu_validation import comm
from gpu_validation import torch_birder as tb

STATE_FORMAT = "birder-ddp-hook-state/1"
_CONFIG_KEYS = ("scheme", "n_nodes", "gpus_per_node", "worker", "dim", "seed", "beta", "eps", "T0")
_STATE_KEYS = ("t", "skipped_steps", "m", "b_hat", "b", "e", "server_error")
_VECTORS = ("m", "b_hat", "b", "e", "server_error")
log = logging.getLogger("gpu_validation.hook")


@dataclass(frozen=True)
class BucketState:
    """One bucket's Birder state on this rank, for one bucket layout.

    ``signature`` identifies the layout (the bucket's parameters by element offset); ``index`` (padded
    length, int64) is each position's element index in the flattened parameter vector, -1 for padding;
    ``worker`` is this rank's shard of its worker's m, b_hat, b, e; ``server_error`` its chunk's error.
    """

    signature: tuple[tuple[int, int], ...]
    index: torch.Tensor
    worker: tb.WorkerState
    server_error: torch.Tensor


@dataclass(frozen=True)
class FullState:
    """This rank's worker's m, b_hat, b, e and the server error, over the whole flattened parameter vector."""

    m: torch.Tensor
    b_hat: torch.Tensor
    b: torch.Tensor
    e: torch.Tensor
    server_error: torch.Tensor


def _take(vector: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """vector[index] with zeros where index is -1 (padding)."""
    values = vector.to(index.device)[index.clamp(min=0)]
    return torch.where(index >= 0, values, torch.zeros((), dtype=values.dtype, device=values.device))


class BirderState:
    """Birder's state for ``birder_hook`` on one rank: hyperparameters, topology and per-bucket state.

    Args:
        parameters: the model's parameters, in the order that defines each element's index (the draws'
            counter): ``model.parameters()``.
        topology: ``comm.make_topology(scheme, n_nodes, gpus_per_node)``.
        seed: the draws' seed (the same on every rank).
        beta, eps, T0: Algorithm 1's moving-average factor, the constant added to b, and the AMSGrad
            threshold (None: off, as the paper runs it).

    ``t`` counts the Algorithm 1 steps taken (the draw counter: step t + 1 draws with step number t + 1);
    ``skipped_steps`` the iterations skipped because some rank had a non-finite gradient;
    ``last_iteration_skipped`` tells the optimizer whether to leave the parameters alone (the hook also leaves
    NaN in every bucket of a skipped iteration, so a ``GradScaler`` backs off as it would on any overflow).

    For as long as the state lives, a torch optimizer other than ``BirderUpdate`` that steps its parameters
    after a backward through the hook is refused (one RuntimeError, before it moves anything) if that iteration
    was skipped, or if its ``.grad`` no longer holds the hook's +-1 (``clip_grad_norm_`` that clipped,
    ``GradScaler.unscale_``): either would be a silent wrong step (``_other_optimizers_checked``).
    """

    def __init__(self, parameters, topology: comm.Topology, seed: int = 0, beta: float = 0.95,
                 eps: float = 1e-8, T0: int | None = None):
        if not 0.0 < float(beta) < 1.0 or not float(eps) > 0.0:
            raise ValueError(f"need 0 < beta < 1 and eps > 0, got beta={beta}, eps={eps}")
        self.topology, self.seed, self.beta, self.eps, self.T0 = topology, int(seed), float(beta), float(eps), T0
        self._offsets: dict[int, tuple[int, int]] = {}
        offset = 0
        for p in parameters:
            self._offsets[id(p)] = (offset, p.numel())
            offset += p.numel()
        if offset >= 2**32:
            raise ValueError(f"element indices must fit in 32 bits; the model has {offset} elements")
        self.dim = offset
        self.t = 0
        self.skipped_steps = 0
        self.last_iteration_skipped = False
        self.iterations = 0  # backward passes the hook finished (the optimizer checks one ran before each step)
        self.committed_iterations = 0  # of which every rank's gradient was finite (t advanced)
        self.buckets: dict[int, BucketState] = {}
        self._pending: dict[int, BucketState] = {}
        self._flags: list[tuple[torch.Tensor, object]] = []
        self._held: list[tuple[torch.futures.Future, torch.Tensor]] = []  # results wait for the last bucket
        self._carry: FullState | None = None  # per-element state awaiting new buckets (layout change, load)
        self._executor: ThreadPoolExecutor | None = None  # the hook's communication thread, made on first use
        self._executor_lock = threading.Lock()
        handle = register_optimizer_step_pre_hook(_other_optimizers_checked(weakref.ref(self)))
        weakref.finalize(self, handle.remove)

    def communication_thread(self) -> ThreadPoolExecutor:
        """One thread per state: buckets are processed in the order DDP hands them over, on every rank alike."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="birder-hook")
            return self._executor

    def __getstate__(self) -> dict:
        raise ValueError("BirderState cannot be pickled or copied (torch.save(state), copy.deepcopy(state)): it "
                         "holds process groups and a communication thread. Save state.state_dict() (collective: "
                         "every rank calls it, one file per rank) and restore it with state.load_state_dict()")

    # ---- per-bucket state, created lazily and rebuilt when the bucket layout changes ----

    def _signature(self, bucket: dist.GradBucket) -> tuple[tuple[int, int], ...]:
        """The bucket's parameters as (element offset, numel), in the order of the bucket's buffer."""
        try:
            return tuple(self._offsets[id(p)] for p in bucket.parameters())
        except KeyError:
            raise ValueError("a bucket holds a parameter that was not given to BirderState") from None

    def bucket_state(self, bucket: dist.GradBucket) -> BucketState:
        """The committed state of ``bucket``; after a layout change, every rank rebuilds (collective)."""
        signature = self._signature(bucket)
        known = self.buckets.get(bucket.index())
        if known is not None and known.signature == signature:
            return known
        if known is not None:  # DDP rebuilt its buckets: move the old layout's state into element order
            self._carry = self.full_state()
            self.buckets.clear()
        return self._new_bucket_state(signature, bucket.buffer().device)

    def _new_bucket_state(self, signature: tuple[tuple[int, int], ...], device) -> BucketState:
        flat = torch.cat([torch.arange(start, start + n, dtype=torch.int64) for start, n in signature])
        length = comm.padded_length(self.topology, flat.numel())
        index = torch.cat([flat, torch.full((length - flat.numel(),), -1, dtype=torch.int64)]).to(device)
        shard, chunk = index[comm.shard_slice(self.topology, length)], index[comm.chunk_slice(self.topology, length)]
        if self._carry is None:
            worker, server_error = tb.WorkerState.zeros(shard.numel(), device), torch.zeros(chunk.numel(),
                                                                                            device=device)
        else:
            c = self._carry
            worker = tb.WorkerState(_take(c.m, shard), _take(c.b_hat, shard), _take(c.b, shard), _take(c.e, shard))
            server_error = _take(c.server_error, chunk)
        return BucketState(signature, index, worker, server_error)

    def stage(self, bucket_index: int, new: BucketState, flag: tuple[torch.Tensor, object],
              future: torch.futures.Future, buffer: torch.Tensor) -> None:
        """Hold a bucket's new state, and its future (u_bar in ``buffer``), until the iteration's last bucket says
        whether the step counts."""
        self._pending[bucket_index] = new
        self._flags.append(flag)
        self._held.append((future, buffer))

    def finish_iteration(self) -> None:
        """Commit every staged bucket (t += 1), or, if any rank saw a non-finite gradient, drop them all and fill
        their buffers with NaN; then complete their futures (DDP reads none before the end of backward)."""
        for _, work in self._flags:
            if work is not None:
                work.wait()
        skipped = bool(torch.cat([f for f, _ in self._flags]).amax().item() > 0)
        if skipped:
            self.skipped_steps += 1
            log.warning("birder_hook: iteration skipped on every rank (a NaN or infinity in some rank's gradient): "
                        "Birder's state is untouched at t=%d, .grad holds NaN (%d skipped in all)",
                        self.t, self.skipped_steps)
        else:
            self.buckets.update(self._pending)
            self.t += 1
            self.committed_iterations += 1
            covered = sum(n for b in self.buckets.values() for _, n in b.signature)
            if covered == self.dim:
                self._carry = None
        self.last_iteration_skipped = skipped
        self.iterations += 1
        self._pending.clear()
        self._flags.clear()
        held, self._held = self._held, []
        for future, buffer in held:
            if skipped:
                buffer.fill_(math.nan)
            future.set_result(buffer)

    def fail_iteration(self, future: torch.futures.Future, error: BaseException) -> None:
        """A bucket's step raised (a failed collective): its future and every held one carry the error, so
        backward raises it on this rank instead of waiting on a future that nothing will complete."""
        held, self._held = self._held, []
        for waiting in [f for f, _ in held] + [future]:
            if not waiting.done():
                waiting.set_exception(error)
        self._pending.clear()
        self._flags.clear()

    # ---- state that survives: every piece, in element order, independent of the bucket layout ----

    def full_state(self) -> FullState:
        """This worker's state and the server error over all elements (collective: every rank must call).

        Gathers the worker state's shards within the worker group and the server error's chunks from all
        ranks; elements no bucket has touched yet come from the carried state (or are zero).
        """
        device = next((b.index.device for b in self.buckets.values()), torch.device("cpu"))
        base = self._carry or FullState(*(torch.zeros(self.dim) for _ in _VECTORS))
        out = {name: getattr(base, name).clone().to(device) for name in _VECTORS}
        buckets = [self.buckets[i] for i in sorted(self.buckets)]
        if not buckets:
            return FullState(**{k: v.cpu() for k, v in out.items()})
        topo = self.topology
        mine = torch.cat([torch.stack([b.worker.m, b.worker.b_hat, b.worker.b, b.worker.e]) for b in buckets], 1)
        worker_ranks = [topo.worker * topo.shards_per_worker + j for j in range(topo.shards_per_worker)]
        shards = comm.all_gather_rows(mine.reshape(-1), topo.worker_group, len(worker_ranks))
        for rank, row in zip(worker_ranks, shards.view(len(worker_ranks), 4, -1), strict=True):
            index = torch.cat([b.index[comm.shard_slice(topo, b.index.numel(), rank)] for b in buckets])
            for name, values in zip(("m", "b_hat", "b", "e"), row, strict=True):
                out[name][index[index >= 0]] = values[index >= 0]
        chunks = torch.cat([b.server_error for b in buckets])
        for rank, row in enumerate(comm.all_gather_rows(chunks, topo.world_group, topo.n_ranks)):
            index = torch.cat([b.index[comm.chunk_slice(topo, b.index.numel(), rank)] for b in buckets])
            out["server_error"][index[index >= 0]] = row[index >= 0]
        return FullState(**{k: v.cpu() for k, v in out.items()})

    def _config(self) -> dict:
        topo = self.topology
        return {"scheme": topo.scheme, "n_nodes": topo.n_nodes, "gpus_per_node": topo.gpus_per_node,
                "worker": topo.worker, "dim": self.dim, "seed": self.seed, "beta": self.beta, "eps": self.eps,
                "T0": self.T0}

    def state_dict(self) -> dict:
        """Every piece of Birder state of this rank's worker (collective: every rank must call it).

        m, b_hat, b, e (this node's, or this GPU's in flat), the server error (all of it), t (steps taken,
        also the draw counter), skipped_steps, and the configuration they belong to. CPU tensors, in element
        order, so a checkpoint loads under any bucket layout.
        """
        if self._pending:
            raise ValueError("state_dict() in the middle of an iteration: call it between steps")
        full = self.full_state()
        return {"format": STATE_FORMAT, **self._config(), "t": self.t, "skipped_steps": self.skipped_steps,
                **{name: getattr(full, name) for name in _VECTORS}}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()``'s output. Everything is checked first (keys, format, configuration, integer
        counters, dtypes and shapes, finite values, b and b_hat >= 0, errors within [-2, 2]); any problem raises
        one ValueError and leaves the state unchanged."""
        if not isinstance(state, dict):
            raise ValueError(f"Birder state must be a dict, got {type(state).__name__}")
        expected = {"format", *_CONFIG_KEYS, *_STATE_KEYS}
        missing, unknown = expected - set(state), set(state) - expected
        if missing or unknown:
            raise ValueError(f"Birder state: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
        if state["format"] != STATE_FORMAT:
            raise ValueError(f"Birder state format {state['format']!r}, expected {STATE_FORMAT!r}")
        for key, value in self._config().items():
            if state[key] != value or type(state[key]) is not type(value):
                per_rank = ("; each rank's state_dict() holds its own worker's state: save one file per rank "
                            "(e.g. path = f'birder-rank{dist.get_rank()}.pt') and load each rank's own"
                            if key == "worker" else "")
                raise ValueError(f"Birder state was saved with {key}={state[key]!r}, this run has {value!r}{per_rank}")
        counters = {}
        for key in ("t", "skipped_steps"):
            v = state[key]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 0:
                raise ValueError(f"Birder state {key!r} must be an integer >= 0, got {v!r}")
            counters[key] = int(v)
        for name in _VECTORS:
            v = state[name]
            if not isinstance(v, torch.Tensor) or v.dtype != torch.float32 or v.shape != (self.dim,):
                raise ValueError(f"Birder state {name!r} must be a float32 tensor of shape ({self.dim},)")
            if not bool(torch.isfinite(v).all()):
                raise ValueError(f"Birder state {name!r} holds a NaN or an infinity")
        for name in ("b_hat", "b"):
            if bool((state[name] < 0).any()):
                raise ValueError(f"Birder state {name!r} holds a negative value; it is a mean of |g|")
        for name in ("e", "server_error"):
            if bool((state[name].abs() > 2).any()):
                raise ValueError(f"Birder state {name!r} holds a value outside [-2, 2], which Algorithm 1 never makes")
        self._carry = FullState(*(state[name].detach().clone().cpu() for name in _VECTORS))
        self.t, self.skipped_steps = counters["t"], counters["skipped_steps"]
        self.buckets.clear()
        self._pending.clear()
        self._flags.clear()
        self.last_iteration_skipped = False


def birder_hook(state: BirderState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Birder (Algorithm 1) as a DDP communication hook: the bucket's gradients in, u_bar of +-1 out.

    For the bucket's gradients (flattened, padded to a multiple of 8 x world size):

    1. intra-node reduce-scatter, added in local-rank order, divided by G: this GPU's shard of the node-mean
       gradient (hierarchical; in flat every GPU is its own worker);
    2. lines 5-9: m, b_hat, b, u = Q(m / (b + eps) + e), e on the shard, draws of stream = worker index;
    3. inter-node all-to-all of packed sign bits; lines 12-13 on this GPU's chunk from the counts of +1;
       inter-node all-gather of the packed u_bar; intra-node all-gather;
    4. start a MAX all-reduce of "this rank's new m holds a NaN or infinity" (a non-finite gradient, or a
       node sum that overflowed);
    5. write u_bar into the bucket; its new state waits until the last bucket: if any rank flagged any
       bucket, every rank drops the whole iteration (state untouched, counted in ``state.skipped_steps``),
       else all buckets commit and t advances.

    The hook returns at once with a future: steps 1-5 run on the state's communication thread (one per state,
    buckets in DDP's order, so every rank issues the same collectives in the same order, on Birder's own groups),
    while backward goes on computing the next buckets' gradients; DDP waits for the futures at the end of
    backward. The same operations as before, so the same bits.

    The parameters then move by line 16, x -= lr * u_bar (``BirderUpdate``). Every rank ends with the same
    u_bar: the same bits as ``birder_ref.algorithm1.step`` on ``schemes.worker_gradients`` of the same gradients
    with the same draws (and as ``schemes.step``, whose ring order agrees whenever node sums are exact, always
    with G <= 2). Buckets of float16 or
    bfloat16 gradients are computed in float32 (the state is float32) and get u_bar in their own dtype.

    Example::
        >>> topology = make_topology("hierarchical", n_nodes, gpus_per_node)
        >>> state = BirderState(model.parameters(), topology, seed=0)
        >>> ddp_model = DistributedDataParallel(model)
        >>> ddp_model.register_comm_hook(state, birder_hook)
        >>> optimizer = BirderUpdate(ddp_model.parameters(), lr=1e-3, weight_decay=1e-4, hook_state=state)
    """
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()

    def run() -> None:
        try:
            _bucket_step(state, bucket, future)
        except BaseException as error:  # a failed collective: backward raises it on this rank
            state.fail_iteration(future, error)

    state.communication_thread().submit(run)
    return future


def _bucket_step(state: BirderState, bucket: dist.GradBucket, future: torch.futures.Future) -> None:
    """``birder_hook``'s work on one bucket (on the communication thread): u_bar written into the bucket, which
    ``future`` returns once the iteration's last bucket has decided whether it counts."""
    buffer = bucket.buffer()
    current = state.bucket_state(bucket)
    grad = torch.zeros(current.index.numel(), dtype=torch.float32, device=buffer.device)
    grad[: buffer.numel()] = buffer  # float16 / bfloat16 gradients widen exactly; u_bar (+-1) narrows exactly
    u_bar, worker, server_error = comm.one_bit_allreduce(
        state.topology, grad, current.index, current.worker, current.server_error,
        state.seed, state.t + 1, state.beta, state.eps, state.T0)
    # m (line 5) is non-finite exactly when a gradient element was, or when the node sum of finite gradients
    # overflowed: every element reaches one rank's m, and beta m + (1 - beta) g of finite values stays finite.
    flag = comm.any_nonfinite(worker.m, state.topology.world_group)
    buffer.copy_(u_bar[: buffer.numel()])
    state.stage(bucket.index(), replace(current, worker=worker, server_error=server_error), flag, future, buffer)
    if bucket.is_last():
        state.finish_iteration()


def _refuse_rescaled_updates(optimizer: torch.optim.Optimizer, grads: list[torch.Tensor]) -> None:
    """One RuntimeError, before any parameter moves, if a ``.grad`` no longer holds birder_hook's +-1."""
    changed = sum(not bool((g.abs() == 1).all()) for g in grads)
    if changed:
        raise RuntimeError(f"{type(optimizer).__name__}.step(): .grad no longer holds the +-1 u_bar that birder_hook "
                           f"wrote ({changed} parameter(s) changed after backward: clip_grad_norm_, a GradScaler, "
                           "or other code scaling .grad); on the expert hook path that would silently shrink "
                           "the update. Step without clipping or a scaler, or use gpu_validation.Birder, which "
                           "handles both exactly")


def _other_optimizers_checked(state_ref):
    """A pre-step hook for every torch optimizer but ``BirderUpdate`` (which checks for itself): after a backward
    through birder_hook, a step on the state's parameters is refused if the hook skipped that iteration (.grad
    holds NaN) or if their .grad no longer holds the hook's +-1."""
    iterations_stepped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer -> hook's at its step

    def pre_step(optimizer, args, kwargs):
        state = state_ref()
        if state is None or isinstance(optimizer, BirderUpdate):
            return None
        if state.iterations == iterations_stepped.get(optimizer, 0):
            return None  # no backward through the hook since this optimizer's last step
        grads = [p.grad for g in optimizer.param_groups for p in g["params"]
                 if id(p) in state._offsets and p.grad is not None]
        if not grads:
            return None
        iterations_stepped[optimizer] = state.iterations
        if state.last_iteration_skipped:
            raise RuntimeError(f"{type(optimizer).__name__}.step(): birder_hook skipped this iteration (a rank had "
                               "a NaN or infinite gradient; Birder's state is untouched) and left NaN in .grad, "
                               "which this step would write into the parameters. Skip the step when "
                               "hook_state.last_iteration_skipped is True (a GradScaler does so by itself), or step "
                               "with BirderUpdate, which skips it")
        _refuse_rescaled_updates(optimizer, grads)

    return pre_step


class BirderUpdate(torch.optim.Optimizer):
    """Line 16 with decoupled weight decay, x -= lr * (u_bar + weight_decay * x), u_bar in p.grad (the expert
    path: ``gpu_validation.Birder`` keeps the update out of ``.grad``).

    ``.grad`` must still hold the hook's +-1 when step() runs: anything that rescaled it (``clip_grad_norm_``
    that clipped, ``GradScaler``'s unscaling) is refused with one RuntimeError, before any parameter moves. A
    clip that did not bite (factor 1) or a scale of 1 leaves the +-1 as they are and the step exact.

    With ``hook_state``, a step the hook skipped (non-finite gradient somewhere) leaves every parameter as is.
    The float32 operations of ``birder_ref.update.apply_update``, never fused, so NumPy reproduces them bit for bit.
    """

    def __init__(self, params, lr: float, weight_decay: float = 0.0, hook_state: BirderState | None = None):
        if not lr > 0 or weight_decay < 0:
            raise ValueError(f"need lr > 0 and weight_decay >= 0, got lr={lr}, weight_decay={weight_decay}")
        if not isinstance(hook_state, BirderState):
            raise ValueError("BirderUpdate needs hook_state, the BirderState registered with birder_hook: without "
                             "it .grad holds a plain gradient and the step would be SGD (gpu_validation.Birder does "
                             "it all in one line)")
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        self.hook_state = hook_state
        self._iterations_seen, self._committed_seen = hook_state.iterations, hook_state.committed_iterations
        self._resumed_at: tuple[int, int] | None = None  # (the hook's t when saved, committed iterations at load)

    def state_dict(self) -> dict:
        """torch's optimizer state (param_groups), and the hook's step count ``hook_t``, which the first step after
        ``load_state_dict`` checks against the ``BirderState``: Birder's own state is not here but in
        ``hook_state.state_dict()``, and a resume that restored only this would restart m, b, e and the draws."""
        return {**super().state_dict(), "hook_t": self.hook_state.t}

    def load_state_dict(self, state_dict: dict) -> None:
        hook_t = state_dict.get("hook_t") if isinstance(state_dict, dict) else None
        if hook_t is not None and (isinstance(hook_t, bool) or not isinstance(hook_t, numbers.Integral) or hook_t < 0):
            raise ValueError(f"BirderUpdate state: 'hook_t' must be an integer >= 0, got {hook_t!r}")
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "hook_t"})
        if hook_t is not None:
            self._resumed_at = (int(hook_t), self.hook_state.committed_iterations)

    @torch.no_grad()
    def step(self, closure=None):
        state = self.hook_state
        done, committed = state.iterations - self._iterations_seen, state.committed_iterations - self._committed_seen
        if done == 0:
            raise RuntimeError("BirderUpdate.step(): birder_hook has not finished a backward pass since the last "
                               "step (is the hook registered on the DDP model that ran backward?)")
        if committed > 1:  # skipped iterations do not count: a GradScaler does not call step() after one
            raise RuntimeError(f"BirderUpdate.step(): birder_hook ran {done} backward passes since the last step; "
                               "accumulate gradients under ddp_model.no_sync(), or use gpu_validation.Birder, which "
                               "accumulates without it")
        self._iterations_seen, self._committed_seen = state.iterations, state.committed_iterations
        if self._resumed_at is not None:
            saved_t, committed_at_load = self._resumed_at
            restored_t = state.t - (state.committed_iterations - committed_at_load)
            if restored_t != saved_t:
                raise RuntimeError(f"BirderUpdate.step(): this optimizer was restored from a checkpoint taken at "
                                   f"Birder step t={saved_t}, but its BirderState resumed from t={restored_t}: "
                                   "Birder's m, b, e and draw counter live in the BirderState, not in the "
                                   "optimizer's state_dict. Restore them with hook_state.load_state_dict() from "
                                   "hook_state.state_dict() saved at the same step (one file per rank)")
            self._resumed_at = None
        if state.last_iteration_skipped:
            return None
        params = [p for group in self.param_groups for p in group["params"]]
        # u_bar is +-1 in every element: a trainable parameter with no .grad, or a .grad of zeros, sat out the
        # backward (DDP's find_unused_parameters leaves it so) while the hook advanced its m and e on a zero
        # gradient; Algorithm 1 still moves it by lr * u_bar, which this path does not have
        unused = [i for i, p in enumerate(params) if p.requires_grad and (p.grad is None or not bool(p.grad.any()))]
        if unused:  # checked before any parameter moves: all or nothing
            raise RuntimeError(f"BirderUpdate.step(): {len(unused)} trainable parameter(s) (positions {unused[:8]}, "
                               f"shapes {[tuple(params[i].shape) for i in unused[:8]]}) got no u_bar in .grad: they "
                               "took no part in this backward (DDP with find_unused_parameters=True), and Algorithm "
                               "1 still moves them by lr * u_bar, which the hook path cannot; use "
                               "gpu_validation.Birder, which does, or keep every parameter in the loss")
        _refuse_rescaled_updates(self, [p.grad for p in params if p.grad is not None])
        for group in self.param_groups:
            lr, decay = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.sub_(lr * (p.grad + decay * p))  # = optimizer.apply_update_
        return None
