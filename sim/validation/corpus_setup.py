"""A corpus row (sim/validation/corpus.csv) as a simulated set-up: its cluster from generic hardware data or
its source's site profile (``corpus_cluster``), its prediction calibrated by its own single-node throughput
(``corpus_predict``), and the two naive baselines on the same row (``linear_scaling``, ``alpha_beta``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sim.hardware import (
    COMM_LIBRARIES,
    FRAMEWORKS,
    GENERIC_NETWORKS,
    GPUS,
    INTRA,
    TRANSPORTS,
    Cluster,
    Nic,
    cluster,
    default_intra,
    make_nic,
    network_spec,
)
from sim.models import MODELS, model_profile
from sim.validation.corpus import PublishedRow
from sim.workload import OPTIMIZERS, predict

if TYPE_CHECKING:

    from sim import workload
from sim.uncertainty import alpha_beta_throughput, gradient_bits, incast_slowed, interval_regime

PAPER_SOURCE = "birder-neurips2023"  # the corpus's id of the Birder paper (its rows are the site profiles' fit)
# (source, transport, line rate in Gb/s) -> the site profile fitted on that source's rows of that testbed
SITE_OF_SETUP = {(PAPER_SOURCE, "tcp", 10.0): "birder-paper-10gbe", (PAPER_SOURCE, "ib", 200.0): "birder-paper-ib"}
FITTED_SOURCES = frozenset(source for source, _, _ in SITE_OF_SETUP)  # the only sources whose rows are fitted on
TRANSPORT_OF = {"tcp": "socket", "ib": "ib", "roce": "ib"}
# optimizers of the corpus that the simulator runs as another that communicates the same way: LAMB all-reduces
# full-precision gradients as Adam does (You et al. 2020, Algorithm 2: a per-layer trust ratio on the same
# moments), plain SGD as SGD with momentum; their step's compute is in the measured single-node throughput
SIMULATED_AS = {"lamb": "adam", "sgd": "sgdm"}
GRAD_DTYPE_OF_PRECISION = {"fp32": "fp32", "amp": "fp32", "fp16": "fp16", "bf16": "bf16"}  # amp: fp32 gradients


def corpus_rows() -> tuple[tuple, str]:
    """The validation corpus (``sim.validation.load_corpus``) and where it comes from."""
    from sim.validation.corpus import load_corpus

    return tuple(load_corpus()), "sim/validation/corpus.csv"


def linear_scaling(row: PublishedRow) -> float:
    """Naive baseline: nodes x single-node throughput."""
    return row.nodes * row.single_node_throughput


def link_rate_gbps(row: PublishedRow) -> float:
    """Gb/s per NIC of a row's link as the simulator and the alpha-beta baseline both take it: the rate its source
    measured host to host where it states one (set-up data), else the line rate."""
    return row.line_rate_gbps if row.measured_link_gbps is None else row.measured_link_gbps


def alpha_beta(row: PublishedRow) -> float:
    """``alpha_beta_throughput`` of a corpus row: its link rate (``link_rate_gbps``) on all its NICs, once per
    optimizer step (``grad_accum`` micro-batches)."""
    bits = gradient_bits(SIMULATED_AS.get(row.optimizer, row.optimizer),
                         GRAD_DTYPE_OF_PRECISION.get(row.precision, "fp32"), row.model, row.warmup_fraction)
    return alpha_beta_throughput(row.params, bits, row.nodes, row.gpus_per_node * row.batch_per_gpu * row.grad_accum,
                                 row.single_node_throughput, link_rate_gbps(row) * 1e9 * row.nics_per_node / 8)


def row_interval_regime(row: PublishedRow, prediction: workload.Prediction) -> str:
    """A corpus row's interval regime as ``api.predict_on`` keys a prediction on a generic network: the alpha-beta
    ring's efficiency with the simulator's TCP incast stalls (``prediction``'s, on the row's generic cluster)."""
    efficiency = alpha_beta(row) / linear_scaling(row)
    if prediction.incast_timeouts > 0:
        incast_s = prediction.incast_timeouts * corpus_cluster(row, False).nic.retransmission_timeout
        samples = row.nodes * row.gpus_per_node * row.batch_per_gpu * row.grad_accum
        efficiency = incast_slowed(alpha_beta(row), samples, incast_s) / linear_scaling(row)
    return interval_regime(efficiency)


CLOUD_NIC_VENDOR = {"ec2": "aws"}  # a corpus row's cloud=NAME -> the nic_vendor of its network presets


def _generic_nic(row) -> Nic:
    """The NIC of a row's set-up from generic hardware data only: the preset of its transport and line rate if
    there is one (on a cloud, its cloud's preset: EC2's caps each TCP flow; in a cluster placement group only
    where the source says so), else its transport's constants at its line rate. ValueError for a cloud row
    whose line rate has no preset of its cloud."""
    transport = TRANSPORT_OF[row.transport]
    prefix = {"ib": "ib-", "roce": "roce-"}.get(row.transport)
    vendor = CLOUD_NIC_VENDOR.get(row.cloud, "")
    for name in GENERIC_NETWORKS:
        full = network_spec(name)
        if (full["transport"] == transport and float(full["line_rate_gbps"]) == float(row.line_rate_gbps)
                and (prefix is None or name.startswith(prefix)) and full.get("nic_vendor", "") == vendor):
            return make_nic(name, full | {"count": row.nics_per_node, "placement_group": bool(row.placement_group)})
    if row.cloud is not None:
        raise ValueError(f"no {row.cloud} network preset at {row.line_rate_gbps:g} Gb/s {row.transport} in "
                         "sim/presets/networks.toml")
    return make_nic(f"{row.transport}-{row.line_rate_gbps:g}g", TRANSPORTS[transport] | {
        "transport": transport, "line_rate_gbps": float(row.line_rate_gbps), "count": row.nics_per_node})


def comm_library_of(row: PublishedRow) -> str:
    """The collective library release a row is simulated with (presets/comm_libraries.toml): its own where that
    file has it, else today's NCCL (gloo, MPI, ps-lite and gRPC rows: their TCP flows are not NCCL's)."""
    return row.comm_library if row.comm_library in COMM_LIBRARIES else "nccl"


def framework_of(row: PublishedRow) -> str:
    """The training framework a row is simulated with: its own where presets/frameworks.toml has it, else DDP's
    (counted in the summary as ``rows_framework_as_ddp``, never silently)."""
    return row.framework if row.framework in FRAMEWORKS else "ddp"


def corpus_cluster(row: PublishedRow, fitted: bool) -> Cluster:
    """The cluster of a row's set-up: its source's site profile when ``fitted`` and one exists, else generic
    hardware data. ValueError (naming what is missing) if the simulator cannot express the set-up."""
    if row.gpu not in GPUS:
        raise ValueError(f"GPU {row.gpu!r} has no entry in sim/presets/gpus.toml")
    if row.transport not in TRANSPORT_OF:
        raise ValueError(f"transport {row.transport!r} is not one of {', '.join(TRANSPORT_OF)}")
    if row.nics_per_node > row.gpus_per_node:
        raise ValueError(f"{row.nics_per_node} NICs per node for {row.gpus_per_node} GPUs")
    if row.intra == "nvlink":
        intra = default_intra(row.gpu)
        if INTRA[intra].get("kind", "nvlink") != "nvlink":
            raise ValueError(f"no NVLink fabric preset for {row.gpu}")
    elif f"{row.gpu}-pcie" in INTRA:
        intra = f"{row.gpu}-pcie"
    else:
        raise ValueError(f"no {row.intra} fabric preset for {row.gpu} in sim/presets/intra.toml")
    site = SITE_OF_SETUP.get((row.source, row.transport, float(row.line_rate_gbps))) if fitted else None
    if site is not None and row.nics_per_node == 1:
        c = cluster(site, row.nodes, row.gpus_per_node, intra, row.gpu, framework=framework_of(row))
    else:
        c = replace(cluster("10gbe", row.nodes, row.gpus_per_node, intra, row.gpu, framework=framework_of(row)),
                    nic=_generic_nic(row))
    c = replace(c, servers=row.parameter_servers, comm_library=comm_library_of(row))
    if row.measured_link_gbps is None:
        return c
    # the source's measured link rate is set-up data: the same in the fitted and the generic prediction
    return replace(c, nic=replace(c.nic, measured_rate=row.measured_link_gbps * 1e9))


def corpus_predict(row: PublishedRow, fitted: bool, measured_node: bool = True,
                   step_jitter_cv: float | None = None, collective_efficiency: float = 1.0,
                   multinode_loss_scale: float | None = None, collective_pace: float = 1.0) -> workload.Prediction:
    """The simulator's prediction (``sim.workload.Prediction``) for a row, calibrated by its single-node
    throughput (``measured_node``; else compute from the built-in GPU profiles), with per-step jitter
    ``step_jitter_cv`` (None: the shipped one), ``collective_efficiency`` and ``collective_pace`` (``Cluster``'s) and
    ``multinode_loss_scale`` (None: the cluster's, the shipped one or a site profile's 1); ValueError if the
    set-up cannot be expressed."""
    optimizer = SIMULATED_AS.get(row.optimizer, row.optimizer)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {row.optimizer!r} is not simulated")
    if row.precision not in GRAD_DTYPE_OF_PRECISION:
        raise ValueError(f"precision {row.precision!r} is not one of {', '.join(GRAD_DTYPE_OF_PRECISION)}")
    c = corpus_cluster(row, fitted)
    if step_jitter_cv is not None:
        c = replace(c, step_jitter_cv=step_jitter_cv)
    c = replace(c, collective_efficiency=collective_efficiency, collective_pace=collective_pace)
    if multinode_loss_scale is not None:
        c = replace(c, multinode_loss_scale=multinode_loss_scale)
    known = row.model in MODELS
    p = predict(c, model=row.model if known else None, params=None if known else int(row.params),
                batch_per_gpu=int(row.batch_per_gpu), optimizer=optimizer,
                single_node_throughput=float(row.single_node_throughput) if measured_node else None,
                grad_dtype=GRAD_DTYPE_OF_PRECISION[row.precision], accumulation_steps=row.grad_accum,
                warmup_fraction=row.warmup_fraction)
    return p


def gpu_calibrated_on(gpu: str, model: str) -> str | None:
    """The corpus source the built-in compute figure for ``model`` on ``gpu`` was read from (gpus.toml
    ``<family>_calibrated_on``), or None: also where the model or GPU is not built in."""
    if model not in MODELS:
        return None
    return GPUS.get(gpu, {}).get(f"{model_profile(model).family}_calibrated_on")
