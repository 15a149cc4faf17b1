"""What the GPU check runs and what it needs: its parts in order, the modules (the machine's own, or a wheel carried
in ``gpu_check/wheels/``), the project files; the dry run's check of all of it. Standard library only: the dry run
must work on a machine that lacks everything it checks for.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS_DIR = ROOT / "gpu_check" / "wheels"  # gitignored; `make gpu-wheels` fills it
WHEELS_LIST = ROOT / "gpu_check" / "wheels.txt"
MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python
BUDGET_S = 450.0  # a GPU may be lent for minutes: the whole check stops within 7.5 min (the bound is 8)
TARGET_SHARE_OF_COPY = 0.5  # the quantize + pack stage's goal: half the measured HBM copy bandwidth (issue 33)


@dataclass(frozen=True)
class Part:
    """One part of the check. ``limit_s`` bounds it on CUDA (the CPU forms run together, under their sum);
    ``concurrent`` parts check correctness and run side by side, the others time things and run alone."""

    name: str
    what: str  # on CUDA
    cpu_form: str  # what runs instead without CUDA
    limit_s: float
    concurrent: bool = False
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the part's process


PARTS = (
    Part("env", "the machine: Python, torch and its CUDA, the GPU, NCCL, each package and where it came from",
         "the same", 45),
    Part("cuda_tests", "the CUDA-marked tests: pytest -m cuda on the test files that carry the mark",
         "the same (the marked tests skip themselves)", 150, True),
    Part("check_adapter", "birder check --impl gpu_validation.check_adapter on CUDA tensors "
         "(BIRDER_CHECK_DEVICE=cuda)", "three cheap checks on CPU tensors", 180, True),
    Part("validate", "gpu_validation.Birder and the expert hook against birder_ref bit for bit on CUDA: 6 and 4 gloo "
         "ranks sharing the GPU, 1 NCCL rank; 2 NCCL ranks on one GPU tried (NCCL refuses them)",
         "2 gloo ranks on CPU, 2 steps", 150, True),
    Part("bench", "birder bench on the GPU; Birder's quantize + pack (worker) stage against the measured HBM copy "
         "bandwidth (goal 50%)", "65,536 elements on one CPU thread (no figure)", 50),
    Part("step_time", "Birder's step against DDP's all-reduce + AdamW at benchmarks/hook_speed.py's model sizes",
         "one gloo rank, a 64-wide MLP, 2 steps (no figure)", 90),
    Part("largest_model", "the largest MLP that trains a step with Birder, and with AdamW (a bounded search; an "
         "out-of-memory trial is caught)", "64-wide layers, at most 4 (the search's code, no figure)", 120,
         env=(("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),)),
)
PART_NAMES = tuple(p.name for p in PARTS)

# Modules the machine must have itself (none is carried: torch alone is GBs), with what to install for each.
MACHINE_MODULES = {"torch": "torch (a CUDA build; any version)", "numpy": "numpy", "scipy": "scipy",
                   "matplotlib": "matplotlib", "tqdm": "tqdm", "sklearn": "scikit-learn", "hypothesis": "hypothesis"}

# Files of the checkout the parts read (beyond the packages themselves).
FILES = ("pyproject.toml", "tests/conftest.py", "gpu_validation/check_adapter.py", "gpu_validation/digests.json",
         "birder/cli.py")


def cuda_test_files(root: Path = ROOT) -> list[str]:
    """The test files that mark a test ``cuda`` (``pytest.mark.cuda``), relative to ``root``."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py")
                  if "pytest.mark.cuda" in p.read_text(encoding="utf-8", errors="replace"))


def wheel_requirements(listing: Path = WHEELS_LIST) -> list[tuple[str, str]]:
    """(distribution, version) pinned in ``wheels.txt``."""
    pins = []
    for line in listing.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins.append((name.strip(), version.strip()))
    return pins


def find_wheel(folder: Path, name: str, version: str) -> Path | None:
    """The pure-Python wheel of ``name`` ``version`` in ``folder`` (wheel names write '-' and '.' as '_')."""
    stem = re.sub(r"[-_.]+", "_", name).lower()
    for path in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
        parts = path.name[:-4].split("-")
        if len(parts) >= 5 and parts[0].lower() == stem and parts[1] == version and parts[-2:] == ["none", "any"]:
            return path
    return None


