"""`birder collective` and the physical checks of issue 9, each against a published nccl-tests figure (cited)."""

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from birder.cli import main
from sim.collective import OPS, bus_factor, parse_size, predict_collective, sweep_sizes
from sim.hardware import cluster, nic_preset
from sim.workload import predict

GiB = 2**30


@pytest.mark.parametrize("network, gpu, low, high", [
    ("ib-hdr", "a100", 20.0, 24.5),  # "24 GB/s is the peak performance per 200G NIC" (sjeaugey, nccl-tests issue
                                     # 119); 3 nodes x 4 HDR NICs averaged 84.8 GB/s busbw, 21.2 per NIC (same issue)
    ("ib-ndr", "h100", 44.0, 48.5),  # NDR 400G behind PCIe Gen5: 46-48 GB/s per NIC (nccl-tests issue 290)
])
@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_one_gib_allreduce_bus_bandwidth_on_one_nic_per_node_is_the_published_per_nic_figure(network, gpu, low, high,
                                                                                           nodes):
    r = predict_collective("all-reduce", GiB, cluster(network, nodes, 8, gpu=gpu), algorithm="ring")
    assert low <= r["busbw_gbytes_per_s"] <= high


@pytest.mark.parametrize("gpu, low, high", [
    ("a100", 20.0, 25.0),  # PCIe Gen4 x16: NCCL counts 24 GB/s (src/graph/topo.cc); an A100 with its HDR NIC reaches
                           # the 24 GB/s per NIC of nccl-tests issue 119, and no more through a faster NIC
    ("v100", 10.0, 12.5),  # PCIe Gen3 x16: 12 GB/s (topo.h PCI_BW); "12.2 GB/s for a 100Gbps card is as good as you
                           # can get" on V100 nodes (sjeaugey, nccl-tests issue 29)
])
def test_an_ndr_nic_behind_an_older_pcie_carries_what_the_pcie_link_does(gpu, low, high):
    """The PCIe link between GPU and NIC caps the NIC: one A100 cannot push 47 GB/s through an NDR NIC."""
    r = predict_collective("all-reduce", GiB, cluster("ib-ndr", 4, 8, gpu=gpu), algorithm="ring")
    assert low <= r["busbw_gbytes_per_s"] <= high
    assert cluster("ib-ndr", 4, 8, gpu=gpu).nic_bandwidth < cluster("ib-ndr", 4, 8, gpu="h100").nic_bandwidth


def test_sockets_shared_by_eight_gpus_reach_the_published_share_of_the_wire():
    """NCCL over TCP: 8 GPUs per node on one 32 Gb/s NIC, "never more than 60% of wire speed" (NVIDIA/nccl issue
    209); 1 GPU per node keeps the TCP frame share (94%); past 5 GB/s the host-staged socket path binds however
    fast the wire (100 Gb/s TCP: 4-6 GB/s with 8 ranks per node, nccl issue 450; 4.7 GB/s with 1, nccl issue 398).
    And every Ethernet preset is built one way: more line rate never gives less."""
    def busbw(net, gpus, **overrides):
        c = cluster(net, 4, gpus)
        if overrides:
            c = replace(c, nic=nic_preset(net, **overrides))
        return predict_collective("all-reduce", GiB, c, algorithm="ring")["busbw_gbytes_per_s"] * 1e9

    wire32 = 32e9 / 8
    assert 0.55 <= busbw("40gbe", 8, line_rate_gbps=32) / wire32 <= 0.62
    assert 0.90 <= busbw("40gbe", 1, line_rate_gbps=32) / wire32 <= 0.95
    assert 4.0e9 <= busbw("100gbe", 8) <= 6.0e9 and 4.0e9 <= busbw("100gbe", 1) <= 6.0e9
    speeds = [busbw(net, 8) for net in ("10gbe", "25gbe", "40gbe", "100gbe")]
    assert speeds == sorted(speeds) and len(set(speeds)) == 4
    # the per-NIC figures sim/README.md quotes for 8 and 1 GPUs per node
    for net, eight, one in (("10gbe", 0.75, 1.18), ("25gbe", 1.88, 2.94), ("40gbe", 3.01, 4.71), ("100gbe", 5.0, 5.0)):
        assert round(cluster(net, 2, 8).nic_bandwidth / 1e9, 2) == eight
        assert round(cluster(net, 2, 1).nic_bandwidth / 1e9, 2) == one


