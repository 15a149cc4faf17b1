"""Multi-rank checks of what ``Birder`` refuses where clients meet it: a layout the hosts contradict, a DDP model over
a subgroup, gradients all-reduced before step(). Each function is the body of one rank (``launch.launch`` runs it
in an initialised process group); ``tests/test_gpu_adoption.py`` reads what each rank raised and after how many
seconds. Hosts are simulated with ``BIRDER_HOSTNAME`` (``gpu_validation.layout``)."""

from __future__ import annotations

import os
import time

import torch.distributed as dist
from torch import nn

from gpu_validation.optimizer import Birder
from gpu_validation.validate import batch, make_model

SEED = 3


def _timed(run) -> dict:
    """What ``run()`` returned, or the first line of the error it raised, and the seconds either took."""
    started = time.monotonic()
    try:
        return {"result": run(), "seconds": round(time.monotonic() - started, 2)}
    except (ValueError, RuntimeError) as error:
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}",
                "seconds": round(time.monotonic() - started, 2)}


def _layout_of(gpus_per_node, rank: int) -> list[int]:
    opt = Birder(nn.parallel.DistributedDataParallel(make_model(0)), lr=0.01, seed=SEED, gpus_per_node=gpus_per_node)
    return [opt.topology.n_nodes, opt.topology.gpus_per_node]


def _own_all_reduce(rank: int, unscale: float = 1.0) -> None:
    """The client averages .grad itself after backward (as DDP would have), times ``unscale`` (what a GradScaler's
    unscale_ does with 1 / its scale), then calls step()."""
    ddp = nn.parallel.DistributedDataParallel(make_model(0))
    opt = Birder(ddp, lr=0.01, seed=SEED)
    x, y = batch(SEED, 1, rank)
    nn.functional.mse_loss(ddp(x), y).backward()
    for p in ddp.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
        p.grad *= unscale
    opt.step()


def _outer_ddp(rank: int) -> None:
    """A second DDP around Birder's DDP model (what Accelerate's prepare(DDP(model), opt) builds)."""
    inner = nn.parallel.DistributedDataParallel(make_model(0))
    opt = Birder(inner, lr=0.01, seed=SEED)
    outer = nn.parallel.DistributedDataParallel(inner)
    x, y = batch(SEED, 1, rank)
    nn.functional.mse_loss(outer(x), y).backward()
    opt.step()


def _subgroup(rank: int) -> None:
    """Ranks 0 and 1 train a DDP model over their own group while ranks 2 and 3 wait at a barrier."""
    group = dist.new_group([0, 1])
    if rank < 2:
        ddp = nn.parallel.DistributedDataParallel(make_model(0), process_group=group)
        Birder(ddp, lr=0.01, seed=SEED)


def refusals(rank: int) -> dict:
    """On 4 ranks, one case after another (each leaves the process group usable for the next): the layout from
    simulated hosts (2 hosts of 2), and each refusal with its message and seconds."""
    out = {}
    os.environ["BIRDER_HOSTNAME"] = f"host{rank // 2}"
    out["hosts_2x2"] = _timed(lambda: _layout_of(None, rank))
    out["given_1_on_2x2"] = _timed(lambda: _layout_of(1, rank))
    os.environ["LOCAL_WORLD_SIZE"] = "4"
    out["local_world_size_4_on_2x2"] = _timed(lambda: _layout_of(None, rank))
    del os.environ["LOCAL_WORLD_SIZE"]
    os.environ["BIRDER_HOSTNAME"] = "one-machine"
    out["one_host_given_2"] = _timed(lambda: _layout_of(2, rank))
    out["one_host_default"] = _timed(lambda: _layout_of(None, rank))
    out["own_all_reduce"] = _timed(lambda: _own_all_reduce(rank))
    out["own_all_reduce_unscaled"] = _timed(lambda: _own_all_reduce(rank, 2.0**-10))
    out["outer_ddp"] = _timed(lambda: _outer_ddp(rank))
    out["subgroup"] = _timed(lambda: _subgroup(rank))
    dist.barrier()
    return out
