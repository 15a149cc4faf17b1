"""Users' input files read with a bound: regular files only (a FIFO or a device is refused before it is opened
for reading, so a pipe without a writer never blocks), at most a given size, UTF-8 text (a byte-order mark
allowed); every failure one ValueError naming the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_bytes_bounded(path: str | Path, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, refused if larger than ``max_bytes``; ``what`` names the kind of
    file in the messages ("cluster file")."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}") from None
    except OSError as error:
        raise ValueError(f"{path}: cannot read the {what} ({error.strerror})") from None
    _check_regular(path, info.st_mode, what)
    if info.st_size > max_bytes:
        raise ValueError(f"{path}: {info.st_size:,} bytes; a {what} of more than {max_bytes:,} bytes is the wrong file")
    try:  # O_NONBLOCK: had the path become a FIFO since the stat, opening it would not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ValueError(f"{path}: cannot read the {what} ({error.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        _check_regular(path, os.fstat(fd).st_mode, what)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path}: a {what} of more than {max_bytes:,} bytes is the wrong file")
    return data


def read_text_bounded(path: str | Path, max_bytes: int, what: str) -> str:
    """``read_bytes_bounded`` decoded as UTF-8 (a leading byte-order mark dropped)."""
    data = read_bytes_bounded(path, max_bytes, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a UTF-8 text file (byte {error.start}): a {what} is text") from None


def _check_regular(path: Path, mode: int, what: str) -> None:
    if stat.S_ISDIR(mode):
        raise ValueError(f"{path} is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or a socket"
        raise ValueError(f"{path} is {kind}, not a regular file: give a {what} saved on disk")
