"""Where a command may write: never inside the toolkit's own packages or a checkout's source folders, never over a
directory it did not write (a report directory carries a manifest of its files), symbolic links followed (a
dangling one refused), and checked before any long work starts."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from safeio.inputs import read_text_bounded
from safeio.text import printable

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
        existing = _nearest_existing(resolved.parent)
        if not existing.is_dir():
            raise ValueError(f"{flag} {path}: {existing} is not a directory")
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
    existing = _nearest_existing(resolved)
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is not a directory")
    _check_writable(existing, path, flag)
    return resolved


def _nearest_existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


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
    (folder / MANIFEST_NAME).write_text("\n".join(lines) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------ the one output rule
# Every file a command writes goes through ``check_owned`` (before the work, and again at the swap): a file that
# is already there is replaced only if its folder's manifest lists it with the SHA-256 it still has, i.e. a
# command of the toolkit wrote it and nobody edited it since. A folder replaced whole (``birder report``) is held
# to the same rule by ``check_replaceable_dir``.


def check_owned(path: str | Path, flag: str = "--out") -> None:
    """ValueError (one line naming the file and how to proceed) if ``path`` exists and is not a file the toolkit
    wrote and nobody changed since (see above); a symbolic link, a folder or a device there is refused too."""
    path = Path(path)
    prefix, other = (f"{flag}: ", f"another {flag}") if flag else ("", "another output path")
    if path.name == MANIFEST_NAME or not path.name.isprintable():  # a line break in a name would forge manifest lines
        raise ValueError(f"{prefix}{printable(path.name)} cannot be an output's name (the manifest birder keeps, or "
                         f"a name with control characters): give {other}")
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{prefix}{path} exists and is not a regular file birder wrote: move it away, or give {other}")
    manifest = path.parent / MANIFEST_NAME
    listed = read_manifest(manifest) if manifest.is_file() and not manifest.is_symlink() else {}
    if path.name not in listed:
        raise ValueError(f"{prefix}{path} was not written by birder (no entry in {manifest}): it is never replaced; "
                         f"remove or move it, or give {other}")
    digest = listed[path.name]
    if digest is not None and _sha256(path) != digest:
        raise ValueError(f"{prefix}{path} changed since birder wrote it (an edit of yours?): it is never replaced; "
                         f"remove or move it, or give {other}")


def check_outputs(folder: str | Path, names: tuple[str, ...] | list[str], flag: str = "--out") -> Path:
    """Before the work: ``folder`` may receive files (``check_output_dir``) and none of ``names`` in it would
    replace a file the toolkit did not write (``check_owned``). Returns the resolved folder."""
    resolved = check_output_dir(folder, flag)
    _manifest_lines(resolved, flag)
    for name in names:
        check_owned(resolved / name, flag)
    return resolved


def _manifest_lines(folder: Path, flag: str = "--out") -> dict[str, str | None]:
    """The manifest's entries (none if there is none yet); ValueError if something else stands in its place, which
    a run could not update after writing its files."""
    manifest = folder / MANIFEST_NAME
    if not os.path.lexists(manifest):
        return {}
    if manifest.is_symlink() or not manifest.is_file():
        raise ValueError(f"{flag}: {manifest} is not the manifest birder keeps (a link, a folder or a device): move "
                         f"it away, or give another {flag}")
    return read_manifest(manifest)


class StagedOutputs:
    """Files being written by ``output_files``: put them in ``dir`` (or through ``write_text``/``write_toml``);
    each is read back and checked before any replaces its namesake."""

    def __init__(self, staging: Path) -> None:
        self.dir = staging
        self.checks: dict[str, Callable[[Path], None]] = {}

    def path(self, name: str) -> Path:
        return self.dir / name

    @contextmanager
    def writing(self, name: str) -> Iterator[Path]:
        """Around a writer that names no file in its errors (matplotlib's savefig): an OSError inside names
        ``name``, so a full disk is reported against the file being written."""
        try:
            yield self.dir / name
        except OSError as error:
            if error.filename is not None:
                raise
            raise OSError(error.errno, error.strerror or str(error), str(self.dir / name)) from None

    def write_text(self, name: str, text: str, check: Callable[[str], None] | None = None) -> Path:
        """``text`` as UTF-8 into ``name``; ``check(text_read_back)`` raises ValueError if it is not what was
        meant (a reader of the format)."""
        path = self.dir / name
        path.write_text(text, encoding="utf-8")
        if check is not None:
            self.checks[name] = lambda p: check(p.read_text(encoding="utf-8"))
        return path

    def write_toml(self, name: str, text: str, data: dict) -> Path:
        """A TOML file read back with tomllib and compared with ``data``, the values it was rendered from."""
        from safeio.serialise import check_toml

        return self.write_text(name, text, lambda back: check_toml(back, data, name))


def check_written(path: Path) -> None:
    """What any file of its kind must be when read back: UTF-8 text for .md/.csv/.toml/.json (strict JSON), a
    whole PNG (signature first, IEND chunk last)."""
    suffix = path.suffix.lower()
    if suffix == ".png":
        data = path.read_bytes()
        if not (data.startswith(b"\x89PNG\r\n\x1a\n") and data[-12:-4] == b"\x00\x00\x00\x00IEND"):
            raise ValueError(f"{path.name}: the PNG written is not whole; nothing was replaced")
    elif suffix in (".md", ".csv", ".toml", ".json", ".txt"):
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path.name}: the file written is not UTF-8 text; nothing was replaced") from None
        if suffix == ".json":
            import json

            def refuse(constant):
                raise ValueError(constant)

            try:
                json.loads(text, parse_constant=refuse)
            except ValueError:
                raise ValueError(f"{path.name}: the JSON written does not read back as strict JSON; nothing was "
                                 "replaced") from None


@contextmanager
def output_files(folder: str | Path, command: str, flag: str = "--out") -> Iterator[StagedOutputs]:
    """Write several files into ``folder`` all or nothing: they are written into a staging folder beside them,
    each read back and checked (its format, and the caller's check), every one held to ``check_owned``; only then
    are they renamed into ``folder`` and listed in its manifest with their SHA-256. On any error (a full disk, a
    bad value, a file of the user's in the way) no file in ``folder`` has changed; the error names the file.

    The renames and the manifest update hold an exclusive lock on ``folder``, so two runs writing into one folder
    do not lose each other's manifest entries."""
    from safeio.atomic import staging_dir, write_text

    folder = check_output_dir(folder, flag)
    folder.mkdir(parents=True, exist_ok=True)
    with staging_dir(folder, "birder-outputs") as staging:
        staged = StagedOutputs(staging)
        try:
            yield staged
        except OSError as error:  # name the output, not the staging folder
            raise _named(error, folder, staging) from None
        names = sorted(p.name for p in staging.iterdir())
        for name in names:
            try:
                check_written(staging / name)
                if name in staged.checks:
                    staged.checks[name](staging / name)
            except OSError as error:
                raise _named(error, folder, staging) from None
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            for name in names:
                check_owned(folder / name, flag)
            listed = _manifest_lines(folder, flag)
            digests = {name: _sha256(staging / name) for name in names}
            for name in names:
                os.replace(staging / name, folder / name)
            listed.update(digests)
            header = f"# files written by birder ({command} last); a later run replaces only files listed here " \
                     "with the digest they still have"
            write_text(folder / MANIFEST_NAME, "\n".join([header, *(
                f"{digest}  {name}" if digest else name for name, digest in sorted(listed.items()))]) + "\n")
        finally:
            os.close(descriptor)


def _named(error: OSError, folder: Path, staging: Path) -> OSError:
    """An OSError raised while writing into ``staging`` with the output's own name in ``folder`` instead."""
    # a writer that names no file (matplotlib's savefig outside ``StagedOutputs.writing``): the folder
    name = Path(error.filename).name if error.filename and Path(error.filename).parent == staging else ""
    target = folder / name if name else folder
    return OSError(error.errno, f"{error.strerror or error}; nothing in {folder} was changed", str(target))


def write_output_file(path: str | Path, text: str, command: str, flag: str = "--out",
                      toml_data: dict | None = None, check: Callable[[str], None] | None = None) -> Path:
    """Write one file the one-rule way (``output_files`` with ``path``'s folder): never over a file the toolkit
    did not write, read back before it replaces anything (as TOML compared with ``toml_data`` if given)."""
    resolved = check_output_file(path, flag)
    with output_files(resolved.parent, command, flag) as staged:
        if toml_data is not None:
            staged.write_toml(resolved.name, text, toml_data)
        else:
            staged.write_text(resolved.name, text, check)
    return resolved
