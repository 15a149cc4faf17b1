"""What the what-if fits share (``sim.validation.collective_efficiency``, ``sim.validation.multinode_loss``,
``sim.validation.overlap_evidence``): the corpus's rows predicted as its left-out generic predictions are, the
groups their rows are held out in, the commit a fit record names, and the command line that writes the record."""

from __future__ import annotations

import json
import sys

from tqdm import tqdm


def corpus_left_out_predictions(options: dict, progress=None) -> list[tuple]:
    """Every corpus row with a measured node, predicted as its left-out generic prediction is (generic presets, its
    measured node, its source's stored per-step jitter fitted without it) once per entry of ``options`` (a key:
    ``corpus_setup.corpus_predict`` keyword arguments): (row, {key: throughput}). A row the simulator cannot express
    is left out; ``progress`` (a tqdm bar) counts every row tried."""
    from sim.validation.corpus_setup import corpus_predict, corpus_rows
    from sim.validation.stored import stored_step_jitter_fits

    jitter = stored_step_jitter_fits()
    if jitter is None:
        raise ValueError("no stored per-step jitter fits on this corpus: run python -m sim.validation.stored first")
    out = []
    for row in corpus_rows()[0]:
        if row.single_node_throughput is None:
            continue
        try:
            cv = jitter["by_held_out_source"][row.source]
            out.append((row, {key: corpus_predict(row, False, step_jitter_cv=cv, **kwargs).throughput
                              for key, kwargs in options.items()}))
        except ValueError:  # a set-up the simulator cannot express
            continue
        finally:
            if progress is not None:
                progress.update()
    return out


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
