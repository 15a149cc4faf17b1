"""The predictions `birder report` reads, computed once: per model, the buying networks x optimizers x nodes
(``grid``), and what they decide (``decide``, ``pays_runs``, ``why_not``).

Every number comes from the simulator through ``sim.api`` (``sweep_grid``, ``validation_summary``). The networks
are the presets of ``sim.network.NETWORKS`` that describe hardware (site profiles, fitted to one testbed, are left
out), in order of line rate: the slowest is taken to be the cheapest.
"""

from __future__ import annotations

from dataclasses import dataclass

from birder_ref import registry

MATCH_SHARE = 0.95  # "matches": at least this share of the other's throughput
NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
QUICK_NODES = (1, 2, 16, 64)
QUICK_MODELS = ("resnet50", "bert-base")  # --quick: the two models of the buyer's question, fewer optimizers
HEADLINE_NODES = (16, 64)
GPUS_PER_NODE = 8

# A published single-node throughput that calibrates one optimizer; the others are scaled from it by the
# simulated one-node ratio (their compression costs on one node), so every optimizer shares the same compute.
NVIDIA_BERT_LARGE = {
    "optimizer": "adam", "throughput": 469.8,
    "source": "NVIDIA DeepLearningExamples, PyTorch BERT README: SQuAD v1.1 fine-tuning of BERT-Large, sequence "
              "384, batch 32 per GPU, TF32, 8 x A100-80GB, PyTorch 21.11: 469.8 sequences/s",
}


@dataclass(frozen=True)
class Setting:
    """One model's section: its batch and where its single-node compute comes from."""

    model: str
    label: str
    batch_per_gpu: int
    calibration: str  # "paper" (published single-node rows), "nvidia" (NVIDIA_BERT_LARGE), "built-in"


SETTINGS = (
    Setting("resnet50", "ResNet-50", 32, "paper"),
    Setting("bert-base", "BERT-base", 32, "built-in"),
    Setting("bert-large", "BERT-large", 32, "nvidia"),
    Setting("gpt2", "GPT-2", 8, "built-in"),
)


# ------------------------------------------------------------------------------------------ optimizers
def is_uncompressed(optimizer: str) -> bool:
    """Whether ``optimizer`` sends every step in full precision (SGDM, Adam): a baseline Birder is measured
    against (``OptimizerSpec.compressed``)."""
    return not registry.get(optimizer).compressed


def section_optimizers(quick: bool = False) -> tuple[str, ...]:
    """The optimizers each model's section predicts, in the registry's order: every simulated one, or with
    ``quick`` only the uncompressed baselines and Birder."""
    return tuple(o for o in registry.SIMULATED if not quick or is_uncompressed(o) or o == "birder")


# ------------------------------------------------------------------------------------------ networks
def is_site_profile(name: str, networks: dict, transports: dict, fitted: dict) -> bool:
    """A preset fitted to one testbed (a ``birder-paper-*`` profile, or one overriding its transport's fitted
    constants with values of its own) rather than hardware."""
    if name.startswith("birder-paper"):
        return True
    spec = networks[name]
    base = transports.get(spec.get("transport"), {})
    return any(k in spec and spec[k] != base.get(k) for k in fitted.get(spec.get("transport"), ()))


def buying_networks() -> list[str]:
    """The hardware presets, slowest line rate first."""
    from sim import plots
    from sim.network import NETWORKS, TRANSPORTS

    fitted = _fitted_names()
    names = [n for n in NETWORKS if not is_site_profile(n, NETWORKS, TRANSPORTS, fitted)]
    return plots.speed_order(names)


def _fitted_names() -> dict:
    try:
        from sim.validation.site_fit import FITTED
    except ImportError:
        return {}
    return dict(FITTED)


