"""Properties of the simulator's network and system layers: the flow engine, symmetry, NCCL's latencies, bytes.

Changed on purpose from the earlier lock-step model (issue 9): a collective is now pipelined as NCCL runs it (its
latency once per operation, its bytes streaming over max-min shared links), so the closed forms below are NCCL's
(latency + bytes / bandwidth), not 2(p-1) lock-step rounds.
"""

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from birder_ref.execute import ByteLog, run_phase
from birder_ref.registry import optimizer_schedule
from birder_ref.schedules import Layout, allreduce, padded_dim, schedule, tree_allreduce
from sim.hardware import cluster
from sim.network import FlowNetwork, Link, max_min_rates, transfer_time
from sim.system import (
    BASE_LATENCY_US,
    collective_schedule,
    collective_time,
    expanded_flow_time,
    flow_time,
    fp32_allreduce,
    incast_bracket,
    nccl_allreduce_algorithm,
    op_time,
    ring_latency,
    step_schedule,
    traffic,
)

networks = st.sampled_from(["10gbe", "25gbe", "100gbe", "ib-hdr", "ib-ndr"])


def test_max_min_sharing_gives_a_flow_what_another_cannot_use():
    """Flow A crosses links 1 (1 MB/s) and 2 (0.25 MB/s); flow B only link 1. Max-min: A gets 0.25 (its
    bottleneck), B the remaining 0.75 MB/s of link 1, not an equal half."""
    one, two = Link("1", 1e6), Link("2", 0.25e6)
    env = simpy.Environment()
    net = FlowNetwork(env)
    a = net.transfer(1e6, {one: 1, two: 1})
    b = net.transfer(1.5e6, {one: 1})
    assert [f.rate for f in net.active] == [pytest.approx(0.25e6), pytest.approx(0.75e6)]
    ends = {}
    a.callbacks.append(lambda _: ends.setdefault("a", env.now))
    b.callbacks.append(lambda _: ends.setdefault("b", env.now))
    env.run()
    assert ends == {"a": pytest.approx(4.0), "b": pytest.approx(2.0)}  # b alone moves 1.5 MB at 0.75 MB/s


def test_flows_share_a_link_fairly_and_rates_are_recomputed_as_they_end():
    """1 MB and 3 MB on one 1 MB/s link: half each until the small one ends at 2 s, then the large alone: 4 s."""
    link = Link("l", 1e6)
    env = simpy.Environment()
    net = FlowNetwork(env)
    ends = {}
    for name, nbytes in (("small", 1e6), ("large", 3e6)):
        net.transfer(nbytes, {link: 1}).callbacks.append(lambda _, n=name: ends.setdefault(n, env.now))
    env.run()
    assert ends == {"small": pytest.approx(2.0), "large": pytest.approx(4.0)}
    assert link.busy_bytes == pytest.approx(4e6)


def test_multiplicity_counts_identical_flows():
    link = Link("l", 10.0)
    flows = [type("F", (), {})() for _ in range(1)]
    from sim.network import Flow

    flows = [Flow(1.0, {link: 4}, None)]
    max_min_rates(flows)
    assert flows[0].rate == pytest.approx(2.5)


def test_flows_finish_at_huge_simulated_times():
    """Float residue at huge times may never leave a flow a sliver short: the engine finishes what it scheduled
    (issue 12: a calibration at 0.001 samples/s hung)."""
    env = simpy.Environment(initial_time=1e15)
    net = FlowNetwork(env)
    done = [net.transfer(b, {Link("l", 3e-7): 1}) for b in (1.0, 7.0, 1e9)]
    env.run(env.all_of(done))
    assert env.now > 1e15


@pytest.mark.parametrize("n,g,k,over,leaf", [(2, 2, 1, 1.0, 1), (3, 4, 2, 1.0, 1), (4, 4, 2, 2.0, 1),
                                             (3, 2, 1, 3.0, 1), (3, 4, 4, 1.5, 1), (4, 2, 2, 4.0, 2),
                                             (8, 2, 1, 3.0, 4)])
@pytest.mark.parametrize("which", ["allreduce", "tree", "hierarchical", "flat", "ring", "allgather",
                                   "onebit-adam", "marsit"])
