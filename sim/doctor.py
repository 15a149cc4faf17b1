"""`birder doctor`: is this nccl-tests bandwidth normal? A verdict on a pasted nccl-tests output, against what the
collective model (``sim.collective.predict_collective``) gives for the hardware stated, and the likely cause when it
is low.

What cluster owners ask in NCCL's issue threads is "is this busbw normal for my hardware, and if not, why?". The
answer here has three parts, each computed once:

1. ``rows``: every size of the table, its measured bus bandwidth, the bandwidth the model gives for the stated
   hardware at that size, and their ratio (``share``).
2. The verdict, read on the plateau (the rows of ``PLATEAU_BYTES`` and more; where the sweep stops earlier, its
   largest sizes, and the verdict says the plateau was not reached): the median share there against
   ``NORMAL_SHARE``.
3. ``likely_causes``: hypotheses, each a change of the stated hardware that a known misconfiguration amounts to
   (NCCL falling back to TCP sockets, one NIC used of several, GPUs reaching each other over PCIe instead of
   NVLink). Each is timed by the same model; a hypothesis whose bandwidth is much closer to the measured one than
   the stated hardware's counts as a cause, and one that the log itself shows (NCCL INFO lines, the command line's
   NCCL_* settings) comes first. Causes the model cannot time (too few channels, no GPUDirect RDMA) are named
   only from the log's own evidence.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, replace

from sim.calibrate import PLATEAU_BYTES, NcclTestsOutput, efficiency_limit, whole_wire
from sim.collective import predict_collective
from sim.hardware import INTRA, TRANSPORTS, Cluster, intra_preset, make_nic, nccl_channels

# A share of the model's bandwidth counted as normal: the collective model reproduces published nccl-tests plateaus
# within about 15% (sim/README.md, "Physical checks"), and a healthy cluster loses a few % more to its own set-up;
# below 0.8 something is off by more than the model's own error.
NORMAL_SHARE = 0.8
FAR_BELOW_SHARE = 0.5  # half of the hardware's bandwidth: a misconfiguration, not tuning
FASTER_SHARE = 1.15  # above the model's error: the hardware is faster than stated
EXPLAINS = math.log(1.25)  # a hypothesis within 25% of the measured plateau explains it ...
BETTER_BY = math.log(1.5)  # ... where the stated hardware misses by 50% more than it does
PLATEAU_ROWS = 3  # where the sweep stops below PLATEAU_BYTES, its largest sizes stand for the plateau

_TRANSPORT = re.compile(r"(?:via NET/|NET/|Using network )(Socket|IB|AWS Libfabric|Libfabric|OFI)")
_IB_DEVICES = re.compile(r"NET/IB\s*:\s*Using\s+((?:\[\d+\]\S+\s*)+)")
_CHANNELS_RING = re.compile(r"Channel\s+\d+/(\d+)\s*:\s*\d")  # "Channel 00/02 :    0   1" (a ring, not a connection)
_CHANNELS_COUNT = re.compile(r"(\d+)\s+coll channels")
# NCCL_* settings as a command line gives them (-x NCCL_ALGO=Tree) or as NCCL INFO echoes them ("NCCL_IB_DISABLE set
# by environment to 1.")
_ENV = re.compile(r"NCCL_(MAX_NCHANNELS|MIN_NCHANNELS|IB_DISABLE|P2P_DISABLE|ALGO|NET_GDR_LEVEL|NVLS_ENABLE)"
                  r"(?:=| set by environment to )([^\s.]+)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class LogEvidence:
    """What the NCCL INFO lines and the command line around a table say about how NCCL ran."""

    transports: frozenset[str] = frozenset()  # "socket", "ib", "plugin"
    ib_devices: int | None = None  # NICs NCCL's IB transport listed as used
    channels: int | None = None  # collective channels NCCL built
    shm: bool = False  # some GPU pair went through host shared memory (no peer-to-peer)
    gdr: bool | None = None  # GPUDirect RDMA on the IB connections (None: no IB connection line)
    ibverbs_missing: bool = False
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* settings on the command line
    nccl_version: str | None = None


def read_evidence(text: str) -> LogEvidence:
    """The evidence in a paste's log lines (what ``parse_nccl_tests`` ignores)."""
    transports, ib_devices, channels, shm, gdr_lines, env, version = set(), None, None, False, [], {}, None
    names = {"Socket": "socket", "IB": "ib"}
    for line in text.splitlines():
        for m in _TRANSPORT.finditer(line):
            transports.add(names.get(m.group(1), "plugin"))
        if (m := _IB_DEVICES.search(line)) is not None:
            ib_devices = max(ib_devices or 0, len(re.findall(r"\[\d+\]", m.group(1))))
        if "->" not in line and (m := _CHANNELS_RING.search(line) or _CHANNELS_COUNT.search(line)) is not None:
            channels = max(channels or 0, int(m.group(1)))
        shm = shm or "via SHM" in line
        if "via NET/IB" in line:
            gdr_lines.append("GDRDMA" in line)
        env.update(dict(_ENV.findall(line)))
        version = version or ((m := _VERSION.search(line)) and m.group(1))
    return LogEvidence(frozenset(transports), ib_devices, channels, shm, any(gdr_lines) if gdr_lines else None,
                       "Failed to open libibverbs" in text, env, version)


