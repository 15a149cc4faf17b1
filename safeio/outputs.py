"""Where a command may write: never inside the toolkit's own packages or a checkout's source folders, never over a
directory it did not write (a report directory carries a manifest of its files), symbolic links followed (a
dangling one refused), and checked before any long work starts."""

from __future__ import annotations

import os
from pathlib import Path

# The toolkit's packages (pyproject's [tool.setuptools.packages.find]); in a checkout, the folders beside them
# that hold its source, and the files at its root that describe it.
TOOLKIT_PACKAGES = ("birder", "birder_ref", "sim", "proofs_checks", "gpu_validation", "safeio")
CHECKOUT_FOLDERS = ("tests", "benchmarks", "examples", ".git", ".ci", ".venv")
CHECKOUT_FILES = ("README.md", "pyproject.toml", "Makefile", ".gitignore")
MANIFEST_NAME = ".birder-manifest"  # in a directory a command wrote whole: the files it wrote, one a line


def protected_paths() -> list[Path]:
    """The toolkit's packages, wherever they are installed, and (in a source checkout) its other source folders,
    its environment and its top-level project files."""
    root = Path(__file__).resolve().parents[1]
    paths = [root / name for name in TOOLKIT_PACKAGES if (root / name / "__init__.py").is_file()]
    if (root / "pyproject.toml").is_file() and (root / "safeio").is_dir():  # a checkout, not site-packages
        paths += [root / name for name in CHECKOUT_FOLDERS] + [root / name for name in CHECKOUT_FILES]
    return paths


def resolve_output(path: str | Path, flag: str = "--out") -> Path:
    """``path`` with symbolic links followed; ValueError (one line, naming ``flag``) if it is a dangling link or
    lies inside the toolkit's own source (``protected_paths``)."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{flag} {path} is a dangling symbolic link (to {os.readlink(path)}): give a path that "
                         "exists or a new one")
    resolved = path.resolve()
    for protected in protected_paths():
        if resolved == protected or protected in resolved.parents:
            raise ValueError(f"{flag} {path} lies inside the toolkit's own files ({protected}): write outputs "
                             "elsewhere (a new folder of yours)")
    return resolved


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """An output file's resolved path: not a directory, device, pipe or socket; its folder exists and is
    writable; not inside the toolkit (``resolve_output``)."""
    resolved = resolve_output(path, flag)
    if resolved.is_dir():
        raise ValueError(f"{flag} {path} is a directory: give a file path")
    if resolved.exists() and not resolved.is_file():
        raise ValueError(f"{flag} {path} is not a regular file (a device, a pipe or a socket): refusing to replace it")
    if not resolved.parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {resolved.parent} does not exist")
    if not os.access(resolved.parent, os.W_OK):
        raise ValueError(f"{flag} {path}: the folder {resolved.parent} is not writable")
    return resolved


def check_output_dir(path: str | Path, flag: str = "--out") -> Path:
    """A folder that files are written into, one by one (each atomically, beside what is there): its resolved path;
    it may exist (files of other names are kept) or be created. Refused: a file, a device, a pipe; a folder whose
    nearest existing ancestor is not a writable folder; anything inside the toolkit."""
    resolved = resolve_output(path, flag)
    if resolved.exists() and not resolved.is_dir():
        raise ValueError(f"{flag} {path} exists and is not a directory")
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {existing} is not writable")
    return resolved


def check_replaceable_dir(path: str | Path, flag: str = "--out") -> Path:
    """A folder that a command replaces whole (``birder report``): its resolved path, if it is new, empty, or
    holds only the files its manifest lists (what an earlier run wrote); anything else is refused, so a user's
    own files are never deleted."""
    resolved = check_output_dir(path, flag)
    if not resolved.is_dir():
        return resolved
    present = {str(p.relative_to(resolved)) for p in resolved.rglob("*") if not p.is_dir()}
    if not present:
        return resolved
    manifest = resolved / MANIFEST_NAME
    if not manifest.is_file() or manifest.is_symlink():
        raise ValueError(f"{flag} {path} holds files that no earlier run wrote (it has no {MANIFEST_NAME}): give a "
                         "new or empty folder, or an earlier report's")
    written = set(read_manifest(manifest)) | {MANIFEST_NAME}
    foreign = sorted(present - written)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"{flag} {path} holds files an earlier run did not write ({shown}): move them, or give a "
                         "new folder")
    return resolved


def read_manifest(manifest: Path) -> list[str]:
    """The relative paths a manifest lists (at most 64 kB of it is read: a manifest is a short list)."""
    with manifest.open("rb") as handle:
        text = handle.read(1 << 16).decode("utf-8", errors="replace")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def write_manifest(folder: Path, command: str) -> None:
    """List every file under ``folder`` in its manifest (written last, so a listed folder is a whole one)."""
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    lines = [f"# files written by {command}; a later run replaces this folder only while it holds nothing else",
             *names]
    (folder / MANIFEST_NAME).write_text("\n".join(lines) + "\n")