# ------------------------------------------------------------------------------------------ calibration
def single_node_figures(setting: Setting, summary: dict, optimizers: tuple[str, ...], network: str
                        ) -> tuple[dict[str, float] | None, tuple[str, ...], str]:
    """(single-node throughput per optimizer or None, the optimizers the section runs, the calibration's words)."""
    from sim import api

    if setting.calibration == "paper":
        published = {}
        for r in summary["rows"]:
            if (r["model"], r["batch_per_gpu"], r["gpus"]) == (setting.model, setting.batch_per_gpu, GPUS_PER_NODE):
                published.setdefault(r["optimizer"], r["published"])
        if published:
            runs = tuple(o for o in optimizers if o in published)
            words = ("calibrated with each optimizer's published single-node throughput (Birder paper, Table 1: "
                     + ", ".join(f"{o} {published[o]:,.0f}/s" for o in runs) + ")")
            return {o: published[o] for o in runs}, runs, words
    if setting.calibration == "nvidia":
        ref = NVIDIA_BERT_LARGE
        one = {o: api.predict_config(setting.model, 1, network, o, batch_per_gpu=setting.batch_per_gpu,
                                     gpus_per_node=GPUS_PER_NODE)["throughput"] for o in optimizers}
        scaled = {o: ref["throughput"] * one[o] / one[ref["optimizer"]] for o in optimizers}
        words = (f"calibrated with {ref['optimizer']}'s published single-node throughput, {ref['throughput']}/s "
                 f"({ref['source']}); the other optimizers' single-node figures scaled from it by the simulated "
                 "one-node ratio")
        return scaled, optimizers, words
    return None, optimizers, "built-in A100 compute profile (no published single-node figure in this project)"


# ------------------------------------------------------------------------------------------ the grid
@dataclass(frozen=True)
class ModelGrid:
    setting: Setting
    calibration: str  # in words, with its source
    optimizers: tuple[str, ...]
    networks: tuple[str, ...]
    nodes: tuple[int, ...]
    predictions: tuple[dict, ...]
    gpus_per_node: int = GPUS_PER_NODE

    def get(self, network: str, optimizer: str, nodes: int) -> dict | None:
        for p in self.predictions:
            if (p["network"], p["optimizer"], p["nodes"]) == (network, optimizer, nodes):
                return p
        return None

    @property
    def baselines(self) -> tuple[str, ...]:
        return tuple(o for o in self.optimizers if is_uncompressed(o))

    @property
    def title(self) -> str:
        s = self.setting
        if self.calibration.startswith("built-in"):
            short = f"{self.calibration.split(' compute')[0]} compute profile (no published single-node figure)"
        elif "Birder paper" in self.calibration:
            short = "calibrated on the Birder paper's single-node throughputs"
        else:
            short = "calibrated on a published single-node throughput"
        return f"{s.label}, {s.batch_per_gpu} samples per GPU, {short}"


@dataclass(frozen=True)
class Grid:
    models: tuple[ModelGrid, ...]
    summary: dict
    networks: tuple[str, ...]


@dataclass(frozen=True)
class Question:
    """The user's own question (``birder report --model --nodes --gpu --cluster``); None: the overview's."""

    models: tuple[str, ...] | None = None
    nodes: tuple[int, ...] | None = None
    gpu: str | None = None
    cluster: str | None = None  # a cluster file: its one network instead of the buying networks

    def settings(self, quick: bool) -> tuple[Setting, ...]:
        """The models asked (a known setting's batch and calibration, else 32 per GPU on the built-in profile)."""
        if self.models is None:
            return tuple(s for s in SETTINGS if not quick or s.model in QUICK_MODELS)
        known = {s.model: s for s in SETTINGS}
        return tuple(known.get(m, Setting(m, m, 32, "built-in")) for m in self.models)

    def decision_nodes(self) -> tuple[int, ...]:
        return self.nodes if self.nodes is not None else HEADLINE_NODES

    @property
    def published_calibration(self) -> bool:
        """The published single-node figures are of 8 A100s on the authors' own machines: used only for the
        overview's hardware (no --gpu other than a100, no cluster file)."""
        return self.cluster is None and self.gpu in (None, "a100")


_QUESTION: list[Question] = []


def use_question(question: Question | None) -> None:
    """The question this run's report answers (None: the overview)."""
    _QUESTION[:] = [question] if question is not None else []


def current_question() -> Question:
    return _QUESTION[0] if _QUESTION else Question()


_CACHE: dict[tuple, Grid] = {}


