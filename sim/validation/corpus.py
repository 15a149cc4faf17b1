"""The validation corpus: published multi-node training throughputs, each row with its source.

``corpus.csv`` holds one published measurement per row (column meanings: sim/validation/README.md);
``sources.toml`` holds one ``[sources.ID]`` table per source a row may name. ``load_corpus()`` reads and checks
both and returns the rows; ``load_sources()`` returns the sources. A bad file is refused with one ValueError
naming the file, the row and the column. ``regime(row)`` classifies a row as the issue's report does.
"""

from __future__ import annotations

import csv
import math
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from safeio.inputs import read_text_bounded
from sim.hardware import MAX_LINE_RATE_GBPS, check_measured_rate
from sim.models import MODELS, model_profile
from sim.uncertainty import regime_of_efficiency

HERE = Path(__file__).resolve().parent
CORPUS_CSV = HERE / "corpus.csv"
SOURCES_TOML = HERE / "sources.toml"

COLUMNS = ("source", "table", "model", "params", "gpu", "gpus_per_node", "intra", "nodes", "line_rate_gbps",
           "transport", "nics_per_node", "measured_link_gbps", "framework", "comm_library", "optimizer", "precision",
           "batch_per_gpu", "throughput", "single_node_throughput", "notes")
OPTIONAL_COLUMNS = ("measured_link_gbps",)  # a file may leave these out of its header (every row: empty)
INTRA = ("nvlink", "pcie")
TRANSPORTS = ("tcp", "ib", "roce")
PRECISIONS = ("fp32", "fp16", "amp", "bf16")
HOW_READ = ("table", "text", "figure, read off the plot", "issue thread")
SOURCE_KEYS = ("title", "authors", "venue", "year", "url", "how_read", "independent_of", "testbed")
TOKEN = re.compile(r"^[a-z0-9][a-z0-9.+_-]*$")  # gpu, framework, comm_library, optimizer: lower-case names
PARAMS_TOLERANCE = 0.05  # a row's parameter count may differ this much from the simulator's model profile
MAX_SCALING_EFFICIENCY = 1.5  # above 1.5 x nodes x single-node: refused as a transcription error (the highest
# published row, DeepSpeed's SQuAD on InfiniBand with 1-bit Adam, is 1.40 x: its single-node point is low)
MAX_FILE_BYTES = 16 << 20  # the shipped corpus is ~0.2 MB; a bounded read never hangs on a device such as /dev/zero
GRAD_ACCUM = re.compile(r"\bgrad_accum=(\d+)\b")  # in notes: micro-batches per all-reduce (absent: 1)
PARAMETER_SERVERS = re.compile(r"\bparameter_servers=(\d+)\b")  # in notes: servers a push-pull run used
WARMUP = re.compile(r"\bwarmup_fraction=(\d+(?:\.\d+)?)\b")  # in notes: 1-bit Adam's uncompressed share of the steps
# measured (absent: the simulator's default for the model)
CLOUD = re.compile(r"\bcloud=([a-z0-9-]+)\b")  # in notes: the cloud whose instances ran the row (absent: none)
PLACEMENT_GROUP = re.compile(r"\bplacement_group=(yes|no)\b")  # in notes: stated by the source (absent: unknown)
CLOUDS = ("ec2",)  # clouds a row may name: Amazon EC2 (its network presets in sim/presets/networks.toml, ec2-*)
# what may have measured a row's link rate host to host; the notes must name it
LINK_TOOLS = ("iperf", "perftest", "ib_write_bw", "ib_send_bw", "netperf", "qperf")