NVLS_SINCE = (2, 17)  # NCCL 2.17.1 added NVLink SHARP (NVLS) all-reduce on NVSwitch 3 (NCCL release notes)


def without_nvls(stated: Cluster, ev: LogEvidence) -> tuple[Cluster, str | None]:
    """The stated cluster as the log says NCCL ran it: an NCCL older than NVLS, or NVLS turned off, reduces on one
    node through the ring (the intra-node preset without its NVLS rate), and why (None: as stated)."""
    if not stated.intra.nvls_bandwidth:
        return stated, None
    version = tuple(int(x) for x in ev.nccl_version.split(".")[:2]) if ev.nccl_version else None
    why = (f"NCCL {ev.nccl_version} predates NVLS (NVLink SHARP, NCCL 2.17)" if version and version < NVLS_SINCE
           else "NCCL_NVLS_ENABLE=0 turns NVLS off" if ev.env.get("NVLS_ENABLE") == "0" else None)
    if why is None:
        return stated, None
    return replace(stated, intra=replace(stated.intra, nvls_bandwidth=0.0)), why


@dataclass(frozen=True)
class Hypothesis:
    """A known misconfiguration as a change of the stated cluster, with what would show it in a log."""

    key: str
    name: str  # what it is, a few words
    advice: str  # what to check
    cluster: Cluster | None  # the stated cluster as the misconfiguration leaves it (None: the model cannot time it)
    evidence: str | None  # what in the log shows it (None: nothing)