@pytest.mark.parametrize("intra", ["a100-nvlink", "a100-pcie"])
def test_representative_node_equals_the_full_expansion(n, g, k, over, leaf, which, intra):
    """Every link of every node, every message of the cluster, max-min shared: the same time as the
    representative node's counted flows (the symmetry shortcut is exact for these schedules). On a PCIe node
    a GPU's own link carries its intra- and inter-node messages at once (they share it)."""
    layout = Layout(n, g)
    if which == "allreduce":
        sched = allreduce(layout, 10**5)
    elif which == "tree":
        sched = tree_allreduce(layout, 10**5)
    elif which in ("onebit-adam", "marsit"):
        sched = optimizer_schedule(which, layout, 10**5)
    else:
        sched = schedule(which, layout, 10**5)
    base = cluster("25gbe", n, g, intra=intra, oversubscription=over)
    c = replace(base, nic=replace(base.nic, count=k), nodes_per_leaf=leaf)
    for phase in sched.phases:
        assert flow_time((phase,), layout, c) == pytest.approx(expanded_flow_time((phase,), layout, c), rel=1e-9)
    if which in ("allreduce", "tree"):  # one pipelined operation: all its phases at once
        assert flow_time(sched.phases, layout, c) == pytest.approx(expanded_flow_time(sched.phases, layout, c),
                                                                   rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 16), g=st.sampled_from([1, 2, 4, 8]), k=st.sampled_from([1, 2, 4, 8]),
       mbytes=st.integers(64, 1024), net=st.sampled_from(["100gbe", "ib-hdr", "ib-ndr"]))
def test_large_ring_allreduce_is_latency_plus_bytes_over_every_nic(n, g, k, mbytes, net):
    """A large flat ring all-reduce, Simple protocol: NCCL's ring latency once, plus 2(p-1)/p S over the node's
    k NICs (channels), or over the GPU's NVLink port if that is slower."""
    k = min(k, g)
    c = cluster(net, n, g, nic_count=k)
    dim = mbytes * 2**18
    sched = allreduce(Layout(n, g), dim)
    p = n * g
    size = 4 * sched.padded_dim
    bandwidth = min(k * c.nic_bandwidth, c.intra.port_bandwidth)
    expected = ring_latency(c, "Simple", 2 * (p - 1), 2 * (n - 1), True) + 2 * (p - 1) / p * size / bandwidth
    op = op_time("ring_allreduce", sched.phases, sched.layout, c, "Simple")
    assert op.seconds == pytest.approx(expected, rel=1e-9)
    assert collective_time(sched, c) <= op.seconds  # NCCL's tuner may find LL128 faster still


def test_the_base_latency_is_paid_once_per_operation():
    """An 8-element ring all-reduce on 2 nodes: one base latency, not one per step."""
    c = cluster("ib-ndr", 2, 8)
    sched = allreduce(Layout(2, 8), 8)
    t = collective_time(sched, c)
    assert t < 2 * (BASE_LATENCY_US["ring"]["LL"] + 30 * 1.0 + 2 * 2.7) * 1e-6
    assert t > BASE_LATENCY_US["ring"]["LL"] * 1e-6


@given(n=st.integers(2, 64), scheme=st.sampled_from(["hierarchical", "flat", "ring", "allgather", "ps"]),
       dim=st.integers(1, 10**6))
def test_traffic_matches_the_schedules_bytes(n, scheme, dim):
    """What the system layer counts equals what the schedule says each endpoint sends (one source of truth)."""
    sched = schedule(scheme, Layout(n, 4), dim)
    t = traffic(sched)
    sent = sum(b for ph in sched.phases for ep, b in ph.bytes_sent().items() if ep < sched.layout.n_ranks)
    assert (t.intra_node_bytes_per_gpu + t.inter_node_bytes_per_gpu) * sched.layout.n_ranks == pytest.approx(sent)