@pytest.mark.parametrize("network", ["ib-hdr", "ib-ndr", "25gbe"])
def test_two_nics_give_about_twice_one(network):
    """NCCL's channels spread a ring over every NIC (rail-aligned): 2 NICs, twice the bus bandwidth (nccl-tests
    issue 252: about 24 GB/s per HDR NIC with 4 NICs per node)."""
    one = predict_collective("all-reduce", GiB, cluster(network, 4, 8, nic_count=1))
    two = predict_collective("all-reduce", GiB, cluster(network, 4, 8, nic_count=2))
    # over sockets each NIC also serves half the GPUs, so its sockets are less shared (share_at_8_gpus)
    sockets = 1.0 if network != "25gbe" else nic_preset(network).socket_share(4) / nic_preset(network).socket_share(8)
    assert 1.85 <= two["busbw_gbytes_per_s"] / one["busbw_gbytes_per_s"] / sockets <= 2.0


@pytest.mark.parametrize("nodes", [2, 3])
def test_four_hdr_nics_per_node_reach_the_published_busbw(nodes):
    """8 A100 and 4 ConnectX-6 HDR NICs per node, ring: 91 GB/s (nccl-tests issue 100), 86 GB/s (issue 175),
    about 95 GB/s, "~24GB/s per NIC" (issue 252); 3 nodes: average 84.8, peak about 96 GB/s (issue 119)."""
    r = predict_collective("all-reduce", GiB, cluster("ib-hdr", nodes, 8, nic_count=4), algorithm="ring")
    assert 84.0 <= r["busbw_gbytes_per_s"] <= 96.5


def test_small_message_latency_on_two_ndr_nodes_is_in_the_published_range():
    """An 8-byte all-reduce on 2 nodes x 8 GPUs: 20-50 us published (2 x 8 H20 about 46 us, NVIDIA/nccl issue
    1244; nccl-tests on NDR clusters report 20-40 us)."""
    r = predict_collective("all-reduce", 8, cluster("ib-ndr", 2, 8))
    assert 20e-6 <= r["time_s"] <= 50e-6


def test_small_broadcast_over_sockets_is_the_published_latency():
    """8-byte broadcast between 2 hosts over NET/Socket: 38-46 us (nccl-tests issue 82)."""
    r = predict_collective("broadcast", 8, cluster("10gbe", 2, 1))
    assert 38e-6 <= r["time_s"] <= 46e-6


def test_100gbe_tcp_8mb_allreduce_on_4_nodes_is_near_the_measured_3_6_ms():
    """4 nodes x 8 V100 over 100 Gb/s TCP: 8 MB all-reduce about 3.6 ms, and the best busbw over 8-128 MB 4-6
    GB/s (NVIDIA/nccl issue 450). Predicted 4.16 ms (+16%: NCCL's Volta ring plateau factor 1.9 on the latency)."""
    c = cluster("100gbe", 4, 8, gpu="v100")
    assert predict_collective("all-reduce", 8 * 2**20, c)["time_s"] == pytest.approx(3.6e-3, rel=0.2)
    best = max(predict_collective("all-reduce", s * 2**20, c)["busbw_gbytes_per_s"] for s in (8, 16, 32, 64, 128))
    assert 4.0 <= best <= 6.0


def bound(op, nbytes, c):
    """What no algorithm can beat: the bytes a node must move through its NICs at their LINE rate (not the
    achieved one), or through one GPU's port inside a node; and one network hop of the transport."""
    n, g, k = c.n_nodes, c.gpus_per_node, c.nic.count
    node_line = k * c.nic.line_rate / 8
    if n == 1:
        p = g
        volume = {"all-reduce": 2 * (p - 1) / p * nbytes, "broadcast": nbytes}.get(op, (p - 1) / p * nbytes)
        return volume / c.intra.port_bandwidth
    volume = {"all-reduce": 2 * (n - 1) / n * nbytes, "broadcast": nbytes,
              "all-to-all": g * (n - 1) / n * nbytes}.get(op, (n - 1) / n * nbytes)
    return max(volume / node_line, c.nic.latency + 0.8e-6)  # perftest's ib_send_lat: about 0.8 us one way


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(OPS), log_bytes=st.integers(3, 31), n=st.sampled_from([1, 2, 3, 8, 64]),
       g=st.sampled_from([1, 2, 8]), k=st.sampled_from([1, 2, 8]),
       net=st.sampled_from(["10gbe", "100gbe", "roce-100gbe", "ib-edr", "ib-hdr", "ib-ndr", "birder-paper-ib"]))
