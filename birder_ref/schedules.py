"""Communication schedules as data: who sends how many bytes of which chunk to whom, phase by phase.

No NumPy numerics here. ``birder_ref.schemes`` executes a schedule by moving encoded chunks along it, and
``sim`` times the same schedule on a network model. A schedule never lists all its messages at once: each
phase names a pattern (ring, all-to-all, direct all-gather, push to a root, pull from a root) run
concurrently by disjoint groups of endpoints, and ``Phase.rounds()`` expands it into messages on demand.

Endpoints are global ranks 0 .. n_ranks - 1 (rank = node * gpus_per_node + local_rank); the parameter
server of ``ps`` is the extra endpoint ``n_ranks``, on a node of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import ceil

from birder_ref.validation import check_int

SCHEMES = ("ps", "ring", "flat", "allgather", "hierarchical")
PATTERNS = ("ring_reduce_scatter", "ring_all_gather", "all_to_all", "direct_all_gather", "push", "pull", "binary_tree")
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

    def node_ranks(self, node: int) -> tuple[int, ...]:
        return tuple(range(node * self.gpus_per_node, (node + 1) * self.gpus_per_node))

    def local_rank_group(self, local_rank: int) -> tuple[int, ...]:
        """The GPUs of equal local rank, one per node: the inter-node groups of Section 4."""
        return tuple(node * self.gpus_per_node + local_rank for node in range(self.n_nodes))


@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    chunk: int  # which chunk of the group's vector (position in the group for ring and direct patterns)
    nbytes: int


@dataclass(frozen=True)
class Phase:
    """One collective step, run at once by every group in ``groups``.

    ``chunk_elements`` elements per chunk; ``bits_per_element[r]`` is the encoding width in round r (32 for
    float32 values, 1 for signs, more for exact partial counts). ``op`` says what a receiver does with a
    chunk: ``reduce`` adds it to its own, ``copy`` replaces its own.
    """

    name: str
    pattern: str
    groups: tuple[tuple[int, ...], ...]
    chunk_elements: int
    bits_per_element: tuple[int, ...]
    op: str
    header_bytes: int = 0  # extra bytes each message carries (for example a float32 scale)

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS or self.op not in OPS:
            raise ValueError(f"unknown pattern {self.pattern!r} or op {self.op!r}")
        if len(self.bits_per_element) != self.n_rounds:
            raise ValueError(f"{self.name}: {self.n_rounds} rounds but {len(self.bits_per_element)} widths")
        if any(self.chunk_elements * w % 8 for w in self.bits_per_element):
            raise ValueError(f"{self.name}: chunks of {self.chunk_elements} elements are not whole bytes")

    @property
    def group_size(self) -> int:
        return len(self.groups[0])

    @property
    def n_rounds(self) -> int:
        if self.group_size < 2 and self.pattern not in ("push", "pull"):
            return 0
        if self.pattern == "binary_tree":  # one round per level below the root
            return (self.group_size).bit_length() - 1
        return self.group_size - 1 if self.pattern.startswith("ring") else 1

    def message_bytes(self, round_index: int) -> int:
        return self.chunk_elements * self.bits_per_element[round_index] // 8 + self.header_bytes

    def group_rounds(self, group: tuple[int, ...]) -> Iterator[list[Message]]:
        """The messages of one group, round by round."""
        p = len(group)
        for r in range(self.n_rounds):
            nbytes = self.message_bytes(r)
            if self.pattern == "ring_reduce_scatter":  # position i ends owning chunk i
                yield [Message(group[i], group[(i + 1) % p], (i - r - 1) % p, nbytes) for i in range(p)]
            elif self.pattern == "ring_all_gather":  # position i starts owning chunk i
                yield [Message(group[i], group[(i + 1) % p], (i - r) % p, nbytes) for i in range(p)]
            elif self.pattern == "all_to_all":  # chunk j of every member goes to member j
                yield [Message(group[i], group[j], j, nbytes) for i in range(p) for j in range(p) if i != j]
            elif self.pattern == "direct_all_gather":  # chunk i of member i goes to everyone
                yield [Message(group[i], group[j], i, nbytes) for i in range(p) for j in range(p) if i != j]
            elif self.pattern == "push":  # the last member is the root; all others send it their chunk 0
                yield [Message(src, group[-1], 0, nbytes) for src in group[:-1]]
            elif self.pattern == "binary_tree":  # heap order: member i's parent is (i - 1) // 2
                yield _tree_round(group, r, self.n_rounds, self.op, self.groups.index(group) % 2, nbytes)
            else:  # pull: the root (last member) sends its chunk 0 to all others
                yield [Message(group[-1], dst, 0, nbytes) for dst in group[:-1]]

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
            p = len(group)
            if p < 2:
                continue
            if self.pattern.startswith("ring"):
                per = {ep: total for ep in group}
            elif self.pattern in ("all_to_all", "direct_all_gather"):
                per = {ep: total * (p - 1) for ep in group}
            elif self.pattern == "push":
                per = {ep: total for ep in group[:-1]}
            elif self.pattern == "binary_tree":
                per = _tree_bytes_sent(self, group)
            else:
                per = {group[-1]: total * (p - 1)}
            for ep, b in per.items():
                sent[ep] = sent.get(ep, 0) + b
        return sent


def _tree_round(group: tuple[int, ...], r: int, depth: int, op: str, chunk: int, nbytes: int) -> list[Message]:
    """Round r of a binary tree in heap order: ``reduce`` sends level depth - r up to the parents (leaves
    first), ``copy`` sends level r down to the children (root first)."""
    q = len(group)
    if op == "reduce":
        level = depth - r
        senders = range(2**level - 1, min(2 ** (level + 1) - 1, q))
        return [Message(group[i], group[(i - 1) // 2], chunk, nbytes) for i in senders]
    parents = range(2**r - 1, min(2 ** (r + 1) - 1, q))
    return [Message(group[i], group[c], chunk, nbytes) for i in parents for c in (2 * i + 1, 2 * i + 2) if c < q]


def _tree_bytes_sent(phase: Phase, group: tuple[int, ...]) -> dict[int, int]:
    """Per member of one binary tree: a message to its parent (reduce) or one to each child (copy)."""
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
    """The communication schedule of one Birder step with ``scheme`` on ``layout`` for a ``dim`` vector."""
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
            Phase("all_gather", "direct_all_gather", everyone, D // p, one, "copy"),
        )
    elif scheme == "allgather":
        phases = (Phase("all_gather", "direct_all_gather", everyone, D, (1,) if p > 1 else (), "copy"),)
    else:
        nodes = tuple(layout.node_ranks(k) for k in range(n))
        peers = tuple(layout.local_rank_group(j) for j in range(g))
        intra, inter = ((32,) * (g - 1)), ((1,) if n > 1 else ())
        phases = (
            Phase("intra_reduce_scatter", "ring_reduce_scatter", nodes, D // g, intra, "reduce"),
            Phase("inter_all_to_all", "all_to_all", peers, D // p, inter, "reduce"),
            Phase("inter_all_gather", "direct_all_gather", peers, D // p, inter, "copy"),
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