@given(n=st.integers(1, 64), g=st.sampled_from([1, 2, 4, 8]), dim=st.integers(1, 10**7))
def test_hierarchical_inter_node_bytes_are_the_papers(n, g, dim):
    """Section 4: the whole cluster sends 2(n-1)P/32 bytes between nodes, P = 4 * padded dim bytes."""
    sched = schedule("hierarchical", Layout(n, g), dim)
    P = 4 * padded_dim(dim, n * g)
    assert traffic(sched).inter_node_bytes_per_gpu * n * g == 2 * (n - 1) * P // 32


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 16), dim=st.integers(1, 10**6), factor=st.floats(1.01, 10))
def test_more_bandwidth_is_never_slower(n, dim, factor):
    for sched in (allreduce(Layout(n, 8), dim), schedule("hierarchical", Layout(n, 8), dim),
                  tree_allreduce(Layout(n, 8), dim), schedule("ps", Layout(n, 8), dim)):
        for net in ("25gbe", "birder-paper-10gbe"):
            c = cluster(net, n)
            faster = replace(c, nic=replace(c.nic, line_rate=c.nic.line_rate * factor))
            assert collective_time(sched, faster) <= collective_time(sched, c) * (1 + 1e-12)


def test_ten_times_the_bandwidth_speeds_up_a_bandwidth_bound_collective():
    sched = allreduce(Layout(8, 8), 25 * 2**20)
    slow, fast = collective_time(sched, cluster("10gbe", 8)), collective_time(sched, cluster("ib-edr", 8))
    assert fast < slow / 5


def test_oversubscribed_switch_is_slower_for_inter_node_traffic():
    c = cluster("100gbe", 8)
    sched = allreduce(Layout(8, 8), 10**7)
    assert collective_time(sched, replace(c, oversubscription=4.0)) > collective_time(sched, c)


def test_oversubscription_slows_only_what_crosses_the_spine():
    """Leaves of 4 nodes, spine oversubscribed 4:1: a 2-node job stays under one leaf and loses nothing; on 8
    nodes (2 leaves) a flat all-to-all, which sends most bytes across the spine, slows down, while a ring, which
    crosses it once per leaf, does not."""
    def t(sched, n, over):
        return collective_time(sched, replace(cluster("ib-hdr", n, 8, oversubscription=over), nodes_per_leaf=4))

    two = allreduce(Layout(2, 8), 10**8)
    assert t(two, 2, 4.0) == pytest.approx(t(two, 2, 1.0))
    a2a, ring = schedule("flat", Layout(8, 8), 10**9), allreduce(Layout(8, 8), 10**8)
    assert t(a2a, 8, 4.0) > 1.5 * t(a2a, 8, 1.0)
    assert t(ring, 8, 4.0) == pytest.approx(t(ring, 8, 1.0))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16])
def test_tree_allreduce_sums_and_counts_bytes(n):
    """The double binary tree phases, executed, leave every member with the sum of its two chunks."""
    layout = Layout(n, 2)
    sched = tree_allreduce(layout, 1000)
    reduce_phase, broadcast = sched.phases[1], sched.phases[2]
    rng = np.random.default_rng(n)
    buffers = {e: rng.integers(0, 5, (max(2, n), reduce_phase.chunk_elements)).astype(np.float32)
               for e in range(layout.n_ranks)}
    expected = {j: sum(buffers[e][:2] for e in layout.local_rank_group(j)) for j in range(2)}
    log = ByteLog()
    run_phase(reduce_phase, buffers, log)
    run_phase(broadcast, buffers, log)
    for e in range(layout.n_ranks):
        np.testing.assert_array_equal(buffers[e][:2], expected[e % 2])
    for phase in (reduce_phase, broadcast):
        assert log.sent.get(phase.name, {}) == {k: v for k, v in phase.bytes_sent().items() if v}


def test_tree_throughput_has_no_cliff_where_a_tree_level_is_added():
    """Pipelined trees: the bus bandwidth of a 64 MB tree all-reduce moves smoothly from 7 to 9 nodes (the
    lock-step model lost 5-10% at each new level)."""
    def busbw(n):
        sched = tree_allreduce(Layout(n, 8), 16 * 2**20)
        return 64 * 2**20 / collective_time(sched, cluster("ib-hdr", n))

    assert busbw(9) == pytest.approx(busbw(7), rel=0.02)


def test_nccl_picks_ring_for_large_buckets_and_tree_at_scale_or_small_sizes():
    assert nccl_allreduce_algorithm(cluster("10gbe", 2), 100e6) == "ring"
    assert nccl_allreduce_algorithm(cluster("10gbe", 512), 1e6) == "tree"
    assert nccl_allreduce_algorithm(cluster("ib-ndr", 2), 8) == "tree"
    assert nccl_allreduce_algorithm(cluster("10gbe", 1), 1e3) == "ring"


