"""`birder gpu-validate`'s runner: train a small model with Birder and compare every step with birder_ref.

Two code paths are checked, one after the other in the same ranks (``PATHS``; the JSON's ``checked`` names them):
``optimizer`` is ``gpu_validation.Birder`` as users adopt it (``Birder(ddp, lr=..., weight_decay=...)``, its own
DDP hook, the update applied in ``step()``, no clipping or scaler), ``hook`` the expert path (``birder_hook`` +
``BirderUpdate``, u_bar in ``.grad``). Ranks are spawned locally (``run``), or, under ``torchrun``, each process
runs ``train_and_compare`` itself.
Every step, rank 0 gathers every rank's local gradients, u_bar (hook path only: the optimizer never exposes it)
and parameters, runs
``birder_ref.algorithm1.step`` on the workers' gradients (``schemes.worker_gradients``: node means, or every
GPU's own) with the same counter-based draws, applies the same update in NumPy, and counts the elements that
differ. It also runs the scheme's executor, ``birder_ref.schemes.step``, which moves the data along the same
schedule the hook runs, and reports whether its u_bar agreed (``executor_identical``; required to pass).
At the end it compares the full state (``BirderState.state_dict`` on the hook path, ``Birder.state_dict`` on the
optimizer path) with the reference's. The comparison is exact: there is no tolerance anywhere.

Faults can be injected: a non-finite gradient on one rank at one step (every rank must skip that step, the
reference skips it too), a rank that dies or stalls at one step (the others must stop with an error, not
hang), and a resume from a checkpoint (the resumed run must end bit-identical to the uninterrupted one).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass, replace
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from birder_ref import algorithm1, schemes
from birder_ref.draws import server_uniforms, worker_uniforms
from birder_ref.update import apply_update
from gpu_validation import comm, launch
from gpu_validation.hook import BirderState, BirderUpdate, birder_hook
from gpu_validation.optimizer import Birder

PATHS = ("optimizer", "hook")  # gpu_validation.Birder as adopted; the expert birder_hook + BirderUpdate

LOCAL_RANKS_PER_CORE = 8  # more local gloo ranks than this per core is a mistake, not a validation run

KILLED_EXIT_STATUS = 17


@dataclass(frozen=True)
class Config:
    """One validation run. ``nonfinite_at`` / ``kill_at`` / ``hang_at`` are (step, rank) faults; ``resume_at``
    a step."""

    backend: str = "gloo"
    nodes: int = 2
    gpus_per_node: int = 2
    steps: int = 6
    seed: int = 0
    scheme: str = "hierarchical"
    lr: float = 0.01
    weight_decay: float = 1e-4
    beta: float = 0.95
    eps: float = 1e-8
    bucket_cap_mb: float = 0.0003
    timeout_s: float = 60.0
    nonfinite_at: tuple[int, int] | None = None
    overflow_at: tuple[int, int] | None = None  # (step, node): finite gradients whose node sum overflows
    kill_at: tuple[int, int] | None = None
    hang_at: tuple[int, int] | None = None
    resume_at: int | None = None
    paths: tuple[str, ...] = PATHS  # which code paths to check, in this order (a fault stops the first)
    quiet: bool = False  # no progress bar
    device: str | None = None  # "cpu" or "cuda"; None: cuda with nccl, cpu with gloo. gloo with "cuda" moves CUDA
    # tensors (staged through host memory): several local ranks may share one GPU, which NCCL refuses

    def check(self) -> None:
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")
        if self.device not in (None, "cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.backend == "nccl" and self.device_type != "cuda":
            raise ValueError("backend nccl moves CUDA tensors only: use --backend gloo with --device cpu")
        if self.scheme not in comm.PIPELINE_SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(comm.PIPELINE_SCHEMES)}, got {self.scheme!r}")
        if self.nodes < 1 or self.gpus_per_node < 1 or self.steps < 1:
            raise ValueError(f"need nodes, gpus per node and steps >= 1, got {self.nodes}, {self.gpus_per_node}, "
                             f"{self.steps}")
        if not self.paths or len(set(self.paths)) != len(self.paths) or not set(self.paths) <= set(PATHS):
            raise ValueError(f"paths must be distinct names among {', '.join(PATHS)}, got {list(self.paths)}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must lie in [0, 2**32), got {self.seed}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout_s}")
        if self.resume_at is not None and not 1 <= self.resume_at < self.steps:
            raise ValueError(f"resume step must lie in [1, {self.steps - 1}], got {self.resume_at}")
        for name in ("nonfinite_at", "kill_at", "hang_at"):
            fault = getattr(self, name)
            if fault is not None and not (1 <= fault[0] <= self.steps and 0 <= fault[1] < self.world):
                raise ValueError(f"{name} needs a step in [1, {self.steps}] and a rank in [0, {self.world}), "
                                 f"got {fault}")
        if self.overflow_at is not None and not (1 <= self.overflow_at[0] <= self.steps
                                                 and 0 <= self.overflow_at[1] < self.nodes):
            raise ValueError(f"overflow_at needs a step in [1, {self.steps}] and a node in [0, {self.nodes}), "
                             f"got {self.overflow_at}")
        if self.overflow_at is not None and (self.scheme != "hierarchical" or self.gpus_per_node < 2):
            raise ValueError("overflow_at needs the hierarchical scheme and at least 2 GPUs per node: only a node "
                             f"sum of several GPUs' finite gradients can overflow (got scheme {self.scheme!r}, "
                             f"{self.gpus_per_node} GPU(s) per node)")

    def check_local(self) -> None:
        """What spawning ``world`` ranks on this machine needs: a GPU per rank for nccl, a sane count for gloo (and a
        GPU, which the ranks share, for gloo on CUDA)."""
        if self.backend == "nccl":
            found = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if not dist.is_nccl_available() or found < self.world:
                raise ValueError(f"nccl needs one CUDA GPU per rank: {self.world} wanted, {found} found here"
                                 f"{'' if dist.is_nccl_available() else ' (this torch has no NCCL)'}")
        elif self.device_type == "cuda" and not torch.cuda.is_available():
            raise ValueError("gloo on device cuda asked for, but torch sees no CUDA device")
        elif self.world > LOCAL_RANKS_PER_CORE * (os.cpu_count() or 1):
            raise ValueError(f"{self.world} local gloo ranks on {os.cpu_count()} cores is too many (at most "
                             f"{LOCAL_RANKS_PER_CORE} per core); run under torchrun across machines instead")

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def device_type(self) -> str:
        return self.device or ("cuda" if self.backend == "nccl" else "cpu")


@dataclass(frozen=True)
class Comparison:
    """A run that compared every step with birder_ref: what rank 0 found. ``as_dict()`` is the JSON of
    `birder gpu-validate --json` (the contract's keys first)."""

    passed: bool  # nothing differed, every rank agreed, and a resume (if asked for) ended bit-identical
    steps: int
    mismatched_elements: int  # elements of u_bar (hook path), parameters and final state that differ from
    # birder_ref, summed over the paths checked
    max_abs_diff: float  # the largest |difference| of u_bar or parameters from birder_ref's, over the paths
    ranks_identical: bool  # every rank held the same u_bar and parameters at every step, on every path
    backend: str  # gloo or nccl
    device: str  # "cpu", or the CUDA device's name
    checked: tuple[str, ...]  # the code paths compared (``PATHS``): "optimizer" (gpu_validation.Birder), "hook"
    paths: dict  # path -> its own findings (the fields above and below, for that path alone)
    reference_updates_agree: bool  # birder_ref, fed each path's gathered gradients, computed the same updates
    # (u_bar digests) on every path: the paths gave it the same gradients. The paths' own updates are compared with
    # birder_ref inside each path (``mismatched_elements``), not here
    scheme: str
    nodes: int
    gpus_per_node: int
    seed: int
    parameters: int  # elements of the model
    buckets: int | None  # DDP buckets the hook path saw (after DDP's bucket rebuild); None without that path
    skipped_steps: int  # steps with a non-finite gradient or node mean, skipped by birder_ref (and by Birder)
    state_mismatched_elements: int  # of ``mismatched_elements``, those in the final state and counters
    resume_identical: bool | None  # with ``resume_at``: the resumed run ended bit-identical; else None
    executor_identical: bool  # birder_ref's scheme executor gave Algorithm 1's u_bar at every step
    phases_as_scheduled: bool  # every rank ran the schedule's collectives, groups and bytes (comm.trace_mismatches)
    update_digests: tuple[str, ...]  # per step birder_ref did not skip: SHA-256 (16 hex digits) of the packed u_bar
    seconds: float | None = None  # wall time of the whole run; set by ``run`` / ``run_under_torchrun``
    config: dict | None = None  # the Config without its backend; set with ``seconds``

    def as_dict(self) -> dict:
        return {**asdict(self), "checked": list(self.checked), "update_digests": list(self.update_digests)}


@dataclass(frozen=True)
class Stopped:
    """A run that did not finish: a rank failed, died or hung, so nothing final was compared. With an injected
    fault (``kill_at``, ``hang_at``) it passes when that fault was handled as designed. ``as_dict()`` is its JSON:
    the contract's comparison keys are there, null."""

    passed: bool  # only with an injected fault: ``fault_handled``
    steps: int
    backend: str
    device: str  # the Config's device type: "cpu" or "cuda"
    error: str  # the launcher's account: who died, hung or failed, and how
    rank_errors: dict[str, str]  # rank (as text) -> the error it reported
    exit_codes: dict[str, int | None]  # rank (as text) -> its exit status
    killed_by_launcher: tuple[int, ...]  # ranks still silent after the grace period
    seconds_to_stop_after_failure: float | None  # from the first failure to the last rank's report
    fault: str | None = None  # the injected fault in words; None without one
    fault_handled: bool | None = None  # the injected rank died or hung and every other rank stopped with an error
    seconds: float | None = None
    config: dict | None = None

    def as_dict(self) -> dict:
        out = {"passed": self.passed, "steps": self.steps, "mismatched_elements": None, "max_abs_diff": None,
               "ranks_identical": None, "backend": self.backend, "device": self.device, "error": self.error,
               "rank_errors": dict(self.rank_errors), "exit_codes": dict(self.exit_codes),
               "killed_by_launcher": list(self.killed_by_launcher),
               "seconds_to_stop_after_failure": self.seconds_to_stop_after_failure}
        if self.fault is not None:
            out |= {"fault": self.fault, "fault_handled": self.fault_handled}
        return out | {"seconds": self.seconds, "config": self.config}


Result = Comparison | Stopped


def make_model(seed: int) -> nn.Module:
    """The small model every rank starts from (same weights everywhere): 467 parameters in 6 tensors."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(seed: int, step: int, rank: int, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic data of ``rank`` at ``step``: inputs and a fixed teacher's noisy targets (CPU generator)."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1009 + rank)
    x = torch.randn(size, 8, generator=generator)
    teacher = torch.linspace(-1.0, 1.0, 24).reshape(8, 3)
    return x, torch.tanh(x @ teacher) + 0.1 * torch.randn(size, 3, generator=generator)


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


class HookTrainer:
    """One rank's DDP model with the expert ``birder_hook`` + ``BirderUpdate``, recording the local gradients the
    hook receives (u_bar comes back in ``.grad``)."""

    def __init__(self, cfg: Config, topology: comm.Topology, device: torch.device):
        self.cfg, self.device, self.topology = cfg, device, topology
        self.model = make_model(cfg.seed).to(device)
        self.params = list(self.model.parameters())
        self.state = BirderState(self.params, topology, cfg.seed, cfg.beta, cfg.eps)
        self.ddp = nn.parallel.DistributedDataParallel(
            self.model, bucket_cap_mb=cfg.bucket_cap_mb, device_ids=[device.index] if device.type == "cuda" else None)
        self.ddp.register_comm_hook(self.state, self._recording_hook)
        self.optimizer = BirderUpdate(self.params, cfg.lr, cfg.weight_decay, hook_state=self.state)
        self.local_grad = torch.zeros(self.state.dim, device=device)
        self.current_step, self.node = 0, 0

    def _recording_hook(self, state, bucket):  # no annotations: DDP accepts only real (not string) ones
        if self.cfg.overflow_at == (self.current_step, self.node):
            bucket.buffer().fill_(3.0e38)  # finite on every GPU of the node; their sum is not
        position = 0
        for start, n in state._signature(bucket):
            self.local_grad[start:start + n] = bucket.buffer()[position:position + n]
            position += n
        return birder_hook(state, bucket)

    def step(self, step: int, rank: int) -> None:
        self.current_step, self.node = step, rank // self.cfg.gpus_per_node
        x, y = _inputs(self.cfg, step, rank, self.device)
        self.optimizer.zero_grad(set_to_none=False)
        nn.functional.mse_loss(self.ddp(x), y).backward()
        self.optimizer.step()

    def u_bar(self) -> torch.Tensor | None:
        return flat(p.grad for p in self.params)

    @property
    def t(self) -> int:
        return self.state.t

    @property
    def dim(self) -> int:
        return self.state.dim

    def buckets(self) -> int:
        return len(self.state.buckets)

    def checkpoint(self) -> dict:
        return {"model": {k: v.clone() for k, v in self.model.state_dict().items()}, "birder": self.state.state_dict()}

    def load(self, checkpoint: dict) -> None:
        self.model.load_state_dict(checkpoint["model"])
        self.state.load_state_dict(checkpoint["birder"])

    def final_state(self, world: int) -> dict[str, np.ndarray]:
        """Every rank's state rows (rank, d) and skipped-step count, gathered on every rank."""
        sd = self.state.state_dict()
        out = {name: _gather(sd[name].to(self.device), world) for name in ("m", "b_hat", "b", "e", "server_error")}
        out["skipped"] = _gather(torch.tensor([sd["skipped_steps"]], device=self.device), world).reshape(-1)
        return out


class OptimizerTrainer:
    """One rank's DDP model trained by ``gpu_validation.Birder`` as users write it: ``Birder(ddp, lr=...,
    weight_decay=...)``, then backward, ``step()``, ``zero_grad()``; no clipping, no scaler. ``.grad`` holds this
    rank's local gradient between backward and step (Birder's hook leaves it), which is recorded."""

    def __init__(self, cfg: Config, device: torch.device):
        self.cfg, self.device = cfg, device
        self.model = make_model(cfg.seed).to(device)
        self.params = list(self.model.parameters())
        self.ddp = nn.parallel.DistributedDataParallel(
            self.model, bucket_cap_mb=cfg.bucket_cap_mb, device_ids=[device.index] if device.type == "cuda" else None)
        self.optimizer = Birder(self.ddp, lr=cfg.lr, weight_decay=cfg.weight_decay, beta=cfg.beta, eps=cfg.eps,
                                seed=cfg.seed, scheme=cfg.scheme, gpus_per_node=cfg.gpus_per_node)
        self.topology = self.optimizer.topology
        self.local_grad = torch.zeros(self.optimizer.dim, device=device)
        self.current_step, self.node = 0, 0
        for p in self.params:  # runs before DDP copies the gradient into its bucket
            p.register_hook(self._overflow)

    def _overflow(self, grad: torch.Tensor) -> torch.Tensor:
        if self.cfg.overflow_at == (self.current_step, self.node):
            return torch.full_like(grad, 3.0e38)  # finite on every GPU of the node; their sum is not
        return grad

    def step(self, step: int, rank: int) -> None:
        self.current_step, self.node = step, rank // self.cfg.gpus_per_node
        x, y = _inputs(self.cfg, step, rank, self.device)
        self.optimizer.zero_grad()
        nn.functional.mse_loss(self.ddp(x), y).backward()
        self.local_grad.copy_(flat(p.grad for p in self.params))
        self.optimizer.step()

    def u_bar(self) -> torch.Tensor | None:
        return None  # the optimizer applies u_bar itself; the parameters show it

    @property
    def t(self) -> int:
        return self.optimizer.t

    @property
    def dim(self) -> int:
        return self.optimizer.dim

    def buckets(self) -> None:
        return None  # Birder flattens the gradients in step(): its buckets only carry the hook's finiteness check

    def checkpoint(self) -> dict:  # collective: every rank calls it, as the README's checkpoint idiom does
        return {"model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "birder": self.optimizer.state_dict()}

    def load(self, checkpoint: dict) -> None:
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["birder"])

    def final_state(self, world: int) -> dict[str, np.ndarray]:
        """The full state (``Birder.state_dict``, the same on every rank) as the rows of each rank's worker."""
        state = self.optimizer.state_dict()["state"]
        workers = [self.topology.worker_of(r) for r in range(world)]
        rows = {name: state[name][workers].numpy() for name in ("m", "b_hat", "e")}
        return {**rows,  # no b: Birder holds none (T0 off, b is b_hat), so only what it holds is compared
                "server_error": np.tile(state["server_error"].numpy(), (world, 1)),
                "skipped": np.full(world, state["skipped_steps"])}


Trainer = HookTrainer | OptimizerTrainer


def _inputs(cfg: Config, step: int, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch(cfg.seed, step, rank)
    if cfg.nonfinite_at == (step, rank):
        x[0, 0] = float("nan")
    return x.to(device), y.to(device)


def _trainer(path: str, cfg: Config, device: torch.device) -> Trainer:
    if path == "optimizer":
        return OptimizerTrainer(cfg, device)
    return HookTrainer(cfg, comm.make_topology(cfg.scheme, cfg.nodes, cfg.gpus_per_node), device)


def _gather(tensor: torch.Tensor, world: int) -> np.ndarray:
    """Every rank's copy of ``tensor`` (world, n) as NumPy, on every rank."""
    return comm.all_gather_rows(tensor, dist.group.WORLD if world > 1 else None, world).cpu().numpy()


class Reference:
    """birder_ref driven on the gathered gradients: Algorithm 1's state, the parameters, the comparisons."""

    def __init__(self, cfg: Config, x0: np.ndarray):
        self.cfg = cfg
        n_workers = cfg.nodes if cfg.scheme == "hierarchical" else cfg.world
        self.state = algorithm1.init(n_workers, x0.size)
        self.x = x0.copy()
        self.mismatched, self.max_abs_diff, self.ranks_identical, self.skipped = 0, 0.0, True, 0
        self.executor_identical = True
        self.digests: list[str] = []

    def step(self, grads: np.ndarray, u_bars: np.ndarray | None, params: np.ndarray) -> None:
        """One reference step on grads (world, d); compare with every rank's u_bar (None: a path that does not
        expose it) and parameters."""
        cfg, d = self.cfg, self.x.size
        by_node = grads.reshape(cfg.nodes, cfg.gpus_per_node, d)
        with np.errstate(over="ignore"):
            worker_grads = schemes.worker_gradients(cfg.scheme, by_node)
        if not (np.isfinite(grads).all() and np.isfinite(worker_grads).all()):  # birder_ref would reject it
            self.skipped += 1
            u_bar = None
        else:
            t, n = self.state.t + 1, self.state.n_workers
            draws = {"u_worker": worker_uniforms(cfg.seed, t, n, d), "u_server": server_uniforms(cfg.seed, t, d)}
            executed, _, _ = schemes.step(cfg.scheme, self.state, by_node, cfg.beta, cfg.eps, **draws)
            u_bar, self.state = algorithm1.step(self.state, worker_grads, cfg.beta, cfg.eps, **draws)
            self.executor_identical &= bool(np.array_equal(executed, u_bar))
            self.x = apply_update(self.x, u_bar, cfg.lr, cfg.weight_decay)
            self.digests.append(hashlib.sha256(np.packbits(u_bar > 0).tobytes()).hexdigest()[:16])
            if u_bars is not None:
                self.mismatched += int((u_bars != u_bar).sum())
                self.max_abs_diff = max(self.max_abs_diff, float(np.abs(u_bars - u_bar).max()))
        self.mismatched += int((params != self.x).sum())
        self.max_abs_diff = max(self.max_abs_diff, float(np.abs(params.astype(np.float64) - self.x).max()))
        self.ranks_identical &= bool((params == params[0]).all())
        if u_bar is not None and u_bars is not None:
            self.ranks_identical &= bool((u_bars == u_bars[0]).all())

    def compare_state(self, states: dict[str, np.ndarray], workers: list[int], t: int, skipped: np.ndarray) -> int:
        """Elements of a path's gathered state (rank, d) that differ from the reference's, plus counters. ``b`` is
        compared where the path holds one (the hook's state); Birder holds only m, b_hat, e."""
        ref = self.state
        held = (("m", ref.m), ("b_hat", ref.b_hat), ("e", ref.e)) + ((("b", ref.b),) if "b" in states else ())
        bad = 0
        for name, ref_rows in held:
            bad += int((states[name] != ref_rows[workers]).sum())
        bad += int((states["server_error"] != ref.server_e).sum())
        return bad + int(t != ref.t) + int((skipped != self.skipped).sum())


def _device(cfg: Config, gpu: int, needed: int) -> torch.device:
    """CPU for gloo on CPU; for nccl CUDA device ``gpu``, of which this machine must have ``needed``; for gloo on
    CUDA device ``gpu`` modulo the GPUs here (local ranks share them: gloo, unlike NCCL, allows it)."""
    if cfg.device_type == "cpu":
        return torch.device("cpu")
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.backend == "gloo" and found:
        torch.cuda.set_device(gpu % found)
        return torch.device("cuda", gpu % found)
    if found < needed:
        raise ValueError(f"nccl needs one GPU per rank: {needed} on this machine, found {found}")
    torch.cuda.set_device(gpu)
    return torch.device("cuda", gpu)


def _check_path(path: str, cfg: Config, rank: int, device: torch.device) -> dict | None:
    """Train ``cfg.steps`` steps on one code path, every step compared with birder_ref; rank 0 returns the
    path's findings (``PathCheck`` fields), other ranks None."""
    world = cfg.world
    trainer = _trainer(path, cfg, device)
    reference = Reference(cfg, flat(trainer.params).cpu().numpy()) if rank == 0 else None
    checkpoint, trace = None, []
    for step in tqdm(range(1, cfg.steps + 1), desc=f"gpu-validate {path} steps", unit="step",
                     disable=True if rank != 0 or cfg.quiet else None):
        if cfg.kill_at == (step, rank):
            os._exit(KILLED_EXIT_STATUS)  # a crash: no clean-up, no goodbye to the other ranks
        if cfg.hang_at == (step, rank):
            time.sleep(1e6)  # a deadlock: alive, silent, holding its connections open
        try:
            taken = trainer.t
            with comm.record_phases() as records:  # every collective Birder runs, checked against the schedule
                trainer.step(step, rank)
            if trainer.t > taken:  # a skipped step may stop after its first phase (a node sum that overflowed)
                trace += records
            grads = _gather(trainer.local_grad, world)
            u_bar = trainer.u_bar()
            u_bars = None if u_bar is None else _gather(u_bar, world)
            params = _gather(flat(trainer.params), world)
        except RuntimeError as error:  # a collective failed: a peer died, or hung past the timeout
            raise RuntimeError(f"stopped at step {step} ({path} path), a collective failed: {error}") from error
        if reference is not None:
            reference.step(grads, u_bars, params)
        if step == cfg.resume_at:
            checkpoint = trainer.checkpoint()
    off_schedule = len(comm.trace_mismatches(trace, trainer.topology))
    phases_as_scheduled = not _gather(torch.tensor([off_schedule], device=device), world).any()
    final = trainer.final_state(world)
    resume_identical = None
    if checkpoint is not None:  # a fresh model, DDP and Birder state, resumed from the checkpoint
        resumed = _trainer(path, cfg, device)
        resumed.load(checkpoint)
        for step in range(cfg.resume_at + 1, cfg.steps + 1):
            resumed.step(step, rank)
        same = torch.equal(flat(resumed.params), flat(trainer.params))
        after = resumed.final_state(world)
        same &= all(np.array_equal(after[k], final[k]) for k in final) and resumed.t == trainer.t
        resume_identical = bool(_gather(torch.tensor([int(same)], device=device), world).all())
    if reference is None:
        return None
    topology = trainer.topology
    state_mismatches = reference.compare_state(final, [topology.worker_of(r) for r in range(world)], trainer.t,
                                               final["skipped"])
    return {"path": path,
            "passed": reference.mismatched == 0 and state_mismatches == 0 and reference.ranks_identical
            and reference.executor_identical and bool(phases_as_scheduled) and resume_identical is not False,
            "mismatched_elements": reference.mismatched + state_mismatches, "max_abs_diff": reference.max_abs_diff,
            "ranks_identical": reference.ranks_identical, "skipped_steps": reference.skipped,
            "state_mismatched_elements": state_mismatches, "resume_identical": resume_identical,
            "executor_identical": reference.executor_identical, "phases_as_scheduled": bool(phases_as_scheduled),
            "compared_updates": u_bars is not None, "parameters": trainer.dim, "buckets": trainer.buckets(),
            "update_digests": tuple(reference.digests)}


def train_and_compare(cfg: Config, rank: int, one_machine: bool = True) -> Comparison | None:
    """The body of every rank (process group already initialised): each path of ``cfg.paths`` in turn; rank 0
    returns the result, others None.

    ``one_machine``: all ranks run here (GPU = rank), else one node per machine (GPU = local rank).
    """
    world = cfg.world
    device = _device(cfg, rank, world) if one_machine else _device(cfg, rank % cfg.gpus_per_node, cfg.gpus_per_node)
    checks = [_check_path(path, cfg, rank, device) for path in cfg.paths]
    if rank != 0:
        return None
    first = checks[0]
    same_updates = all(c["update_digests"] == first["update_digests"] for c in checks)
    return Comparison(
        passed=all(c["passed"] for c in checks) and same_updates,
        steps=cfg.steps,
        mismatched_elements=sum(c["mismatched_elements"] for c in checks),
        max_abs_diff=max(c["max_abs_diff"] for c in checks),
        ranks_identical=all(c["ranks_identical"] for c in checks),
        backend=cfg.backend,
        device=device.type if device.type == "cpu" else torch.cuda.get_device_name(device),
        checked=tuple(cfg.paths),
        paths={c["path"]: {k: (list(v) if k == "update_digests" else v) for k, v in c.items() if k != "path"}
               for c in checks},
        reference_updates_agree=same_updates,
        scheme=cfg.scheme,
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        seed=cfg.seed,
        parameters=first["parameters"],
        buckets=max((c["buckets"] for c in checks if c["buckets"] is not None), default=None),
        skipped_steps=first["skipped_steps"],
        state_mismatched_elements=sum(c["state_mismatched_elements"] for c in checks),
        resume_identical=None if cfg.resume_at is None else all(c["resume_identical"] for c in checks),
        executor_identical=all(c["executor_identical"] for c in checks),
        phases_as_scheduled=all(c["phases_as_scheduled"] for c in checks),
        update_digests=first["update_digests"],
    )


def run(cfg: Config) -> Result:
    """Spawn ``cfg.world`` ranks on this machine, wait for them (never longer than the timeouts allow)."""
    cfg.check()
    cfg.check_local()
    started = time.monotonic()
    outcome = launch.launch(train_and_compare, (cfg,), cfg.world, cfg.backend, cfg.timeout_s,
                            backstop_s=120 + cfg.timeout_s * (cfg.steps + 4))
    result = outcome.reports.get(0, {}).get("result")
    if result is None or outcome.errors or outcome.lost:
        result = _stopped(cfg, outcome)
    return _with_run_facts(result, cfg, started)


def _stopped(cfg: Config, outcome: launch.Outcome) -> Stopped:
    """What a run that did not finish reports; with an injected fault, whether it was handled as designed."""
    stopped = Stopped(
        passed=False, steps=cfg.steps, backend=cfg.backend, device=cfg.device_type,
        error=outcome.describe_failures() or "no result",
        rank_errors={str(r): msg for r, msg in outcome.errors.items()},
        exit_codes={str(r): c for r, c in outcome.exit_codes.items()},
        killed_by_launcher=tuple(outcome.killed),
        seconds_to_stop_after_failure=outcome.seconds_to_stop_after_failure)
    return _judge_injected_fault(stopped, cfg, outcome)


def _judge_injected_fault(stopped: Stopped, cfg: Config, outcome: launch.Outcome) -> Stopped:
    """With --kill-at / --hang-at, the run passes when exactly the injected rank died or hung and every other
    rank stopped with an error of its own (no hang, within the timeouts): the fault was handled as designed."""
    fault = cfg.kill_at or cfg.hang_at
    if fault is None:
        return stopped
    step, bad = fault
    others = set(range(cfg.world)) - {bad}
    if cfg.kill_at is not None:
        injected = outcome.exit_codes.get(bad) == KILLED_EXIT_STATUS and bad in outcome.lost
        what = f"rank {bad} killed at step {step}"
    else:
        injected = bad in outcome.killed
        what = f"rank {bad} stalled at step {step} (killed by the launcher afterwards)"
    others_stopped = set(outcome.errors) == others and not (set(outcome.killed) & others)
    handled = bool(injected and others_stopped)
    return replace(stopped, fault=what, fault_handled=handled, passed=handled)


def run_under_torchrun(cfg: Config) -> Comparison | None:
    """Run this process as one rank of a ``torchrun`` job (env:// rendezvous); rank 0 returns the result."""
    cfg.check()
    rank = int(os.environ["RANK"])
    if int(os.environ["WORLD_SIZE"]) != cfg.world or int(os.environ.get("LOCAL_WORLD_SIZE", cfg.gpus_per_node)) != (
            cfg.gpus_per_node):
        raise ValueError(f"torchrun started {os.environ['WORLD_SIZE']} ranks ({os.environ.get('LOCAL_WORLD_SIZE')} "
                         f"per node); --nodes {cfg.nodes} --gpus-per-node {cfg.gpus_per_node} need {cfg.world}")
    started = time.monotonic()
    dist.init_process_group(cfg.backend, init_method="env://", timeout=timedelta(seconds=cfg.timeout_s))
    try:
        result = train_and_compare(cfg, rank, one_machine=False)
    finally:
        dist.destroy_process_group()
    return None if result is None else _with_run_facts(result, cfg, started)


def _with_run_facts(result: Result, cfg: Config, started: float) -> Result:
    return replace(result, seconds=round(time.monotonic() - started, 2),
                   config={k: v for k, v in asdict(cfg).items() if k != "backend"})
