"""Where a command may write: never inside the toolkit's own packages or a checkout's source folders, never over a
directory it did not write (a report directory carries a manifest of its files), symbolic links followed (a
dangling one refused), and checked before any long work starts."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from safeio.inputs import read_text_bounded

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
    if (root / "pyproject.toml").is_file():  # a source checkout (site-packages holds no pyproject.toml)
        paths += [root / name for name in CHECKOUT_FOLDERS] + [root / name for name in CHECKOUT_FILES]
    return paths


def resolve_output(path: str | Path, flag: str = "--out") -> Path:
    """``path`` with symbolic links followed; ValueError (one line, naming ``flag``) if it is a dangling link or
    lies inside the toolkit's own source (``protected_paths``)."""
    path = Path(path)
    for part in (path, *path.parents):  # a dangling link anywhere on the way would make its target appear
        if part.is_symlink() and not part.exists():
            where = "" if part == path else f" (its part {part})"
            raise ValueError(f"{flag} {path}{where} is a dangling symbolic link (to {os.readlink(part)}): give a "
                             "path that exists or a new one")
    resolved = path.resolve()
    for protected in protected_paths():
        if resolved == protected or protected in resolved.parents:
            raise ValueError(f"{flag} {path} lies inside the toolkit's own files ({protected}): write outputs "
                             "elsewhere (a new folder of yours)")
    return resolved


def check_output_file(path: str | Path, flag: str = "--out", inputs: tuple[str | Path, ...] = ()) -> Path:
    """An output file's resolved path: not a directory, device, pipe or socket; not one of the command's
    ``inputs`` (a measurement overwritten by what was computed from it is lost); its folder exists and is
    writable; not inside the toolkit (``resolve_output``)."""
    resolved = resolve_output(path, flag)
    for source in inputs:
        if Path(source).resolve() == resolved:
            raise ValueError(f"{flag} {path} is also an input ({source}): writing it would destroy what it is "
                             "computed from; give another file name")
    if resolved.is_dir():
        raise ValueError(f"{flag} {path} is a directory: give a file path")
    if resolved.exists() and not resolved.is_file():
        raise ValueError(f"{flag} {path} is not a regular file (a device, a pipe or a socket): refusing to replace it")
    if not resolved.parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {resolved.parent} does not exist")
    _check_writable(resolved.parent, path, flag)
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
    _check_writable(existing, path, flag)
    return resolved


def _check_writable(folder: Path, path: str | Path, flag: str) -> None:
    """Tried, not asked: os.access says yes to root in /proc, on a read-only mount or in an immutable folder."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".birder-probe.", dir=folder))
    except OSError as error:
        raise ValueError(f"{flag} {path}: cannot write in {folder} ({error.strerror})") from None


def check_replaceable_dir(path: str | Path, flag: str = "--out",
                          unlisted: Callable[[Path], set[str]] | None = None) -> Path:
    """A folder that a command replaces whole (``birder report``): its resolved path, if it is new, empty, or
    holds only the files its manifest lists (what an earlier run wrote); anything else is refused, so a user's
    own files are never deleted. ``unlisted(folder)``: for a folder without a manifest, the files the caller can
    prove an earlier run wrote (a report from before manifests), else an empty set."""
    resolved = check_output_dir(path, flag)
    if not resolved.is_dir():
        return resolved
    present = {str(p.relative_to(resolved)) for p in resolved.rglob("*") if not p.is_dir()}
    if not present:
        return resolved
    manifest = resolved / MANIFEST_NAME
    listed: dict[str, str | None] = {}
    if manifest.is_file() and not manifest.is_symlink():
        listed = read_manifest(manifest)
        written = set(listed) | {MANIFEST_NAME}
    else:
        written = unlisted(resolved) if unlisted else set()
        if not written:
            raise ValueError(f"{flag} {path} holds files that no earlier run wrote (it has no {MANIFEST_NAME}): "
                             "give a new or empty folder, or an earlier report's")
    foreign = sorted(present - written)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"{flag} {path} holds files an earlier run did not write ({shown}): move them, or give a "
                         "new folder")
    edited = sorted(name for name, digest in listed.items()
                    if digest is not None and name in present and _sha256(resolved / name) != digest)
    if edited:
        raise ValueError(f"{flag} {path}: {', '.join(edited[:3])} changed since the earlier run wrote it (an edit of "
                         "yours?): move it, or give a new folder")
    return resolved


def read_manifest(manifest: Path) -> dict[str, str | None]:
    """The relative paths a manifest lists, each with the SHA-256 it was written with (None in a manifest from
    before digests); a short file: at most 1 MB."""
    text = read_text_bounded(manifest, 1 << 20, "manifest")
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        digest, sep, name = line.partition("  ")
        if sep and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
            out[name] = digest
        else:
            out[line] = None
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, command: str) -> None:
    """List every file under ``folder`` in its manifest with its SHA-256, as sha256sum writes them (written last,
    so a listed folder is a whole one; a later run refuses to replace a listed file that was edited since)."""
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    lines = [f"# files written by {command}; a later run replaces this folder only while it holds nothing else",
             *(f"{_sha256(folder / name)}  {name}" for name in names)]
    (folder / MANIFEST_NAME).write_text("\n".join(lines) + "\n")