def hypotheses(stated: Cluster, ev: LogEvidence) -> list[Hypothesis]:
    """The misconfigurations that apply to the stated cluster, each with the log's evidence for it, if any."""
    out = []
    multi = stated.n_nodes > 1
    if multi and stated.nic.transport == "ib":
        sockets = make_nic(f"{stated.nic.name} over TCP", TRANSPORTS["socket"] | {
            "transport": "socket", "line_rate_gbps": stated.nic.line_rate / 1e9, "count": stated.nic.count})
        seen = ("the log shows NET/Socket" if "socket" in ev.transports and "ib" not in ev.transports else
                "NCCL could not open libibverbs" if ev.ibverbs_missing else
                "NCCL_IB_DISABLE=1 is set" if ev.env.get("IB_DISABLE") == "1" else None)
        out.append(Hypothesis("sockets", "NCCL over TCP sockets instead of verbs", "check that libibverbs loads, "
                              "NCCL_IB_DISABLE is unset and NCCL_IB_HCA names the HCAs", replace(stated, nic=sockets),
                              seen))
    if multi and stated.nic.count > 1:
        seen = (f"NCCL's IB transport lists {ev.ib_devices} of {stated.nic.count} NICs"
                if ev.ib_devices is not None and ev.ib_devices < stated.nic.count else None)
        out.append(Hypothesis("one_nic", f"one NIC used of {stated.nic.count}", "check NCCL_IB_HCA and that every "
                              "NIC is up and on the GPUs' PCIe switches",
                              replace(stated, nic=replace(stated.nic, count=1)), seen))
    pcie = f"{stated.gpu}-pcie"
    if stated.gpus_per_node > 1 and stated.intra.kind == "nvlink" and pcie in INTRA:
        seen = ("some GPU pairs go through host memory (via SHM)" if ev.shm else
                "NCCL_P2P_DISABLE=1 is set" if ev.env.get("P2P_DISABLE") == "1" else None)
        out.append(Hypothesis("pcie", "GPUs talking over PCIe or host memory, not NVLink", "check nvidia-smi topo "
                              "-m, NCCL_P2P_DISABLE, and that the fabric manager runs",
                              replace(stated, intra=intra_preset(pcie)), seen))
    expected_channels = nccl_channels(stated) if multi else None
    few = [int(v) for k, v in ev.env.items() if k == "MAX_NCHANNELS" and v.isdigit()]
    if few or (ev.channels is not None and expected_channels is not None and ev.channels < expected_channels):
        built = few[0] if few else ev.channels
        out.append(Hypothesis("channels", "too few channels to fill the links", "unset NCCL_MAX_NCHANNELS, or "
                              "raise NCCL_MIN_NCHANNELS", None,
                              f"NCCL built {built} channels" + (f" where the model expects {expected_channels}"
                                                                 if expected_channels else "")))
    if multi and stated.nic.transport == "ib" and ev.gdr is False:
        out.append(Hypothesis("no_gdr", "no GPUDirect RDMA (data staged through host memory)", "load "
                              "nvidia-peermem, check NCCL_NET_GDR_LEVEL", None,
                              "the IB connection lines show no GDRDMA"))
    return out


@dataclass(frozen=True)
class Diagnosis:
    """The verdict on one nccl-tests table."""

    op: str
    cluster: Cluster
    rows: tuple[dict, ...]  # size, busbw_gbytes_per_s, expected_busbw_gbytes_per_s, share
    plateau_share: float
    plateau_reached: bool
    verdict: str
    likely_causes: tuple[str, ...]
    hypotheses: tuple[dict, ...]  # key, plateau busbw the hypothesis gives, log distance to the measured one
    evidence: LogEvidence


def _plateau(rows: list[dict]) -> tuple[list[dict], bool]:
    big = [r for r in rows if r["size"] >= PLATEAU_BYTES]
    return (big, True) if big else (rows[-PLATEAU_ROWS:], False)