@dataclass(frozen=True)
class PublishedRow:
    source: str
    table: str
    model: str
    params: int
    gpu: str
    gpus_per_node: int
    intra: str
    nodes: int
    line_rate_gbps: float
    transport: str
    nics_per_node: int
    measured_link_gbps: float | None  # Gb/s per NIC the source measured host to host (empty: not stated)
    framework: str
    comm_library: str
    optimizer: str
    precision: str
    batch_per_gpu: int
    throughput: float
    single_node_throughput: float | None
    notes: str

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def grad_accum(self) -> int:
        """Micro-batches of ``batch_per_gpu`` per all-reduce, from ``grad_accum=N`` in the notes (absent: 1)."""
        found = GRAD_ACCUM.search(self.notes)
        return int(found.group(1)) if found else 1

    @property
    def parameter_servers(self) -> int:
        """Parameter / summation servers of a push-pull run, from ``parameter_servers=N`` in the notes (absent: 0,
        the framework's own rule, sim.system.summation_servers)."""
        found = PARAMETER_SERVERS.search(self.notes)
        return int(found.group(1)) if found else 0

    @property
    def warmup_fraction(self) -> float | None:
        """Share of the measured steps that ran 1-bit Adam's uncompressed warm-up, from ``warmup_fraction=F`` in
        the notes (0: the compression stage alone; absent: None, the simulator's default)."""
        found = WARMUP.search(self.notes)
        return float(found.group(1)) if found else None

    @property
    def cloud(self) -> str | None:
        """The cloud whose instances ran the row, from ``cloud=NAME`` in the notes (absent: None, own hardware)."""
        found = CLOUD.search(self.notes)
        return found.group(1) if found else None

    @property
    def placement_group(self) -> bool | None:
        """Whether the source states its instances were in one cluster placement group, from
        ``placement_group=yes|no`` in the notes (absent: None, not stated)."""
        found = PLACEMENT_GROUP.search(self.notes)
        return None if found is None else found.group(1) == "yes"


@dataclass(frozen=True)
class Source:
    id: str
    title: str
    authors: str
    venue: str
    year: int
    url: str
    how_read: str
    independent_of: tuple[str, ...]
    testbed: str


def regime(row: PublishedRow) -> str | None:
    """A measured row's regime (``regime_of_efficiency`` of its scale efficiency); None for a row without a
    single-node figure."""
    if row.single_node_throughput is None:
        return None
    return regime_of_efficiency(row.throughput / (row.nodes * row.single_node_throughput))


def independent_groups(sources: dict[str, Source]) -> list[tuple[str, ...]]:
    """Sources joined by ``independent_of`` (in either direction), as connected groups in file order: the units a
    leave-one-source-out report leaves out together when it wants independent evidence."""
    groups: list[set[str]] = []
    for sid, source in sources.items():
        linked = {sid, *source.independent_of}
        for group in [g for g in groups if g & linked]:
            groups.remove(group)
            linked |= group
        groups.append(linked)
    order = list(sources)
    return sorted((tuple(sorted(g, key=order.index)) for g in groups), key=lambda g: order.index(g[0]))


def totals_line(rows: tuple[PublishedRow, ...], sources: dict[str, Source]) -> str:
    """The corpus in one sentence (the README's "Total:" line)."""
    comm = sum(regime(row) == "communication-bound" for row in rows)
    return (f"Total: {len(rows)} rows from {len(sources)} sources in {len(independent_groups(sources))} "
            f"independent groups; {comm} communication-bound.")


