"""`birder`: one console script; each subcommand lives in the package it belongs to.

A command module exposes ``register(subparsers)``, which adds its parser(s) and sets ``func`` to a callable
``func(args) -> int``. This module adds ``--quiet`` to every subcommand that lacks it (packages read
``getattr(args, "quiet", False)`` and pass ``disable=True if quiet else None`` to tqdm, which also turns itself
off when stderr is not a terminal), and turns bad input into one line on stderr and exit status 2, never a
traceback: argparse errors, ``ValueError``, ``OSError``, ``MemoryError`` (and allocators' out-of-memory
``RuntimeError``), a missing optional dependency. Ctrl-C is one line and exit status 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from safeio.text import printable

# Modules that register subcommands, in the order `birder --help` lists them.
COMMAND_MODULES = (
    "birder.report",
    "sim.cli",
    "proofs_checks.cli",
    "gpu_validation.cli",
)

QUIET_HELP = "silences progress bars (they are shown on a terminal only)"
TORCH_HINT = 'this command needs torch, which is not installed: pip install -e ".[torch]" (the torch extra)'
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as shells report a writer whose reader closed the pipe
_OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "cannot allocate memory", "bad_alloc")


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a single line on stderr and exit status 2, and which takes no abbreviated
    options (``--node 4`` is an error, not a silent ``--nodes 4``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse's name
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line(message)}\n")

    def parse_known_args(self, args=None, namespace=None):
        conflict = conflicting_repeat(self, sys.argv[1:] if args is None else list(args))
        if conflict:
            self.error(conflict)
        return super().parse_known_args(args, namespace)


def conflicting_repeat(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """A value-taking option given twice with different values (``--network 10gbe --network 25gbe``): argparse
    would silently keep the last one. Options of the subcommand's own parser only; stops at ``--``."""
    seen: dict[argparse.Action, tuple[str, str]] = {}
    for i, token in enumerate(args):
        if token == "--":
            break
        option, _, inline = token.partition("=")
        action = parser._option_string_actions.get(option)
        if action is None or action.nargs == 0 or isinstance(action, argparse._AppendAction):
            continue
        if action.nargs not in (None, "?"):
            continue  # multi-valued options (nargs="+") are left to argparse
        value = inline if "=" in token else (args[i + 1] if i + 1 < len(args) else "")
        if action in seen and seen[action][1] != value:
            first, earlier = seen[action]
            return f"argument {option}: given twice with different values ({first} {earlier!r}, {option} {value!r})"
        seen.setdefault(action, (option, value))
    return None


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space, and any other control
    character (an ANSI escape) written as its escape (``safeio.text.printable``)."""
    return printable(" ".join(str(text).split()))


def add_quiet(subparsers: argparse._SubParsersAction) -> None:
    """Give every subcommand a ``--quiet`` flag, unless its package already defines one."""
    seen = set()
    for parser in subparsers.choices.values():
        if id(parser) in seen:  # aliases share a parser
            continue
        seen.add(id(parser))
        if not any("--quiet" in action.option_strings for action in parser._actions):
            parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("birder-toolkit")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="birder",
        description="Check, simulate and regression-test Birder, a 1-bit adaptive optimizer.",
    )
    parser.add_argument("--version", action="version", version=f"birder {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineErrorParser)
    subparsers.required = True
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    add_quiet(subparsers)
    return parser


def describe_error(error: BaseException) -> tuple[str, int] | None:
    """(one-line message, exit status) for an error that means bad input or environment; None for a bug."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted (Ctrl-C)", EXIT_INTERRUPTED
    if isinstance(error, ModuleNotFoundError | ImportError):
        missing = (getattr(error, "name", None) or "").split(".")[0]
        if missing == "torch" or (not missing and "torch" in str(error)):
            return TORCH_HINT, EXIT_BAD_INPUT
        if isinstance(error, ModuleNotFoundError) and missing:
            return f"a required module is not installed: {missing} ({error})", EXIT_BAD_INPUT
        return None  # an ImportError inside the project is a bug: let its traceback show
    if isinstance(error, MemoryError):
        detail = one_line(error) or "the allocation failed"
        return f"out of memory: {detail} (try smaller sizes)", EXIT_BAD_INPUT
    if isinstance(error, RuntimeError) and any(s in str(error).lower() for s in _OUT_OF_MEMORY):
        return f"out of memory: {one_line(error)} (try smaller sizes)", EXIT_BAD_INPUT
    if isinstance(error, OSError):
        if error.strerror:
            names = [n for n in (error.filename, error.filename2) if n is not None]
            where = f": {' -> '.join(map(str, names))}" if names else ""
            return one_line(f"{error.strerror}{where}"), EXIT_BAD_INPUT
        return one_line(error) or type(error).__name__, EXIT_BAD_INPUT
    if isinstance(error, ValueError):
        return one_line(error) or "invalid value", EXIT_BAD_INPUT
    return None


class NamedStream:
    """A text stream whose write errors (a full disk, a closed descriptor, an I/O error) are OSErrors naming it
    (``standard output``), so the one-line message says which stream failed ("No space left on device: standard
    output"); a closed pipe stays a
    BrokenPipeError (exit 141, as shells expect)."""

    def __init__(self, stream, name: str) -> None:
        self._stream, self._name = stream, name

    def _named(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OSError(error.errno, error.strerror or str(error), self._name) from None

    def write(self, text: str) -> int:
        return self._named(self._stream.write, text)

    def flush(self) -> None:
        self._named(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _real_stream(stream) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # captured in-process (StringIO), or closed
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    command = "birder"
    if sys.stdout is None or (_real_stream(sys.stdout) and not _open_descriptor(sys.stdout.fileno())):
        # started with stdout closed (`birder ... >&-`): every answer would be lost while the exit status said 0
        if sys.stderr is not None:
            print("birder: error: standard output is closed: run with >FILE, or >/dev/null to discard it",
                  file=sys.stderr)
        return EXIT_BAD_INPUT
    stdout = sys.stdout
    if _real_stream(stdout):
        for stream in (stdout, sys.stderr):  # an ASCII-only terminal (LC_ALL=C, PYTHONIOENCODING=ascii) shows a
            try:  # name it cannot encode as \xe9, not a codec error
                stream.reconfigure(errors="backslashreplace")
            except (AttributeError, ValueError, OSError):
                pass
        sys.stdout = NamedStream(stdout, "standard output")
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = f"birder {args.command}"
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a full disk behind stdout shows here, not after the exit status is decided
        return status
    except BrokenPipeError:  # the reader of stdout went away (`birder ... | head`): nothing left to say
        try:  # point stdout at /dev/null so the flush at exit does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # stdout is not a file descriptor (captured in-process)
            pass
        return EXIT_BROKEN_PIPE
    except (KeyboardInterrupt, ImportError, MemoryError, RuntimeError, OSError, ValueError) as error:
        described = describe_error(error)
        if described is None:
            raise
        message, status = described
        print(f"{command}: error: {message}", file=sys.stderr)
        if isinstance(error, OSError) and error.filename == "standard output":
            _discard_stdout()  # the flush at exit would fail again, with a second message
        return status
    finally:
        if isinstance(sys.stdout, NamedStream):
            sys.stdout = stdout


def _open_descriptor(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _discard_stdout() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
