"""Counter-based uniform draws: u = uniform(seed, step, stream, index), a pure function.

Every operation is on integers below 2**48 held in int64, so NumPy and torch (CPU or CUDA, int64 tensors)
compute the same bits without relying on unsigned or overflowing arithmetic. A 32x32-bit product is split into
two 32x16-bit products; the mixing function is MurmurHash3's 32-bit finaliser (fmix32). The top 24 bits of the
hash become a float32 on the grid k / 2**24, so u lies in [0, 1) exactly and every value is representable.

Streams: worker i of Algorithm 1 draws from stream i, the server from ``SERVER_STREAM``.
"""

from __future__ import annotations

import numpy as np

MASK32 = 0xFFFFFFFF
SERVER_STREAM = 0x7FFFFFFF
GOLDEN = 0x9E3779B9
_FMIX_C1 = 0x85EBCA6B
_FMIX_C2 = 0xC2B2AE35
UNIFORM_BITS = 24


def mul32(a, c: int):
    """(a * c) mod 2**32 for int64 values 0 <= a < 2**32 and a 32-bit constant c, without overflow."""
    low = (a * (c & 0xFFFF)) & MASK32
    high = ((a * (c >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def fmix32(h):
    """MurmurHash3's finaliser on int64 values holding 32-bit words (works on ints, NumPy and torch)."""
    h = h ^ (h >> 16)
    h = mul32(h, _FMIX_C1)
    h = h ^ (h >> 13)
    h = mul32(h, _FMIX_C2)
    return h ^ (h >> 16)


def stream_key(seed: int, step: int, stream: int) -> int:
    """The 32-bit key of one (seed, step, stream) triple; each of the three must fit in 32 bits."""
    for name, value in (("seed", seed), ("step", step), ("stream", stream)):
        if not 0 <= int(value) <= MASK32:
            raise ValueError(f"{name} must lie in [0, 2**32), got {value}")
    key = fmix32(int(seed) ^ GOLDEN)
    key = fmix32(key ^ int(step))
    return fmix32((key + mul32(int(stream), GOLDEN)) & MASK32)


def hash_index(key: int, index):
    """The 32-bit hash of element ``index`` (an int64 array, or torch tensor) under ``key``."""
    return fmix32(fmix32((index ^ key) & MASK32) ^ key)


def uniforms(seed: int, step: int, stream: int, n: int, offset: int = 0) -> np.ndarray:
    """float32 uniforms on the grid k / 2**24 in [0, 1) for element indices offset .. offset + n - 1."""
    if n < 0 or offset < 0 or offset + n > 2**32:
        raise ValueError(f"element indices must lie in [0, 2**32), got offset={offset}, n={n}")
    index = np.arange(offset, offset + n, dtype=np.int64)
    bits = hash_index(stream_key(seed, step, stream), index) >> (32 - UNIFORM_BITS)
    return bits.astype(np.float32) * np.float32(2.0**-UNIFORM_BITS)


def worker_uniforms(seed: int, step: int, n_workers: int, dim: int) -> np.ndarray:
    """The (n_workers, dim) worker draws of one step of Algorithm 1 (worker i uses stream i)."""
    return np.stack([uniforms(seed, step, i, dim) for i in range(n_workers)]) if n_workers else np.zeros(
        (0, dim), np.float32
    )


def server_uniforms(seed: int, step: int, dim: int) -> np.ndarray:
    """The (dim,) server draws of one step of Algorithm 1."""
    return uniforms(seed, step, SERVER_STREAM, dim)
