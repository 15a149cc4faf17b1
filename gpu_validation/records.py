"""What Birder's ranks tell each other besides the algorithm's bits, and what they conclude from it.

Every collective of Birder's besides the 1-bit all-reduce's is here: one record per rank (``RECORD_WORDS`` int64
words: what it is doing, the Birder step, its largest |gradient|, checksums of parameters and settings),
all-gathered over Birder's group of all ranks by the DDP hook in backward (``local_gradient_hook``, one per
bucket), by step() (``start``/``finish``) and by state_dict() and the first forward running DDP's own collectives
(``Birder._exchange_record``). Every rank gathers the same rows, so every rank draws the same conclusion at once
(``check_records``, ``refuse_reduced_gradients``); a collective that fails gets one message naming the ranks that
went silent (``fault_message``, which tells a dead rank from a live one by the heartbeat each rank's
``start_heartbeat`` thread keeps in the default store); ranks whose parameters or settings differ are named by
``drift_message`` and ``settings_message``. The refusals these feed are in ``guards``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist

from gpu_validation import comm

if TYPE_CHECKING:
    from gpu_validation.optimizer import Birder

# How long a rank whose collective failed waits for the others to report theirs (at most a quarter of the timeout).
# A live rank reports only when its own next collective fails, after whatever compute lies before it, and that
# collective may itself wait on the rank that is waiting here: so a silent rank is named dead by its heartbeat
# (``start_heartbeat``), which stopped, and a live one is named only if it stays silent for the whole window.
_FAULT_REPORT_S = 10.0
_HEARTBEAT_S = 1.0  # each rank's heartbeat thread counts up its store key this often
_DEAD_AFTER_S = 5.0  # a heartbeat that has not moved for this long (5 beats missed) belongs to a dead process


# what a rank does when it joins a record all-gather on Birder's group (EVALUATION: a forward in eval mode or
# without gradients, so that one rank's evaluation does not pass for the others' training forward)
HOOK, STATE_DICT, FORWARD, STEP, EVALUATION = 1, 2, 3, 4, 5
CALLS = {HOOK: "backward", STATE_DICT: "state_dict()", FORWARD: "forward", STEP: "step()",
         EVALUATION: "an evaluation forward (eval mode or no_grad)"}
RECORD_WORDS = 5  # int64 words per rank: (what it is doing, Birder step, largest |gradient| as float32 bits, checksum
# of the bucket's parameters, checksum of every group's lr and weight decay)


def group_settings(param_groups: list[dict]) -> list[float]:
    """Every group's lr and weight decay in order, as floats (a value that is not a real number, which step()
    refuses, as NaN)."""
    values = []
    for group in param_groups:
        for key in ("lr", "weight_decay"):
            try:
                values.append(float(group[key]))
            except (TypeError, ValueError, RuntimeError, KeyError):
                values.append(math.nan)
    return values


def settings_checksum(param_groups: list[dict]) -> int:
    """One int64 word from ``group_settings`` (their float64 bits, weighted by position): ranks whose settings
    differ (a scheduler stepped on rank 0 only, ReduceLROnPlateau fed each rank's own metric) get different
    words."""
    bits = np.array(group_settings(param_groups), dtype=np.float64).view(np.uint64).tolist()
    return sum((i + 1) * b for i, b in enumerate(bits)) % 2**63


def bits_checksum(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """An int64 0-dim tensor: the tensors' bit patterns summed as integer words (modulo 2**32 per tensor), the
    i-th tensor's sum weighted by i + 1. Identical tensors give the same value on every rank and device; a change
    to one element always changes it (its words change by a nonzero amount below 2**32). One read pass, about as
    fast as copying; no host synchronisation."""
    sums = []
    for x in tensors:
        flat = x.detach().reshape(-1)
        word = {4: torch.int32, 2: torch.int16, 8: torch.int32}.get(flat.element_size(), torch.uint8)
        sums.append(flat.view(word).sum(dtype=torch.int32).to(torch.int64))
    if not sums:
        return torch.zeros((), dtype=torch.int64)
    weights = torch.arange(1, len(sums) + 1, dtype=torch.int64, device=sums[0].device)
    return (torch.stack(sums) * weights).sum()


class HookState:
    """What the comm hook shares with the optimizer: whether a backward ran since the last step, what the ranks'
    records said, and how to name the ranks when the hook's collective fails."""

    def __init__(self, world: int, group, step_of, fault_message, settings_of, sample=()):
        self.world = world
        # step()'s gradient sample (``gradient_sample``): id(parameter) -> (slot, element indices), and each slot's
        # elements as backward left them in this rank's bucket (None: not seen since the last step)
        self.sampled = {id(p): (slot, index) for slot, (p, index) in enumerate(sample)}
        self.backward_sample: list[torch.Tensor | None] = [None] * len(self.sampled)
        self.group = group  # Birder's own group of all ranks (None: one rank)
        self.step_of = step_of  # () -> the Birder step the next step() computes
        self.settings_of = settings_of  # () -> settings_checksum of the optimizer's groups now
        self.fault_message = fault_message  # (phase, group, error) -> Birder's one-line fault message
        self.backward_ran = False
        self.backward_seen = False  # a backward ran at least once (DDP rebuilds its buckets in the next forward)
        self.seen: set[int] = set()  # ids of the parameters whose bucket the hook saw since the last step
        self.nonfinite_ranks: set[int] = set()  # ranks whose local gradient was NaN/inf since the last step
        self.largest: dict[int, float] = {}  # bucket index -> max |gradient| over every rank (last backward)
        self.drifted: set[int] = set()  # buckets whose parameters' checksums differed between ranks
        self.settings_differ = False  # the ranks' lr / weight decay differed in some bucket's records
        self.gradients_differ = False  # the ranks' largest |gradient| differed in some bucket (local gradients)
        self.on_bucket = None  # Birder's overlap: starts the bucket's share of the intra-node exchange

    def reset(self) -> None:
        """Forget what the hook saw: the next step() needs a new backward."""
        self.backward_ran = self.settings_differ = self.gradients_differ = False
        for seen in (self.seen, self.nonfinite_ranks, self.largest, self.drifted):
            seen.clear()
        self.backward_sample = [None] * len(self.sampled)


def check_records(rows: torch.Tensor, doing: int, step: int) -> None:
    """Raise one RuntimeError if the ranks' records (world, RECORD_WORDS) say that they are not all doing ``doing`` at
    Birder step ``step`` (one rank called state_dict() while the others ran forward or backward, or the ranks are
    steps apart). Every rank gathered the same rows, so every rank raises the same error, at once."""
    calls, steps = rows[:, 0].tolist(), rows[:, 1].tolist()
    if all(c == doing for c in calls) and all(s == step for s in steps):
        return
    by_call = {CALLS.get(c, f"code {c}"): [r for r, x in enumerate(calls) if x == c] for c in dict.fromkeys(calls)}
    if len(by_call) > 1:
        who = "; ".join(f"rank(s) {ranks} called {call}" for call, ranks in by_call.items())
        if STATE_DICT in calls:
            raise RuntimeError(f"Birder step {step}: {who}. state_dict() is collective: call it on every rank (before "
                               f"`if rank == 0: torch.save(...)`), or save sharded_state_dict() on each rank")
        if EVALUATION in calls:
            raise RuntimeError(f"Birder step {step}: {who}. Through the DDP model every rank must run the same "
                               "forwards (DDP broadcasts a model's buffers in each): evaluate on every rank, or on "
                               "one rank through the unwrapped model (ddp.module)")
        if STEP in calls:
            raise RuntimeError(f"Birder step {step}: {who}. step() is collective: every rank calls it after the same "
                               "backwards; a step skipped on some ranks only (`if loss.isfinite(): opt.step()` on a "
                               "rank's own loss) must be decided on every rank alike (all_reduce the flag first; "
                               "a NaN/inf gradient on any rank already makes step() skip on every rank)")
        raise RuntimeError(f"Birder step {step}: {who}: every rank must run the same forwards and backwards through "
                           "the DDP model")
    by_step = {s: [r for r, x in enumerate(steps) if x == s] for s in dict.fromkeys(steps)}
    raise RuntimeError("Birder: the ranks are at different steps (" + "; ".join(
        f"rank(s) {ranks} at step {s}" for s, ranks in by_step.items()) + "): every rank must call step() once per "
        "backward (and load the same checkpoint)")


_SAMPLE, _SAMPLED_PARAMETERS = 256, 4  # step()'s gradient fingerprint: elements per parameter, largest parameters


def gradient_sample(params: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(parameter, element indices): up to ``_SAMPLE`` evenly spaced elements of each of the
    ``_SAMPLED_PARAMETERS`` largest parameters, the fixed sample step()'s fingerprint reads."""
    largest = sorted(params, key=lambda p: -p.numel())[:_SAMPLED_PARAMETERS]
    picks = []
    for p in largest:
        k = min(_SAMPLE, p.numel())
        picks.append((p, torch.arange(k, dtype=torch.int64, device=p.device) * (p.numel() - 1) // max(k - 1, 1)))
    return picks


def refuse_reduced_gradients(opt: Birder, rows: torch.Tensor, step: int) -> None:
    """Raise one RuntimeError, on every rank alike, when step()'s records (world, RECORD_WORDS) say that every rank's
    gradient sample is the same and not all zero, where the hook's records of the same backward said the ranks'
    local gradients differed, and the sample is a multiple of the ranks' mean backward-time sample
    (``_averaged_after_backward``): the gradients were averaged over the ranks after Birder's hook saw them (an
    outer DistributedDataParallel, as Accelerate's prepare(DDP(model), ...) makes; the client's own all_reduce of
    .grad). Birder's 1-bit exchange would average what is already the same everywhere, and an outer DDP pays a
    full-precision all-reduce on top. Ranks fed the same batch have the same gradients in backward too, and
    gradients clipped by value to the same +-c on every rank are the same in step() without any average:
    neither is refused."""
    if rows.shape[0] < 2 or not bool((rows[:, 3] == 1).all()) or bool((rows[:, 2] != rows[0, 2]).any()):
        return
    if not _averaged_after_backward(opt):
        return
    raise RuntimeError(f"Birder step {step}: the ranks' gradients differed in backward but are the same in step() "
                       f"(a sample of the largest parameters' .grad, identical on all {rows.shape[0]} ranks and "
                       "equal to the mean of their backward values): they were all-reduced after backward (a second "
                       "DistributedDataParallel around Birder's, as Accelerate's prepare(DDP(model), opt) makes; "
                       "your own all_reduce of .grad), which bypasses the 1-bit exchange. Give Birder the only DDP "
                       "model (accelerator.prepare(model) first, then Birder(model)) and its ranks' own gradients")


_AVERAGE_TOLERANCE = 2.0**-7  # relative residual of the sample from a multiple of the ranks' mean: above bf16's


def _step_sample(opt: Birder) -> torch.Tensor:
    """step()'s gradient sample as float32, each parameter's slot 0 where it has no dense gradient."""
    return torch.cat([p.grad.reshape(-1)[index].to(torch.float32) if p.grad is not None and not p.grad.is_sparse
                      else torch.zeros(len(index), dtype=torch.float32, device=index.device)
                      for p, index in opt._sample]).to(opt.device)


def _averaged_after_backward(opt: Birder) -> bool:
    """Whether this step's gradient sample is a positive multiple of the ranks' mean backward-time sample (the
    multiple: 1, or 1 / a GradScaler's scale after unscale_), within ``_AVERAGE_TOLERANCE``. Collective (one
    all-reduce of the sample, a few kB, over Birder's group): called on every rank alike, only when the records
    already said the step's samples are identical where backward's differed."""
    backward = [torch.full((len(index),), math.nan, device=opt.device) if got is None else got.to(opt.device)
                for got, (_, index) in zip(opt._backward_sample, opt._sample, strict=True)]
    mean = torch.cat(backward) if backward else torch.zeros(0, device=opt.device)
    opt._collective("gradient sample all-reduce", opt.topology.world_group,
                    lambda: dist.all_reduce(mean, group=opt.topology.world_group))
    mean /= dist.get_world_size(opt.topology.world_group)
    sample = _step_sample(opt)
    if not bool(torch.isfinite(mean).all()) or not bool(mean.ne(0).any()):
        return False  # a rank saw no backward value for the sample: nothing proves an average
    sample, mean = sample.double(), mean.double()
    multiple = float(sample @ mean) / float(mean @ mean)
    residual = float(torch.linalg.vector_norm(sample - multiple * mean))
    return multiple > 0 and residual <= _AVERAGE_TOLERANCE * float(torch.linalg.vector_norm(sample))


def local_gradient_hook(state, bucket):  # DDP accepts only real (not string) annotations: none here
    """Birder's DDP hook: keep this rank's gradient; poison the bucket everywhere if any rank's is non-finite.

    One asynchronous all-gather per bucket, over Birder's own group of all ranks, of a 4-word record: "in
    backward", the step, this rank's largest |gradient| (NaN or inf if one is) and a checksum of the bucket's
    parameters (``bits_checksum``). Every rank learns which ranks had a non-finite gradient, a bound on every node
    sum (so step() needs no collective of its own to decide whether the step counts), and whether the ranks'
    parameters still agree (something other than Birder moved them if not). A rank that called state_dict() alone
    meets this record with its own and both sides raise at once. If the all-gather fails (a peer died, raised or
    stalled), backward raises Birder's fault message naming the ranks that never reported. DDP waits for it at
    the end of backward, so it overlaps the backward of the following buckets.
    """
    state.backward_ran = state.backward_seen = True
    buffer = bucket.buffer()
    index = bucket.index()
    params = bucket.parameters()
    state.seen.update(map(id, params))
    if state.sampled:
        for p, gradient in zip(params, bucket.gradients(), strict=True):
            if id(p) in state.sampled:
                slot, elements = state.sampled[id(p)]
                state.backward_sample[slot] = gradient.reshape(-1)[elements].to(torch.float32)  # a copy: .grad moves on
    if state.on_bucket is not None:
        state.on_bucket(bucket)
    if buffer.numel():
        low, high = torch.aminmax(buffer)  # one pass, no temporary; NaN propagates
        largest = torch.maximum(-low, high).to(torch.float32).reshape(1)
    else:
        largest = torch.zeros(1, dtype=torch.float32, device=buffer.device)
    step = state.step_of()
    if state.group is None:
        if not bool(torch.isfinite(largest).all()):
            state.nonfinite_ranks.add(0)
        state.largest[index] = float(largest)
        done = torch.futures.Future()
        done.set_result(buffer)
        return done
    record = torch.cat([torch.tensor([HOOK, step], dtype=torch.int64, device=buffer.device),
                        largest.view(torch.int32).to(torch.int64), bits_checksum(params).reshape(1),
                        torch.tensor([state.settings_of()], dtype=torch.int64, device=buffer.device)])
    every = torch.empty(state.world * RECORD_WORDS, dtype=torch.int64, device=buffer.device)
    work = comm._all_gather(every, record, group=state.group, async_op=True)

    def finish(done):
        try:
            done.value()
        except Exception as error:  # the rows were never filled: name the ranks from who reported failing
            raise RuntimeError(state.fault_message("all-gather in backward (Birder's hook)", state.group, error)) \
                from None
        rows = every.view(state.world, RECORD_WORDS).cpu()
        check_records(rows, HOOK, step)
        largest_of = rows[:, 2].to(torch.int32).view(torch.float32)
        bad = (~torch.isfinite(largest_of)).nonzero().reshape(-1).tolist()
        state.largest[index] = float(largest_of.max()) if not bad else float("inf")
        if bool((rows[:, 3] != rows[0, 3]).any()):
            state.drifted.add(index)
        if bool((rows[:, 4] != rows[0, 4]).any()):
            state.settings_differ = True
        if bool((rows[:, 2] != rows[0, 2]).any()):
            state.gradients_differ = True
        if bad:
            state.nonfinite_ranks.update(bad)
            buffer.fill_(float("nan"))
        return buffer

    return work.get_future().then(finish)


@dataclass
class Pending:
    """A record all-gather under way (``start``); ``finish`` waits for it and checks the rows, once."""

    doing: int
    record: torch.Tensor  # kept alive until the all-gather is done
    every: torch.Tensor
    work: object
    finished: bool = False


def start(opt: Birder, doing: int) -> Pending | None:
    """Start ``Birder._exchange_record``'s all-gather (asynchronous; ``finish`` waits and checks). step()'s
    record (``STEP``): a rank that skipped step() meets it with its next backward's record, and every rank
    raises at once instead of waiting out the timeout in mismatched collectives. None on one rank."""
    group = opt.topology.world_group
    if group is None:
        return None
    words = torch.tensor([doing, opt.t + 1, 0, 0, 0], dtype=torch.int64, device=opt.device)
    record = words if doing != STEP else torch.cat([words[:2], gradient_fingerprint(opt), words[4:]])
    every = torch.empty(dist.get_world_size() * RECORD_WORDS, dtype=torch.int64, device=opt.device)
    return Pending(doing, record, every, comm._all_gather(every, record, group=group, async_op=True))


def gradient_fingerprint(opt: Birder) -> torch.Tensor:
    """Two int64 words for step()'s record: a checksum of a fixed sample of the local gradient (up to
    ``_SAMPLE`` evenly spaced elements of each of the largest trainable parameters' .grad) and whether that
    sample is finite and holds a nonzero value. Costs a few small index reads per step."""
    if not opt._sample:
        return torch.zeros(2, dtype=torch.int64, device=opt.device)
    sample = _step_sample(opt)  # exact for every floating dtype it holds
    usable = torch.isfinite(sample).all() & sample.ne(0).any()  # a poisoned (NaN) step is skipped anyway
    return torch.stack([sample.view(torch.int32).sum(dtype=torch.int64), usable.to(torch.int64)]).to(opt.device)


def finish(opt: Birder, started: Pending | None) -> None:
    """Wait for ``start``'s all-gather and check the rows (``check_records``; for step()'s,
    ``refuse_reduced_gradients``); nothing on one rank or when already finished."""
    if started is None or started.finished:
        return
    started.finished = True
    doing, every, work = started.doing, started.every, started.work
    phase = {STATE_DICT: "state_dict() record all-gather", STEP: "step() record all-gather"}.get(
        doing, "record all-gather before DDP's collectives in forward")
    opt._collective(phase, opt.topology.world_group, work.wait)
    rows = every.view(-1, RECORD_WORDS).cpu()
    check_records(rows, doing, opt.t + 1)
    if doing == STEP and opt._gradients_differed:
        refuse_reduced_gradients(opt, rows, opt.t + 1)


def start_heartbeat() -> None:
    """Start this process's heartbeat once (a daemon thread): while the default process group exists it adds 1 to
    ``birder/alive/{rank}`` in the default store every ``_HEARTBEAT_S``, so that a rank whose collective failed can
    tell a peer that died (its count stopped) from one that is alive and has not reached its own failure yet
    (``fault_message``). The thread ends with the process group or on any store error."""
    global _heartbeat
    with _heartbeat_lock:
        if _heartbeat is not None and _heartbeat.is_alive():
            return
        _heartbeat = threading.Thread(target=_beat, name="birder-heartbeat", daemon=True)
        _heartbeat.start()


_heartbeat: threading.Thread | None = None
_heartbeat_lock = threading.Lock()


def _beat() -> None:
    try:
        while dist.is_initialized():
            dist.distributed_c10d._get_default_store().add(f"birder/alive/{dist.get_rank()}", 1)
            time.sleep(_HEARTBEAT_S)
    except Exception:  # the process group went away between the check and the add, or its store did
        return


def fault_message(opt: Birder, phase: str, group, error: Exception) -> str:
    """Birder's one line for a collective that failed in ``phase``: the step, the group's ranks, this rank, the
    timeout, and the ranks that never reported their own failure through the default store: those whose heartbeat
    stopped for ``_DEAD_AFTER_S`` (dead; named as soon as one is seen), else those still silent, though alive,
    after ``_FAULT_REPORT_S`` (hung; a quarter of the timeout at most). The cause is cut to 200 characters."""
    rank, step = dist.get_rank(), opt.t + 1
    members = dist.get_process_group_ranks(group)
    who = "the store could not tell which rank is missing"
    try:  # every rank whose collective failed says so; those that never do are hung or dead
        store = dist.distributed_c10d._get_default_store()
        store.set(f"birder/fault/{step}/{rank}", phase)
        others = [r for r in range(dist.get_world_size()) if r != rank]
        now = time.monotonic()
        beats = {r: store.add(f"birder/alive/{r}", 0) for r in others}  # add 0: read without blocking
        moved = dict.fromkeys(others, now)
        window = min(_FAULT_REPORT_S, opt.timeout_s / 4)
        deadline = now + window
        while True:
            silent = [r for r in others if not store.check([f"birder/fault/{step}/{r}"])]
            now = time.monotonic()
            for r in silent:
                count = store.add(f"birder/alive/{r}", 0)
                if count != beats[r]:
                    beats[r], moved[r] = count, now
            dead = [r for r in silent if beats[r] > 0 and now - moved[r] >= _DEAD_AFTER_S]
            if not silent or dead or now > deadline:
                break
            time.sleep(0.05)
        if dead:
            who = f"rank(s) {dead} did not reach it (dead: no heartbeat for {_DEAD_AFTER_S:g} s)"
        elif silent:
            alive = all(beats[r] > 0 for r in silent)  # a rank without a heartbeat yet: no telling
            state = f"hung: alive, silent for {window:g} s" if alive else "hung or dead"
            who = f"rank(s) {silent} did not reach it ({state})"
        else:
            who = "no rank is silent"
    except Exception:  # the store itself may be gone with a dead rank 0
        pass
    cause = " ".join(str(error).split())[:200]
    hint = " (state_dict() is collective: every rank must call it)" if phase.startswith("state_dict") else ""
    return (f"Birder step {step}: the {phase} over ranks {members} failed on rank {rank} within the "
            f"{opt.timeout_s:g} s process-group timeout; {who}{hint}. Cause: {cause}")


def drift_message(opt: Birder) -> str:
    """The parameters whose copies differ between ranks (one all-gather of per-parameter checksums, every rank
    taking part: every rank saw the same records), named with the ranks that agree with each other."""
    world, group = dist.get_world_size(), opt.topology.world_group
    mine = torch.stack([bits_checksum([p]) for p in opt._params])
    rows = opt._collective("parameter checksum all-gather", group,
                           lambda: comm.all_gather_rows(mine, group, world)).cpu()
    differ = []
    for i, name in enumerate(opt.param_names):
        column = rows[:, i].tolist()
        if len(set(column)) > 1:
            sides = {v: [r for r, x in enumerate(column) if x == v] for v in dict.fromkeys(column)}
            differ.append(f"{name} (ranks {' | '.join(str(r) for r in sides.values())})")
    what = ", ".join(differ[:6]) + (", ..." if len(differ) > 6 else "") if differ else "(changed since backward)"
    return (f"Birder step {opt.t + 1}: the ranks' copies of {len(differ) or 'some'} parameter(s) differ: "
            f"{what}. Something other than Birder.step() changed them on some ranks: weights loaded on some "
            "ranks only after DDP was built (DDP copies rank 0's weights only when it is built: load them on "
            "every rank), or a second optimizer, or code updating them from .grad (under Birder .grad holds each "
            "rank's LOCAL gradient: give those parameters to Birder, param_groups=[...], or to a separate DDP "
            "model)")


def settings_message(opt: Birder) -> str:
    """Each group's lr and weight decay that differ between ranks (one all-gather of every rank's settings,
    every rank taking part: every rank saw the same records), with the ranks holding each value."""
    world, group = dist.get_world_size(), opt.topology.world_group
    mine = torch.tensor(group_settings(opt.param_groups), dtype=torch.float64)
    rows = opt._collective("lr / weight decay all-gather", group,
                           lambda: comm.all_gather_rows(mine.to(opt.device), group, world)).cpu()
    differ = []
    for i, (g, key) in enumerate((g, key) for g in range(len(opt.param_groups)) for key in ("lr", "weight_decay")):
        column = rows[:, i].tolist()
        sides = {repr(v): [r for r, x in enumerate(column) if repr(x) == repr(v)] for v in column}
        if len(sides) > 1:
            differ.append(f"param_groups[{g}][{key!r}] " + ", ".join(
                f"{v} on rank(s) {ranks}" for v, ranks in sides.items()))
    return (f"Birder step {opt.t + 1}: the ranks' settings differ before the update: "
            f"{'; '.join(differ) or 'lr or weight decay'}. Every rank must use the same lr and weight decay: "
            "step the LR scheduler on every rank (not under `if rank == 0:`), and give ReduceLROnPlateau a "
            "metric all-reduced across the ranks, not each rank's own")