def on_machine(module: str) -> bool:
    """Whether ``module`` imports here without the carried wheels (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Need:
    """One module the check needs and where it will come from: ``machine``, ``wheel`` (``wheel`` names the file)
    or ``missing``."""

    module: str
    source: str
    wheel: Path | None
    why: str


def needs(wheels: Path = WHEELS_DIR, require_wheels: bool = False) -> list[Need]:
    """Every module the check needs and its source. The carried wheels serve modules the machine lacks; with
    ``require_wheels`` every wheel must be in the folder (the check before carrying it to a bare machine)."""
    out = [Need(m, "machine" if on_machine(m) else "missing", None, why) for m, why in MACHINE_MODULES.items()]
    for name, version in wheel_requirements():
        module = name.lower()  # each carried distribution imports under its own name
        wheel = find_wheel(wheels, name, version)
        here = on_machine(module)
        if wheel is None and (require_wheels or not here):
            source = "missing"
        else:
            source = "machine" if here else "wheel"
        out.append(Need(module, source, wheel, f"{name}=={version}"))
    return out


def missing_files(root: Path = ROOT) -> list[str]:
    missing = [f for f in FILES if not (root / f).is_file()]
    if not missing and not cuda_test_files(root):
        missing.append("tests/test_*.py marked pytest.mark.cuda")
    return missing


def dry_run_lines(out: Path, wheels: Path, require_wheels: bool, device: str) -> tuple[list[str], str | None]:
    """The dry run's listing, and None if everything is there, else one line naming what is missing."""
    found = needs(wheels, require_wheels)
    lines = [f"gpu-check dry run (nothing runs): output folder {out}",
             f"python {sys.version.split()[0]} ({sys.executable}); checkout {ROOT}; wheels {wheels}", "modules:"]
    for need in found:
        where = {"machine": "this machine" + (f" (wheel {need.wheel.name} also carried)" if need.wheel else ""),
                 "wheel": f"wheel {need.wheel.name if need.wheel else ''} (unpacked for the run)",
                 "missing": "MISSING"}[need.source]
        lines.append(f"  {need.module:<11} {need.why:<28} {where}")
    on = {"auto": "CUDA if torch sees a GPU at run time, else each part's CPU form at small sizes",
          "cuda": "CUDA", "cpu": "each part's CPU form at small sizes"}[device]
    lines.append(f"parts, in order ({on}; correctness parts side by side, then timings alone):")
    for i, part in enumerate(PARTS, 1):
        lines.append(f"  {i}. {part.name:<14} <= {part.limit_s:>4.0f} s  {part.what}")
        if device != "cuda":
            lines.append(f"     {'':<14}          CPU form: {part.cpu_form}")
    lines.append(f"  the CUDA-marked test files: {', '.join(cuda_test_files()) or 'none found'}")
    lines.append(f"whole check: at most {BUDGET_S:.0f} s; writes {out}/gpu_check.json, {out}/gpu_check.md, "
                 f"{out}/parts/*.json, {out}/logs/*.log")
    problems = []
    if sys.version_info[:2] < MIN_PYTHON:
        problems.append(f"python >= {'.'.join(map(str, MIN_PYTHON))} (this is {sys.version.split()[0]})")
    gone = [n for n in found if n.source == "missing"]
    absent = [n.why for n in gone if n.module in MACHINE_MODULES]
    if absent:
        problems.append(f"{', '.join(absent)} on the machine (not carried: install it there)")
    unwheeled = [n.why for n in gone if n.module not in MACHINE_MODULES]
    if unwheeled:
        problems.append(f"wheel(s) {', '.join(unwheeled)} in {wheels} (run `make gpu-wheels`)")
    problems += [f"file {f}" for f in missing_files()]
    if problems:
        return lines, "gpu-check: missing: " + "; ".join(problems)
    lines.append("everything the check needs is here")
    return lines, None
