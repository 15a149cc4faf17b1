"""Value types for the subcommands' options, shared by every package's command line: argparse reports a
rejected value as one line naming the flag (``argument --nodes: expected a positive integer, got '0'``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def non_empty_path(text: str) -> str:
    """A path that is not empty or blank (an empty ``--out`` would otherwise mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_number(unit: str = "") -> Callable[[str], float]:
    """A parser of finite numbers > 0; ``unit`` (e.g. "seconds") names what the number counts in the message."""
    expected = "a positive finite number" + (f" of {unit}" if unit else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def number_between(low: float, high: float, unit: str, why: str = "") -> Callable[[str], float]:
    """A parser of numbers in [low, high] (``unit`` names what they count; ``why`` says where the bounds come from)."""
    expected = f"a number of {unit} in [{low:g}, {high:g}]" + (f" ({why})" if why else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text[:24]!r}") from None
        if not low <= value <= high:  # NaN fails too
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text[:24]!r}")
        return value

    return parse
