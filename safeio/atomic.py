"""Atomic outputs: a file or a directory appears whole or not at all (written to a temporary path, then renamed)."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (file or directory) in one rename.

    On an exception the temporary is removed and ``path`` is left as it was.
    """
    path = Path(path)
    if path.exists() and not (path.is_file() or path.is_dir()):  # renaming over it would replace a device node
        raise OSError(errno.EEXIST, "not a regular file or directory (a device, a pipe or a socket): refusing to "
                                    "replace it", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:  # name the output asked for, not the temporary beside it
        raise OSError(error.errno, f"cannot write {path.name} in {path.parent} ({error.strerror})", str(path)) from None
    os.close(handle)
    tmp = Path(tmp_name)
    tmp.unlink()
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():  # a directory cannot be renamed over a non-empty one: swap
            old = path.with_name(f".{path.name}.old")
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


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