def load_sources(path: str | Path | None = None) -> dict[str, Source]:
    """The ``[sources.ID]`` tables of ``path`` (default: the shipped sources.toml), by id. ValueError naming the
    source and key for a missing or unknown key, an unknown ``how_read`` or an ``independent_of`` id that has
    no entry."""
    path = Path(path) if path is not None else SOURCES_TOML
    try:
        data = tomllib.loads(read_text_bounded(path, MAX_FILE_BYTES, "sources file"))
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: cannot read the sources ({err})") from None
    tables = data.get("sources")
    if not isinstance(tables, dict) or not tables or set(data) != {"sources"}:
        raise ValueError(f"{path}: expected only [sources.ID] tables, found {sorted(data)}")
    sources = {}
    for sid, entry in tables.items():
        where = f"{path}: [sources.{sid}]"
        if not TOKEN.match(sid):
            raise ValueError(f"{where}: an id is lower-case letters, digits, '.', '+', '_' or '-'")
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: not a table")
        unknown, missing = set(entry) - set(SOURCE_KEYS), set(SOURCE_KEYS) - set(entry)
        if unknown or missing:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
        for key in SOURCE_KEYS:
            value = entry[key]
            if key == "year":
                if not isinstance(value, int) or not 1990 <= value <= 2100:
                    raise ValueError(f"{where}: year must be an integer year, got {value!r}")
            elif key == "independent_of":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"{where}: independent_of must be a list of source ids")
            elif not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where}: {key} must be a non-empty string")
        if entry["how_read"] not in HOW_READ:
            raise ValueError(f"{where}: how_read must be one of {HOW_READ}, got {entry['how_read']!r}")
        if not entry["url"].startswith("https://"):
            raise ValueError(f"{where}: url must be an https:// address")
        sources[sid] = Source(sid, entry["title"], entry["authors"], entry["venue"], entry["year"], entry["url"],
                              entry["how_read"], tuple(entry["independent_of"]), entry["testbed"])
    for source in sources.values():
        for other in source.independent_of:
            if other not in sources or other == source.id:
                raise ValueError(f"{path}: [sources.{source.id}]: independent_of names {other!r}, "
                                 "which is not another source of the file")
    return sources


