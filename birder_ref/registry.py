"""Every optimizer the toolkit knows, one ``OptimizerSpec`` each, registered here with ``@register``.

A spec says all that the other layers read about an optimizer: the schedule of its communicating step on a
layout (``birder_ref.schedules`` / ``baseline_schedules``), the kinds of steps it mixes and their shares (the
simulator's workload), how many full-precision and 1-bit steps a reference run takes (the comparison's bytes),
its reference implementation, and the GPU memory traffic of its step and of its compression kernels. Adding an
optimizer is one registered function here (or in a test: ``register`` then ``unregister``).

What the simulator runs for each: sgdm and adam an fp32 all-reduce per bucket every step (ring or tree, as
NCCL would choose); birder the scheme's 1-bit schedule per bucket (a DDP communication hook, as in the paper);
onebit-adam a warm-up share of fp32 steps, then steps whose momentum goes through the compressed all-reduce of
the whole model inside ``optimizer.step``; zero-one-adam fp32 variance-update steps, 1-bit sync steps and silent
local steps in the shares ``zero_one_adam.communication_profile`` counts for its learning-rate-based policy;
marsit the sign ring all-reduce per bucket, with its full-precision round every K steps.

``names()`` lists every optimizer; ``SIMULATED`` is a live view of those the simulator times (all but the
uncompressed SoftSignSGD, which no cluster runs), read by ``birder predict --optimizer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from birder_ref.baseline_schedules import check_topology, compressed_allreduce, marsit_schedule
from birder_ref.marsit import Marsit
from birder_ref.onebit_adam import DEFAULT_WARMUP_FRACTION, OneBitAdam, warmup_steps_for
from birder_ref.optimizers import SGDM, Adam, Birder, SoftSignSGD
from birder_ref.schedules import Layout, Schedule, allreduce, check_layout, schedule
from birder_ref.validation import check_int
from birder_ref.zero_one_adam import Policy, ZeroOneAdam, communication_profile

ZERO_ONE_ADAM_RUN_STEPS = 45_045  # 0/1 Adam's ImageNet policy (Policy.scaled) over a run of this length
COMMS = ("bucketed", "after_backward", "none")
COMPRESSIONS = ("none", "quantize", "sign_merge")


@dataclass(frozen=True)
class StepKind:
    """One kind of training step: its share of the steps and how its gradients travel."""

    name: str
    share: float
    comm: str  # "bucketed" (DDP hook, overlapped), "after_backward" (inside optimizer.step), "none"
    full_precision: bool

    def __post_init__(self) -> None:
        if self.comm not in COMMS:
            raise ValueError(f"a step kind's comm must be one of {', '.join(COMMS)}, got {self.comm!r}")


@dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer as every layer sees it.

    ``schedule(layout, dim, scheme=None, full_precision=False, **options)``: the schedule of one communicating
    step. ``step_kinds(model_name, warmup_fraction, marsit_period)``: the simulator's kinds of steps and their
    shares (None: not simulated). ``reference(steps, **settings)``: the reference optimizer of a run of
    ``steps``. ``step_counts(optimizer, steps)``: (full-precision, 1-bit) communicating steps that run takes.
    ``step_bytes_per_element``: GPU memory traffic of the optimizer step (read/write of parameters and states).
    ``compression``: the compression kernels of its 1-bit steps (``sim.workload.KERNELS``). ``own_full_precision``:
    its full-precision steps follow its own schedule rather than DDP's fp32 all-reduce. ``takes_scheme``: it
    runs one of Birder's schemes. ``learning_rate``: the digits comparison's rate (``birder.comparison``).
    """

    name: str
    schedule: Callable[..., Schedule]
    reference: Callable[..., object]
    step_counts: Callable[[object, int], tuple[int, int]]
    learning_rate: float
    step_kinds: Callable[[str, float | None, int | None], tuple[StepKind, ...]] | None = None
    step_bytes_per_element: float = 0.0
    compression: str = "none"
    own_full_precision: bool = False
    takes_scheme: bool = False

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}")

    @property
    def compressed(self) -> bool:
        """Whether some of its steps send compressed (1-bit) messages."""
        return self.compression != "none"


_REGISTRY: dict[str, OptimizerSpec] = {}


