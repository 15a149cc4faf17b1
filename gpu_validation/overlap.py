"""Birder's option ``overlap=True``: the intra-node exchange of each bucket started during backward."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from gpu_validation import comm, records

if TYPE_CHECKING:
    from gpu_validation.optimizer import Birder


class Overlap:
    """Birder's intra-node exchange (the node mean's all-to-all), started bucket by bucket during backward.

    As each bucket becomes ready, the hook copies its gradients into the flattened gradient (``grad``, the
    vector step() would build) and, if the bucket extends the ready suffix [frontier, length) of that vector,
    starts an asynchronous ``all_to_all_single`` of the new range (uneven splits: its part in shard j goes to
    local rank j). Every rank sees the same buckets in the same order, so the collectives match. step() uses
    what arrived only if every rank of the node finds its ``.grad`` bit-identical to what it sent and no
    GradScaler scale is to be divided out (one 4-byte all-reduce over the node agrees on it); otherwise every
    rank of the node discards it and exchanges the current gradients as before. Either way the node mean is
    that of the gradients step() sees, so the bits are Algorithm 1's.
    """

    def __init__(self, opt: Birder):
        self.opt = opt
        self.spans = {id(p): (start, p.numel()) for p, start in zip(opt._params, opt.offsets,
                                                                    strict=True)}
        self.pending: list[tuple[object, torch.Tensor, int, int]] = []  # (work, received, start, stop in shard)
        self.frontier = opt.length
        self.sent = False  # this backward started at least one exchange
        self.broken = False  # a bucket did not extend the ready suffix: the rest waits for step()

    def on_bucket(self, bucket) -> None:
        opt = self.opt
        if bucket.index() == 0:  # a new backward: whatever an earlier one started is stale
            self.drain()
            self.frontier, self.sent, self.broken = opt.length, False, False
        grad, buffer, position, lows, highs = opt._buffer("grad"), bucket.buffer(), 0, [], []
        for p in bucket.parameters():
            span = self.spans.get(id(p))
            n = p.numel()
            if span is None:  # not one of Birder's parameters: leave the rest to step()
                self.broken = True
                return
            grad[span[0]:span[0] + n] = buffer[position:position + n]
            position += n
            lows.append(span[0])
            highs.append(span[0] + n)
        if self.broken or not lows:
            return
        low, high = min(lows), max(highs)
        if high - low != sum(h - lo for lo, h in zip(lows, highs, strict=True)) or \
                high != (opt.dim if self.frontier == opt.length else self.frontier):
            self.broken = True  # not one contiguous range just below the ready suffix
            return
        self.pending.append(self.start(low, self.frontier))
        self.frontier, self.sent = low, True

    def used(self, record: records.Pending | None, nonfinite_ranks: list[int], scale, found_inf) -> bool:
        """Whether step() takes what this backward's exchange delivered: only if it started one, no rank's
        gradient was non-finite, and every rank of the node finds .grad bit-identical to what it sent with no
        GradScaler scale to divide out (one 4-byte all-gather over the node agrees on it, after step()'s
        ``record`` is finished). If not, whatever was started is drained, and step() exchanges the gradients
        again."""
        opt = self.opt
        if nonfinite_ranks or found_inf is not None and float(found_inf) > 0:
            self.drain()
            return False
        if not self.sent:
            return False
        topo = opt.topology
        records.finish(opt, record)
        changed = torch.tensor([float(not self.unchanged(scale))], device=opt.device)
        agreed = opt._collective("intra-node overlap check", topo.worker_group, lambda: comm.all_gather_rows(
            changed, topo.worker_group, topo.shards_per_worker))
        if not bool(agreed.any()):
            opt.overlapped_steps += 1
            return True
        opt.overlap_fallbacks += 1
        self.drain()
        self.frontier, self.sent = opt.length, False
        return False

    def start(self, low: int, high: int, async_op: bool = True):
        """The all-to-all of grad[low:high]; returns (work, received (G, n), start, stop in this rank's shard)."""
        opt = self.opt
        topo, size = opt.topology, opt.length // opt.topology.shards_per_worker
        g = topo.shards_per_worker
        splits = [max(0, min(high, (j + 1) * size) - max(low, j * size)) for j in range(g)]
        mine = topo.shard_of(topo.rank)
        received = torch.empty(g * splits[mine], dtype=torch.float32, device=opt.device)
        comm.note_phase(comm.pipeline_phases(topo, opt.length).intra_reduce_scatter, topo.worker_group,
                        "all_to_all_single", 4 * (sum(splits) - splits[mine]))
        work = dist.all_to_all_single(received, opt._buffer("grad")[low:high], output_split_sizes=[splits[mine]] * g,
                                      input_split_sizes=splits, group=topo.worker_group, async_op=async_op)
        first = max(low, mine * size) - mine * size
        return work, received.view(g, -1), first, first + splits[mine]

    def drain(self) -> None:
        for work, *_ in self.pending:
            work.wait()
        self.pending.clear()

    def unchanged(self, scale) -> bool:
        """Whether .grad still holds, bit for bit, what the hook sent (and no scale is to be divided out)."""
        if scale is not None:
            return False
        grad = self.opt._buffer("grad")
        for p, start in zip(self.opt._params, self.opt.offsets, strict=True):
            sent = grad[start:start + p.numel()]
            if p.grad is None or not p.requires_grad:
                if bool(sent.any()):
                    return False
            elif p.grad.is_sparse or not torch.equal(p.grad.reshape(-1).to(torch.float32), sent):
                return False
        return True

    def rows(self, out: torch.Tensor) -> torch.Tensor:
        """The (G, shard) rows of the node's GPUs: what arrived during backward, the rest exchanged now."""
        if self.frontier > 0:
            self.pending.append(self.start(0, self.frontier, async_op=False))
        rows = out.view(self.opt.topology.shards_per_worker, -1)
        for work, received, first, stop in self.pending:
            if work is not None:
                work.wait()
            rows[:, first:stop] = received
        self.pending.clear()
        return rows
