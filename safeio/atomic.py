"""Atomic outputs: a file or a directory appears whole or not at all (written to a temporary path, then renamed).

The temporary beside the output is named ``.NAME.PID.XXXX.tmp`` (a directory being replaced is moved aside to
``.NAME.PID.old`` for the instant of the swap): a run killed with SIGKILL leaves one behind, and the next run
writing NAME removes it once process PID is gone (restoring ``.old`` if NAME itself is missing).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(path: Path) -> None:
    """Remove what killed runs writing ``path`` left beside it (see the module docstring)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.(?:\w+\.tmp|old)")
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if not match or _alive(int(match.group(1))) or entry.is_symlink():
            continue
        if entry.name.endswith(".old") and not os.path.lexists(path):
            entry.rename(path)  # killed between the two renames of a swap: the previous output comes back
        elif entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (file or directory) in one rename.

    A symbolic link is followed (its target is replaced, the link stays); a dangling one is refused. On an
    exception the temporary is removed and ``path`` is left as it was.
    """
    path = Path(path)
    if path.is_symlink():
        if not path.exists():
            raise OSError(errno.ENOENT, "a dangling symbolic link: refusing to replace it", str(path))
        path = path.resolve()
    if path.exists() and not (path.is_file() or path.is_dir()):  # renaming over it would replace a device node
        raise OSError(errno.EEXIST, "not a regular file or directory (a device, a pipe or a socket): refusing to "
                                    "replace it", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    try:
        handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as error:  # name the output asked for, not the temporary beside it
        raise OSError(error.errno, f"cannot write {path.name} in {path.parent} ({error.strerror})", str(path)) from None
    os.close(handle)
    tmp = Path(tmp_name)
    tmp.unlink()
    try:
        try:
            yield tmp
        except OSError as error:  # a full disk, a quota: name the output, not the temporary beside it
            if error.filename is not None and not str(error.filename).startswith(str(tmp)):
                raise  # about another file (an input read on the way)
            raise OSError(error.errno, f"{error.strerror or error}; {path.name} was left as it was",
                          str(path)) from None
        if path.is_dir() and tmp.is_dir():  # a directory cannot be renamed over a non-empty one: swap
            old = path.with_name(f".{path.name}.{os.getpid()}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


@contextmanager
def staging_dir(folder: str | Path, name: str) -> Iterator[Path]:
    """A temporary directory ``.NAME.PID.XXXX.tmp`` in ``folder`` (created if missing), for files drawn there and
    then renamed into ``folder`` one by one; removed afterwards, and by the next run if this one is killed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder / name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=folder))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")  # never the locale's codec (ASCII under LC_ALL=C on old Pythons)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