def register(make: Callable[[], OptimizerSpec]) -> Callable[[], OptimizerSpec]:
    """Decorator: register the spec ``make()`` returns under its name (a name registered twice is an error)."""
    spec = make()
    if not isinstance(spec, OptimizerSpec):
        raise ValueError(f"{make.__name__} must return an OptimizerSpec, got {type(spec).__name__}")
    if spec.name in _REGISTRY:
        raise ValueError(f"optimizer {spec.name!r} is registered already")
    _REGISTRY[spec.name] = spec
    return make


def unregister(name: str) -> None:
    """Remove a registered optimizer (tests that registered a toy one); an unknown name is a ValueError."""
    del _REGISTRY[get(name).name]


def names() -> tuple[str, ...]:
    """Every registered optimizer, in registration order."""
    return tuple(_REGISTRY)


def get(name: str) -> OptimizerSpec:
    """The spec of ``name``, or a ValueError naming the choices."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


class _Simulated(Sequence):
    """The names of the simulated optimizers, read from the registry on every use (argparse ``choices``)."""

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, spec in _REGISTRY.items() if spec.step_kinds is not None)

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())


SIMULATED: Sequence[str] = _Simulated()


def optimizer_schedule(optimizer: str, layout: Layout, dim: int, scheme: str | None = None, **options) -> Schedule:
    """The schedule one communicating step of ``optimizer`` runs: the single source for the simulator."""
    return get(optimizer).schedule(layout, dim, scheme=scheme, **options)


def simulated_spec(optimizer: str) -> OptimizerSpec:
    """The spec of a simulated optimizer, or a ValueError naming the simulated ones."""
    if not isinstance(optimizer, str) or optimizer not in SIMULATED:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(SIMULATED)}")
    return _REGISTRY[optimizer]


# ------------------------------------------------------------------------------------------------ shared parts
def schedule_options(optimizer: str, options: dict, **defaults) -> dict:
    """``options`` over ``defaults``: the options ``optimizer``'s schedule takes, each with its default; an option
    it does not take is a ValueError naming it."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        takes = f"takes the options {', '.join(sorted(defaults))}" if defaults else "takes no options"
        raise ValueError(f"{optimizer} {takes}, not {', '.join(unknown)}")
    return {**defaults, **options}


def _check_layout_and_dim(layout: Layout, dim: int) -> None:
    check_layout(layout)
    check_int("dim", dim, 1)


def fp32_allreduce_schedule(name: str) -> Callable[..., Schedule]:
    """Every step an fp32 ring all-reduce (``full_precision`` changes nothing; Birder's ``scheme`` does not
    apply)."""
    def build(layout: Layout, dim: int, scheme: str | None = None, **options) -> Schedule:
        schedule_options(name, options, full_precision=True)
        return allreduce(layout, dim)

    return build


def every_step_full(_optimizer, steps: int) -> tuple[int, int]:
    return steps, 0


def all_reduce_kinds(*_options) -> tuple[StepKind, ...]:
    return (StepKind("all-reduce", 1.0, "bucketed", True),)


def onebit_allreduce_schedule(name: str) -> Callable[..., Schedule]:
    """DeepSpeed's compressed all-reduce on 1-bit steps, the fp32 ring all-reduce on ``full_precision`` ones
    (``baseline_schedules``)."""
    def build(layout: Layout, dim: int, scheme: str | None = None, **options) -> Schedule:
        _check_layout_and_dim(layout, dim)
        if schedule_options(name, options, full_precision=False)["full_precision"]:
            return allreduce(layout, dim, name=f"{name}-full-precision")
        return compressed_allreduce(layout, dim, name=name)

    return build


def default_warmup_fraction(model_name: str) -> float:
    """1-bit Adam's warm-up share: 0.2 for BERT fine-tuning, 15 of 100 epochs otherwise (Birder paper 5.1)."""
    return 0.2 if model_name.startswith("bert") else DEFAULT_WARMUP_FRACTION


@lru_cache(maxsize=1)
def zero_one_adam_shares() -> tuple[float, float, float]:
    """Shares of fp32, 1-bit and local steps under 0/1 Adam's policy (birder_ref.zero_one_adam)."""
    prof = communication_profile(ZERO_ONE_ADAM_RUN_STEPS)
    total = prof.total_steps
    return prof.full_precision_rounds / total, prof.onebit_rounds / total, prof.local_steps / total


# ----------------------------------------------------------------------------------------------- registrations
@register
def sgdm() -> OptimizerSpec:
    return OptimizerSpec("sgdm", fp32_allreduce_schedule("sgdm"), lambda steps, **kw: SGDM(momentum=0.9, **kw),
                         every_step_full, 1.0, all_reduce_kinds, step_bytes_per_element=16.0)


