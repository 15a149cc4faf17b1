"""`birder calibrate`: fit a cluster's network constants to the user's own nccl-tests output and write a cluster
TOML that `birder predict --cluster` and `birder collective --cluster` read.

nccl-tests prints one table per run (all_reduce_perf, all_gather_perf, alltoall_perf): `#` comment lines (the
parameters, one `Rank ... on HOST device D [bus] NAME` line per rank, the column headers) and one row per size:
size, count, type, [redop], [root], then out-of-place time (us), algbw, busbw, error and the same in place.
``parse_nccl_tests`` reads such a paste as users copy it: the prefixes launchers and log collectors put before each
line (``mpirun --tag-output``'s ``[1,0]<stdout>:``, ``srun --label``'s ``0:``, ``kubectl logs --timestamps``' RFC
3339 time) are removed, and so is the time ``-S 1`` prints after each row and ``-I 1``'s per-iteration columns; NCCL
INFO log lines and shell prompts around the table are ignored, and tables cut to their out-of-place columns are
read. What would make a fit silently wrong is refused, never skipped: a table row that cannot be read, a run that
failed nccl-tests' own check (``#wrong`` values, ``FAILED`` in its footer), a size that appears twice (two runs, or
interleaved output, in one paste), a run's header or Rank line printed twice (two runs whose sizes do not repeat),
Rank lines that do not number every rank from 0 (a paste that lost its first lines), ranks spread unevenly over the
hosts, time columns of CPU time (``-C 1``). Machines that share a host name (containers all called ``localhost``) are
told apart by their GPUs' bus ids (``machines``).

``fit_network`` fits what the simulator's collective model takes from the network (``sim.system``): the payload
share of the line rate (``efficiency``: the bandwidth term), the transport's own latency per inter-node hop
(``latency_us``: the latency term) and, when the table holds all-to-all rows, the cost per remote peer
(``peer_overhead_us``). It minimises the mean squared log ratio of simulated to measured out-of-place times:
a log-spaced grid per constant, then Nelder-Mead in log space. A constant the table does not constrain (halving
the efficiency or adding 10 us of latency changes no row's time by 1%) keeps its preset value and is reported as
such, not as fitted.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from safeio.inputs import read_bytes_bounded, read_text_bounded
from safeio.serialise import toml_comment, toml_pair
from sim.collective import predict_collective
from sim.hardware import GENERIC_NETWORKS, GPUS, TRANSPORTS, Cluster, cluster, make_nic

OPS = {"all_reduce_perf": "all-reduce", "all_gather_perf": "all-gather", "reduce_scatter_perf": "reduce-scatter",
       "alltoall_perf": "all-to-all"}
# nccl-tests' other binaries (src/*.cu): their bus bandwidth is not one the model times for a network fit, and
# sendrecv_perf's rows print the same columns as all_reduce_perf's (redop sum, root -1, the whole count)
OTHER_BINARIES = ("sendrecv_perf", "broadcast_perf", "reduce_perf", "gather_perf", "scatter_perf", "hypercube_perf")
_BINARY = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted([*OPS, *OTHER_BINARIES], key=len, reverse=True))
                     + r")(?![A-Za-z0-9])")
# busbw / algbw as nccl-tests computes it (src/*.cu, *GetBw) on n ranks
BUS_FACTOR = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: (n - 1) / n,
              "reduce-scatter": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n}
MAX_OUTPUT_BYTES = 64 << 20  # a sweep of nccl-tests is a few kB; with NCCL INFO logs of a large job, tens of MB
UNCONSTRAINED = 0.01  # a constant whose probe moves no row's simulated time by 1% is not fitted
GRID_POINTS = 25  # per constant, log-spaced over GRID_RANGE, before Nelder-Mead
GRID_RANGE = {"efficiency": (0.005, 1.0), "latency_us": (0.1, 1000.0), "peer_overhead_us": (0.1, 1000.0)}
TOO_FAST = 0.05  # a table 5% faster than the line rate allows is another network than the one named
# size bands, each counting equally in the fit whatever its number of rows: a doubling sweep from 8 B has many more
# latency-bound rows than plateau rows, but training's gradient buckets (DDP's 25 MB, and larger) are medium and
# large messages (torch.nn.parallel.DistributedDataParallel, bucket_cap_mb)
SIZE_BANDS = (("small, < 1 MiB", 0, 1 << 20), ("medium, 1-64 MiB", 1 << 20, 64 << 20),
              ("large, >= 64 MiB", 64 << 20, math.inf))
IDENTIFY_STEP = {"efficiency": 0.8, "latency_us": 0.5, "peer_overhead_us": 0.5}  # the fitted value x this, and /
# a row taking at least twice the smallest messages' time (the table's fastest row, or the simulated time of 8
# bytes where that is shorter) spends at least half of it moving bytes: a table with none says nothing of the link
BANDWIDTH_BOUND = 2.0
PLATEAU_BYTES = 256 << 20  # busbw on InfiniBand and RoCE flattens by a few hundred MB (nccl-tests issues 119, 290)
# What launchers and log collectors put before each line, in any order and repeated: mpirun --tag-output's
# "[1,0]<stdout>:", srun --label's "12: ", kubectl logs --timestamps' and docker logs -t's RFC 3339 time
_PREFIX = re.compile(r"^\s*(?:(?:\[[^\]]*\](?:<\w+>)?:?|\d{1,6}:(?=\s)"
                     r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s*)+")
_FAILED_FOOTER = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s+FAILED")
_PASSED_FOOTER = re.compile(r"#\s*Out of bounds values\s*:\s*0\s+OK")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*)")  # rank, host, device, bus id, GPU name
_ROW_TIMESTAMP = re.compile(r"\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")  # nccl-tests -S 1, after a row's columns
_RUN_HEADER = re.compile(r"#\s*nThread\s+\d+\s+nGpus\s+\d+")  # printed once at the start of each run
# the sweep the run's header announces (src/util.cu writeDeviceReport), and where memory cut it short (src/common.cu)
_SWEEP = re.compile(r"maxBytes\s+(\d+)\s+step:\s*(\d+)\((factor|bytes)\)")
_REDUCED_MAX = re.compile(r"#\s*Reducing maxBytes to (\d+)")
_REDOPS = {"sum", "prod", "min", "max", "avg", "none", "mulsum"}
# bytes per element of nccl-tests' type names (nccl-tests src/common.cu, test_typenames)
TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
              "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
GPU_NAMES = {"A100": "a100", "H100": "h100", "H200": "h200", "V100": "v100"}  # nccl-tests device name -> gpus.toml


@dataclass(frozen=True)
class Measurement:
    """One row of an nccl-tests table: its size column (bytes) and out-of-place time and bus bandwidth."""

    op: str  # birder collective's name: all-reduce, all-gather, all-to-all
    nbytes: int
    time_s: float
    busbw_gbytes_per_s: float
    line: int  # where in the file


@dataclass(frozen=True)
class NcclTestsOutput:
    """What one paste of nccl-tests output holds: its rows and, where it prints them, the ranks' hosts and GPU."""

    rows: tuple[Measurement, ...]
    hosts: tuple[str, ...]  # distinct host names of the Rank lines, in order (empty: none printed)
    ranks: int  # Rank lines seen (0: none printed)
    gpu: str | None  # gpus.toml name of the ranks' device, where the name says it
    ranks_per_host: tuple[int, ...] = ()  # in the order of ``hosts``
    device_names: tuple[str, ...] = ()  # the Rank lines' device names as printed (distinct, in order)
    warnings: tuple[str, ...] = ()  # what the paste lacks that a fit should say (a table cut short)
    source: str = ""  # the paste's name in errors
    columns: tuple[tuple[int, tuple], ...] = ()  # (line, (redop, root, algbw, busbw)) per row: same_collective


