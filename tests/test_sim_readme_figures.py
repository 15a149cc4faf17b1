"""The simulator figures sim/README.md quotes are the simulator's: each predicted cell of its physical-checks table,
and the figures its prose quotes, are recomputed here and must read exactly as printed (the published ranges they
are checked against are asserted, with their sources, in tests/test_sim_collective.py)."""

import re
from pathlib import Path

import pytest

from sim.api import predict_config
from sim.collective import predict_collective
from sim.hardware import cluster
from sim.validation import corpus_setup
from sim.validation.corpus import load_corpus

GiB = 2**30
README = Path(__file__).resolve().parents[1] / "sim" / "README.md"


def span(values: list[float], fmt: str) -> str:
    """'lo-hi' at the printed precision, one figure where both print alike."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def busbw(network: str, nodes: int, gpu: str = "a100", nics: int = 1) -> float:
    c = cluster(network, nodes, 8, gpu=gpu, nic_count=nics)
    return predict_collective("all-reduce", GiB, c, algorithm="ring")["busbw_gbytes_per_s"]


def one_nic_per_node(network: str, gpu: str) -> str:
    return span([busbw(network, n, gpu) for n in (2, 4, 8, 16)], ".1f") + " GB/s"


def two_nics_over_one() -> str:
    return "x" + span([busbw(net, 4, gpu, 2) / busbw(net, 4, gpu, 1)
                       for net, gpu in (("ib-hdr", "a100"), ("ib-ndr", "h100"))], ".2f")


def small_allreduce() -> str:
    r = predict_collective("all-reduce", 8, cluster("ib-ndr", 2, 8))
    return f"{r['time_s'] * 1e6:.0f} us ({r['algorithm']}, {r['protocol']})"


def small_broadcast() -> str:
    return f"{predict_collective('broadcast', 8, cluster('10gbe', 2, 1))['time_s'] * 1e6:.0f} us"


def tcp_8mb() -> str:
    v100, a100 = (predict_collective("all-reduce", 8 * 2**20, cluster("100gbe", 4, 8, gpu=gpu))["time_s"] * 1e3
                  for gpu in ("v100", "a100"))
    return f"{v100:.2f} ms ({a100:.2f} on A100)"


ROWS = {  # the check column of the README's table: how its predicted cell is computed
    "1 GiB all-reduce busbw, one HDR NIC per node (2-16 nodes, A100)": lambda: one_nic_per_node("ib-hdr", "a100"),
    "same, one NDR NIC, H100 (`--gpu h100`; an A100's PCIe Gen4 holds it at 24)":
        lambda: one_nic_per_node("ib-ndr", "h100"),
    "two NICs vs one (4 nodes, HDR on A100 and NDR on H100)": two_nics_over_one,
    "1 GiB ring all-reduce, 2-3 nodes x 4 HDR NICs": lambda: span([busbw("ib-hdr", n, nics=4) for n in (2, 3)], ".1f")
    + " GB/s",
    "8-byte all-reduce, 2 x 8 GPUs on NDR": small_allreduce,
    "8-byte broadcast, 2 hosts over sockets": small_broadcast,
    "8 MB all-reduce, 4 x 8 V100 on 100 GbE TCP": tcp_8mb,
}


def readme_table() -> dict[str, str]:
    """check -> predicted cell of the '## Physical checks' table."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Physical checks", 1)[1]
    table = section[section.index("| check |"):].split("\n\n", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines()]
    return {cells[0].removeprefix("| "): cells[1] for cells in rows[1:] if len(cells) > 2}


@pytest.mark.parametrize("check", ROWS)
def test_readme_physical_check_reads_as_the_simulator_predicts(check):
    assert readme_table().get(check) == ROWS[check](), f"sim/README.md physical checks: row {check!r}"


def test_every_predicted_row_of_the_readme_table_is_computed_here():
    table = readme_table()
    assert set(table) - set(ROWS) <= {"no collective beats the line-rate bound or one hop"}, set(table) - set(ROWS)


def quoted(pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` where it matches sim/README.md (its prose wraps lines: whitespace is one space)."""
    found = re.search(pattern, " ".join(README.read_text(encoding="utf-8").split()))
    assert found, f"sim/README.md no longer says {pattern!r}"
    return found.groups()


def test_readme_deepspeed_measured_link_error_reads_as_the_simulator_predicts():
    """The DeepSpeed blog's 1-bit Adam rows at their measured 4.1 Gb/s: how much too slow they are predicted."""
    rows = [r for r in load_corpus() if r.source == "deepspeed-onebit-adam-blog" and r.optimizer == "onebit-adam"]
    slow = [1 - corpus_setup.corpus_predict(r, fitted=False).throughput / r.throughput for r in rows]
    assert rows and min(slow) > 0
    assert quoted(r"are predicted (\d+)-(\d+)% too slow at that rate") == (f"{min(slow):.0%}"[:-1],
                                                                            f"{max(slow):.0%}"[:-1])


def test_readme_40gbe_slower_than_25gbe_from_the_node_count_it_quotes():
    """The incast paragraph: Birder on the 40 GbE preset falls behind 25 GbE from the node count quoted, on."""
    nodes = (2, 4, 8, 16, 32, 64)
    slower = [predict_config("resnet50", n, "40gbe", "birder")["throughput"]
              < predict_config("resnet50", n, "25gbe", "birder")["throughput"] for n in nodes]
    first = nodes[slower.index(True)]
    assert all(slower[nodes.index(first):])
    assert quoted(r"slower on 40 GbE than on 25 GbE from (\d+) nodes \(ResNet-50, built-in A100 compute, 2-64 "
                  r"nodes\)") == (str(first),)