@register
def adam() -> OptimizerSpec:
    return OptimizerSpec("adam", fp32_allreduce_schedule("adam"), lambda steps, **kw: Adam(**kw), every_step_full,
                         0.05, all_reduce_kinds, step_bytes_per_element=28.0)


@register
def softsignsgd() -> OptimizerSpec:
    return OptimizerSpec("softsignsgd", fp32_allreduce_schedule("softsignsgd"),
                         lambda steps, **kw: SoftSignSGD(**kw), every_step_full, 0.01)


@register
def birder() -> OptimizerSpec:
    def build(layout: Layout, dim: int, scheme: str | None = None, **options) -> Schedule:
        schedule_options("birder", options)  # every step 1-bit: no full-precision schedule
        return schedule(scheme or "hierarchical", layout, dim)

    return OptimizerSpec("birder", build, lambda steps, **kw: Birder(**{"scheme": "hierarchical", **kw}),
                         lambda _optimizer, steps: (0, steps), 0.02,
                         lambda *_: (StepKind("1-bit", 1.0, "bucketed", False),), step_bytes_per_element=8.0,
                         compression="quantize", takes_scheme=True)


@register
def onebit_adam() -> OptimizerSpec:
    def kinds(model_name: str, warmup_fraction: float | None = None, _marsit_period=None) -> tuple[StepKind, ...]:
        w = default_warmup_fraction(model_name) if warmup_fraction is None else warmup_fraction
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"--warmup-fraction must lie in [0, 1], got {w}")
        return (StepKind("warm-up", w, "bucketed", True), StepKind("compressed", 1.0 - w, "after_backward", False))

    def counts(optimizer: OneBitAdam, steps: int) -> tuple[int, int]:
        return min(steps, optimizer.warmup_steps), max(0, steps - optimizer.warmup_steps)

    return OptimizerSpec("onebit-adam", onebit_allreduce_schedule("onebit-adam"),
                         lambda steps, **kw: OneBitAdam(**{"warmup_steps": warmup_steps_for(steps), **kw}), counts,
                         0.1, kinds, step_bytes_per_element=28.0, compression="quantize")


@register
def zero_one_adam() -> OptimizerSpec:
    def kinds(*_options) -> tuple[StepKind, ...]:
        full, onebit, local = zero_one_adam_shares()
        return (StepKind("variance update", full, "bucketed", True),
                StepKind("1-bit sync", onebit, "after_backward", False), StepKind("local", local, "none", False))

    def counts(optimizer: ZeroOneAdam, steps: int) -> tuple[int, int]:
        kinds_run = optimizer.policy.kinds(steps)
        return kinds_run.count("variance"), kinds_run.count("onebit")

    return OptimizerSpec("zero-one-adam", onebit_allreduce_schedule("zero-one-adam"),
                         lambda steps, **kw: ZeroOneAdam(**{"policy": Policy.scaled(steps), **kw}), counts, 0.05,
                         kinds, step_bytes_per_element=28.0, compression="quantize")


@register
def marsit() -> OptimizerSpec:
    def kinds(_model_name: str, _warmup_fraction=None, marsit_period: int | None = None) -> tuple[StepKind, ...]:
        if marsit_period is not None and marsit_period < 1:
            raise ValueError(f"Marsit's full-precision period K must be >= 1, got {marsit_period}")
        full = 0.0 if marsit_period is None else 1.0 / marsit_period
        return (StepKind("full-precision", full, "bucketed", True),
                StepKind("1-bit", 1.0 - full, "bucketed", False))

    def build(layout: Layout, dim: int, scheme: str | None = None, **options) -> Schedule:
        _check_layout_and_dim(layout, dim)
        chosen = schedule_options("marsit", options, full_precision=False, topology="ring")
        return marsit_schedule(layout, dim, check_topology(chosen["topology"]), bool(chosen["full_precision"]))

    def counts(optimizer: Marsit, steps: int) -> tuple[int, int]:
        rounds = sum(optimizer.is_full_precision(t) for t in range(1, steps + 1))
        return rounds, steps - rounds

    return OptimizerSpec("marsit", build, lambda steps, **kw: Marsit(**kw), counts, 0.5,
                         kinds, step_bytes_per_element=16.0, compression="sign_merge",
                         own_full_precision=True)