def test_no_prediction_beats_the_bandwidth_or_latency_bound(op, log_bytes, n, g, k, net):
    if n * g == 1:
        return  # one rank moves nothing
    c = cluster(net, n, g, nic_count=min(k, g))
    nbytes = 2**log_bytes
    r = predict_collective(op, nbytes, c)
    assert r["time_s"] >= bound(op, nbytes, c) * (1 - 1e-9)
    assert math.isfinite(r["busbw_gbytes_per_s"]) and r["busbw_gbytes_per_s"] > 0


def test_bus_bandwidth_follows_nccl_tests_definitions():
    assert bus_factor("all-reduce", 16) == pytest.approx(30 / 16)
    assert bus_factor("all-gather", 16) == bus_factor("reduce-scatter", 16) == pytest.approx(15 / 16)
    assert bus_factor("broadcast", 16) == 1.0
    r = predict_collective("all-gather", 2**24, cluster("ib-hdr", 2, 8))
    assert r["algbw_gbytes_per_s"] == pytest.approx(2**24 / r["time_s"] / 1e9)
    assert r["busbw_gbytes_per_s"] == pytest.approx(r["algbw_gbytes_per_s"] * 15 / 16)


def test_sizes_parse_as_nccl_tests_takes_them():
    assert [parse_size(s) for s in ("8", "64K", "8M", "1G")] == [8, 65536, 8 * 2**20, GiB]
    assert sweep_sizes(8, 64) == [8, 16, 32, 64]
    for bad in ("0", "-8", "1.5", "abc", "nanK"):
        with pytest.raises(ValueError, match="bytes"):
            parse_size(bad)


def test_collective_command_json_and_sweep_plot(tmp_path, capsys):
    assert main(["collective", "--op", "all-reduce", "--bytes", "1G", "--nodes", "2", "--network", "ib-ndr",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"time_s", "algbw_gbytes_per_s", "busbw_gbytes_per_s", "algorithm"} <= set(out)
    assert main(["collective", "--op", "all-to-all", "--bytes", "1K:1M", "--nodes", "4", "--network", "100gbe",
                 "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["results"]) == 11 and (tmp_path / "collective.png").stat().st_size > 0
    assert (tmp_path / "collective.csv").read_text().count("\n") == 12


@pytest.mark.parametrize("argv, message", [
    (["--op", "broadcast", "--bytes", "8", "--algorithm", "tree"], "all-reduce only"),
    (["--op", "all-reduce", "--bytes", "0"], "bytes"),
    (["--op", "all-reduce", "--bytes", "8", "--nics-per-node", "9"], "nics"),
])
def test_bad_collective_arguments_exit_2_with_one_line(argv, message, capsys):
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err.lower() and "\n" not in err


# ----------------------------------------------------------------------------------- whole-job physical checks
def test_ten_times_the_bandwidth_speeds_up_communication_bound_predictions():
    """ResNet-50 on 512 nodes (issue 9: 29,814 samples/s on both 10gbe and 100gbe before): Birder and SGDM are
    faster on 100 GbE than on 10 GbE, and SGDM, communication-bound on 10 GbE, much faster."""
    def throughput(net, opt):
        return predict(cluster(net, 512), model="resnet50", optimizer=opt).throughput

    assert throughput("100gbe", "birder") > throughput("10gbe", "birder")
    assert throughput("100gbe", "sgdm") > 2 * throughput("10gbe", "sgdm")


def test_more_nics_speed_up_a_bandwidth_bound_job():
    """BERT-large on 4 nodes of 25 GbE (issue 9: 114.99 samples/s with 1 or 4 NICs before)."""
    def throughput(k):
        return predict(cluster("25gbe", 4, nic_count=k), model="bert-large", batch_per_gpu=8).throughput

    assert throughput(2) > 1.5 * throughput(1) and throughput(4) > 1.3 * throughput(2)