def _positive(text: str, column: str, integer: bool) -> int | float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "a positive integer" if integer else "a positive number"
        raise ValueError(f"column {column}: {text!r} is not {kind}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"column {column}: {text!r} is not positive and finite")
    return value


def _parse_row(record: dict[str, str], sources: dict[str, Source]) -> PublishedRow:
    values: dict[str, object] = {}
    for column in COLUMNS:
        text = record[column].strip()
        if column in ("single_node_throughput", "measured_link_gbps") and text == "":
            values[column] = None
        elif column in ("params", "gpus_per_node", "nodes", "nics_per_node", "batch_per_gpu"):
            values[column] = _positive(text, column, integer=True)
        elif column in ("line_rate_gbps", "measured_link_gbps", "throughput", "single_node_throughput"):
            values[column] = _positive(text, column, integer=False)
        else:
            values[column] = text
    row = PublishedRow(**values)
    if row.source not in sources:
        raise ValueError(f"column source: {row.source!r} has no [sources.{row.source}] entry in sources.toml")
    if not row.table:
        raise ValueError("column table: empty (say where in the source the row is)")
    if row.model not in MODELS:
        raise ValueError(f"column model: {row.model!r} is not a model of sim/models.py ({', '.join(MODELS)})")
    known = model_profile(row.model).n_params
    if abs(row.params - known) > PARAMS_TOLERANCE * known:
        raise ValueError(f"column params: {row.params} is more than {PARAMS_TOLERANCE:.0%} away from "
                         f"{row.model}'s {known} parameters in sim/models.py")
    for column in ("gpu", "framework", "comm_library", "optimizer"):
        if not TOKEN.match(getattr(row, column)):
            raise ValueError(f"column {column}: {getattr(row, column)!r} is not a lower-case name")
    for column, allowed in (("intra", INTRA), ("transport", TRANSPORTS), ("precision", PRECISIONS)):
        if getattr(row, column) not in allowed:
            raise ValueError(f"column {column}: {getattr(row, column)!r} is not one of {', '.join(allowed)}")
    if len(GRAD_ACCUM.findall(row.notes)) > 1 or row.grad_accum < 1:
        raise ValueError(f"column notes: grad_accum=N must appear at most once, with N >= 1 ({row.notes[:60]!r}...)")
    servers = PARAMETER_SERVERS.findall(row.notes)
    if len(servers) > 1 or any(int(n) < 1 for n in servers):
        raise ValueError("column notes: parameter_servers=N must appear at most once, with N >= 1 "
                         f"({row.notes[:60]!r}...)")
    warmups = WARMUP.findall(row.notes)
    if len(warmups) > 1 or (warmups and not 0 <= float(warmups[0]) < 1):
        raise ValueError(f"column notes: warmup_fraction=F must appear at most once, with 0 <= F < 1 "
                         f"({row.notes[:60]!r}...)")
    clouds = CLOUD.findall(row.notes)
    if len(clouds) > 1 or any(cloud not in CLOUDS for cloud in clouds):
        raise ValueError(f"column notes: cloud=NAME must appear at most once, NAME one of {', '.join(CLOUDS)} "
                         f"({row.notes[:60]!r}...)")
    if len(PLACEMENT_GROUP.findall(row.notes)) > (1 if clouds else 0):
        raise ValueError("column notes: placement_group=yes|no must appear at most once, and only with cloud=NAME "
                         f"({row.notes[:60]!r}...)")
    if row.nodes < 2:
        raise ValueError(f"column nodes: {row.nodes} is not a multi-node measurement (nodes >= 2)")
    if row.line_rate_gbps > MAX_LINE_RATE_GBPS:
        raise ValueError(f"column line_rate_gbps: {row.line_rate_gbps} Gb/s per NIC is not physical")
    if row.measured_link_gbps is not None:
        check_measured_rate(row.measured_link_gbps, row.line_rate_gbps, "column measured_link_gbps")
        if not any(tool in row.notes.lower() for tool in LINK_TOOLS):
            raise ValueError(f"column measured_link_gbps: the notes must say what measured it (one of "
                             f"{', '.join(LINK_TOOLS)})")
    if row.single_node_throughput is not None:
        linear = row.nodes * row.single_node_throughput
        if row.throughput > MAX_SCALING_EFFICIENCY * linear:
            raise ValueError(f"column throughput: {row.throughput:g} is more than {MAX_SCALING_EFFICIENCY} x "
                             f"linear scaling ({row.nodes} x {row.single_node_throughput:g})")
    return row


def load_corpus(path: str | Path | None = None, sources_path: str | Path | None = None
                ) -> tuple[PublishedRow, ...]:
    """The rows of ``path`` (default: the shipped corpus.csv), checked against ``sources_path``. ValueError
    naming the file, the row (its line number) and the column for an unknown, missing or duplicate column, a
    source without an entry, an unknown model, a non-physical value, or a set-up that a source repeats."""
    path = Path(path) if path is not None else CORPUS_CSV
    sources = load_sources(sources_path)
    text = read_text_bounded(path, MAX_FILE_BYTES, "corpus file")
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{path}: empty file")
    header = [name.strip() for name in header]
    duplicate = sorted({name for name in header if header.count(name) > 1})
    unknown = [name for name in header if name not in COLUMNS]
    missing = [name for name in COLUMNS if name not in header and name not in OPTIONAL_COLUMNS]
    if duplicate or unknown or missing:
        raise ValueError(f"{path}: line 1: duplicate columns {duplicate}, unknown columns {unknown}, "
                         f"missing columns {missing}")
    rows, seen = [], {}
    for line, cells in enumerate(reader, start=2):
        if not cells:
            continue
        if len(cells) != len(header):
            raise ValueError(f"{path}: line {line}: {len(cells)} cells for {len(header)} columns")
        try:
            record = dict.fromkeys(OPTIONAL_COLUMNS, "") | dict(zip(header, cells, strict=True))
            row = _parse_row(record, sources)
        except ValueError as err:
            raise ValueError(f"{path}: line {line}: {err}") from None
        key = tuple(getattr(row, f.name) for f in fields(row) if f.name != "throughput")
        if key in seen:
            raise ValueError(f"{path}: line {line}: repeats the set-up of line {seen[key]}")
        seen[key] = line
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return tuple(rows)
