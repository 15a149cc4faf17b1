"""Communication schedules as data: who sends how many bytes of which chunk to whom, phase by phase.

No NumPy numerics here. ``birder_ref.schemes`` executes a schedule by moving encoded chunks along it, ``sim``
times the same schedule on a network model, and ``gpu_validation.comm`` runs Birder's ``hierarchical`` and
``flat`` schedules phase by phase as torch collectives. A schedule never lists all its messages at once: each
phase names a pattern (ring, all-to-all, direct all-gather, push to a root, pull from a root) run
concurrently by disjoint groups of endpoints, and ``Phase.rounds()`` expands it into messages on demand.

Endpoints are global ranks 0 .. n_ranks - 1 (rank = node * gpus_per_node + local_rank); the parameter
server of ``ps`` is the extra endpoint ``n_ranks``, on a node of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from math import ceil

from birder_ref.validation import check_int

SCHEMES = ("ps", "ring", "flat", "allgather", "hierarchical")
OPS = ("reduce", "copy")


@dataclass(frozen=True)
class Layout:
    """n_nodes nodes of gpus_per_node GPUs each."""

    n_nodes: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        check_int("n_nodes", self.n_nodes, 1)  # a layout needs whole nodes and GPUs
        check_int("gpus_per_node", self.gpus_per_node, 1)

    @property
    def n_ranks(self) -> int:
        return self.n_nodes * self.gpus_per_node

    @property
    def server(self) -> int:
        """The endpoint of the parameter server (``ps`` only), on node ``n_nodes``."""
        return self.n_ranks

    def node_of(self, endpoint: int) -> int:
        return endpoint // self.gpus_per_node

    def local_rank(self, endpoint: int) -> int:
        return endpoint % self.gpus_per_node

    def nodes_spanned(self, group: tuple[int, ...]) -> int:
        """How many nodes the endpoints of ``group`` lie on."""
        return len({self.node_of(ep) for ep in group})

    def node_ranks(self, node: int) -> tuple[int, ...]:
        return tuple(range(node * self.gpus_per_node, (node + 1) * self.gpus_per_node))

    def local_rank_group(self, local_rank: int) -> tuple[int, ...]:
        """The GPUs of equal local rank, one per node: the inter-node groups of Section 4."""
        return tuple(node * self.gpus_per_node + local_rank for node in range(self.n_nodes))


class OnLayout:
    """A base for records that hold a ``layout`` (a simulated cluster, a torch topology): its sizes, read through."""

    layout: Layout

    @property
    def n_nodes(self) -> int:
        return self.layout.n_nodes

    @property
    def gpus_per_node(self) -> int:
        return self.layout.gpus_per_node

    @property
    def n_ranks(self) -> int:
        return self.layout.n_ranks


@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    chunk: int  # which chunk of the group's vector (position in the group for ring and direct patterns)
    nbytes: int


class Pattern:
    """How one group of endpoints exchanges chunks in a phase: its rounds, the messages of each round, the
    bytes each member sends and the edges one pipelined round uses. One subclass per pattern; ``PATTERNS``
    holds one instance of each by name."""

    name: str
    is_ring = False  # NCCL runs it as a ring (a pipelined chain of p - 1 steps), not point to point
    everyone_to_everyone = False  # every member sends to every other member in its one round
    collective: str | None = None  # the torch.distributed call that runs it (None: no torch code runs it)
    sums_in_member_order = False  # ``reduce``: a receiver adds the group's chunks, its own included, in member order

    def n_rounds(self, group_size: int) -> int:
        return 1 if group_size >= 2 else 0

    def round_messages(self, phase: Phase, group: tuple[int, ...], r: int, nbytes: int) -> list[Message]:
        raise NotImplementedError

    def bytes_sent(self, phase: Phase, group: tuple[int, ...], total: int) -> dict[int, int]:
        """Bytes each member sends in the phase, given the bytes ``total`` of one message per round, summed."""
        raise NotImplementedError

    def edges(self, phase: Phase, group: tuple[int, ...]) -> list[tuple[int, int]]:
        """(src, dst) of every message of one group in one pipelined round (all rounds at once)."""
        return [(m.src, m.dst) for r in range(phase.n_rounds) for m in self.round_messages(phase, group, r, 0)]

    def edge_bytes(self, phase: Phase) -> int:
        """Bytes one edge carries in all: a point-to-point message its chunk once."""
        return phase.message_bytes(0)

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Pattern({self.name!r})"


class RingReduceScatter(Pattern):
    """p - 1 rounds along the ring; position i ends owning chunk i."""

    name = "ring_reduce_scatter"
    is_ring = True
    collective = "reduce_scatter_tensor"
    offset = 1  # the chunk position i sends in round r is i - r - offset

    def n_rounds(self, group_size: int) -> int:
        return group_size - 1 if group_size >= 2 else 0

    def round_messages(self, phase, group, r, nbytes):
        p = len(group)
        return [Message(group[i], group[(i + 1) % p], (i - r - self.offset) % p, nbytes) for i in range(p)]

    def bytes_sent(self, phase, group, total):
        return {ep: total for ep in group}

    def edges(self, phase, group):
        return [(group[i], group[(i + 1) % len(group)]) for i in range(len(group))]

    def edge_bytes(self, phase):
        """A ring edge carries every round's chunk."""
        return sum(phase.message_bytes(r) for r in range(phase.n_rounds))


