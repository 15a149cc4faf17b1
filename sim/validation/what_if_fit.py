"""What the what-if fits share (``sim.validation.collective_efficiency``, ``sim.validation.multinode_loss``): the
groups their rows are held out in, the commit a fit record names, and the command line that writes the record."""

from __future__ import annotations

import json
import sys

from tqdm import tqdm


def groups_of(rows: list[dict]) -> dict[str, frozenset[str]]:
    """Per source, the sources held out with it, as the stored run holds them out: the corpus's groups joined with
    the first-contact sources' (``leave_one_source_out.joined_groups``)."""
    from sim.validation import first_contact as fc
    from sim.validation.corpus_setup import corpus_rows
    from sim.validation.leave_one_source_out import joined_groups, sources_held_out_together

    logged = {r["source"] for r in rows if r["set"] == "first contact"}
    return joined_groups(sources_held_out_together(corpus_rows()[0]), fc.logged_groups(fc.load_sources(), logged))


def head_commit() -> str:
    """The checkout's HEAD, which a fit record names as the code it was fitted with."""
    from sim.validation.first_contact import _git

    return _git("rev-parse", "HEAD")


def write_fit_record(argv: list[str], module: str, desc: str, collect, report_of, summary_skips: tuple[str, ...]
                     ) -> int:
    """A what-if fit's command line (``python -m MODULE OUT.json``): ``collect(bar)`` predicts its rows under a
    progress bar on a terminal, ``report_of(rows)`` fits and scores them; the record is written atomically to
    OUT.json and printed without its ``summary_skips`` keys. Exit 2 with a usage line for any other arguments."""
    if len(argv) != 1:
        print(f"usage: python -m {module} OUT.json", file=sys.stderr)
        return 2
    from safeio.atomic import write_text

    with tqdm(desc=desc, disable=not sys.stderr.isatty()) as bar:
        rows = collect(bar)
    out = report_of(rows)
    write_text(argv[0], json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in summary_skips}, indent=1))
    return 0
