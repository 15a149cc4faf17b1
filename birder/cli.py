"""`birder`: one console script; each subcommand lives in the package it belongs to.

A command module exposes ``register(subparsers)``, which adds its parser(s) and sets ``func`` to a callable
``func(args) -> int``. Bad arguments or input (argparse errors, ``ValueError``) print one line on stderr and
exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that register subcommands, in the order `birder --help` lists them.
COMMAND_MODULES = (
    "birder.report",
    "sim.cli",
    "proofs_checks.cli",
    "gpu_validation.cli",
)


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a single line on stderr and exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse's name
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="birder",
        description="Check, simulate and regression-test Birder, a 1-bit adaptive optimizer.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineErrorParser)
    subparsers.required = True
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as error:
        message = " ".join(str(error).split())
        print(f"birder {args.command}: error: {message}", file=sys.stderr)
        return 2
    except OSError as error:  # a file or directory that cannot be read or written
        print(f"birder {args.command}: error: {error.strerror}: {error.filename}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