def _number(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(token)
    return value


def all_reduce_row(nbytes: int, count: int, type_name: str, redop: str | None, root: str | None) -> bool:
    """Whether a row's columns show an all-reduce in nccl-tests' format: a reduction (redop not ``none``), no
    root (``-1`` or no root column: reduce_perf has one), and count x element size = size (reduce_scatter_perf
    prints the count per rank, a ranks-th of the size). all_gather_perf and alltoall_perf print the same columns
    as each other (redop ``none`` or empty, count per rank), so their rows say nothing."""
    element = TYPE_BYTES.get(type_name)
    return (redop is not None and redop != "none" and root in (None, "-1") and element is not None
            and count * element == nbytes)


# the largest error per element older nccl-tests (before 2.13) let pass, times (ranks - 1): src/common.cu
# DeltaMaxValue (half 1e-2 in most releases, 5e-2 in some: the larger is taken; integer types exact)
OLD_CHECK_TOLERANCE = {"half": 5e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12}
MAX_RANKS = 1 << 16  # where no Rank line says how many ranks ran: the most the simulator takes


def not_all_reduce_row(nbytes: int, count: int, type_name: str, redop: str | None) -> bool:
    """Whether a row's columns rule out an all-reduce: redop ``none`` (all_gather_perf, alltoall_perf), or a count
    per rank (count x element size below the size: all_gather_perf, reduce_scatter_perf)."""
    element = TYPE_BYTES.get(type_name)
    return redop == "none" or (element is not None and count * element < nbytes)


def same_collective(op: str, columns_of: dict[int, tuple], ranks: int, source: str, given: str = "") -> None:
    """ValueError where a row's own columns contradict ``op``: a reduction on an all-gather or all-to-all, redop
    ``none`` on an all-reduce or reduce-scatter, or busbw / algbw away from the factor nccl-tests applies to ``op`` on
    ``ranks`` ranks (``BUS_FACTOR``) beyond what printing both to 2 decimals allows, in most rows of algbw >= 1 GB/s.
    The factor tells sendrecv_perf's 1 from an all-reduce's 2(n-1)/n whenever n > 2, whatever the binary's name.
    ``given``: the options that gave ``ranks`` where the paste prints no Rank lines (else the Rank lines did)."""
    reduces = op in ("all-reduce", "reduce-scatter")
    for line, (redop, *_) in columns_of.items():
        if redop is not None and (redop == "none") == reduces:
            raise ValueError(f"{source}, line {line}: --op {op} but the row's redop is {redop} ("
                             + ("no reduction" if reduces else "a reduction")
                             + "): the table is of another collective; pass its own --op")
    if ranks < 2:
        return
    expected = BUS_FACTOR[op](ranks)
    # nccl-tests computes busbw from algbw (one time) and prints both to 2 decimals: the true factor of a row lies
    # within what +-0.005 on each allows, so ``op``'s factor lies inside every row's range (a 1e-6 slack for floats)
    judged = [(line, busbw / algbw, (busbw - 0.005) / (algbw + 0.005) * (1 - 1e-6),
               (busbw + 0.005) / (algbw - 0.005) * (1 + 1e-6))
              for line, (_, _, algbw, busbw) in columns_of.items() if algbw >= 1.0]
    outside = [row for row in judged if not row[2] <= expected <= row[3]]
    if judged and 2 * len(outside) > len(judged):
        line, factor = outside[0][:2]
        scale = BUS_FACTOR[op](2) * 2  # 2 for all-reduce's 2(n-1)/n, 1 for the others' (n-1)/n
        sharpest = max(outside, key=lambda row: row[1] / (row[3] - row[2]))[1]  # the narrowest range's factor
        implied = round(scale / (scale - sharpest)) if sharpest < scale else 0
        fits = implied > 1 and all(lo <= BUS_FACTOR[op](implied) <= hi for *_, lo, hi in judged)
        if given and fits:
            raise ValueError(f"{source}, line {line}: busbw / algbw is {factor:.4g}, {op}'s factor on {implied} ranks, "
                             f"but {given} give {ranks}: the paste prints no Rank lines, so the layout is yours; "
                             "give the run's own (or the table is of another run"
                             + (", or of another collective: 1 is also sendrecv_perf's, broadcast_perf's and "
                                "reduce_perf's factor)" if BUS_FACTOR[op](implied) == 1 else ")"))
        if implied > ranks and fits:
            raise ValueError(f"{source}, line {line}: busbw / algbw is {factor:.4g}, {op}'s factor on {implied} ranks, "
                             f"but the paste's Rank lines name {ranks}: Rank lines are missing (a cut paste, a "
                             "terminal's scrollback), or the table is of another run; paste the whole output")
        raise ValueError(f"{source}, line {line}: busbw / algbw is {factor:.4g} where nccl-tests prints {expected:.4g} "
                         f"for {op} on {ranks} ranks: the table is of another collective (1 for sendrecv_perf, "
                         "broadcast_perf and reduce_perf; 2(n-1)/n for all-reduce; (n-1)/n for all-gather, "
                         "reduce-scatter and all-to-all); pass its own --op")


def old_check_tolerance(type_name: str, ranks: int) -> float:
    """The largest error older nccl-tests let pass for ``type_name`` on ``ranks`` ranks (``OLD_CHECK_TOLERANCE``
    times ranks - 1; ``ranks`` 0: unknown, the most there can be)."""
    return OLD_CHECK_TOLERANCE.get(type_name, 0.0) * ((ranks or MAX_RANKS) - 1)


def wrong_count(token: str, tolerance: float = math.inf) -> bool:
    """Whether a #wrong/error cell read without its column header is a failed check. nccl-tests 2.13 and later
    print the count of wrong values with ``%g`` (src/util.cu: a plain integer, or an exponent from 1e+06); older
    ones printed the largest error with ``%.0e`` (``2e-06``), which failed their check above ``tolerance``
    (``old_check_tolerance``; infinite where the run's own footer says it passed: old alltoall_perf printed
    1e+00 in its in-place columns and "Out of bounds values : 0 OK")."""
    try:
        value = float(token)
    except ValueError:
        return False
    return value != 0 and (token.isdigit() or value >= 1e6 or value > tolerance)


def machines(ranks: list[tuple[str, str, int]]) -> tuple[list[tuple[str, int]], list[str]]:
    """Each rank's machine, from its Rank line's (host, GPU, rank), the GPU written ``DEVICE [BUS ID]``, and a
    warning where host names are shared. NCCL refuses two ranks of one host (host name and boot id) on one bus id
    unless NCCL_MULTI_RANK_GPU_ENABLE is set (src/init.cc, "Multiple Ranks are using the same GPU"), so a host name
    whose ranks repeat a GPU names several machines (containers that all call themselves ``localhost``): the k-th
    rank on a GPU, in rank order, runs on that name's k-th machine, written ``NAME #k``. Both the device number and
    the bus id must repeat (ranks that each see one GPU all print device 0). Returns (machine, rank) per rank."""
    seen: dict[tuple[str, str], int] = {}
    placed = []
    for host, gpu, rank in sorted(set(ranks), key=lambda x: x[2]):
        seen[host, gpu] = seen.get((host, gpu), 0) + 1
        placed.append((host, gpu, rank, seen[host, gpu]))
    count: dict[str, int] = {}  # machines per shared host name
    for (host, _), k in seen.items():
        if k > 1:
            count[host] = max(count.get(host, 0), k)
    return ([(f"{host} #{k}" if host in count else host, rank) for host, _, rank, k in placed],
            [f"the Rank lines put two ranks on one GPU (device and bus id) of host {host}, which NCCL refuses on one "
             f"machine: read as {n} machines of that name, {host} #1 to #{n} (the k-th rank on each GPU on the k-th)"
             for host, n in count.items()])


def _more_than_one_run(ranks: dict[tuple[str, str, int], bool]) -> str:
    """Why a paste of several runs is refused, in words. Where every host holds ranks 0 to k-1 on k GPUs of its own
    (whether the runs follow each other or interleave line by line), the habit of launching nccl-tests built without
    MPI under srun or mpirun: each task a single-node test."""
    per_host: dict[str, list[tuple[int, str]]] = {}
    for host, gpu, rank in ranks:
        per_host.setdefault(host, []).append((rank, gpu))
    if len(per_host) > 1 and all(sorted(r for r, _ in held) == list(range(len(held)))
                                 and len({gpu for _, gpu in held}) == len(held) for held in per_host.values()):
        return (f"the paste holds a run per host ({', '.join(sorted(per_host))}, each its own rank 0): nccl-tests "
                "built without MPI=1 runs one single-node test per task of srun or mpirun; rebuild it with MPI=1 so "
                "that one test spans the nodes")
    return "the paste holds more than one run (or interleaved output); give each run as its own file"


def parse_nccl_tests(text: str, source: str, op: str | None = None) -> NcclTestsOutput:
    """The rows of one nccl-tests run pasted as ``text`` (``source`` names it in errors). ``op``: the collective
    when the paste does not name its binary (all_reduce_perf, all_gather_perf, alltoall_perf) and its columns do
    not show an all-reduce (``all_reduce_row``, every row). ValueError if
    there is no row, the op is unknown or ambiguous, or a row cannot be read."""
    rows, ranks, gpus, evidence, names, counts_wrong = [], {}, set(), [], {}, False
    seen: dict[int, tuple[int, str, str | None]] = {}  # size -> the line, data type and reduction of its row
    against = []  # per row: its columns show a collective other than all-reduce (not_all_reduce_row)
    columns_of: dict[int, tuple] = {}  # line -> the row's redop, root, algbw and busbw (same_collective)
    passed = bool(_PASSED_FOOTER.search(text))  # the run's own check: no out-of-bounds value
    sweep = None  # (maxBytes, step, "factor" or "bytes") from the run's header
    side = 4  # columns per side: time, algbw, busbw, #wrong (-I 1 adds i_min, i_max, i_p99, i_cv% after them)
    columns = 0  # tokens of the table's first row: every row prints as many
    run_started, rank_line, second_run = None, {}, None  # line of the run's header; rank -> its Rank line's
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _PREFIX.sub("", raw).strip()
        rank, header = _RANK.match(line), _RUN_HEADER.match(line)
        again = rank_line.get(int(rank.group(1))) if rank else run_started if header else None
        if again and not second_run:  # two runs whose sizes need not repeat (refused after the rows' own checks)
            second_run = (again, lineno)
        if rank:
            rank_line[int(rank.group(1))] = lineno
            ranks[(rank.group(2), f"{rank.group(3)} [{rank.group(4).strip()}]", int(rank.group(1)))] = True
            gpus.add(next((v for k, v in GPU_NAMES.items() if k in rank.group(5)), None))
            names[rank.group(5).strip()] = True
            continue
        if header:
            run_started = lineno
            found = _SWEEP.search(line)
            sweep = (int(found.group(1)), int(found.group(2)), found.group(3)) if found else None
        if (reduced := _REDUCED_MAX.match(line)) and sweep:
            sweep = (int(reduced.group(1)), *sweep[1:])
        if line.startswith("#") and re.search(r"\bcputime\b", line):  # the column header of nccl-tests -C 1
            raise ValueError(f"{source}, line {lineno}: the time columns are CPU time (nccl-tests -C 1: the host's "
                             "time to launch each collective, not how long it takes): rerun without -C")
        if line.startswith("#") and "#wrong" in line:
            counts_wrong = True  # nccl-tests >= 2.13 counts wrong elements; older ones print the largest error
            side = 8 if "i_min" in line else 4
        failed = _FAILED_FOOTER.search(line)
        if failed:
            raise ValueError(f"{source}, line {lineno}: nccl-tests reports {failed.group(1)} out-of-bounds values "
                             "(FAILED): the run computed wrong results, so its times are not a measurement to fit")
        tokens = _ROW_TIMESTAMP.sub("", line).split()
        if line.startswith("#") or len(tokens) < 3 or not (tokens[0].isdigit() and tokens[1].isdigit()
                                                            and tokens[2].isidentifier()):
            continue  # comments, NCCL logs, prompts: only lines of a size, a count and a type are rows
        if rows and len(tokens) < columns and columns - len(tokens) != side:  # a row cut before its in-place
            # columns still has its out-of-place ones whole (read as such); cut anywhere else, it is no row
            raise ValueError(f"{source}, line {lineno}: {len(tokens)} columns where the rows above have {columns}: "
                             f"the row is cut short (does the paste end mid-row?): {' '.join(tokens)[:80]!r}")
        columns = len(tokens)
        rest, redop, root = tokens[3:], None, None
        if rest and rest[0] in _REDOPS:
            redop, rest = rest[0], rest[1:]
        if len(rest) in (side + 1, 2 * side + 1):  # the root column (-1 where the collective has none)
            root, rest = rest[0], rest[1:]
        try:
            if len(rest) not in (side, 2 * side):  # out-of-place and in-place, or out-of-place alone (a cut paste)
                raise ValueError(f"{len(rest)} columns after the type, expected time, algbw, busbw, error"
                                 + (", i_min, i_max, i_p99, i_cv%" if side == 8 else "")
                                 + " (out-of-place, then optionally in-place)")
            time_us, algbw, busbw = _number(rest[0]), _number(rest[1]), _number(rest[2])
        except ValueError as error:
            raise ValueError(f"{source}, line {lineno}: not an nccl-tests row ({error}): {line[:80]!r}") from None
        nbytes = int(tokens[0])
        if nbytes == 0:
            continue  # nccl-tests' empty sizes time only the launch
        if time_us <= 0:
            raise ValueError(f"{source}, line {lineno}: a time of {time_us} us is not a measurement")
        tolerance = math.inf if passed else old_check_tolerance(tokens[2], len(rank_line))
        wrong = [w for w in rest[3::side] if w not in ("0", "N/A") and (counts_wrong or wrong_count(w, tolerance))]
        if wrong:
            raise ValueError(f"{source}, line {lineno}: nccl-tests "
                             + (f"counted {wrong[0]} wrong values" if counts_wrong or wrong[0].isdigit() else
                                f"found an error of {wrong[0]} ({tokens[2]}, past its check's tolerance)")
                             + f" at {nbytes:,} bytes: the run computed wrong results, so its times are not a "
                             "measurement to fit")
        if nbytes in seen and seen[nbytes][1] != tokens[2]:
            raise ValueError(f"{source}: size {nbytes:,} is measured in {seen[nbytes][1]} (line {seen[nbytes][0]}) and "
                             f"in {tokens[2]} (line {lineno}): the paste holds a table per data type (nccl-tests -d "
                             "all); give one type's table (-d float)")
        if nbytes in seen and seen[nbytes][2] != redop:
            raise ValueError(f"{source}: size {nbytes:,} is measured with reduction {seen[nbytes][2]} (line "
                             f"{seen[nbytes][0]}) and {redop} (line {lineno}): the paste holds a table per reduction "
                             "(nccl-tests -o all); give one reduction's table (-o sum)")
        if nbytes in seen:
            raise ValueError(f"{source}: size {nbytes:,} appears on lines {seen[nbytes][0]} and {lineno}: "
                             + _more_than_one_run(ranks))
        if rows and nbytes < rows[-1][0]:
            raise ValueError(f"{source}, line {lineno}: size {nbytes:,} after {rows[-1][0]:,}: a second run starts "
                             "inside the paste; give each run as its own file")
        seen[nbytes] = lineno, tokens[2], redop
        rows.append((nbytes, time_us * 1e-6, busbw, lineno))
        evidence.append(all_reduce_row(nbytes, int(tokens[1]), tokens[2], redop, root))
        columns_of[lineno] = (redop, root, algbw, busbw)
        against.append(not_all_reduce_row(nbytes, int(tokens[1]), tokens[2], redop))
    if second_run:  # rows of two measurements in one fit, Rank lines of two layouts counted as one
        raise ValueError(f"{source}: lines {second_run[0]} and {second_run[1]} each start a run (a header or Rank line "
                         f"printed twice): {_more_than_one_run(ranks)}")
    missing = sorted(set(range(max(rank_line, default=-1) + 1)) - set(rank_line))
    if missing:  # nccl-tests prints every rank's line, 0 to N-1: the rest of the job's hosts would go unseen
        raise ValueError(f"{source}: no Rank line for rank {missing[0]} ({len(missing)} of ranks 0-{max(rank_line)} "
                         "missing): the paste lost lines (a terminal's scrollback, a cut); paste the whole output")
    if not rows:
        raise ValueError(f"{source}: no nccl-tests rows (lines of size, count, type, ..., time, algbw, busbw)")
    binaries = {found.group(1) for found in _BINARY.finditer(text)}
    other = sorted(binaries.intersection(OTHER_BINARIES))
    if other:
        raise ValueError(f"{source}: the output is of {', '.join(other)}, whose bus bandwidth no network fit here "
                         f"reads: doctor and calibrate take {', '.join(OPS)}")
    rooted = next(((line, c[1]) for line, c in columns_of.items() if c[1] not in (None, "-1")), None)
    if rooted:
        raise ValueError(f"{source}, line {rooted[0]}: the rows have root {rooted[1]}, a rooted collective's "
                         f"({', '.join(OTHER_BINARIES[1:5])}), whose bus bandwidth no network fit here reads: doctor "
                         f"and calibrate take {', '.join(OPS)}")
    named = {OPS[b] for b in binaries if b in OPS}
    if op is None and not named and all(evidence):
        named = {"all-reduce"}  # the columns say so (all_reduce_row)
    if op is None:
        if len(named) != 1:
            found = ", ".join(sorted(named)) or "none"
            raise ValueError(f"{source}: cannot tell which collective the table measures (binaries named: {found}); "
                             f"pass --op {'|'.join(OPS.values())}")
        op = named.pop()
    elif named and named != {op}:
        raise ValueError(f"{source}: --op {op} but the output is of {', '.join(sorted(named))}")
    elif op != "all-reduce" and all(evidence):
        raise ValueError(f"{source}: --op {op} but every row's columns show an all-reduce (a reduction, no root, "
                         "count x element size = size): pass --op all-reduce, or the right table")
    elif op == "all-reduce" and not any(evidence) and any(against):
        raise ValueError(f"{source}: --op all-reduce but the rows' columns show another collective (redop none, or "
                         "a count per rank: count x element size below the size): pass the table's own --op")
    same_collective(op, columns_of, len(rank_line), source)
    if len(gpus - {None}) > 1:
        raise ValueError(f"{source}: the Rank lines name GPUs of different kinds ({', '.join(sorted(gpus - {None}))}): "
                         "a table of one cluster has one kind; give each cluster's run as its own file")
    placed, warnings = machines(list(ranks))
    hosts = tuple(dict.fromkeys(h for h, _ in placed))
    gpu = next(iter(gpus)) if len(gpus) == 1 else None
    per_host = tuple(sum(h == host for h, _ in placed) for host in hosts)
    largest = rows[-1][0]
    if sweep and (largest * sweep[1] if sweep[2] == "factor" else largest + sweep[1]) <= sweep[0]:
        warnings.append(f"the paste stops at {largest:,} bytes but its header's sweep runs to maxBytes {sweep[0]:,}: "
                        "the rest of the table is not in the paste (paste the whole table to fit the larger sizes)")
    return NcclTestsOutput(tuple(Measurement(op, *row) for row in rows), hosts, len(placed), gpu,
                           per_host, tuple(names), tuple(warnings), source, tuple(columns_of.items()))


def read_output(path: str | Path, op: str | None = None) -> NcclTestsOutput:
    """``parse_nccl_tests`` of a file; ValueError if it cannot be read as UTF-8 text of bounded size."""
    path = Path(path)
    text = read_text_bounded(path, MAX_OUTPUT_BYTES, "nccl-tests output")  # a regular file: no FIFO, no device
    return parse_nccl_tests(text, str(path), op)


@dataclass(frozen=True)
class Fit:
    """The fitted network: its constants (TOML units), which of them the table constrained, and the error."""

    cluster: Cluster
    constants: dict[str, float]  # efficiency, latency_us, peer_overhead_us as the cluster now holds them
    fitted: tuple[str, ...]  # those the table constrained (the rest keep their preset value)
    rms_log_error: float  # over the rows, of simulated / measured time
    max_relative_error: float
    warnings: tuple[str, ...] = ()
    # per size band (SIZE_BANDS) with rows: (name, rows, rms log error, largest relative error)
    band_errors: tuple[tuple[str, int, float, float], ...] = ()
    # fitted constants no row's time depends on at the fitted point: name -> why (the limit that binds instead)
    unidentified: tuple[tuple[str, str], ...] = ()
    raised_socket_share: bool = False  # the table is past the generic sockets' share: they keep the whole wire

    @property
    def identified(self) -> tuple[str, ...]:
        """The constants the table fitted and whose fitted value it pins: FITTED in the written file."""
        return tuple(n for n in self.fitted if n not in dict(self.unidentified))

    def row_errors(self, rows: tuple[Measurement, ...]) -> list[float]:
        return [predict_collective(m.op, m.nbytes, self.cluster)["time_s"] / m.time_s - 1 for m in rows]


def _with(c: Cluster, values: dict[str, float]) -> Cluster:
    fields = {"efficiency": min(1.0, values["efficiency"]), "latency": values["latency_us"] * 1e-6,
              "peer_overhead": values["peer_overhead_us"] * 1e-6}
    return replace(c, nic=replace(c.nic, **fields))


def _log_errors(c: Cluster, rows: tuple[Measurement, ...]) -> list[float]:
    return [math.log(predict_collective(m.op, m.nbytes, c)["time_s"] / m.time_s) for m in rows]


def fit_network(base: Cluster, rows: tuple[Measurement, ...]) -> Fit:
    """Fit the network constants of ``base`` (a cluster of the measured layout) to the rows: the efficiency on the
    largest size band measured (``SIZE_BANDS``), the latency and per-peer cost on the small band, then the
    efficiency again; the error is reported per band and each fitted constant the table does not pin is named
    (``unidentified``). ValueError for a table of latency-bound rows only (``BANDWIDTH_BOUND``) or one faster than
    the named hardware can carry; a socket table past the generic share of the wire its GPUs' sockets keep, but
    within the wire, is fitted with them keeping the whole wire (``Fit.raised_socket_share``)."""
    start = {"efficiency": base.nic.efficiency, "latency_us": base.nic.latency * 1e6,
             "peer_overhead_us": base.nic.peer_overhead * 1e6}
    names = ["efficiency", "latency_us"] + (["peer_overhead_us"] if any(m.op == "all-to-all" for m in rows) else [])
    # a constant is constrained when a probe (half the efficiency; 10 us more latency or per-peer cost, about an
    # inter-node hop of NCCL's model) moves some row's simulated time by more than 1%
    probe = {"efficiency": start["efficiency"] / 2, "latency_us": start["latency_us"] + 10,
             "peer_overhead_us": start["peer_overhead_us"] + 10}
    floor = {"efficiency": 1e-4, "latency_us": 1.0, "peer_overhead_us": 1.0}  # log space needs a positive start
    reference = _log_errors(base, rows)
    # the link's rate is what training's gradient buckets need: a table of latency-bound rows only cannot say it
    fixed_s = min(min(m.time_s for m in rows), *(predict_collective(op, 8, base)["time_s"] for op in
                                                   {m.op for m in rows}))
    largest, slowest_s = max(m.nbytes for m in rows), max(m.time_s for m in rows)
    if slowest_s < BANDWIDTH_BOUND * fixed_s:
        raise ValueError(f"no row of the table spends most of its time moving bytes (the largest, "
                         f"{largest:,} bytes, takes {slowest_s * 1e6:.1f} us, "
                         f"under {BANDWIDTH_BOUND:g} x the {fixed_s * 1e6:.1f} us of the smallest messages): it cannot "
                         "say what the link carries; measure up to "
                         f"{PLATEAU_BYTES >> 20} MB (nccl-tests -e {PLATEAU_BYTES >> 20}M)")
    constrained = []
    for name in names:
        moved = _log_errors(_with(base, start | {name: probe[name]}), rows)
        if max(abs(a - b) for a, b in zip(moved, reference, strict=True)) > math.log1p(UNCONSTRAINED):
            constrained.append(name)

    # the bandwidth on the largest messages measured (what gradient buckets are), the per-message constants on
    # the small ones: fitted on their own rows, so many latency-bound rows never outweigh the plateau
    bands = {name: tuple(m for m in rows if low <= m.nbytes < high) for name, low, high in SIZE_BANDS}
    large = next((b for b in reversed(bands.values()) if b), rows)
    small = bands[SIZE_BANDS[0][0]] or rows
    steps = (((["efficiency"], large), (["latency_us", "peer_overhead_us"], small), (["efficiency"], large))
             if large is not small else ((constrained, rows),))  # one band: all together on it
    best = start
    for names_now, subset in steps:
        best = _fit(base, best, [n for n in names_now if n in constrained], subset, floor)
    fitted = _with(base, best)
    errors = _log_errors(fitted, rows)
    # the fastest the named hardware goes: the full line rate, whichever limit of the NIC's path binds (where the
    # GPU's PCIe link binds, the fitted efficiency is not pinned, and a table past it was written with 1,235% errors)
    fastest = _with(base, best | {"efficiency": 1.0})
    # judged on the plateau, where the bytes' rate is what the time says: below it the model's latency and pipeline
    # fill weigh in, and a mid-size row faster than them is the model's error, not another network (t12: a table
    # doctor called 97% of the wire was refused for its 64 MiB row); and, as doctor judges it, on the plateau's
    # median row: where the model's curve is still rising at its smallest sizes, one row faster than it is again the
    # model's error (t14: a 2 x 8 H100 table doctor called 97% of the wire was refused for its 256 MiB row)
    plateau = tuple(m for m in large if m.nbytes >= PLATEAU_BYTES) or large
    slowest_at_best = statistics.median(_log_errors(fastest, plateau))
    limits = fastest.nic_limits()
    if slowest_at_best > math.log1p(TOO_FAST) and min(limits, key=limits.get) == "sockets" and \
            base.nic.share_at_8_gpus < 1:
        # the generic share of the wire 8 GPUs' sockets keep is of a 32 Gb/s link (presets/networks.toml); on a
        # slower one they can fill it (birder-paper-10gbe's fit: the whole 10 Gb/s): the table says which
        raised = fit_network(whole_wire(base), rows)
        return replace(raised, raised_socket_share=True, warnings=(
            f"the table is faster than the generic share of the wire its GPUs' sockets keep "
            f"({base.nic.share_at_8_gpus:g} at 8 GPUs) allows: written as the whole wire (share_at_8_gpus = 1, as "
            "birder-paper-10gbe's fit), the efficiency fitted on it", *raised.warnings))
    if slowest_at_best > math.log1p(TOO_FAST):
        raise ValueError(f"the table is faster than {base.nic.count} x {base.nic.line_rate / 1e9:g} Gb/s per node can "
                         f"carry ({efficiency_limit(fastest)}; at the full line rate the simulated times of its "
                         f"{'plateau sizes' if plateau is not large else 'largest sizes'} are still "
                         f"{math.expm1(slowest_at_best):.0%} longer at the median): check --network or "
                         "--line-rate-gbps, --nics-per-node, --nodes and --gpus-per-node")
    warnings = []
    if "efficiency" in constrained and largest < PLATEAU_BYTES:
        warnings.append(f"the largest size measured is {largest:,} bytes: the efficiency fitted is that of mid-size "
                        "messages, below the large-message plateau, where the model's approach to it weighs in, so "
                        f"it may be off either way; measure up to {PLATEAU_BYTES >> 20} MB or more")
    band_errors = tuple((name, len(b), math.sqrt(sum(errors[i] ** 2 for i in b) / len(b)),
                         max(abs(math.expm1(errors[i])) for i in b))
                        for (name, low, high) in SIZE_BANDS
                        if (b := [i for i, m in enumerate(rows) if low <= m.nbytes < high]))
    return Fit(fitted, {n: best[n] for n in ("efficiency", "latency_us", "peer_overhead_us")}, tuple(constrained),
               math.sqrt(sum(e * e for e in errors) / len(errors)), max(abs(math.expm1(e)) for e in errors),
               tuple(warnings), band_errors, unidentified(fitted, best, tuple(constrained), rows, errors))


def whole_wire(c: Cluster) -> Cluster:
    """``c`` with its GPUs' sockets keeping the whole wire (``share_at_8_gpus`` 1): where a table is past the generic
    share (of a 32 Gb/s link) but within the wire, as birder-paper-10gbe's fit keeps it."""
    return replace(c, nic=replace(c.nic, share_at_8_gpus=1.0))


def unidentified(fitted: Cluster, values: dict[str, float], names: tuple[str, ...], rows: tuple[Measurement, ...],
                 errors: list[float]) -> tuple[tuple[str, str], ...]:
    """The fitted constants the table does not pin at the fitted point, each with why. The efficiency scales the
    wire and the sockets' share of it (``Cluster.nic_limits``): where another limit of the NIC's path binds (the
    host-staged socket path, PCIe, a measured rate), every efficiency above the one where they meet gives the
    same times. A per-message constant is not pinned where moving it by ``IDENTIFY_STEP`` either way moves no
    row's simulated time by ``UNCONSTRAINED``."""
    from sim.hardware import LIMIT_NAMES

    out = []
    for name in names:
        if name == "efficiency":
            limits = fitted.nic_limits()
            binding = min(limits, key=limits.get)
            scaled = min(v for k, v in limits.items() if k in ("wire", "sockets")) if "wire" in limits else None
            if scaled is not None and binding not in ("wire", "sockets"):
                edge = values[name] * limits[binding] / scaled
                out.append((name, f"{LIMIT_NAMES[binding]} ({limits[binding] / 1e9:.2f} GB/s per NIC) binds, not the "
                                  f"wire: any efficiency from {edge:.3g} to 1 gives the same times"))
            continue
        step = IDENTIFY_STEP[name]
        moves = [max(abs(a - b) for a, b in zip(_log_errors(_with(fitted, values | {name: values[name] * f}), rows),
                                                errors, strict=True)) for f in (step, 1 / step)]
        if values[name] <= GRID_RANGE[name][0] * (1 + 1e-6):  # at the floor, within the optimiser's tolerance
            out.append((name, f"at {GRID_RANGE[name][0]:g} us, the least the fit takes: the table's smallest messages "
                              "are as fast as the simulator's other fixed costs allow with none of it"))
        elif max(moves) <= math.log1p(UNCONSTRAINED):
            out.append((name, f"no row's time moves by {UNCONSTRAINED:.0%} with it x{step:g} or /{step:g}"))
    return tuple(out)


def efficiency_limit(c: Cluster) -> str:
    """The limit of the NIC's path that binds at the cluster's efficiency, in words, with its bandwidth."""
    from sim.hardware import LIMIT_NAMES

    limits = c.nic_limits()
    binding = min(limits, key=limits.get)
    return f"{LIMIT_NAMES[binding]} binds, {limits[binding] / 1e9:.2f} GB/s per NIC"


def _fit(base: Cluster, start: dict[str, float], names: list[str], rows: tuple[Measurement, ...],
         floor: dict[str, float]) -> dict[str, float]:
    """``start`` with ``names`` fitted to ``rows`` (mean squared log error of the simulated times)."""
    from scipy.optimize import minimize, minimize_scalar

    if not names:
        return start

    def values_of(x) -> dict[str, float]:  # held inside GRID_RANGE: beyond it no row's time moves (the latency of
        # a table faster than the simulator's fixed costs would run to 1e-20 us, which no cluster file may hold)
        return start | {n: min(max(math.exp(v), GRID_RANGE[n][0]), GRID_RANGE[n][1]) for n, v in zip(names, x,
                                                                                                     strict=True)}

    def loss(x) -> float:
        values = values_of(x)
        if values["efficiency"] > 1:
            return math.inf
        errors = _log_errors(_with(base, values), rows)
        return sum(e * e for e in errors) / len(errors)

    x0 = [math.log(max(start[n], floor[n])) for n in names]
    # the simulated times are piecewise in the constants (a protocol or algorithm switch, the sockets' host-staging
    # cap, flat beyond it): each constant first takes the best of a grid of GRID_POINTS over its range, refined
    # between the grid points either side (a flat stretch would hold Nelder-Mead where it starts), one after
    # another, then Nelder-Mead refines them together
    for i, name in enumerate(names):
        low, high = (math.log(m) for m in GRID_RANGE[name])
        grid = [low + (high - low) * k / (GRID_POINTS - 1) for k in range(GRID_POINTS)]

        def along(v, i=i) -> float:
            return loss(x0[:i] + [v] + x0[i + 1:])

        k = min(range(GRID_POINTS), key=lambda k: along(grid[k]))
        refined = minimize_scalar(along, bounds=(grid[max(0, k - 1)], grid[min(GRID_POINTS - 1, k + 1)]),
                                  method="bounded", options={"xatol": 1e-4}).x
        x0[i] = min((grid[k], refined, x0[i]), key=along)
    result = minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-8, "maxiter": 400})
    return values_of(result.x)


