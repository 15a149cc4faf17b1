"""Multi-rank checks of what ``Birder`` refuses or survives: ranks drifting apart, a failed peer, a rank-0-only
``state_dict()``; and the expert hook's skipped iteration. Each function is the body of one rank (``launch.launch``
runs it in an initialised process group); the tests in ``tests/test_gpu_birder_optimizer.py`` (the hook's:
``tests/test_gpu_hook.py``) read what each rank reported or raised.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from gpu_validation import records
from gpu_validation.optimizer import Birder
from gpu_validation.validate import batch, make_model

SEED = 3
STALL_S = 15.0  # a stalled rank's silence: past the 10 s timeout the stall tests use, plus the 2.5 s report window
SLOW_S = records._FAULT_REPORT_S + 2.0  # a slow live rank's pause: past the whole report window of a crash


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


def _bn_model() -> nn.Module:
    """make_model's shape with a BatchNorm: DDP broadcasts its running statistics from rank 0 in every forward."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))


def _fail(kind: str) -> None:
    """The injected fault: raise ("raise"), exit without a word ("exit"), or go silent past the others' timeout
    and report window ("stall"), then exit."""
    if kind == "raise":
        raise ValueError("injected fault: this rank raised")
    if kind == "exit":
        os._exit(3)
    time.sleep(STALL_S)
    os._exit(3)


def _timed(run, rank: int) -> dict:
    """Run the steps after the fault; a RuntimeError comes back prefixed with the seconds it took to arrive."""
    started = time.monotonic()
    try:
        run()
    except RuntimeError as error:
        raise RuntimeError(f"after {time.monotonic() - started:.1f} s: {error}") from None
    return {"finished": True}


def peer_fault(kind: str, faulty: int, rank: int) -> dict:
    """Rank ``faulty`` fails (``_fail``) before the forward pass of step 3. The others must raise Birder's own
    error naming it. (Step 3: DDP's own bucket rebuild, a collective of DDP's, runs in step 2's forward.)"""
    _, ddp, opt = _setup()
    for step in (1, 2):
        _step(ddp, opt, step, rank)
    if rank == faulty:
        _fail(kind)
    return _timed(lambda: _step(ddp, opt, 3, rank), rank)


def ddp_fault(where: str, kind: str, faulty: int, rank: int, slow: int | None = None) -> dict:
    """Rank ``faulty`` fails (``_fail``) where the others are about to enter one of DDP's own collectives:
    "init" before DDP(model) (its parameter check and broadcast, before Birder exists), "rebuild" before step 2's
    forward (DDP's bucket-rebuild broadcast), "buffers" before step 3's forward of a BatchNorm model (DDP's buffer
    broadcast), "buffers_inside" inside that forward, after Birder's record exchange and before DDP's broadcast (a
    forward pre-hook of its own, registered after Birder's; once the other non-root ranks have their buffers,
    ``_order_buffers_fault``), "unused" before step 3's forward under
    find_unused_parameters (DDP's bitmap all-reduce in backward), "unused_inside" in step 3's backward right after
    its last bucket's record all-gather completed, before DDP's bitmap all-reduce. Rank ``slow``, if given, sleeps
    ``SLOW_S`` after that step's forward: alive, and silent for longer than the others' report window."""
    if where == "init":  # before Birder exists: whatever DDP's constructor raises reaches the caller as it is
        if rank == faulty:
            _fail(kind)
        return _timed(lambda: nn.parallel.DistributedDataParallel(make_model(0)), rank)
    ddp = nn.parallel.DistributedDataParallel(_bn_model() if where.startswith("buffers") else make_model(0),
                                              bucket_cap_mb=0.0003, find_unused_parameters=where.startswith("unused"))
    if where == "unused_inside" and rank == faulty:
        real_hook = records.local_gradient_hook

        def hook(state, bucket):
            future = real_hook(state, bucket)
            if bucket.is_last() and state.step_of() == 3:
                future.wait()
                _fail(kind)
            return future

        records.local_gradient_hook = hook  # this rank's process only: Birder registers it below
    opt = Birder(ddp, lr=0.01, seed=SEED)
    fail_at = 2 if where == "rebuild" else 3
    if where == "buffers_inside":  # rank 0 serves each rank itself: rank 2 gets its buffers while rank 1 stalls
        _order_buffers_fault(ddp, opt, fail_at, kind, faulty, rank)
    if rank == slow:
        ddp.register_forward_hook(lambda module, args, output: time.sleep(SLOW_S) if opt.t + 1 == fail_at else None)
    for step in range(1, fail_at):
        _step(ddp, opt, step, rank)
    if rank == faulty and where in ("rebuild", "buffers", "unused"):
        _fail(kind)
    return _timed(lambda: _step(ddp, opt, fail_at, rank), rank)


