"""Properties of the simulator's network and system layers: closed forms, conservation, symmetry, the tree."""

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from birder_ref.execute import ByteLog, run_phase
from birder_ref.schedules import Layout, allreduce, padded_dim, schedule, tree_allreduce
from sim.network import FlowNetwork, Link, cluster
from sim.system import Fabric, collective_time, nccl_allreduce_algorithm, traffic

networks = st.sampled_from(["10gbe", "25gbe", "100gbe", "ib-hdr", "ib-ndr"])


def expected_incast_timeouts(nic, flows, nbytes):
    """The incast ramp of sim/README.md: a burst of one initial window (10 x 1448 B) per flow at most; no timeout
    up to the onset, one from the certain size, linear between."""
    burst = flows * min(nbytes, 14480)
    if burst <= nic.incast_onset_bytes:
        return 0.0
    if burst >= nic.incast_certain_bytes:
        return 1.0
    return (burst - nic.incast_onset_bytes) / (nic.incast_certain_bytes - nic.incast_onset_bytes)


def point_to_point_phase(nic, gpus, posts, nbytes):
    """LogGP closed form of k = gpus * posts point-to-point messages at one NIC: each GPU's proxy posts its
    ``posts`` one by one (o each); the bytes move fairly meanwhile; the last message of every GPU, posted at
    posts * o, then moves (gpus of them at once); then latency and any incast timeout."""
    k = gpus * posts
    time = max(nic.message_overhead + k * nbytes / nic.bandwidth, posts * nic.message_overhead
               + gpus * nbytes / nic.bandwidth)
    return time + nic.latency + expected_incast_timeouts(nic, k, nbytes) * nic.retransmission_timeout


def ring_round(c, nbytes):
    """Closed form of one ring round: the slower of an NVLink hop and a NIC hop (one message each, one step of a
    collective kernel)."""
    intra = c.intra.latency + nbytes / c.intra.port_bandwidth
    inter = c.nic.step_overhead + nbytes / c.nic.bandwidth + c.nic.latency
    return max(intra, inter) if c.n_nodes > 1 else intra


