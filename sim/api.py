"""The simulator as a library, without argparse: what `birder report` and other programs call.

Each prediction is a dict with the keys of ``birder predict --json`` (``throughput``, ``iteration_s``, ...,
``throughput_low``, ``throughput_high``) plus the configuration (``model``, ``batch_per_gpu``, ``network``,
``optimizer``, ``nodes``, ``gpus``). ``validation_summary`` gives the fit (in-sample) and the cross-validated
(rows not fitted on) errors apart.
"""

from __future__ import annotations

import sys
from functools import lru_cache

from tqdm import tqdm

from sim.network import cluster as make_cluster
from sim.workload import predict


@lru_cache(maxsize=1)
def prediction_relative_error() -> float:
    """The relative error that a prediction's interval spans: the cross-validated MAPE (rows not fitted on)."""
    from sim import validate

    cross = validate.cross_validation()
    return float(cross["mape"]) if cross is not None else float(validate.mape(validate.compare(validate.rows())))


def predict_config(model: str, nodes: int, network: str = "10gbe", optimizer: str = "sgdm", *,
                   batch_per_gpu: int = 32, gpus_per_node: int = 8, gpu: str = "a100",
                   scheme: str = "hierarchical", single_node_throughput: float | None = None) -> dict:
    """One training configuration on a preset network: ``birder predict --json`` as a dict."""
    c = make_cluster(network, nodes, gpus_per_node, None, gpu)
    out = predict(c, model=model, batch_per_gpu=batch_per_gpu, optimizer=optimizer, scheme=scheme,
                  single_node_throughput=single_node_throughput).as_dict()
    error = prediction_relative_error()
    out.update({"model": model, "batch_per_gpu": batch_per_gpu, "network": c.nic.name, "optimizer": optimizer,
                "nodes": nodes, "gpus": c.n_gpus, "throughput_low": out["throughput"] * (1 - error),
                "throughput_high": out["throughput"] * (1 + error)})
    return out


def sweep_grid(model: str, nodes: list[int], networks: list[str], optimizers: list[str], *,
               batch_per_gpu: int = 32, gpus_per_node: int = 8, gpu: str = "a100",
               single_node_throughput: float | dict[str, float] | None = None, progress: bool = False) -> list[dict]:
    """``predict_config`` over nodes x networks x optimizers; ``single_node_throughput`` may map optimizer -> X."""
    if isinstance(single_node_throughput, dict):
        missing = [o for o in optimizers if o not in single_node_throughput]
        if missing:
            raise ValueError(f"single_node_throughput has no value for {', '.join(missing)}")
    grid = [(net, opt, n) for net in networks for opt in optimizers for n in nodes]
    out = []
    for net, opt, n in tqdm(grid, desc="sweep", unit="config", disable=not progress, file=sys.stderr):
        single = single_node_throughput.get(opt) if isinstance(single_node_throughput, dict) else single_node_throughput
        out.append(predict_config(model, n, net, opt, batch_per_gpu=batch_per_gpu, gpus_per_node=gpus_per_node,
                                  gpu=gpu, single_node_throughput=single))
    return out


def validation_summary() -> dict:
    """The public rows predicted, with ``fit_mape`` (in-sample: constants fitted on these rows) and
    ``cross_validated_mape`` (rows left out of the fit), the cross-validation's description and its rows."""
    from sim import validate

    results = validate.compare(validate.rows())
    cross = validate.cross_validation()
    return {"rows": results, "fit_mape": validate.mape(results),
            "cross_validated_mape": None if cross is None else cross["mape"],
            "cross_validation": cross}