def test_incast_comes_from_a_sites_fit_or_the_switch_buffer_of_an_ethernet_preset():
    """Flat's all-to-all over 64 nodes bursts window-sized messages into each NIC: on the paper's 10 GbE site it
    loses one retransmission timeout (its fitted bracket), and so it does on the generic 10 GbE preset, whose
    switch (12 MB shared, alpha 1.27: Arista 7050X) leaves each of 64 congested ports 12 MB x 1.27 / (1 + 64 x
    1.27) = 0.185 MB; its ring all-gather (one flow into each NIC) loses none. Verbs (lossless) never time out."""
    sched = schedule("flat", Layout(64, 8), 10**8)
    for net in ("birder-paper-10gbe", "10gbe"):
        c = cluster(net, 64)
        no_incast = replace(c, nic=replace(c.nic, incast_onset_bytes=math.inf, incast_certain_bytes=math.inf,
                                           switch_buffer_bytes=math.inf))
        extra = collective_time(sched, c) - collective_time(sched, no_incast)
        assert extra == pytest.approx(c.nic.retransmission_timeout)
    onset, certain = incast_bracket(cluster("10gbe", 64))
    assert onset == pytest.approx(12e6 * 1.27 / (1 + 64 * 1.27)) and certain == 2 * onset
    assert incast_bracket(cluster("10gbe", 2))[0] > incast_bracket(cluster("10gbe", 64))[0]  # fewer ports congested
    for net in ("roce-100gbe", "ib-ndr"):
        assert incast_bracket(cluster(net, 64)) == (math.inf, math.inf)


def test_parameter_server_waits_for_its_incast():
    """p workers push D/8 bytes each into one server NIC, then pull as much back: 2 p D / 8 bytes at the server."""
    c = cluster("ib-ndr", 8, 8)
    sched = collective_schedule("parameter-server", Layout(8, 8), 10**7, bits=1)
    p, nbytes = 64, sched.padded_dim // 8
    bandwidth_only = 2 * p * nbytes / c.nic_bandwidth
    per_peer = 2 * p * c.nic.peer_overhead  # the server posts to every worker, in each phase
    assert bandwidth_only + per_peer < collective_time(sched, c) < bandwidth_only + per_peer + 100e-6


@pytest.mark.parametrize("nics", [1, 2])
@pytest.mark.parametrize("optimizer", ["onebit-adam", "birder"])
def test_a_barely_oversubscribed_switch_changes_time_continuously(nics, optimizer):
    base = cluster("25gbe", 8, nic_count=nics)
    sched = optimizer_schedule(optimizer, Layout(8, 8), 25_000_000)
    t = collective_time(sched, base)
    assert collective_time(sched, replace(base, oversubscription=1.0001)) == pytest.approx(t, rel=1e-3)
    assert collective_time(sched, replace(base, oversubscription=8.0)) > t


def test_point_to_point_pays_the_published_per_peer_cost():
    """An all-to-all of tiny messages over 64 x 8 ranks: each GPU's 504 remote peers at 2.5 us (nccl-tests
    issue 78) dominate; on the paper's site each costs the fitted per-message overhead instead, in series."""
    flat = schedule("flat", Layout(64, 8), 64 * 8 * 8)
    sched = replace(flat, phases=flat.phases[:1])  # its all-to-all (its all-gather is a ring)
    generic = cluster("ib-ndr", 64)
    t = collective_time(sched, generic)
    assert 504 * 2.5e-6 < t < 504 * 2.5e-6 + 100e-6
    site = cluster("birder-paper-ib", 64)
    assert collective_time(sched, site) > 504 * site.nic.message_overhead


def test_incast_depends_on_the_burst_not_only_on_the_flow_count():
    """Birder's hierarchical all-to-all of a 25 MB bucket sends D/(8 n G) bytes per flow: a burst of about a
    bucket/8 at any n, so no timeout even at 512 nodes on the paper's 10 GbE site."""
    for n in (38, 512):
        c = cluster("birder-paper-10gbe", n)
        no_incast = replace(c, nic=replace(c.nic, incast_onset_bytes=math.inf, incast_certain_bytes=math.inf,
                                           switch_buffer_bytes=math.inf))
        sched = schedule("hierarchical", Layout(n, 8), 6_553_600)
        assert collective_time(sched, c) == collective_time(sched, no_incast)


