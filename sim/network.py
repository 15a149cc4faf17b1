"""Network layer, the flow engine: links shared max-min fairly by the flows that cross them, in simpy.

A link is one direction of a port with a bandwidth in bytes/s. A flow moves ``nbytes`` over a set of links; a
flow may stand for ``k`` identical flows on a link (its multiplicity there, which the system layer uses to let
one representative node stand for all of them). Rates are the max-min fair allocation (progressive filling:
raise every unfrozen flow's rate together until some link is full, freeze the flows on it, repeat), recomputed
whenever a flow starts or ends. Hardware figures live in ``sim.hardware``; this module knows only links.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

# Hardware names re-exported for callers of the earlier layout (birder bench, its tests): they live in sim.hardware.
from sim.hardware import (  # noqa: F401
    GPUS,
    INTRA,
    NETWORKS,
    PRESETS,
    SITES,
    TRANSPORTS,
    Cluster,
    Intra,
    Nic,
    cluster,
    default_intra,
    intra_preset,
    load_cluster,
    make_nic,
    nic_preset,
)


@dataclass(eq=False)
class Link:
    """One direction of a port: ``bandwidth`` bytes/s shared max-min fairly by the flows on it."""

    name: str
    bandwidth: float
    busy_bytes: float = 0.0  # bytes carried so far (counting every multiple of a flow)


@dataclass(eq=False)
class Flow:
    nbytes: float
    path: dict[Link, float]  # link -> multiplicity (how many identical flows this one stands for there)
    done: simpy.Event
    remaining: float = 0.0
    rate: float = 0.0


def max_min_rates(flows: list[Flow]) -> None:
    """Set every flow's rate to its max-min fair share (progressive filling over the links' capacities)."""
    unfrozen = set(range(len(flows)))
    spare: dict[Link, float] = {}
    for f in flows:
        for link in f.path:
            spare[link] = link.bandwidth
    while unfrozen:
        weight: dict[Link, float] = {}
        for i in unfrozen:
            for link, mult in flows[i].path.items():
                weight[link] = weight.get(link, 0.0) + mult
        bottleneck, share = None, math.inf
        for link, w in weight.items():
            if w > 0 and spare[link] / w < share:
                bottleneck, share = link, spare[link] / w
        if bottleneck is None:  # flows on no link: nothing limits them (never created by transfer)
            for i in unfrozen:
                flows[i].rate = math.inf
            return
        frozen = [i for i in unfrozen if bottleneck in flows[i].path]
        for i in frozen:
            flows[i].rate = share
            for link, mult in flows[i].path.items():
                spare[link] = max(0.0, spare[link] - share * mult)
            unfrozen.discard(i)


@dataclass(eq=False)
class FlowNetwork:
    """Max-min fair sharing of links by the flows that cross them, inside one simpy environment."""

    env: simpy.Environment
    active: list[Flow] = field(default_factory=list)
    _stamp: float = 0.0
    _generation: int = 0
    _due: list[Flow] = field(default_factory=list)  # flows the next wake-up finishes

    def transfer(self, nbytes: float, path: dict[Link, float]) -> simpy.Event:
        """An event that succeeds when ``nbytes`` have crossed every link of ``path`` at the fair rates."""
        done = self.env.event()
        path = {link: mult for link, mult in path.items() if mult > 0}
        if nbytes <= 0 or not path:
            done.succeed()
            return done
        self._advance()
        self.active.append(Flow(float(nbytes), path, done, remaining=float(nbytes)))
        self._reschedule()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self._stamp
        if elapsed > 0:
            for flow in self.active:
                moved = min(flow.remaining, flow.rate * elapsed)
                flow.remaining -= moved
                for link, mult in flow.path.items():
                    link.busy_bytes += moved * mult
        self._stamp = self.env.now

    def _reschedule(self) -> None:
        if not self.active:
            return
        max_min_rates(self.active)
        waits = [f.remaining / f.rate for f in self.active]
        wait = min(waits)
        # the flows due at the next wake-up are decided now, so float residue at huge simulated times can never
        # leave a flow a sliver short forever (each wake-up finishes at least one flow)
        self._due = [f for f, w in zip(self.active, waits, strict=True) if w <= wait * (1 + 1e-9)]
        self._generation += 1
        self.env.process(self._wake(wait, self._generation))

    def _wake(self, wait: float, generation: int):
        yield self.env.timeout(wait)
        if generation != self._generation:
            return
        self._advance()
        for flow in self._due:
            self.active.remove(flow)
            for link, mult in flow.path.items():
                link.busy_bytes += flow.remaining * mult
            flow.remaining = 0.0
            flow.done.succeed()
        self._due = []
        self._reschedule()


def transfer_time(flows: list[tuple[float, dict[Link, float]]]) -> float:
    """Seconds until every flow (bytes, path), all started at once on idle links, has finished."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    events = [net.transfer(nbytes, path) for nbytes, path in flows]
    if events:
        env.run(env.all_of(events))
    return env.now