@given(n=st.integers(1, 16), g=st.sampled_from([1, 2, 4, 8]), dim=st.integers(1, 10**7), net=networks)
def test_lone_ring_allreduce_equals_alpha_beta(n, g, dim, net):
    c = cluster(net, n, g)
    sched = allreduce(Layout(n, g), dim)
    p = n * g
    expected = 2 * (p - 1) * ring_round(c, 4 * sched.padded_dim // p) if p > 1 else 0.0
    assert collective_time(sched, c) == pytest.approx(expected, rel=1e-9)


@given(n=st.integers(2, 32), dim=st.integers(1, 10**7), net=networks)
def test_lone_hierarchical_birder_equals_alpha_beta(n, dim, net):
    """Section 4 on an idle cluster: two intra rings and two inter phases in which each GPU sends n-1 messages
    (G(n-1) at the node's NIC)."""
    g = 8
    c = cluster(net, n, g)
    sched = schedule("hierarchical", Layout(n, g), dim)
    D = sched.padded_dim
    nic, intra = c.nic, c.intra
    rs = (g - 1) * (intra.latency + 4 * (D // g) / intra.port_bandwidth)
    ag = (g - 1) * (intra.latency + (D // g) / 8 / intra.port_bandwidth)
    inter = point_to_point_phase(nic, g, n - 1, D // (8 * n * g))
    assert collective_time(sched, c) == pytest.approx(rs + 2 * inter + ag, rel=1e-9)


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


@pytest.mark.parametrize("scheme", ["hierarchical", "flat", "ring", "allgather"])
@pytest.mark.parametrize("net", ["10gbe", "ib-hdr"])
def test_bytes_sent_equal_bytes_received(scheme, net):
    """On every link pair of the representative node the bytes that leave equal the bytes that arrive."""
    c = cluster(net, 4, 8)
    env = simpy.Environment()
    fabric = Fabric(env, c)
    env.process(fabric.run(schedule(scheme, Layout(4, 8), 100_000)))
    env.run()
    assert fabric.nic_tx.busy_bytes > 0
    assert fabric.nic_tx.busy_bytes == pytest.approx(fabric.nic_rx.busy_bytes)
    assert fabric.gpu_tx.busy_bytes == pytest.approx(fabric.gpu_rx.busy_bytes)


def test_processor_sharing_splits_a_link_fairly():
    """Two flows on one link: each gets half while both are active (1 MB and 3 MB at 1 MB/s: 2 s and 4 s)."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    link = Link("l", 1e6)
    ends = {}

    def flow(name, nbytes):
        yield net.transfer(nbytes, {link: 1})
        ends[name] = env.now

    env.process(flow("small", 1e6))
    env.process(flow("large", 3e6))
    env.run()
    assert ends == {"small": pytest.approx(2.0), "large": pytest.approx(4.0)}


@given(n=st.integers(1, 16), dim=st.integers(1, 10**6), factor=st.floats(1.01, 10))
def test_more_bandwidth_is_never_slower(n, dim, factor):
    from dataclasses import replace

    for sched in (allreduce(Layout(n, 8), dim), schedule("hierarchical", Layout(n, 8), dim),
                  tree_allreduce(Layout(n, 8), dim), schedule("ps", Layout(n, 8), dim)):
        c = cluster("25gbe", n)
        faster = replace(c, nic=replace(c.nic, line_rate=c.nic.line_rate * factor))
        assert collective_time(sched, faster) <= collective_time(sched, c) * (1 + 1e-12)


def test_oversubscribed_switch_is_slower_for_inter_node_traffic():
    c = cluster("100gbe", 8)
    from dataclasses import replace

    sched = allreduce(Layout(8, 8), 10**7)
    assert collective_time(sched, replace(c, oversubscription=4.0)) > collective_time(sched, c)


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
    assert reduce_phase.n_rounds == (n.bit_length() - 1 if n > 1 else 0)


def test_nccl_picks_ring_for_large_buckets_and_tree_at_scale():
    assert nccl_allreduce_algorithm(cluster("10gbe", 2), 100e6) == "ring"
    assert nccl_allreduce_algorithm(cluster("10gbe", 512), 1e6) == "tree"
    assert nccl_allreduce_algorithm(cluster("10gbe", 1), 1e3) == "ring"


def test_incast_costs_one_timeout_per_phase_on_lossy_transports_only():
    """A flat all-to-all of 64 nodes puts 8*504 flows of 24 kB (a full initial window each) into each NIC: each of
    its two phases loses one retransmission timeout on sockets; InfiniBand is lossless."""
    sched = schedule("flat", Layout(64, 8), 10**8)
    eth = cluster("100gbe", 64)
    no_incast = replace(eth, nic=replace(eth.nic, incast_onset_bytes=math.inf, incast_certain_bytes=math.inf))
    extra = collective_time(sched, eth) - collective_time(sched, no_incast)
    assert extra == pytest.approx(2 * eth.nic.retransmission_timeout)
    assert math.isinf(cluster("ib-ndr", 64).nic.incast_onset_bytes)


@given(n=st.integers(2, 16), g=st.sampled_from([1, 4, 8]), dim=st.integers(1, 10**6), net=networks)
def test_lone_reduce_scatter_all_gather_all_to_all_equal_alpha_beta(n, g, dim, net):
    from sim.system import collective_schedule

    c = cluster(net, n, g)
    layout = Layout(n, g)
    p = n * g
    for name in ("reduce-scatter", "all-gather"):
        sched = collective_schedule(name, layout, dim)
        assert collective_time(sched, c) == pytest.approx((p - 1) * ring_round(c, 4 * sched.padded_dim // p))
    sched = collective_schedule("all-to-all", layout, dim)
    m, nic, intra = 4 * sched.padded_dim // p, c.nic, c.intra
    inter = point_to_point_phase(nic, g, p - g, m)  # each GPU to every GPU of the other nodes
    local = intra.latency + (g - 1) * m / intra.port_bandwidth if g > 1 else 0.0
    assert collective_time(sched, c) == pytest.approx(max(inter, local))


def test_parameter_server_waits_for_its_incast():
    """p workers push D/8 bytes each into one server NIC, then pull as much back: 2 p D / 8 bytes at the server."""
    from sim.system import collective_schedule

    c = cluster("ib-ndr", 8, 8)
    sched = collective_schedule("parameter-server", Layout(8, 8), 10**7, bits=1)
    p, nbytes = 64, sched.padded_dim // 8
    bandwidth_only = 2 * p * nbytes / c.nic.bandwidth
    assert bandwidth_only < collective_time(sched, c) < bandwidth_only * 1.1


@pytest.mark.parametrize("nics", [1, 2])
@pytest.mark.parametrize("optimizer", ["onebit-adam", "birder"])
def test_a_barely_oversubscribed_switch_changes_time_continuously(nics, optimizer):
    """Oversubscription 1.0001 adds an uplink of almost the NICs' bandwidth: the time may not jump (each NIC
    posts its own messages, whatever the uplink carries)."""
    from dataclasses import replace

    from birder_ref.schedules import optimizer_schedule

    base = cluster("25gbe", 8)
    c = replace(base, nic=replace(base.nic, count=nics))
    sched = optimizer_schedule(optimizer, Layout(8, 8), 25_000_000)
    t = collective_time(sched, c)
    assert collective_time(sched, replace(c, oversubscription=1.0001)) == pytest.approx(t, rel=1e-3)
    assert collective_time(sched, replace(c, oversubscription=8.0)) > t


def test_each_gpu_posts_its_own_point_to_point_messages():
    """Birder's flat scheme (an all-to-all, then a direct all-gather) of tiny messages costs each GPU's proxy
    (p - G) postings per phase, in parallel with the other GPUs', however many NICs the node has; a ring's
    steps cost the step overhead instead."""
    sched = schedule("flat", Layout(4, 8), 10**4)
    one = cluster("10gbe", 4)
    two = replace(one, nic=replace(one.nic, count=2))
    posting = 2 * 24 * one.nic.message_overhead
    assert collective_time(sched, one) == pytest.approx(posting, rel=0.02)
    assert collective_time(sched, two) == pytest.approx(posting, rel=0.02)
    ring = allreduce(Layout(4, 8), 10**4)
    no_step_cost = replace(one, nic=replace(one.nic, step_overhead=0.0))
    assert collective_time(ring, one) - collective_time(ring, no_step_cost) == pytest.approx(
        2 * 31 * one.nic.step_overhead)


def test_incast_depends_on_the_burst_not_only_on_the_flow_count():
    """Birder's hierarchical all-to-all of a 25 MB bucket sends D/(8 n G) bytes per flow: 8(n-1) flows of ever
    smaller messages, a burst of about a bucket/8 at any n, so no timeout even at 512 nodes; 1-bit Adam's
    all-to-all of the whole model sends window-sized messages, and its burst grows with the flow count."""
    for n in (38, 512):
        c = cluster("10gbe", n)
        no_incast = replace(c, nic=replace(c.nic, incast_onset_bytes=math.inf, incast_certain_bytes=math.inf))
        sched = schedule("hierarchical", Layout(n, 8), 6_553_600)
        assert collective_time(sched, c) == collective_time(sched, no_incast)
    nic = cluster("10gbe", 2).nic
    assert expected_incast_timeouts(nic, 8 * 24, 50_000) == 0.0  # 1-bit Adam, 32 GPUs
    assert expected_incast_timeouts(nic, 8 * 56, 50_000) == 1.0  # 1-bit Adam, 64 GPUs
    assert 0 < expected_incast_timeouts(nic, 8 * 40, 50_000) < 1  # in the bracket: a fraction of a timeout