def test_a_cluster_holds_the_one_layout_its_schedules_run_on():
    """A cluster's nodes x GPUs is ``birder_ref.schedules.Layout``: its sizes, the schedules it times and a change
    of node count all read that one layout; anything else in its place, or too many GPUs, is refused."""
    c = cluster("10gbe", 3, 4, nic_count=2)
    assert c.layout == Layout(3, 4) and (c.n_nodes, c.gpus_per_node, c.n_gpus) == (3, 4, 12)
    assert step_schedule("birder", c, 64).layout == c.layout == fp32_allreduce(c, 64).layout
    five = c.with_nodes(5)
    assert five.layout == Layout(5, 4) and replace(five, layout=c.layout) == c
    with pytest.raises(ValueError, match="cluster: layout must be a birder_ref.schedules.Layout"):
        replace(c, layout=(3, 4))
    with pytest.raises(ValueError, match="cluster: n_nodes must be a positive integer, got 0"):
        c.with_nodes(0)
    with pytest.raises(ValueError, match="16385 nodes x 4 GPUs per node = 65540 GPUs exceeds 65,536"):
        replace(c, layout=Layout(16385, 4))
    with pytest.raises(ValueError, match="count = 6 NICs for 4 GPUs per node"):  # GPUs with unequal NICs
        replace(c, nic=replace(c.nic, count=6))
    with pytest.raises(ValueError, match="at most 8 NICs per GPU"):
        replace(c, layout=Layout(3, 1), nic=replace(c.nic, count=9))


def test_transfer_time_of_nothing_is_zero():
    assert transfer_time([]) == 0.0


@pytest.mark.parametrize("which", ["allreduce", "tree", "flat", "hierarchical", "onebit-adam"])
def test_on_a_pcie_node_a_gpus_link_is_shared_by_its_intra_and_inter_node_messages(which):
    """PCIe-only nodes (A100 PCIe Gen4, 25.6 GB/s per GPU) behind HDR NICs (24 GB/s each): a GPU's x16 link
    carries what it sends inside the node and what it sends to its NIC, so the flows share it max-min fairly;
    the representative node equals the full expansion, and sharing never makes an operation faster."""
    layout = Layout(3, 4)
    sched = {"allreduce": lambda: allreduce(layout, 10**6), "tree": lambda: tree_allreduce(layout, 10**6),
             "onebit-adam": lambda: optimizer_schedule("onebit-adam", layout, 10**6)}.get(
        which, lambda: schedule(which, layout, 10**6))()
    c = cluster("ib-hdr", 3, 4, intra="a100-pcie", nic_count=4)
    for phase in sched.phases:
        shared = flow_time((phase,), layout, c)
        assert shared == pytest.approx(expanded_flow_time((phase,), layout, c), rel=1e-9)
        alone = flow_time((phase,), layout, replace(c, intra=replace(c.intra, kind="nvlink")))
        assert shared >= alone * (1 - 1e-12)
    if which == "flat":  # every GPU sends to 3 local and 8 remote peers through one link: sharing binds
        (all_to_all, *_) = sched.phases
        assert flow_time((all_to_all,), layout, c) > 1.2 * flow_time(
            (all_to_all,), layout, replace(c, intra=replace(c.intra, kind="nvlink")))


@pytest.mark.parametrize("optimizer", ["sgdm", "onebit-adam"])
def test_one_gpu_per_node_from_16_nodes_runs_nccls_tree(optimizer):
    """NCCL's tree from 16 one-GPU nodes has no intra-node phase: the all-reduce (and 1-bit Adam's warm-up) is
    timed, not an IndexError (the in-switch check read the first phase's bits, which is empty there)."""
    from sim.workload import predict

    for nodes in (16, 64):
        c = cluster("ib-hdr", nodes, 1)
        r = predict(c, model="bert-base", optimizer=optimizer).as_dict()
        assert 0 < r["throughput"] and r["scale_efficiency"] <= 1 + 1e-9
