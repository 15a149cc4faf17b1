"""`birder check`: the property suite against birder_ref.algorithm1 or a plugged-in implementation."""

from __future__ import annotations

import argparse

from proofs_checks.runner import dumps, run_checks, table
from proofs_checks.target import DEFAULT_IMPL, load_target


def run(args: argparse.Namespace) -> int:
    target = load_target(args.impl)  # ValueError (not importable) -> one line on stderr, exit 2
    names = [n for n in (args.only or "").split(",") if n] or None
    report = run_checks(target, names=names, parity=args.parity, progress=not args.json)
    print(dumps(report) if args.json else table(report))
    return 0 if report.passed else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "check",
        help="the paper's claims as checks, against the reference or your implementation",
        description="Check an implementation of Birder (quantize, init, step; see CONTRACT.md) against every claim "
                    "of the paper. Exit status 0 if every check holds, 1 if one fails.",
    )
    p.add_argument("--impl", metavar="MODULE[:OBJECT]", default=None,
                   help=f"the implementation to judge (default {DEFAULT_IMPL})")
    p.add_argument("--only", metavar="NAME[,NAME]", help="run only these checks")
    p.add_argument("--parity", action="store_true",
                   help="also require bit-for-bit agreement with birder_ref (not a claim of the paper)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