def _order_buffers_fault(ddp: nn.Module, opt: Birder, fail_at: int, kind: str, faulty: int, rank: int) -> None:
    """"buffers_inside": the faulty rank fails in its forward, after Birder's record exchange, once every other
    non-root rank has its buffers from DDP's broadcast in step ``fail_at`` (each says so through the default store
    after its forward). Without that order rank 0 sometimes saw the faulty rank gone before it had served the
    others, which then failed in the broadcast instead of in Birder's hook: a race, once in CI."""
    store = dist.distributed_c10d._get_default_store()
    if rank == faulty:
        others = [f"faults/has_buffers/{r}" for r in range(1, dist.get_world_size()) if r != faulty]

        def fail(module, args):
            if opt.t + 1 == fail_at:
                store.wait(others, timedelta(seconds=STALL_S))
                _fail(kind)

        ddp.register_forward_pre_hook(fail)
    elif rank != 0:
        ddp.register_forward_hook(
            lambda module, args, output: store.set(f"faults/has_buffers/{rank}", "1") if opt.t + 1 == fail_at else None)


def rank0_state_dict(rank: int) -> dict:
    """``if rank == 0: opt.state_dict()`` while the other ranks go on training, into DDP's bucket rebuild
    ("rebuild": after step 1; DDP rebuilds in step 2's forward), DDP's buffer broadcast ("buffers": a BatchNorm
    model, after step 2) or the next step's backward ("backward": after step 2): every rank must raise at once
    (well within the timeout) with one line saying that state_dict() is collective. Each case's records meet
    whole, so the process group stays usable for the next case (a fresh model and Birder); "backward" goes last,
    as it leaves the other buckets' record all-gathers of the other ranks unmatched. Returns, per case, the
    seconds to the error and its message."""
    raised = {}
    for where in ("rebuild", "buffers", "backward"):
        ddp = nn.parallel.DistributedDataParallel(_bn_model() if where == "buffers" else make_model(0),
                                                  bucket_cap_mb=0.0003)
        opt = Birder(ddp, lr=0.01, seed=SEED)
        saved_after = 1 if where == "rebuild" else 2
        for step in range(1, saved_after + 1):
            _step(ddp, opt, step, rank)
        started = time.monotonic()
        try:
            if rank == 0:
                opt.state_dict()
            _step(ddp, opt, saved_after + 1, rank)
        except RuntimeError as error:
            raised[where] = (round(time.monotonic() - started, 2), str(error))
    return raised


def forward_records(rank: int) -> dict:
    """A BatchNorm model (DDP broadcasts its buffers in every forward) trained 3 steps of 3 accumulated
    micro-batches, then reloaded from its own state_dict() and stepped once more on 2: how many forwards ran and
    how many of them exchanged Birder's record before DDP's collectives (due once after construction, each step()
    and load_state_dict())."""
    ddp = nn.parallel.DistributedDataParallel(_bn_model(), bucket_cap_mb=0.0003)
    opt = Birder(ddp, lr=0.01, seed=SEED)
    exchanged, forwards = [], 0
    exchange = opt._exchange_record
    opt._exchange_record = lambda doing: (exchanged.append(doing), exchange(doing))[1]  # counts, then does it
    for step, micro_batches in ((1, 3), (2, 3), (3, 3), (4, 2)):
        if step == 4:
            opt.load_state_dict(opt.state_dict())
        for micro in range(micro_batches):
            x, y = batch(SEED + micro, step, rank)
            nn.functional.mse_loss(ddp(x), y).backward()
            forwards += 1
        opt.step()
        opt.zero_grad()
    return {"forwards": forwards, "forward_records": exchanged.count(records.FORWARD),
            "state_dict_records": exchanged.count(records.STATE_DICT), "t": opt.t}