def base_cluster(nodes: int, gpus_per_node: int, gpu: str, network: str | None, transport: str | None,
                 line_rate_gbps: float | None, nics_per_node: int) -> tuple[Cluster, str]:
    """The cluster of the measured layout before the fit, and the name of its hardware base (a generic preset, or
    a transport's constants at a line rate)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; choose one of {', '.join(GPUS)}")
    if network is not None:
        if network not in GENERIC_NETWORKS:
            raise ValueError(f"--network {network!r} must be a generic preset ({', '.join(GENERIC_NETWORKS)}): a "
                             "site profile's fit belongs to its own cluster")
        if transport is not None or line_rate_gbps is not None:
            raise ValueError("--network conflicts with --transport and --line-rate-gbps: give one or the other")
        c = cluster(network, nodes, gpus_per_node, None, gpu, 1.0, nics_per_node)
        return c, network
    if transport not in TRANSPORTS or line_rate_gbps is None:
        raise ValueError("name the network: --network PRESET, or --transport socket|ib with --line-rate-gbps")
    c = cluster("10gbe", nodes, gpus_per_node, None, gpu)
    nic = make_nic("calibrated", TRANSPORTS[transport] | {"transport": transport, "line_rate_gbps": line_rate_gbps,
                                                          "count": nics_per_node})
    return replace(c, nic=nic), transport


def layout(outputs: list[NcclTestsOutput], nodes: int | None, gpus_per_node: int | None) -> tuple[int, int]:
    """Nodes and GPUs per node: from the Rank lines (distinct hosts, ranks per host) where the output prints them,
    else from the options; ValueError where they disagree or neither says."""
    for o in outputs:
        if len(set(o.ranks_per_host)) > 1:
            shown = ", ".join(f"{n} on {h}" for h, n in zip(o.hosts, o.ranks_per_host, strict=True))
            raise ValueError(f"the Rank lines spread the ranks unevenly over the hosts ({shown}): the simulator models "
                             "nodes of equal size; measure with the same number of GPUs on every node")
    seen = {(len(o.hosts), o.ranks // len(o.hosts)) for o in outputs if o.hosts and o.ranks % len(o.hosts) == 0}
    if len(seen) > 1:
        raise ValueError(f"the outputs were measured on different layouts {sorted(seen)}: calibrate one at a time")
    if seen:
        shown_nodes, shown_per_node = seen.pop()
        for flag, given, shown in (("--nodes", nodes, shown_nodes), ("--gpus-per-node", gpus_per_node,
                                                                       shown_per_node)):
            if given is not None and given != shown:
                raise ValueError(f"{flag} {given} but the output's Rank lines show {shown}")
        return shown_nodes, shown_per_node
    if nodes is None or gpus_per_node is None:
        raise ValueError("the output prints no Rank lines: give --nodes and --gpus-per-node")
    for o in outputs:  # the table's busbw / algbw is its op's factor on the run's ranks: do the options give them?
        same_collective(o.rows[0].op, dict(o.columns), nodes * gpus_per_node, o.source,
                        f"--nodes {nodes} x --gpus-per-node {gpus_per_node}")
    return nodes, gpus_per_node


def check_gpu(outputs: list[NcclTestsOutput], given: str | None) -> None:
    """ValueError where ``--gpu`` names another GPU than the one the output's Rank lines name (as ``layout``
    refuses a --nodes the Rank lines contradict): the GPU sets the PCIe link the NICs sit behind."""
    for o in outputs:
        if given is not None and o.gpu is not None and o.gpu != given:
            raise ValueError(f"--gpu {given} but the output's Rank lines name {', '.join(o.device_names)} ({o.gpu})")


def layout_sources(outputs: list[NcclTestsOutput], gpu_given: bool, gpu: str) -> dict[str, str]:
    """Where a calibrated cluster's ``nodes``, ``gpus_per_node`` and ``gpu`` came from (``layout`` and the GPU
    the Rank lines name): the log, the command line, or the default, and why the log could not say."""
    ranked = any(o.hosts for o in outputs)
    out = {key: "from the Rank lines" if ranked else f"given ({flag}): the output prints no Rank lines"
           for key, flag in (("nodes", "--nodes"), ("gpus_per_node", "--gpus-per-node"))}
    names = list(dict.fromkeys(n for o in outputs for n in o.device_names))
    if gpu_given:
        out["gpu"] = "given (--gpu)"
    elif any(o.gpu == gpu for o in outputs):
        out["gpu"] = f"from the Rank lines ({', '.join(names)})"
    else:
        out["gpu"] = ("assumed (the default): " + (f"the Rank lines name {', '.join(names)}, no GPU the model knows"
                                                   if names else "the output names no GPU") + "; give --gpu")
    return out


def cluster_data(fit: Fit, base_name: str, name: str, sources: list[tuple[str, str]]) -> dict:
    """The values of a fit's cluster TOML (``sim.hardware.load_cluster``'s keys), as tomllib reads them back."""
    c = fit.cluster
    files = ", ".join(f"{path} (sha256 {digest[:12]})" for path, digest in sources)
    network: dict = {"preset": base_name} if base_name in GENERIC_NETWORKS else {
        "transport": base_name, "line_rate_gbps": float(f"{c.nic.line_rate / 1e9:g}")}
    network["count"] = c.nic.count
    for key in ("efficiency", "latency_us", "peer_overhead_us"):
        network[key] = float(f"{fit.constants[key]:.6g}")
    if fit.raised_socket_share:
        network["share_at_8_gpus"] = 1.0
    network["fitted"] = True
    network["source"] = f"birder calibrate: {', '.join(fit.identified) or 'nothing'} fitted to {files}"
    return {"name": name, "nodes": c.n_nodes, "gpus_per_node": c.gpus_per_node, "gpu": c.gpu, "network": network}


def cluster_toml(fit: Fit, base_name: str, name: str, sources: list[tuple[str, str]], n_rows: int,
                 layout_from: dict[str, str] | None = None) -> str:
    """The cluster TOML of a fit (``cluster_data``): the base's hardware data, the fitted constants marked FITTED
    with the files they came from, the layout's keys with where they came from (``layout_sources``). Every value
    and comment goes through ``safeio.serialise`` (a name or a path cannot add keys or lines)."""
    data = cluster_data(fit, base_name, name, sources)
    files = ", ".join(f"{path} (sha256 {digest[:12]})" for path, digest in sources)
    comments = [f"Written by `birder calibrate` from nccl-tests output: {files}.",
                f"{n_rows} rows; simulated / measured time: rms log error {fit.rms_log_error:.3f}, largest "
                f"{fit.max_relative_error * 100:.1f}%. Constants marked FITTED belong to this cluster only.",
                *(f"{band}: {n} rows, rms log error {rms:.3f}, largest {worst * 100:.1f}%"
                  for band, n, rms, worst in fit.band_errors),
                *(f"warning: {w}" for w in fit.warnings)]
    lines = [toml_comment(text) for text in comments]
    lines += [toml_pair(key, data[key], (layout_from or {}).get(key, "")) for key in ("name", "nodes", "gpus_per_node",
                                                                                      "gpu")] + ["", "[network]"]
    unpinned = dict(fit.unidentified)
    notes = {"preset": "hardware data; the keys below override it",
             "share_at_8_gpus": "the table is faster than the generic share allows: the sockets keep the whole wire"}
    for key in ("efficiency", "latency_us", "peer_overhead_us"):
        notes[key] = (f"FITTED to {files}" if key in fit.identified else f"not identified by the table: {unpinned[key]}"
                      if key in unpinned else "not fitted (the table does not constrain it)")
    lines += [toml_pair(key, value, notes.get(key, "")) for key, value in data["network"].items()] + [""]
    return "\n".join(lines)


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(read_bytes_bounded(path, MAX_OUTPUT_BYTES, "nccl-tests output")).hexdigest()