def grid(quick: bool = False, progress: bool = False, question: Question | None = None) -> Grid:
    """Every setting's predictions over the buying networks (or the cluster file's network) and nodes, for the
    question of this run (``use_question``) unless one is given; computed once per process and question."""
    question = question if question is not None else current_question()
    key = (quick, question)
    if key in _CACHE:
        return _CACHE[key]
    from sim import api

    summary = api.validation_summary()
    gpu = question.gpu or "a100"
    if question.cluster is not None:
        networks = (cluster_network_name(question.cluster),)
    else:
        networks = tuple(buying_networks())
    nodes = tuple(sorted(set(QUICK_NODES if quick else NODES) | set(question.decision_nodes())))
    models = []
    for setting in question.settings(quick):
        if question.published_calibration:
            single, optimizers, words = single_node_figures(setting, summary, section_optimizers(quick),
                                                            networks[0])
        else:
            single, optimizers, words = None, section_optimizers(quick), (
                f"built-in {gpu.upper()} compute profile (sim/presets/gpus.toml; no published single-node figure "
                "of this hardware in this project)")
        predictions = api.sweep_grid(setting.model, list(nodes), None if question.cluster else list(networks),
                                     list(optimizers), batch_per_gpu=setting.batch_per_gpu,
                                     gpus_per_node=None if question.cluster else GPUS_PER_NODE,
                                     gpu=question.gpu if question.cluster else gpu, single_node_throughput=single,
                                     progress=progress, cluster_file=question.cluster)
        per_node = predictions[0]["gpus_per_node"] if predictions else GPUS_PER_NODE
        models.append(ModelGrid(setting, words, optimizers, networks, nodes, tuple(predictions), per_node))
    _CACHE[key] = Grid(tuple(models), summary, networks)
    return _CACHE[key]


def cluster_network_name(path: str) -> str:
    """The name predictions on a cluster file carry as their network (its ``name``, else its network's)."""
    from sim.hardware import load_cluster

    return load_cluster(path).nic.name


# ------------------------------------------------------------------------------------------ decisions
def speedup(a: dict, b: dict) -> dict:
    """a's throughput over b's with its interval, calibrated on the corpus's paired rows
    (``sim.api.speedup_interval``: ``ratio``, ``low``, ``high``, ``basis``, ``verdict``)."""
    from sim import api

    return api.speedup_interval(a, b)


def within_uncertainty(a: dict, b: dict) -> bool:
    """Whether the speed-up of a over b has an interval containing 1: neither is known to be faster."""
    return speedup(a, b)["verdict"] == "within the uncertainty"


def best(g: ModelGrid, network: str, nodes: int, optimizers) -> dict | None:
    found = [p for o in optimizers if (p := g.get(network, o, nodes)) is not None]
    return max(found, key=lambda p: p["throughput"], default=None)


def pays_runs(g: ModelGrid, network: str) -> tuple[list[int], list[int]]:
    """(node counts > 1 where Birder beats the best baseline, those where it does not)."""
    pays, not_pays = [], []
    for n in g.nodes:
        if n < 2:
            continue
        b, base = g.get(network, "birder", n), best(g, network, n, g.baselines)
        if b is None or base is None:
            continue
        (pays if b["throughput"] > base["throughput"] else not_pays).append(n)
    return pays, not_pays


def tied_counts(g: ModelGrid, network: str) -> list[int]:
    """Node counts > 1 where Birder's speed-up over the best baseline has an interval containing 1."""
    return [n for n in g.nodes if n >= 2 and (b := g.get(network, "birder", n)) is not None
            and (base := best(g, network, n, g.baselines)) is not None and within_uncertainty(b, base)]


def why_not(g: ModelGrid, network: str, nodes: int) -> str:
    """Why Birder does not beat the best baseline here: compute-bound, per-message costs, or compression."""
    b, base = g.get(network, "birder", nodes), best(g, network, nodes, g.baselines)
    base_comm = base["exposed_communication_s"] / base["iteration_s"]
    if base_comm < 0.10:
        return (f"compute-bound: {base['optimizer']}'s communication is {100 * base_comm:.0f}% of its iteration, "
                "so there is little to save")
    if b.get("incast_s", 0.0) >= 0.5 * b["exposed_communication_s"] > 0:
        return (f"TCP incast: Birder's point-to-point phases lose {b['incast_timeouts']:.1f} retransmission "
                f"timeouts per step ({1e3 * b['incast_s']:,.0f} ms; {b['incast_basis']})")
    if (b["exposed_communication_s"] >= base["exposed_communication_s"]
            and b["inter_node_bytes_per_gpu"] < base["inter_node_bytes_per_gpu"]):
        fewer = base["inter_node_bytes_per_gpu"] / max(1.0, b["inter_node_bytes_per_gpu"])
        return (f"per-message costs: Birder sends {fewer:.0f}x fewer bytes but waits "
                f"{1e3 * b['exposed_communication_s']:,.0f} ms on communication against "
                f"{1e3 * base['exposed_communication_s']:,.0f} ms")
    return (f"compression and communication together: {1e3 * b['iteration_s']:,.0f} ms per iteration against "
            f"{1e3 * base['iteration_s']:,.0f} ms")



def extrapolated(p: dict) -> bool:
    """The simulator's ``extrapolated`` flag: the prediction leans on a site's fitted constants outside the
    models, batch sizes or GPU counts they were fitted on."""
    return bool(p.get("extrapolated", False))
