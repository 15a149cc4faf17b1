"""Birder in PyTorch Lightning: the recipe, run on local gloo ranks that stand for NODES hosts of G "GPUs" each.

The recipe is one line in ``configure_optimizers``: build Birder on the DDP model the strategy made,
``Birder(self.trainer.strategy.model, lr=...)``. Birder reads the layout from the hosts the ranks run on (Lightning's
launcher sets no ``LOCAL_WORLD_SIZE``), so nothing else changes. Here each rank runs in its own process, started
the way a cluster's launcher starts it (``NODE_RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``), and reports
its host as ``node<NODE_RANK>`` through ``BIRDER_HOSTNAME`` (the override for simulating hosts on one machine).
Every step is compared with ``birder_ref`` (``gpu_validation.reference_check.Reference``: the gradients step() saw,
the same draws, line 16, no tolerance). ``--precision 16-mixed`` or ``bf16-mixed`` trains under autocast with
``gpu_validation.lightning_precision.mixed_precision`` as the Trainer's plugin, which lets Lightning clip Birder's
gradients (its own plugin refuses to). Needs the ``lightning`` extra.

    python examples/lightning_birder.py --nodes 2 --gpus-per-node 1 --steps 4     # prints one JSON object
    python examples/lightning_birder.py --precision 16-mixed                     # GradScaler, clipping, autocast
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


def _rank(local_rank: int, node: int, nodes: int, gpus: int, steps: int, port: int, folder: str,
          precision: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": str(node),
                       "LOCAL_RANK": str(local_rank), "BIRDER_HOSTNAME": f"node{node}"})
    torch.set_num_threads(1)
    import lightning as L
    from torch import nn

    from gpu_validation import Birder
    from gpu_validation.lightning_precision import mixed_precision
    from gpu_validation.reference_check import Reference, ranks_identical

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))

        def training_step(self, batch, _):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):  # the recipe: Birder on the strategy's DDP model
            self.birder = Birder(self.trainer.strategy.model, lr=0.01, weight_decay=1e-3, seed=3)
            self.reference = Reference(self.birder)
            return self.birder

    torch.manual_seed(1)
    n = 8 * steps * nodes * gpus
    data = torch.utils.data.TensorDataset(torch.randn(n, 8), torch.randn(n, 3))
    model = Net()
    mixed = {} if precision == "32-true" else {"plugins": [mixed_precision(precision, "cpu")]}
    trainer = L.Trainer(accelerator="cpu", devices=gpus, num_nodes=nodes, strategy="ddp", max_steps=steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, gradient_clip_val=1.0, **mixed)
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
    topo = model.birder.topology
    out = {"rank": trainer.global_rank, "steps": model.reference.steps, "mismatched": model.reference.mismatched,
           "layout": [topo.n_nodes, topo.gpus_per_node], "ranks_identical": ranks_identical(model.net)}
    Path(folder, f"rank{trainer.global_rank}.json").write_text(json.dumps(out))


def _start(index: int, nodes: int, gpus: int, steps: int, port: int, folder: str, precision: str) -> None:
    _rank(index % gpus, index // gpus, nodes, gpus, steps, port, folder, precision)


def run(nodes: int, gpus: int, steps: int, precision: str = "32-true") -> dict:
    """Every rank's report: steps compared, elements differing from ``birder_ref``, Birder's layout."""
    from gpu_validation.launch import start_method

    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(_start, args=(nodes, gpus, steps, _free_port(), folder, precision), nprocs=nodes * gpus,
                           start_method=start_method(["torch._dynamo", "lightning", "gpu_validation.reference_check"]))
        reports = [json.loads(f.read_text()) for f in sorted(Path(folder).glob("rank*.json"))]
    return {"nodes": nodes, "gpus_per_node": gpus, "precision": precision, "ranks": reports,
            "passed": len(reports) == nodes * gpus and all(r["mismatched"] == 0 and r["steps"] == steps
                                                           and r["layout"] == [nodes, gpus] and r["ranks_identical"]
                                                           for r in reports)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--precision", choices=("32-true", "16-mixed", "bf16-mixed"), default="32-true")
    args = parser.parse_args(argv)
    result = run(args.nodes, args.gpus_per_node, args.steps, args.precision)
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