_TABLE = (  # (fault, where the other ranks are, body, its arguments, ranks, process-group timeout in s)
    ("rank 1 raises before step 3's forward", "Birder's hook (backward)", peer_fault, ("raise", 1), 3, 60),
    ("rank 1 stalls before step 3's forward", "Birder's hook (backward)", peer_fault, ("stall", 1), 3, 10),
    ("rank 1 exits before DDP(model)", "DDP's initial parameter check/broadcast", ddp_fault, ("init", "exit", 1), 3,
     60),
    ("rank 1 exits before step 2's forward", "DDP's bucket rebuild", ddp_fault, ("rebuild", "exit", 1), 3, 60),
    ("rank 1 stalls before step 2's forward", "DDP's bucket rebuild", ddp_fault, ("rebuild", "stall", 1), 3, 10),
    ("rank 1 raises before step 3's forward (BatchNorm)", "DDP's buffer broadcast", ddp_fault,
     ("buffers", "raise", 1), 3, 60),
    ("rank 1 exits inside step 3's forward, after Birder's record", "DDP's buffer broadcast", ddp_fault,
     ("buffers_inside", "exit", 1), 3, 60),
    ("rank 1 stalls inside step 3's forward, after Birder's record", "DDP's buffer broadcast", ddp_fault,
     ("buffers_inside", "stall", 1), 3, 10),
    ("rank 1 exits before step 3's forward (find_unused_parameters)", "Birder's hook, then DDP's bitmap all-reduce",
     ddp_fault, ("unused", "exit", 1), 3, 60),
    ("rank 1 exits after its last bucket's record in step 3's backward", "DDP's bitmap all-reduce", ddp_fault,
     ("unused_inside", "exit", 1), 3, 60),
)


def fault_table() -> str:
    """Run every fault of ``_TABLE`` and the rank-0-only state_dict() cases on local gloo ranks: a markdown table
    of what each other rank raised (its message, torch's cause cut to 80 characters) and how many seconds after
    the fault (the injected one, or rank 0's state_dict() call)."""
    from gpu_validation import launch

    def cell(rank: int, seconds, message: str) -> str:  # one line, torch's traceback ("At: ...") left out
        text = " ".join(message.split()).split(" At: ")[0]
        head, cut, cause = text.partition("Cause: ")
        return f"rank {rank}, {seconds} s: ``{head}{cut}{cause[:80]}``"

    rows = ["| fault | the other ranks were in | timeout | outcome on each other rank (s to the error: message) |",
            "|---|---|---|---|"]
    for fault, where, body, args, world, timeout in _TABLE:
        outcome = launch.launch(body, args, world, "gloo", timeout, 120)
        cells = [cell(rank, *message.removeprefix("RuntimeError: after ").split(" s: ", 1))
                 if message.startswith("RuntimeError: after ") else cell(rank, "(before the fault)", message)
                 for rank, message in outcome.errors.items() if rank != args[-1]]
        rows.append(f"| {fault} | {where} | {timeout} s | {'<br>'.join(cells) or outcome.describe_failures()} |")
    outcome = launch.launch(rank0_state_dict, (), 2, "gloo", 60, 120)
    for case, where in (("rebuild", "DDP's bucket rebuild"), ("buffers", "DDP's buffer broadcast"),
                        ("backward", "Birder's hook (backward)")):
        cells = [cell(rank, *report["result"][case]) for rank, report in sorted(outcome.reports.items())
                 if "result" in report]
        rows.append(f"| `if rank == 0: opt.state_dict()` ({case}) | {where} | 60 s | "
                    f"{'<br>'.join(cells) or outcome.describe_failures()} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import importlib

    print(importlib.import_module(__spec__.name).fault_table())  # by its own name, so the ranks can unpickle the bodies


def hook_nan_on_one_rank(rank: int) -> dict:
    """The expert hook on 2 ranks, several buckets: rank 1's gradient holds a NaN at iteration 2 in its first layer
    only (the last bucket DDP reduces). Every rank must find NaN in every .grad, SGD's step refused, a GradScaler's
    step skipped, and training go on after it."""
    from gpu_validation import comm
    from gpu_validation.hook import BirderState, birder_hook

    model = make_model(0)
    state = BirderState(model.parameters(), comm.make_topology("flat", 2, 1), seed=SEED)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0003)
    ddp.register_comm_hook(state, birder_hook)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0)  # on the skipped iteration only (it unscales +-1 later)
    seen = {}
    for step in range(4):
        x, y = batch(SEED, step, rank)
        if step == 2 and rank == 1:
            model[0].weight.register_hook(lambda g: g.index_fill(0, torch.tensor([0]), float("nan")))
        loss = nn.functional.mse_loss(ddp(x), y)
        if step != 2:
            loss.backward()
            sgd.step()
        else:
            scaler.scale(loss).backward()
            seen["all_nan"] = all(bool(p.grad.isnan().all()) for p in model.parameters())
            seen["buckets"] = len(state.buckets)
            try:
                sgd.step()
            except RuntimeError as error:
                seen["sgd_refused"] = "skipped this iteration" in str(error)
            scaler.step(sgd)
            scaler.update()
        sgd.zero_grad()
        if step == 2 and rank == 1:
            model[0].weight._backward_hooks.clear()
    seen.update(t=state.t, skipped=state.skipped_steps, scale=scaler.get_scale(),
                checksum=float(sum(p.detach().double().sum() for p in model.parameters())))
    return seen