class RingAllGather(RingReduceScatter):
    """p - 1 rounds along the ring; position i starts owning chunk i."""

    name = "ring_all_gather"
    collective = "all_gather_single"  # NCCL's all-gather is a ring
    offset = 0


class AllToAll(Pattern):
    """One round: chunk j of every member goes to member j. Under ``reduce`` member j adds the group's chunks j,
    its own included, in member order, ((c_0 + c_1) + c_2) + ...: what a receiver of ``all_to_all_single`` does
    with the rows it got, so a float32 sum has the same bits for any data and on any backend."""

    name = "all_to_all"
    everyone_to_everyone = True
    collective = "all_to_all_single"
    sums_in_member_order = True

    def round_messages(self, phase, group, r, nbytes):
        return [Message(a, b, j, nbytes) for a in group for j, b in enumerate(group) if a != b]

    def bytes_sent(self, phase, group, total):
        return {ep: total * (len(group) - 1) for ep in group}


class DirectAllGather(AllToAll):
    """One round: chunk i of member i goes to everyone (point to point; a torch all-gather is ``ring_all_gather``)."""

    name = "direct_all_gather"
    collective = None
    sums_in_member_order = False

    def round_messages(self, phase, group, r, nbytes):
        return [Message(a, b, i, nbytes) for i, a in enumerate(group) for b in group if a != b]


class Push(Pattern):
    """One round: the last member is the root; all others send it their chunk 0."""

    name = "push"

    def n_rounds(self, group_size: int) -> int:
        return 1

    def round_messages(self, phase, group, r, nbytes):
        return [Message(src, group[-1], 0, nbytes) for src in group[:-1]]

    def bytes_sent(self, phase, group, total):
        return {ep: total for ep in group[:-1]}


class Pull(Push):
    """One round: the root (last member) sends its chunk 0 to all others."""

    name = "pull"

    def round_messages(self, phase, group, r, nbytes):
        return [Message(group[-1], dst, 0, nbytes) for dst in group[:-1]]

    def bytes_sent(self, phase, group, total):
        return {group[-1]: total * (len(group) - 1)}


