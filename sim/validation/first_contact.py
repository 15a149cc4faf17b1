"""First contact: the frozen model against published rows it has never seen (issue 27, item 1).

Each row of ``sim/validation/first_contact_rows.csv`` (sources: ``first_contact_sources.toml``) is scored through
the command line exactly as a user would: ``birder predict --json`` with the row's network (the closest built-in
``--network`` or a cluster TOML of ``sim/validation/first_contact_clusters/`` written from the stated hardware),
model (``--model`` or ``--params``), layout, batch, optimizer, gradient dtype, framework and the table's own
1-node figure as ``--single-node-throughput``. Beside it stand two naive baselines on the same rows: linear scaling
and a no-overlap alpha-beta ring with textbook constants (``sim.uncertainty.alpha_beta_throughput``). Rows the CLI
cannot express (an MPI backend, a parameter-server count, a network without a preset) are scored with the nearest
expressible set-up, flagged ``expressible = false`` and summarised apart.

The log ``sim/validation/first_contact.json`` is append-only: ``python -m sim.validation.first_contact score``
appends one entry (the commit whose prediction code scored it, the date, every row, and the figures per source
and pooled, by regime) and never rewrites an earlier one; ``score --no-log`` scores the same way and writes
nothing (a dry run, to compare a change against the log: its figures are no longer first contact).
``first_contact_summary`` is a pure loader of that log for ``birder validate --json`` (key ``first_contact``).
Nothing here is imported by prediction code.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import hashlib
import io
import json
import math
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: sim/validation/first_contact.py
ROWS_PATH = ROOT / "sim" / "validation" / "first_contact_rows.csv"
SOURCES_PATH = ROOT / "sim" / "validation" / "first_contact_sources.toml"
LOG_PATH = ROOT / "sim" / "validation" / "first_contact.json"
CLUSTERS_DIR = "sim/validation/first_contact_clusters/"  # the cluster files written from the sources' hardware
# the code that makes a prediction: a change here means a new model commit (sim/validation holds data and the
# corpus tooling; this file only scores)
PREDICTION_PATHS = ("sim", "birder", "birder_ref", ":(exclude)sim/validation", ":(exclude,glob)**/*.md")
REGIMES = ("compute-bound", "communication-bound")


def load_sources(path: str | Path = SOURCES_PATH) -> dict[str, dict]:
    """The first-contact sources, ``{id: entry}``; ValueError if an entry lacks a key of sources.toml."""
    from sim.validation.corpus import HOW_READ

    data = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("sources", {})
    keys = {"title", "authors", "venue", "year", "url", "how_read", "independent_of", "testbed"}
    for sid, entry in data.items():
        if set(entry) != keys:
            raise ValueError(f"{path}: [sources.{sid}] must have exactly the keys {sorted(keys)}")
        if not str(entry["url"]).startswith("https://"):
            raise ValueError(f"{path}: [sources.{sid}] url must be an https address")
        if entry["how_read"] not in HOW_READ:
            raise ValueError(f"{path}: [sources.{sid}] how_read must be one of {HOW_READ}")
    return data


def load_rows(path: str | Path = ROWS_PATH, sources: dict | None = None) -> list[dict]:
    """The first-contact rows, numbers parsed; ValueError naming the line for a row without a known source, a
    reference, a positive throughput and 1-node figure, or an expressible flag."""
    sources = load_sources() if sources is None else sources
    with open(path, encoding="utf-8", newline="") as handle:
        raw = list(csv.DictReader(handle))
    rows = []
    for line, row in enumerate(raw, start=2):
        where = f"{path}:{line}"
        if row["source"] not in sources:
            raise ValueError(f"{where}: source {row['source']!r} has no entry in {SOURCES_PATH.name}")
        if not row["ref"].startswith("https://"):
            raise ValueError(f"{where}: ref must give the row's address (https URL with commit and line)")
        if row["expressible"] not in ("true", "false") or (row["expressible"] == "false") != bool(
                row["why_not_expressible"]):
            raise ValueError(f"{where}: expressible must be true, or false with why_not_expressible")
        if bool(row["cli_network"]) == bool(row["cli_cluster"]):
            raise ValueError(f"{where}: give exactly one of cli_network and cli_cluster")
        if row["cli_cluster"]:
            cluster_file = (ROOT / row["cli_cluster"]).resolve()
            if not (cluster_file.is_file() and cluster_file.parent == (ROOT / CLUSTERS_DIR).resolve()):
                raise ValueError(f"{where}: cli_cluster must be a file under {CLUSTERS_DIR}, "
                                 f"got {row['cli_cluster']!r}")
        parsed = dict(row)
        for key in ("params", "gpus_per_node", "nodes", "nics_per_node", "batch_per_gpu", "accumulation_steps"):
            parsed[key] = int(row[key])
        for key in ("line_rate_gbps", "throughput", "single_node_throughput"):
            parsed[key] = float(row[key])
            if not (math.isfinite(parsed[key]) and parsed[key] > 0):
                raise ValueError(f"{where}: {key} must be a positive number")
        if parsed["nodes"] < 2:
            raise ValueError(f"{where}: a first-contact row is multi-node (nodes >= 2)")
        if row["single_node_measured"] not in ("true", "false"):
            raise ValueError(f"{where}: single_node_measured must be true (the source's own 1-node figure) or false")
        parsed["expressible"] = row["expressible"] == "true"
        parsed["single_node_measured"] = row["single_node_measured"] == "true"
        own = row.get("single_node_accumulation_steps") or ""  # a row appended without the column has None
        if own and not (own.isdigit() and int(own) >= 1 and int(own) != parsed["accumulation_steps"]):
            raise ValueError(f"{where}: single_node_accumulation_steps must be empty (the 1-node run accumulated as "
                             f"this row does) or the 1-node run's own micro-batches per step, got {own!r}")
        parsed["single_node_accumulation_steps"] = int(own) if own else None
        rows.append(parsed)
    return rows


# a row's stated framework -> the sharded framework a user types (presets/frameworks.toml, pattern "sharded"); the
# first pattern found wins. Rows that also split the model (tensor or pipeline parallel) are not sharded data
# parallel and keep their own mapping.
SHARDED_STATED = (("HYBRID_SHARD", "fsdp-hybrid"), ("SHARD_GRAD_OP", "fsdp-grad-op"), ("ZeRO stage 2", "fsdp-grad-op"),
                  ("FULL_SHARD", "fsdp"), ("fully_shard", "fsdp"), ("PyTorch FSDP", "fsdp"),
                  ("ZeRO stage 3", "fsdp"), ("ZeRO-3", "fsdp"))
MODEL_PARALLEL_STATED = ("tensor parallel", "pipeline", "3D parallel", "model-parallel-size", "tp=2")


def sharded_framework(framework_stated: str) -> str | None:
    """The sharded framework (``fsdp``, ``fsdp-hybrid``, ``fsdp-grad-op``) a row's stated framework names, or None
    (not sharded data parallel, or sharded beside tensor or pipeline parallelism)."""
    if any(word in framework_stated for word in MODEL_PARALLEL_STATED):
        return None
    return next((cli for word, cli in SHARDED_STATED if word in framework_stated), None)


def published_figure(row: dict) -> tuple:
    """What identifies a row, transcribed (``load_rows``) or scored (``score_row``): its published figure (the
    reference, table, node count and throughput), which its CLI mapping may not be (``sharded_framework`` changed
    some after their first contact)."""
    return row["ref"], row["table"], row["nodes"], row["throughput"] if "throughput" in row else row["measured"]


def predict_argv(row: dict) -> list[str]:
    """The ``birder predict`` arguments a user would type for ``row``."""
    argv = ["predict", "--json", "--quiet"]
    argv += ["--cluster", row["cli_cluster"]] if row["cli_cluster"] else ["--network", row["cli_network"]]
    argv += ["--model", row["model"]] if row["model"] else ["--params", str(row["params"])]
    argv += ["--gpu", row["gpu"], "--nodes", str(row["nodes"]), "--gpus-per-node", str(row["gpus_per_node"]),
             "--nics-per-node", str(row["nics_per_node"]), "--batch-per-gpu", str(row["batch_per_gpu"]),
             "--optimizer", row["optimizer"], "--grad-dtype", row["grad_dtype"], "--framework", row["framework"],
             "--accumulation-steps", str(row["accumulation_steps"]),
             "--single-node-throughput", repr(row["single_node_throughput"])]
    if row["single_node_accumulation_steps"] is not None:
        argv += ["--single-node-accumulation-steps", str(row["single_node_accumulation_steps"])]
    if row["intra"] == "pcie" and not row["cli_cluster"]:
        argv += ["--intra", f"{row['gpu']}-pcie"]
    return argv


def normalised_argv(argv: list[str]) -> list[str]:
    """``argv`` with a cluster file given relative to the repository's root (the first entries of the log wrote
    the absolute path of the checkout that scored them)."""
    return [a[a.index(CLUSTERS_DIR):] if CLUSTERS_DIR in a else a for a in argv]


def run_cli(argv: list[str]) -> dict:
    """``birder`` run in this process on ``argv`` (the console script's own entry point; a cluster file of
    ``first_contact_clusters`` found from the repository's root wherever this runs); its JSON object. RuntimeError
    with its stderr if it exits non-zero."""
    from birder.cli import main

    argv = [str(ROOT / a) if a.startswith(CLUSTERS_DIR) else a for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # argparse's usage errors exit; their message is in ``err``
            status = exit_.code if isinstance(exit_.code, int) else 2
    if status:
        raise RuntimeError(f"birder {' '.join(argv)} exited {status}: {err.getvalue().strip()}")
    try:
        return json.loads(out.getvalue())
    except json.JSONDecodeError as error:  # such as a what-if's --help, which exits 0
        raise RuntimeError(f"birder {' '.join(argv)} printed no JSON object: {out.getvalue()[:200]!r}") from error


def model_params(row: dict) -> int:
    """Parameters the alpha-beta baseline sends: the built-in profile's count for ``--model``, else ``params``."""
    if not row["model"]:
        return row["params"]
    from sim.models import model_profile

    return model_profile(row["model"]).n_params


def with_options(argv: list[str], options: list[str]) -> list[str]:
    """``argv`` with ``options`` (``--name value`` pairs and bare ``--flag``s): an option ``argv`` already gives
    takes the new value in its place (the CLI refuses one given twice with different values), others are added.
    ValueError for an option not of the form ``--name``, and for one that ``argv`` gives with a value but
    ``options`` without (or the other way round): it would not say what the what-if changes."""
    argv, i = list(argv), 0
    while i < len(options):
        name = options[i]
        if not name.startswith("--") or "=" in name:
            raise ValueError(f"what-if options are given as --name value or --flag, got {name!r}")
        value = options[i + 1:i + 2] if i + 1 < len(options) and not options[i + 1].startswith("--") else []
        if name in argv:
            at = argv.index(name)
            if (at + 1 < len(argv) and not argv[at + 1].startswith("--")) != bool(value):
                raise ValueError(f"what-if {name} {'takes no value' if value else 'needs a value'} here")
            if value:
                argv[at + 1] = value[0]
        else:
            argv += [name, *value]
        i += 1 + len(value)
    return argv


def score_row(row: dict, what_if: list[str] = ()) -> dict:
    """One row scored: the CLI's prediction, interval and interval regime (an alpha-beta ring with the simulator's
    incast stalls: ``sim.validation.corpus_setup.row_interval_regime``'s rule, as ``birder predict`` keys its
    interval), the two baselines and the measured regime; ``what_if``: options put in place of the row's own
    (``with_options``)."""
    from sim.uncertainty import alpha_beta_throughput, gradient_bits, regime_of_efficiency

    argv = with_options(predict_argv(row), list(what_if))
    out = run_cli(argv)
    linear = row["nodes"] * row["single_node_throughput"]
    samples_per_node = row["gpus_per_node"] * row["batch_per_gpu"] * row["accumulation_steps"]
    ring = alpha_beta_throughput(model_params(row), gradient_bits(row["optimizer"], row["grad_dtype"]), row["nodes"],
                                 samples_per_node, row["single_node_throughput"],
                                 row["line_rate_gbps"] * 1e9 * row["nics_per_node"] / 8)
    return {"source": row["source"], "ref": row["ref"], "table": row["table"], "nodes": row["nodes"],
            "gpus_per_node": row["gpus_per_node"], "expressible": row["expressible"],
            "why_not_expressible": row["why_not_expressible"], "argv": argv, "measured": row["throughput"],
            "predicted": out["throughput"], "low": out["throughput_low"], "high": out["throughput_high"],
            "linear": linear, "alpha_beta": ring, "interval_regime": out["interval_regime"],
            "measured_regime": regime_of_efficiency(row["throughput"] / linear)}


def _ape(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured


def figures(scored: list[dict], by_regime: bool = True) -> dict:
    """Median and mean absolute % error of the simulator and both baselines, 80% coverage and the median
    half-width of the interval (half its width over the prediction); by the interval regime (alpha-beta ring with
    the simulator's incast stalls, the project's rule: known before measuring) and by the measured regime (linear
    scaling more than 15% above the measurement) when ``by_regime``."""
    if not scored:
        return {"rows": 0}

    def errors(key):
        values = [_ape(s[key], s["measured"]) for s in scored]
        return {"median": statistics.median(values), "mean": statistics.fmean(values)}

    out = {"rows": len(scored), "error": errors("predicted"),
           "coverage": sum(s["low"] <= s["measured"] <= s["high"] for s in scored) / len(scored),
           "median_half_width": statistics.median((s["high"] - s["low"]) / 2 / s["predicted"] for s in scored),
           "linear": errors("linear"), "alpha_beta": errors("alpha_beta"),
           "measured_communication_bound": sum(s["measured_regime"] == REGIMES[1] for s in scored)}
    if by_regime:
        out["by_regime"] = {r: figures([s for s in scored if s["interval_regime"] == r], False) for r in REGIMES}
        out["by_measured_regime"] = {r: figures([s for s in scored if s["measured_regime"] == r], False)
                                     for r in REGIMES}
    return out


def summarise(scored: list[dict]) -> dict:
    """Per source and pooled: every row, the expressible ones and the others apart."""
    def split(rows):
        return {"all": figures(rows), "expressible": figures([s for s in rows if s["expressible"]]),
                "not_expressible": figures([s for s in rows if not s["expressible"]])}

    sources = sorted({s["source"] for s in scored})
    return {"pooled": split(scored), "sources": {sid: split([s for s in scored if s["source"] == sid])
                                                 for sid in sources}}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def model_commit(dry_run: bool = False) -> str:
    """The commit whose prediction code scores now: the fork point from ``main`` if no prediction file differs
    from it (committed or not), else HEAD (which must then hold every change: refused if one is uncommitted, but
    for a ``dry_run``, which logs nothing: HEAD with "+uncommitted")."""
    head = _git("rev-parse", "HEAD")
    try:
        base = _git("merge-base", "HEAD", "main")
    except subprocess.CalledProcessError:
        base = head
    if not _git("diff", "--name-only", base, "--", *PREDICTION_PATHS):
        return base
    if _git("status", "--porcelain", "--", *PREDICTION_PATHS):
        if dry_run:
            return f"{head}+uncommitted"
        raise ValueError("prediction code has uncommitted changes: commit them before scoring")
    return head


def read_log(path: str | Path = LOG_PATH) -> list[dict]:
    """The log's entries, oldest first ([] if there is no log)."""
    path = Path(path)
    if not path.exists():
        return []
    entries = json.loads(path.read_text(encoding="utf-8")).get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected an object with a list 'entries'")
    return entries


def print_log_report(module: str, report, argv: list[str] | None = None) -> int:
    """The command line of a module that reads the log and predicts nothing: no argument, ``report(read_log())``
    printed as JSON (exit 0); with any argument, its usage on stderr (exit 2)."""
    if (sys.argv[1:] if argv is None else argv):
        print(f"usage: python -m {module}", file=sys.stderr)
        return 2
    print(json.dumps(report(read_log()), indent=1))
    return 0


def append_entry(entry: dict, path: str | Path = LOG_PATH) -> None:
    """Append ``entry`` to the log, written atomically; earlier entries are kept byte for byte in content."""
    from safeio.atomic import write_text

    entries = read_log(path) + [entry]
    write_text(path, json.dumps({"entries": entries}, indent=1) + "\n")


def score(rows_path: str | Path = ROWS_PATH, log_path: str | Path = LOG_PATH, progress: bool = True,
          only: list[str] | None = None, log: bool = True, what_if: list[str] | None = None) -> dict:
    """Score every row (or the rows of the sources ``only``: a new source's first contact), append the entry to
    the log (unless ``log`` is false: a dry run that writes nothing) and return it. ``what_if``: ``birder
    predict`` options added to every row's (a dry run only: what the shipped model does not do is never logged)."""
    if what_if and log:
        raise ValueError("a what-if (options beyond the rows' own) is a dry run: add --no-log")
    rows = load_rows(rows_path)
    if only:
        unknown = set(only) - {row["source"] for row in rows}
        if unknown:
            raise ValueError(f"no rows of {', '.join(sorted(unknown))} in {rows_path}")
        rows = [row for row in rows if row["source"] in only]
    commit = model_commit(dry_run=not log)
    scored = []
    for i, row in enumerate(rows, start=1):
        scored.append(score_row(row, what_if or []))
        if progress:
            print(f"\r{i}/{len(rows)} rows scored", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    entry = {"model_commit": commit, "scored_at": _git("rev-parse", "HEAD"),
             "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
             "command": "python -m sim.validation.first_contact score",
             "rows_file": str(Path(rows_path).resolve().relative_to(ROOT)),
             "rows_sha256": hashlib.sha256(Path(rows_path).read_bytes()).hexdigest(),
             **summarise(scored), "rows": scored}
    if log:
        append_entry(entry, log_path)
    return entry


def first_contact_batches(entries: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Each entry that scored sources for the first time, in log order, with those sources' rows (its re-scored
    rows of sources seen before left out)."""
    seen: set[str] = set()
    batches = []
    for entry in entries:
        new = set(entry["sources"]) - seen
        seen |= new
        if new:
            batches.append((entry, [r for r in entry["rows"] if r["source"] in new]))
    return batches


def first_contact_rows(entries: list[dict]) -> list[dict]:
    """Every source's rows as its FIRST entry scored them (later re-scores left out)."""
    return [r for _, rows in first_contact_batches(entries) for r in rows]


def first_contact_summary(path: str | Path = LOG_PATH, rows_path: str | Path = ROWS_PATH) -> dict:
    """``birder validate --json``'s ``first_contact``: per source, its FIRST scoring (the commit that predicted
    it before any change, rows, error, coverage, by regime, beside linear scaling and the alpha-beta ring) and the
    commits of any later re-scores; ``pooled``: the figures of every source's first-contact rows together;
    ``pooled_own_single_node``: the same on the rows whose source published the 1-node figure itself (the others
    multiply a 1-GPU or half-node figure: ``single_node_measured`` in the rows file). A pure loader of the log and
    the rows file: nothing is predicted."""
    entries = read_log(path)
    resolved = Path(path).resolve()
    out: dict = {"log": str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path),
                 "sources": {}, "pooled": None}
    for entry in entries:
        for sid, figs in entry["sources"].items():
            if sid in out["sources"]:
                out["sources"][sid]["rescored_at"].append({"model_commit": entry["model_commit"],
                                                           "date": entry["date"]})
            else:
                out["sources"][sid] = {"model_commit": entry["model_commit"], "date": entry["date"], **figs,
                                       "rescored_at": []}
    rows = first_contact_rows(entries)
    if rows:
        commits = sorted({out["sources"][s]["model_commit"] for s in out["sources"]})
        out["pooled"] = {"model_commits": commits, **summarise(rows)["pooled"]}
        own = {published_figure(r) for r in load_rows(rows_path) if r["single_node_measured"]}
        mine = [r for r in rows if published_figure(r) in own]
        out["pooled_own_single_node"] = {"model_commits": commits, **summarise(mine)["pooled"]}
        # each batch apart: the rows first scored by one model commit (a later batch meets a changed model)
        batches = {}
        for sid, figs in sorted(out["sources"].items(), key=lambda item: item[1]["date"]):
            batches.setdefault(figs["model_commit"], {"date": figs["date"], "sources": []})["sources"].append(sid)
        out["batches"] = [{"model_commit": commit, **batch,
                           **figures([r for r in rows if r["source"] in batch["sources"]])}
                          for commit, batch in batches.items()]
    return out


def calibration_rows(log_path: str | Path = LOG_PATH, rows_path: str | Path = ROWS_PATH,
                     sources_path: str | Path = SOURCES_PATH) -> dict:
    """The first-contact rows that join the corpus in calibrating the intervals (``sim.validation.stored``): those
    of every source whose first contact is logged, and no other (a source not yet scored stays unseen by every
    fit). Each predicted now through the command line as ``score_row`` does: its source, interval regime,
    normalised residual (``sim.uncertainty.normalised_residual`` with the prediction's propagated widths,
    ``interval_model_width``) and the same of linear scaling (the interval's cap), its measured regime and the
    numbers that make its interval. ``groups``: per source, the sources held out with it (itself and those its
    ``independent_of`` names, either way, corpus sources included)."""
    from sim.uncertainty import normalised_residual, regime_of_efficiency

    sources = load_sources(sources_path)
    out = []
    for row, p in logged_rows_predicted([], log_path=log_path, rows_path=rows_path, sources=sources):
        down, up = p["interval_model_width"]
        linear = row["nodes"] * row["single_node_throughput"]
        out.append({"source": row["source"], "regime": p["interval_regime"],
                    "log_ratio": normalised_residual(math.log(row["throughput"] / p["throughput"]), down, up),
                    "cap": normalised_residual(math.log(linear / p["throughput"]), down, up),
                    "measured_regime": regime_of_efficiency(row["throughput"] / linear), "down": down, "up": up,
                    "predicted": p["throughput"], "measured": row["throughput"], "linear": linear})
    logged = logged_sources(log_path)
    return {"sources": sorted(logged), "rows": out, "groups": logged_groups(sources, logged)}


def logged_sources(log_path: str | Path = LOG_PATH) -> set[str]:
    """The sources whose first contact is logged."""
    return {r["source"] for r in first_contact_rows(read_log(log_path))}


def logged_rows_predicted(extra_argv: list[str], progress=None, log_path: str | Path = LOG_PATH,
                          rows_path: str | Path = ROWS_PATH, sources: dict | None = None) -> list[tuple[dict, dict]]:
    """(row, its ``birder predict --json`` with ``extra_argv`` added) for every row of a source whose first contact
    is logged: what the interval calibration (``calibration_rows``) and a what-if fit (``collective_efficiency``,
    ``multinode_loss``) read."""
    logged = logged_sources(log_path)
    out = []
    for row in load_rows(rows_path, sources):
        if row["source"] in logged:
            out.append((row, run_cli(predict_argv(row) + list(extra_argv))))
            if progress is not None:
                progress.update()
    return out


def logged_groups(sources: dict, logged: set[str]) -> dict[str, list[str]]:
    """Per source, the sources held out with it among the logged ones' links: itself and those its
    ``independent_of`` names, either way (corpus sources included)."""
    links = {sid: {sid, *sources[sid]["independent_of"]} for sid in sorted(logged)}
    for sid in sorted(logged):
        for other in sources[sid]["independent_of"]:
            links.setdefault(other, {other}).add(sid)
    return {k: sorted(v) for k, v in sorted(links.items())}


def latest_rescore(entries: list[dict]) -> dict | None:
    """The log's latest re-score of rows already seen: the last entry that scores a source seen before it, with
    only those sources' rows and figures where it also met a new source (that source's first contact, no
    re-score), or None."""
    seen, latest = set(), None
    for entry in entries:
        again = set(entry["sources"]) & seen
        if again and again == set(entry["sources"]):
            latest = entry
        elif again:
            rows = [r for r in entry["rows"] if r["source"] in again]
            latest = {**entry, **summarise(rows), "rows": rows}
        seen |= set(entry["sources"])
    return latest


def plot(path: str | Path, log_path: str | Path = LOG_PATH) -> Path:
    """Every source's first-contact rows: prediction / measurement with its 80% interval against the measured
    scale efficiency (throughput over nodes x the 1-node figure), one marker per source, hollow where the CLI could
    not express the set-up, beside the alpha-beta ring's ratio (grey); written atomically as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from safeio.atomic import atomic_path

    rows = first_contact_rows(read_log(log_path))
    if not rows:
        raise ValueError(f"no entries in {log_path}")
    fig, ax = plt.subplots(figsize=(13, 6))
    markers = "osD^vP*Xh<>"
    for i, source in enumerate(sorted({r["source"] for r in rows})):
        mine = [r for r in rows if r["source"] == source]
        for expressible in (True, False):
            pick = [r for r in mine if r["expressible"] == expressible]
            if not pick:
                continue
            x = [r["measured"] / r["linear"] for r in pick]
            y = [r["predicted"] / r["measured"] for r in pick]
            err = [[yi - r["low"] / r["measured"] for yi, r in zip(y, pick, strict=True)],
                   [r["high"] / r["measured"] - yi for yi, r in zip(y, pick, strict=True)]]
            ax.errorbar(x, y, yerr=err, fmt=markers[i % len(markers)], color=f"C{i}", capsize=2, alpha=0.8,
                        mfc=f"C{i}" if expressible else "none",
                        label=f"{source} ({len(mine)})" if expressible or not any(r["expressible"] for r in mine)
                        else None)
        ax.scatter([r["measured"] / r["linear"] for r in mine], [r["alpha_beta"] / r["measured"] for r in mine],
                   marker="_", color="0.5", s=30, zorder=0)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axvline(1 / 1.15, color="0.6", ls=":", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("measured scale efficiency (throughput / (nodes x 1-node figure)); left of the dotted line: "
                  "communication-bound", fontsize=8)
    ax.set_ylabel("predicted / measured (80% interval); grey dash: alpha-beta ring")
    ax.set_title(f"First contact: {len(rows)} published rows the frozen model never saw (hollow: not expressible)",
                 fontsize=10)
    # below the axes, the canvas grown to hold it: with ~100 sources a legend inside would hide the rows near
    # linear scaling, and one beside them would need more columns than the figure is wide
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, borderaxespad=0.0)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(entry: dict) -> str:
    """Figures (an entry's, or ``first_contact_summary``'s) as a table: pooled and per source, every row, the
    expressible and the others, by regime, beside the baselines."""
    lines = ["| source | set | regime | rows | median err | mean err | coverage | median half-width | "
             "linear median/mean | alpha-beta median/mean |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def add(name, kind, regime, f):
        if not f.get("rows"):
            return
        lines.append(f"| {name} | {kind} | {regime} | {f['rows']} | {_percent(f['error']['median'])} | "
                     f"{_percent(f['error']['mean'])} | {_percent(f['coverage'])} | "
                     f"{_percent(f['median_half_width'])} | {_percent(f['linear']['median'])} / "
                     f"{_percent(f['linear']['mean'])} | {_percent(f['alpha_beta']['median'])} / "
                     f"{_percent(f['alpha_beta']['mean'])} |")

    blocks = [("pooled", entry["pooled"])]
    if "pooled_own_single_node" in entry:
        blocks.append(("pooled, own 1-node figure", entry["pooled_own_single_node"]))
    for name, split in [*blocks, *sorted(entry["sources"].items())]:
        for kind in ("all", "expressible", "not_expressible"):
            f = split[kind]
            add(name, kind, "all", f)
            for regime, fr in f.get("by_regime", {}).items():
                add(name, kind, f"{regime} (alpha-beta)", fr)
            for regime, fr in f.get("by_measured_regime", {}).items():
                add(name, kind, f"{regime} (measured)", fr)
    return "\n".join(lines)


def headline_lines(summary: dict, latest: dict | None = None, left_out: dict | None = None) -> list[str]:
    """``birder validate``'s first lines: the first-contact figures (``first_contact_summary``) pooled, by measured
    regime, per batch (the rows one model commit met first) and per source, each beside linear scaling and the
    alpha-beta ring; then the latest re-score of rows already seen (``latest``: ``latest_rescore`` of the log), which
    is no longer first contact; then (``left_out``: the stored run's ``first_contact_left_out``) the intervals of
    those rows with each source's group left out of the calibration they now join."""
    def line(name: str, f: dict) -> str:
        return (f"  {name}: {f['rows']} rows, median error {_percent(f['error']['median'])} (linear "
                f"{_percent(f['linear']['median'])}, alpha-beta {_percent(f['alpha_beta']['median'])}), 80% interval "
                f"covers {_percent(f['coverage'])}, median half-width {_percent(f['median_half_width'])}")

    pooled = summary["pooled"]["all"]
    commits = ", ".join(c[:7] for c in summary["pooled"]["model_commits"])
    out = [f"first contact: published rows the model had never seen, scored before any change for them (model "
           f"{commits}; {summary['log']})", line("pooled", pooled)]
    out += [line(f"pooled, {regime} (measured)", f) for regime, f in pooled["by_measured_regime"].items()
            if f.get("rows")]
    for batch in summary.get("batches", []):
        out.append(f"  batch first scored by model {batch['model_commit'][:7]} ({batch['date'][:10]}, "
                   f"{len(batch['sources'])} sources):")
        out += [line(f"  {name}", f) for name, f in [("all", batch), *[
            (f"{regime} (measured)", f) for regime, f in batch["by_measured_regime"].items() if f.get("rows")]]]
    out += [line(sid, figs["all"]) for sid, figs in sorted(summary["sources"].items())]
    if latest is not None:
        now = latest["pooled"]["all"]
        rows = "the same rows" if set(latest["sources"]) == set(summary["sources"]) else (
            f"the rows of {len(latest['sources'])} of these sources")
        out.append(f"{rows} re-scored by model {latest['model_commit'][:7]} ({latest['date']}; after the model "
                   "was changed having seen them, so not first contact):")
        out.append(line("pooled", now))
        out += [line(f"pooled, {regime} (measured)", f) for regime, f in now["by_measured_regime"].items()
                if f.get("rows")]
    if left_out:
        def cover(name: str, f: dict) -> str:
            return (f"  {name}: {f['rows']} rows, 80% interval covers {_percent(f['coverage'])}, median half-width "
                    f"{_percent(f['median_half_width'])}")

        out.append(f"their intervals with each source left out of the calibration they now join beside the corpus "
                   f"({left_out['rows']} rows of {left_out['sources']} sources; sim/presets/cross_validation.json):")
        out += [cover("pooled", left_out)] + [cover(f"pooled, {regime} (measured)", f)
                                               for regime, f in left_out["by_measured_regime"].items() if f["rows"]]
    return out


def stored_left_out() -> dict | None:
    """The stored run's intervals of the first-contact rows that calibrate beside the corpus, each source's group
    left out (``CorpusValidation.calibration_extra_figures``), or None."""
    from sim.uncertainty import stored_intervals

    return stored_intervals()["summary"].get("first_contact_left_out")


def readme_block(log_path: str | Path = LOG_PATH) -> str:
    """The README's first-contact figures (``headline_lines`` of the log), as printed by ``birder validate``."""
    return "```\n" + "\n".join(headline_lines(first_contact_summary(log_path), latest_rescore(read_log(log_path)),
                                               stored_left_out())) + "\n```"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dry_run = argv[:1] == ["score"] and "--no-log" in argv
    if dry_run:
        argv = [a for a in argv if a != "--no-log"]
    what_if = []
    if dry_run and "--what-if" in argv:  # everything after it goes to birder predict
        at = argv.index("--what-if")
        argv, what_if = argv[:at], argv[at + 1:]
    if argv[:1] == ["score"] and all(a == "--source" for a in argv[1::2]) and len(argv) % 2 == 1:
        try:
            entry = score(progress=sys.stderr.isatty(), only=argv[2::2] or None, log=not dry_run, what_if=what_if)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(markdown(entry))
        return 0
    if argv == ["show"]:
        summary = first_contact_summary()
        if summary["pooled"] is None:
            print(f"no entries in {LOG_PATH}", file=sys.stderr)
            return 2
        print(markdown(summary))
        return 0
    if argv == ["readme"]:
        print(readme_block())
        return 0
    if len(argv) == 2 and argv[0] == "plot" and argv[1].endswith(".png"):
        print(plot(argv[1]))
        return 0
    print("usage: python -m sim.validation.first_contact score [--no-log] [--source ID ...] "
          "[--what-if PREDICT-OPTIONS (with --no-log)] | show | readme | plot OUT.png", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