def diagnose(output: NcclTestsOutput, stated: Cluster, ev: LogEvidence) -> Diagnosis:
    """Measured against modelled bus bandwidth for every row, the verdict on the plateau, and the causes ranked."""
    op = output.rows[0].op
    stated, ran_without_nvls = without_nvls(stated, ev)
    rows = []
    for m in output.rows:
        expected = predict_collective(op, m.nbytes, stated)["busbw_gbytes_per_s"]
        rows.append({"size": m.nbytes, "busbw_gbytes_per_s": m.busbw_gbytes_per_s,
                     "expected_busbw_gbytes_per_s": expected,
                     "share": m.busbw_gbytes_per_s / expected if expected > 0 else math.nan})
    plateau, reached = _plateau(rows)
    measured = statistics.median(r["busbw_gbytes_per_s"] for r in plateau)
    share = statistics.median(r["share"] for r in plateau)
    if measured <= 0:
        raise ValueError("every plateau row has a bus bandwidth of 0: nccl-tests printed no bandwidth to judge "
                         "(a single rank? busbw is 0 by definition with one rank)")

    def distance(c: Cluster) -> tuple[float, float]:
        busbw = statistics.median(predict_collective(op, r["size"], c)["busbw_gbytes_per_s"] for r in plateau)
        return busbw, abs(math.log(measured / busbw))

    nominal = abs(math.log(share))
    scored = []
    for h in hypotheses(stated, ev):
        busbw, dist = distance(h.cluster) if h.cluster is not None else (None, None)
        explains = dist is not None and dist <= EXPLAINS and dist + BETTER_BY <= nominal
        scored.append((h, busbw, dist, explains))
    causes, named = [], []
    if share < NORMAL_SHARE:
        # the log's own evidence first (those the model also reproduces before the others), then the model's alone
        ranked = sorted(scored, key=lambda s: (s[0].evidence is None, not s[3], s[2] if s[2] is not None else 9.0))
        for h, busbw, _, explains in ranked:
            if h.evidence is None and not explains:
                continue
            model = f"; the model gives {busbw:.3g} GB/s that way" if busbw is not None else ""
            why = h.evidence or "the log does not show it (rerun with NCCL_DEBUG=INFO to confirm)"
            causes.append(f"{h.name}: {why}{model} ({h.advice})")
            named.append(h.name)
        if not causes:
            causes.append("none of the known misconfigurations reproduces it: " + (
                "compare with nccl-tests on two nodes only, and check the switch ports' counters and the NICs' link "
                "speed" if stated.n_nodes > 2 else
                # already two nodes: one node alone, or the pair's link, is slow
                "run nccl-tests on each node alone (is one node slow by itself?), and check the switch ports' "
                "counters and the NICs' link speed" if stated.n_nodes == 2 else
                # one node: no NIC or switch on the path
                "check nvidia-smi topo -m and nvidia-smi nvlink --status (every link up), the GPUs' clocks, and "
                "that the fabric manager runs"))
    if not reached:
        causes.append(f"the sweep stops at {rows[-1]['size']:,} bytes, below the plateau (about {PLATEAU_BYTES >> 20} "
                      "MB): rerun with -e 1G or more")
    where = (f"{stated.n_nodes} node{'s' if stated.n_nodes > 1 else ''} x {stated.gpus_per_node} {stated.gpu.upper()}"
             + (f" over {stated.nic.count} x {stated.nic.name} ({efficiency_limit(stated)})" if stated.n_nodes > 1
                else f" ({stated.intra.name}" + (f", no NVLS: {ran_without_nvls}" if ran_without_nvls else "") + ")"))
    at = "on the plateau" if reached else f"at its largest sizes (up to {rows[-1]['size']:,} bytes)"
    expected = measured / share
    head = f"{op} on {where}: {measured:.3g} GB/s busbw {at}, {share:.0%} of the {expected:.3g} GB/s the model gives"
    if share > FASTER_SHARE and stated.nic.share_at_8_gpus < 1 and \
            measured / distance(whole_wire(stated))[0] <= FASTER_SHARE:
        # the generic share of the wire 8 GPUs' sockets keep is of a 32 Gb/s link; on this one they fill it, as
        # birder calibrate then writes (share_at_8_gpus = 1)
        verdict = (f"{head}: normal for this hardware, its GPUs' sockets keeping the whole wire (the model's generic "
                   f"share of it, {stated.nic.share_at_8_gpus:g} at 8 GPUs, is of a faster link; birder calibrate "
                   "writes the whole wire)")
    elif share > FASTER_SHARE:
        verdict = (f"{head}: faster than the stated hardware allows, so the hardware is not what was stated (more "
                   "NICs, faster links, or switches that reduce: SHARP/NVLS); check --network and --nics-per-node")
    elif share >= NORMAL_SHARE:
        verdict = f"{head}: normal for this hardware"
    else:
        level = "far below" if share < FAR_BELOW_SHARE else "below"
        verdict = f"{head}: {level} what this hardware gives" + (f"; most likely {named[0]}" if named else "")
    table = tuple({"key": h.key, "plateau_busbw_gbytes_per_s": busbw, "log_distance": dist,
                   "evidence": h.evidence, "explains": explains} for h, busbw, dist, explains in scored)
    return Diagnosis(op, stated, tuple(rows), share, reached, verdict, tuple(causes), table, ev)
