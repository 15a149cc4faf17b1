"""Birder in Hugging Face Accelerate: the recipe, run on local gloo ranks that stand for NODES hosts of G "GPUs" each.

The recipe is an order: prepare the model alone (Accelerate wraps it in DistributedDataParallel), build Birder on
that, then prepare the rest::

    model = accelerator.prepare(model)
    opt = Birder(model, lr=...)
    opt, loader, scheduler = accelerator.prepare(opt, loader, scheduler)

``accelerator.prepare(DDP(model), Birder(...))`` instead wraps a second DDP around Birder's, whose full-precision
all-reduce averages the gradients before Birder sees them: Birder refuses it at the first step (``--wrong``).
Each rank runs in its own process, started as ``accelerate launch`` starts it (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) and reports its host as ``node<n>`` through ``BIRDER_HOSTNAME`` (the
override for simulating hosts on one machine). Every step is compared with ``birder_ref``
(``gpu_validation.reference_check.Reference``, no tolerance). Needs the ``accelerate`` extra.

    python examples/accelerate_birder.py --nodes 2 --gpus-per-node 2 --steps 4     # prints one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, nodes: int, gpus: int, steps: int, wrong: bool, port: int, folder: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(nodes * gpus), "LOCAL_RANK": str(rank % gpus), "LOCAL_WORLD_SIZE": str(gpus),
                       "BIRDER_HOSTNAME": f"node{rank // gpus}"})
    torch.set_num_threads(1)
    from accelerate import Accelerator
    from torch import nn

    from gpu_validation import Birder
    from gpu_validation.reference_check import Reference, ranks_identical

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))
    n = 4 * 2 * steps * nodes * gpus
    torch.manual_seed(1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(n, 8), torch.randn(n, 3)),
                                         batch_size=4)
    if wrong:  # the natural code: the client wraps the DDP model in a second DDP
        model = nn.parallel.DistributedDataParallel(net)
        opt = Birder(model, lr=0.01, weight_decay=1e-3, seed=3)
        model, opt, loader = accelerator.prepare(model, opt, loader)
    else:  # the recipe
        model = accelerator.prepare(net)
        opt = Birder(model, lr=0.01, weight_decay=1e-3, seed=3)
        opt, loader = accelerator.prepare(opt, loader)
    reference = Reference(opt.optimizer)
    out = {"rank": rank, "error": None}
    try:
        for x, y in loader:  # 2 micro-batches per step (accelerator.accumulate: no_sync on the first)
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.mse_loss(model(x), y))
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
    except RuntimeError as error:
        out["error"] = str(error).splitlines()[0]
    topo = opt.optimizer.topology
    out.update(steps=reference.steps, mismatched=reference.mismatched, layout=[topo.n_nodes, topo.gpus_per_node],
               ranks_identical=ranks_identical(net) if out["error"] is None else None)
    Path(folder, f"rank{rank}.json").write_text(json.dumps(out))


def run(nodes: int, gpus: int, steps: int, wrong: bool = False) -> dict:
    """Every rank's report: steps compared, elements differing from ``birder_ref``, Birder's layout, an error."""
    from gpu_validation.launch import start_method

    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(_rank, args=(nodes, gpus, steps, wrong, _free_port(), folder), nprocs=nodes * gpus,
                           start_method=start_method(["torch._dynamo", "accelerate", "gpu_validation.reference_check"]))
        reports = [json.loads(f.read_text()) for f in sorted(Path(folder).glob("rank*.json"))]
    return {"nodes": nodes, "gpus_per_node": gpus, "wrong": wrong, "ranks": reports,
            "passed": len(reports) == nodes * gpus and all(r["mismatched"] == 0 and r["steps"] == steps
                                                           and r["layout"] == [nodes, gpus] and r["ranks_identical"]
                                                           and r["error"] is None for r in reports)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--wrong", action="store_true", help="prepare(DDP(model), Birder(...)): refused at step 1")
    args = parser.parse_args(argv)
    result = run(args.nodes, args.gpus_per_node, args.steps, args.wrong)
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