class BinaryTree(Pattern):
    """One round per level below the root, in heap order (member i's parent is (i - 1) // 2): ``reduce``
    sends level depth - r up to the parents (leaves first), ``copy`` sends level r down to the children (root
    first). The groups of a phase alternate two trees, carrying chunk 0 and chunk 1."""

    name = "binary_tree"

    def n_rounds(self, group_size: int) -> int:
        return group_size.bit_length() - 1 if group_size >= 2 else 0

    def round_messages(self, phase, group, r, nbytes):
        q, chunk = len(group), phase.groups.index(group) % 2
        if phase.op == "reduce":
            level = phase.n_rounds - r
            senders = range(2**level - 1, min(2 ** (level + 1) - 1, q))
            return [Message(group[i], group[(i - 1) // 2], chunk, nbytes) for i in senders]
        parents = range(2**r - 1, min(2 ** (r + 1) - 1, q))
        return [Message(group[i], group[c], chunk, nbytes) for i in parents for c in (2 * i + 1, 2 * i + 2) if c < q]

    def bytes_sent(self, phase, group, total):
        """Per member: a message to its parent (reduce) or one to each child (copy)."""
        q, depth = len(group), phase.n_rounds
        sent = {}
        for i, ep in enumerate(group):
            level = (i + 1).bit_length() - 1
            if phase.op == "reduce" and i > 0:
                sent[ep] = phase.message_bytes(depth - level)
            elif phase.op == "copy":
                children = sum(1 for c in (2 * i + 1, 2 * i + 2) if c < q)
                if children:
                    sent[ep] = children * phase.message_bytes(level)
        return sent


PATTERNS: dict[str, Pattern] = {
    cls.name: cls() for cls in (RingReduceScatter, RingAllGather, AllToAll, DirectAllGather, Push, Pull, BinaryTree)
}


def pattern_named(pattern: str | Pattern) -> Pattern:
    """The ``Pattern`` of that name (or the pattern itself); an unknown one is a ValueError."""
    if isinstance(pattern, Pattern):
        return pattern
    if not isinstance(pattern, str) or pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    return PATTERNS[pattern]


@dataclass(frozen=True)
class Phase:
    """One collective step, run at once by every group in ``groups``.

    ``pattern`` is a ``Pattern`` (given by name or as one). ``chunk_elements`` elements per chunk;
    ``bits_per_element[r]`` is the encoding width in round r (32 for float32 values, 1 for signs, more for
    exact partial counts). ``op`` says what a receiver does with a chunk: ``reduce`` adds it to its own,
    ``copy`` replaces its own.
    """

    name: str
    pattern: Pattern
    groups: tuple[tuple[int, ...], ...]
    chunk_elements: int
    bits_per_element: tuple[int, ...]
    op: str
    header_bytes: int = 0  # extra bytes each message carries (for example a float32 scale)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", pattern_named(self.pattern))
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; choose one of {', '.join(OPS)}")
        if len(self.bits_per_element) != self.n_rounds:
            raise ValueError(f"{self.name}: {self.n_rounds} rounds but {len(self.bits_per_element)} widths")
        if any(self.chunk_elements * w % 8 for w in self.bits_per_element):
            raise ValueError(f"{self.name}: chunks of {self.chunk_elements} elements are not whole bytes")

    @property
    def group_size(self) -> int:
        return len(self.groups[0])

    @property
    def n_rounds(self) -> int:
        return self.pattern.n_rounds(self.group_size)

    def __hash__(self) -> int:
        # ``groups`` holds every rank (65,536 at the simulator's largest): hashed once per phase, not on every
        # lookup of a cache keyed by it; equality stays the dataclass's, field by field
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.pattern, self.groups, self.chunk_elements, self.bits_per_element,
                           self.op, self.header_bytes))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        # the fields only: the cached hash stays behind, since a str's hash differs from one process to the next
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def message_bytes(self, round_index: int) -> int:
        return self.chunk_elements * self.bits_per_element[round_index] // 8 + self.header_bytes

    def group_rounds(self, group: tuple[int, ...]) -> Iterator[list[Message]]:
        """The messages of one group, round by round."""
        for r in range(self.n_rounds):
            yield self.pattern.round_messages(self, group, r, self.message_bytes(r))

    def rounds(self) -> Iterator[list[Message]]:
        """All groups' messages, round by round (groups run concurrently)."""
        per_group = [self.group_rounds(g) for g in self.groups]
        for _ in range(self.n_rounds):
            yield [m for it in per_group for m in next(it)]

    def bytes_sent(self) -> dict[int, int]:
        """Bytes each endpoint sends in this phase, computed from the pattern without expanding messages."""
        sent: dict[int, int] = {}
        total = sum(self.message_bytes(r) for r in range(self.n_rounds))
        for group in self.groups:
            if len(group) < 2:
                continue
            for ep, b in self.pattern.bytes_sent(self, group, total).items():
                sent[ep] = sent.get(ep, 0) + b
        return sent


@dataclass(frozen=True)
class Schedule:
    scheme: str
    layout: Layout
    dim: int  # the caller's length
    padded_dim: int  # the length actually moved: a multiple of 8 * n_ranks
    phases: tuple[Phase, ...]

    def bytes_by_link(self) -> tuple[dict[int, int], dict[int, int]]:
        """(inter-node, intra-node) bytes each endpoint sends in one step, message by message."""
        inter: dict[int, int] = {}
        intra: dict[int, int] = {}
        for phase in self.phases:
            for messages in phase.rounds():
                for msg in messages:
                    crosses = self.layout.node_of(msg.src) != self.layout.node_of(msg.dst)
                    target = inter if crosses else intra
                    target[msg.src] = target.get(msg.src, 0) + msg.nbytes
        return inter, intra


def check_layout(layout) -> Layout:
    """A ``Layout``, or a ValueError naming the parameter."""
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a birder_ref.schedules.Layout, got {type(layout).__name__}")
    return layout


def padded_dim(dim: int, n_ranks: int) -> int:
    """dim rounded up to a multiple of 8 * n_ranks, so every chunk of every scheme is whole bytes."""
    check_int("dim", dim, 0)
    check_int("n_ranks", n_ranks, 1)
    unit = 8 * n_ranks
    return ceil(dim / unit) * unit


def count_bits(contributions: int) -> int:
    """Fewest bits that hold an exact count of +1s among ``contributions`` signs (0 .. contributions)."""
    return max(1, int(contributions).bit_length())


def schedule(scheme: str, layout: Layout, dim: int) -> Schedule:
    """The communication schedule of one Birder step with ``scheme`` on ``layout`` for a ``dim`` vector.

    ``hierarchical`` and ``flat`` are what ``gpu_validation.comm`` runs, one torch collective per phase
    (``Pattern.collective``): Section 4's intra-node reduce-scatter is an all-to-all of float32 shards that each
    receiver sums in local-rank order (the same (m-1)P/m bytes as a ring reduce-scatter, but a sum whose order
    does not depend on where an element sits, so the node mean equals Algorithm 1's for any data), and every
    all-gather is NCCL's ring all-gather. ``ps``, ``ring`` and ``allgather`` are the paper's other layouts,
    executed by the reference only.
    """
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    check_layout(layout)
    check_int("dim", dim, 1)
    p, n, g = layout.n_ranks, layout.n_nodes, layout.gpus_per_node
    D = padded_dim(dim, p)
    everyone = (tuple(range(p)),)
    if scheme == "ps":
        with_server = (tuple(range(p)) + (layout.server,),)
        phases = (
            Phase("push", "push", with_server, D, (1,), "reduce"),
            Phase("pull", "pull", with_server, D, (1,), "copy"),
        )
    elif scheme == "ring":
        rs_bits = tuple(count_bits(r + 1) for r in range(p - 1))
        phases = (
            Phase("ring_reduce_scatter_counts", "ring_reduce_scatter", everyone, D // p, rs_bits, "reduce"),
            Phase("ring_all_gather", "ring_all_gather", everyone, D // p, (1,) * (p - 1), "copy"),
        )
    elif scheme == "flat":
        one = (1,) if p > 1 else ()
        phases = (
            Phase("all_to_all", "all_to_all", everyone, D // p, one, "reduce"),
            Phase("all_gather", "ring_all_gather", everyone, D // p, (1,) * (p - 1), "copy"),
        )
    elif scheme == "allgather":
        phases = (Phase("all_gather", "direct_all_gather", everyone, D, (1,) if p > 1 else (), "copy"),)
    else:
        nodes = tuple(layout.node_ranks(k) for k in range(n))
        peers = tuple(layout.local_rank_group(j) for j in range(g))
        phases = (
            Phase("intra_reduce_scatter", "all_to_all", nodes, D // g, (32,) if g > 1 else (), "reduce"),
            Phase("inter_all_to_all", "all_to_all", peers, D // p, (1,) if n > 1 else (), "reduce"),
            Phase("inter_all_gather", "ring_all_gather", peers, D // p, (1,) * (n - 1), "copy"),
            Phase("intra_all_gather", "ring_all_gather", nodes, D // g, (1,) * (g - 1), "copy"),
        )
    return Schedule(scheme, layout, int(dim), D, phases)


def allreduce(layout: Layout, dim: int, bits: int = 32, name: str = "allreduce") -> Schedule:
    """Full-precision ring all-reduce over all ranks: reduce-scatter then all-gather, ``bits`` per element."""
    check_layout(layout)
    check_int("dim", dim, 1)
    p = layout.n_ranks
    D = padded_dim(dim, p)
    everyone = (tuple(range(p)),)
    widths = (bits,) * (p - 1)
    phases = (
        Phase("reduce_scatter", "ring_reduce_scatter", everyone, D // p, widths, "reduce"),
        Phase("all_gather", "ring_all_gather", everyone, D // p, widths, "copy"),
    )
    return Schedule(name, layout, int(dim), D, phases)


def tree_allreduce(layout: Layout, dim: int, bits: int = 32, name: str = "tree_allreduce") -> Schedule:
    """NCCL's tree all-reduce laid out hierarchically: the node's GPUs reduce-scatter over the intra-node
    fabric, each shard is reduced up and broadcast down a double binary tree across the nodes (Sanders, Speck &
    Traeff 2009; NCCL >= 2.4), the second tree the first in reverse order so that inner members of one are
    leaves of the other, each tree carrying half the shard; then the node all-gathers.

    ``binary_tree`` phases list the two trees of each local rank as consecutive groups (chunk 0 and chunk 1).
    """
    check_layout(layout)
    check_int("dim", dim, 1)
    p, n, g = layout.n_ranks, layout.n_nodes, layout.gpus_per_node
    D = padded_dim(dim, p)
    nodes = tuple(layout.node_ranks(k) for k in range(n))
    trees = tuple(t for j in range(g) for t in (layout.local_rank_group(j), layout.local_rank_group(j)[::-1]))
    depth = n.bit_length() - 1
    phases = (
        Phase("intra_reduce_scatter", "ring_reduce_scatter", nodes, D // g, (bits,) * (g - 1), "reduce"),
        Phase("inter_tree_reduce", "binary_tree", trees, D // (2 * g), (bits,) * depth, "reduce"),
        Phase("inter_tree_broadcast", "binary_tree", trees, D // (2 * g), (bits,) * depth, "copy"),
        Phase("intra_all_gather", "ring_all_gather", nodes, D // g, (bits,) * (g - 1), "copy"),
    )
    return Schedule(name, layout, int(dim), D, phases)


def hybrid_shard_reduce(layout: Layout, dim: int, bits: int = 32, name: str = "hybrid_shard_reduce") -> Schedule:
    """PyTorch FSDP HYBRID_SHARD's reduction of one unit's gradients (``bits`` per element): the node's GPUs
    reduce-scatter it by ring, local rank j keeping the node's sum of shard j (D/g), then the GPUs of local rank j
    on every node all-reduce that shard by ring (reduce-scatter, then all-gather, chunks of D/p). Every GPU ends
    with its own shard summed over all GPUs; nothing is gathered back inside the node, as the shard is all the
    optimizer there updates (torch/distributed/fsdp: reduce-scatter over the shard group, all-reduce over the
    replicate group)."""
    check_layout(layout)
    check_int("dim", dim, 1)
    p, n, g = layout.n_ranks, layout.n_nodes, layout.gpus_per_node
    D = padded_dim(dim, p)
    nodes = tuple(layout.node_ranks(k) for k in range(n))
    peers = tuple(layout.local_rank_group(j) for j in range(g))
    phases = (
        Phase("intra_reduce_scatter", "ring_reduce_scatter", nodes, D // g, (bits,) * (g - 1), "reduce"),
        Phase("inter_reduce_scatter", "ring_reduce_scatter", peers, D // p, (bits,) * (n - 1), "reduce"),
        Phase("inter_all_gather", "ring_all_gather", peers, D // p, (bits,) * (n - 1), "copy"),
    )
    return Schedule(name, layout, int(dim), D, phases)


def paper_bytes_per_gpu(scheme: str, layout: Layout, dim: int) -> dict[str, int]:
    """Closed forms of the bytes one GPU sends in each phase (P = 4 * padded dim bytes of float32).

    ``hierarchical`` is Section 4: (m-1)P/m, (n-1)P/(32mn), (n-1)P/(32mn), (m-1)P/(32m) for n nodes of m GPUs.
    The others, for p = n*m ranks: ps sends P/32 up (the server sends pP/32 back); ring sends
    sum_{r=1}^{p-1} ceil-bits(r) * P/(32p) of counts then (p-1)P/(32p); flat (p-1)P/(32p) twice; allgather
    (p-1)P/32.
    """
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    n, m, p = check_layout(layout).n_nodes, layout.gpus_per_node, layout.n_ranks
    check_int("dim", dim, 1)
    P = 4 * padded_dim(dim, p)
    if scheme == "hierarchical":
        return {
            "intra_reduce_scatter": (m - 1) * P // m,
            "inter_all_to_all": (n - 1) * P // (32 * m * n),
            "inter_all_gather": (n - 1) * P // (32 * m * n),
            "intra_all_gather": (m - 1) * P // (32 * m),
        }
    if scheme == "ps":
        return {"push": P // 32, "pull": 0}
    if scheme == "ring":
        counts = sum(count_bits(r) for r in range(1, p)) * P // (32 * p)
        return {"ring_reduce_scatter_counts": counts, "ring_all_gather": (p - 1) * P // (32 * p)}
    if scheme == "flat":
        return {"all_to_all": (p - 1) * P // (32 * p), "all_gather": (p - 1) * P // (32 * p)}
    if scheme == "allgather":
        return {"all_gather": (p - 1) * P // 32}
    raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
