"""Where Birder's ranks really run: the layout (nodes x GPUs per node) checked against the ranks' host names.

The hierarchical scheme's intra-node phases move full-precision gradients; if a "node" spans two machines they
cross the network and the 1-bit exchange saves nothing (Lightning's launcher does not set ``LOCAL_WORLD_SIZE``, so
a 2-node run read "one node of 2"). So the layout is derived from, or checked against, the host every rank runs
on, exchanged once at construction over the default process group (``exchange_hosts``, one all-gather of 64
bytes per rank):

- ranks on several hosts: each host must hold the same number of consecutive ranks (rank = node x G + local
  rank, as torchrun, Lightning and Accelerate number them); that number is G. A ``gpus_per_node`` argument or a
  ``LOCAL_WORLD_SIZE`` that says otherwise is refused with one ValueError;
- every rank on one host: nothing crosses a network whatever the layout, so ``gpus_per_node`` or torchrun's
  ``LOCAL_WORLD_SIZE`` (``--nnodes 2`` on one machine) lays out simulated nodes, as the project's tests do; without
  either, one node of all ranks.

``BIRDER_HOSTNAME`` (environment), when set, is the host name this rank reports instead of
``socket.gethostname()``: for tests and for simulating several hosts on one machine only.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from gpu_validation import comm
from gpu_validation.guards import check_count

HOST_ENV = "BIRDER_HOSTNAME"  # a simulated host name for this rank (tests; several "hosts" on one machine)
_NAME_BYTES = 64  # POSIX HOST_NAME_MAX


def this_host() -> str:
    """The host name this rank reports: ``BIRDER_HOSTNAME`` if set, else ``socket.gethostname()``."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


def exchange_hosts(device: torch.device) -> list[str]:
    """Every rank's host name, in rank order (collective over the default group: every rank calls it)."""
    name = this_host().encode()[:_NAME_BYTES]
    mine = torch.zeros(_NAME_BYTES, dtype=torch.uint8)
    mine[:len(name)] = torch.tensor(list(name), dtype=torch.uint8)
    every = torch.empty(dist.get_world_size() * _NAME_BYTES, dtype=torch.uint8, device=device)
    comm._all_gather(every, mine.to(device))
    rows = every.view(-1, _NAME_BYTES).cpu().tolist()
    return [bytes(b for b in row if b).decode(errors="replace") for row in rows]


def _ranks_of(hosts: list[str]) -> dict[str, list[int]]:
    ranks: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        ranks.setdefault(host, []).append(rank)
    return ranks


def gpus_per_node_of(hosts: list[str]) -> int | None:
    """G from the hosts: the ranks per host when every host holds as many consecutive ranks; None on one host.
    Raises one ValueError when the hosts cannot be a layout (uneven, or ranks not numbered host by host)."""
    ranks = _ranks_of(hosts)
    if len(ranks) == 1:
        return None
    counts = {host: len(r) for host, r in ranks.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"Birder: the ranks run on {len(ranks)} hosts with different numbers of ranks "
                         f"({_describe(ranks)}); the hierarchical scheme needs as many ranks on every node")
    g = len(hosts) // len(ranks)
    if any(r != list(range(r[0], r[0] + g)) or r[0] % g for r in ranks.values()):
        raise ValueError(f"Birder: the ranks are not numbered node by node ({_describe(ranks)}); the hierarchical "
                         "scheme needs rank = node x GPUs per node + local rank (as torchrun, Lightning and "
                         "Accelerate number them)")
    return g


def _describe(ranks: dict[str, list[int]]) -> str:
    shown = [f"{host}: ranks {r}" for host, r in list(ranks.items())[:4]]
    return "; ".join(shown) + (f"; ... ({len(ranks)} hosts)" if len(ranks) > 4 else "")


def verified_gpus_per_node(hosts: list[str], given: int | None, local_world_size: str | None) -> int:
    """The GPUs per node Birder uses: from the hosts when the ranks run on several (``given`` or a
    ``LOCAL_WORLD_SIZE`` that disagrees is refused with one ValueError), else ``given``, else ``LOCAL_WORLD_SIZE``,
    else all ranks (one host: simulated nodes cost no network)."""
    world = len(hosts)
    from_hosts = gpus_per_node_of(hosts)
    env = int(local_world_size) if local_world_size and local_world_size.isdigit() and int(local_world_size) > 0 \
        else None
    if from_hosts is None:
        return given if given is not None else env if env is not None else world
    nodes = world // from_hosts
    for source, value in ((f"gpus_per_node={given}", given), (f"LOCAL_WORLD_SIZE={env}", env)):
        if value is not None and value != from_hosts:
            raise ValueError(f"Birder: {source} says {world // value if world % value == 0 else '?'} node(s) of "
                             f"{value}, but the ranks run on {nodes} hosts of {from_hosts} "
                             f"({_describe(_ranks_of(hosts))}): the full-precision intra-node phase would cross "
                             f"the network. Pass gpus_per_node={from_hosts} or leave it out (Birder reads it from "
                             f"the hosts)")
    return from_hosts


def nodes_and_gpus(scheme: str, gpus_per_node, device: torch.device) -> tuple[int, int]:
    """Birder's (nodes, GPUs per node): in ``hierarchical``, from where the ranks really run (host names exchanged
    once), ``gpus_per_node`` or torchrun's LOCAL_WORLD_SIZE checked against them; in ``flat``, every rank is a
    worker."""
    world = dist.get_world_size()
    env_world = os.environ.get("WORLD_SIZE")
    if env_world is not None and env_world.isdigit() and int(env_world) != world:
        raise ValueError(f"WORLD_SIZE={env_world} in the environment, but the process group has {world} ranks")
    if gpus_per_node is not None:
        gpus_per_node = check_count("gpus_per_node", gpus_per_node, 1)
    if scheme != "hierarchical":
        return 1, world
    hosts = exchange_hosts(device) if world > 1 else [this_host()]
    g = verified_gpus_per_node(hosts, gpus_per_node, os.environ.get("LOCAL_WORLD_SIZE"))
    if world % g:
        raise ValueError(f"gpus_per_node={g} does not divide the world size {world}")
    return world // g, g
