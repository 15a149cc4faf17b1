"""Execute a schedule: move real encoded chunks between endpoints' buffers and log the bytes moved.

Each endpoint holds a buffer of shape (group size, chunk_elements) per phase: row c is chunk c. A message
encodes the sender's chunk as it stood at the start of the round (float32 bytes, or w-bit planes for
non-negative integer counts), the receiver decodes it and adds it (``reduce``) or stores it (``copy``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from birder_ref.schedules import Message, Phase


def encode(values: np.ndarray, bits: int) -> np.ndarray:
    """float32 values (bits == 32) or integer counts in [0, 2**bits) as bytes."""
    if bits == 32:
        return np.frombuffer(np.ascontiguousarray(values, np.float32).tobytes(), np.uint8)
    counts = values.astype(np.int64)
    if counts.size and (counts.min() < 0 or counts.max() >= 2**bits):
        raise ValueError(f"a count in [{counts.min()}, {counts.max()}] does not fit in {bits} bits")
    planes = (counts[None, :] >> np.arange(bits)[:, None]) & 1
    return np.packbits(planes.astype(bool), axis=1, bitorder="big").reshape(-1)


def decode(payload: np.ndarray, bits: int, n: int) -> np.ndarray:
    if bits == 32:
        return np.frombuffer(payload.tobytes(), np.float32).copy()
    planes = np.unpackbits(payload.reshape(bits, -1), axis=1, count=n, bitorder="big").astype(np.int64)
    return (planes << np.arange(bits)[:, None]).sum(axis=0)


@dataclass
class ByteLog:
    """Bytes sent, per phase name and endpoint, as counted from the encoded payloads actually moved."""

    sent: dict[str, dict[int, int]] = field(default_factory=dict)

    def add(self, phase: str, src: int, nbytes: int) -> None:
        per = self.sent.setdefault(phase, {})
        per[src] = per.get(src, 0) + nbytes

    def bytes_per_gpu(self, n_ranks: int) -> dict[str, int]:
        """Per phase, the most bytes any GPU (endpoint below n_ranks) sent."""
        return {ph: max([b for ep, b in per.items() if ep < n_ranks], default=0) for ph, per in self.sent.items()}


def deliver(phase: Phase, encode: Callable[[Message, int], np.ndarray],
            receive: Callable[[Message, np.ndarray, int], None], log: ByteLog) -> None:
    """Move ``phase``'s messages group by group, round by round (groups are disjoint, so this equals running
    them concurrently). Every message of a round is encoded from its sender's state at the start of the round
    (``encode(message, bits)``, with the round's bits per element), checked against the schedule's size and
    logged; then all are received (``receive(message, payload, bits)``)."""
    log.sent.setdefault(phase.name, {})
    for group in phase.groups:
        for r, messages in enumerate(phase.group_rounds(group)):
            bits = phase.bits_per_element[r]
            in_flight = []
            for msg in messages:
                payload = encode(msg, bits)
                if payload.size != msg.nbytes:
                    raise AssertionError(f"{phase.name}: payload of {payload.size} bytes, schedule says {msg.nbytes}")
                log.add(phase.name, msg.src, payload.size)
                in_flight.append((msg, payload))
            for msg, payload in in_flight:
                receive(msg, payload, bits)


def run_phase(phase: Phase, buffers: dict[int, np.ndarray], log: ByteLog) -> None:
    """Move the phase's chunks between ``buffers`` (modified in place): receivers add (``reduce``) or store
    (``copy``) the decoded chunk. Where the pattern ``sums_in_member_order``, a receiver keeps what it got and
    then adds the group's chunks, its own included, in member order."""
    in_order = phase.op == "reduce" and phase.pattern.sums_in_member_order
    received: dict[tuple[int, int], dict[int, np.ndarray]] = {}

    def send(msg: Message, bits: int) -> np.ndarray:
        return encode(buffers[msg.src][msg.chunk], bits)

    def receive(msg: Message, payload: np.ndarray, bits: int) -> None:
        value = decode(payload, bits, phase.chunk_elements).astype(buffers[msg.dst].dtype)
        if in_order:
            received.setdefault((msg.dst, msg.chunk), {})[msg.src] = value
        elif phase.op == "reduce":
            buffers[msg.dst][msg.chunk] += value
        else:
            buffers[msg.dst][msg.chunk] = value

    deliver(phase, send, receive, log)
    group_of = {member: group for group in phase.groups for member in group} if received else {}
    for (dst, chunk), parts in received.items():
        group = group_of[dst]
        parts[dst] = buffers[dst][chunk]
        total = parts[group[0]].copy()
        for member in group[1:]:
            total += parts[member]
        buffers[dst][chunk] = total
