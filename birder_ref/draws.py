"""Counter-based uniform draws: u = uniform(seed, step, stream, index), a pure function.

One implementation serves NumPy and torch (CPU or CUDA): the hash works on 32-bit words held in int32 arrays or
tensors and uses only XOR, AND, right shifts followed by a mask (so an arithmetic shift acts as a logical one)
and multiplications that wrap modulo 2**32 (two's complement int32 multiplication wraps identically in NumPy,
on CPUs and in CUDA's mul.lo.s32). The mixing function is MurmurHash3's 32-bit finaliser (fmix32), applied twice:
h = fmix32(fmix32(index ^ key) ^ key). The top 24 bits of h become a float32 on the grid k / 2**24, so u lies in
[0, 1) exactly and every value is representable. An element index i in [0, 2**32) is held as the int32 with the
same low 32 bits. Python ints (the per-stream key) run the same function in the unsigned domain.

Streams: worker i of Algorithm 1 draws from stream i, the server from ``SERVER_STREAM``.
"""

from __future__ import annotations

import numbers

import numpy as np

MASK32 = 0xFFFFFFFF
SERVER_STREAM = 0x7FFFFFFF
GOLDEN = 0x9E3779B9
_FMIX_C1 = 0x85EBCA6B
_FMIX_C2 = 0xC2B2AE35
UNIFORM_BITS = 24


def as_int32(word: int) -> int:
    """The int32 value with the low 32 bits of ``word`` (a constant that int32 arrays and tensors accept)."""
    word &= MASK32
    return word - (1 << 32) if word >= 1 << 31 else word


def mul32(a, c: int):
    """(a * c) mod 2**32: wrapping int32 multiplication for arrays/tensors, masked for a Python int (unsigned)."""
    if isinstance(a, numbers.Integral):
        return (int(a) * c) & MASK32
    return a * as_int32(c)


def fmix32(h):
    """MurmurHash3's finaliser on 32-bit words: a Python int in [0, 2**32), or an int32 array/tensor, which it
    mixes in place (pass a fresh one) and returns: h ^= h >> 16; h *= C1; h ^= h >> 13; h *= C2; h ^= h >> 16."""
    if isinstance(h, numbers.Integral):
        h = int(h)
        h ^= h >> 16
        h = mul32(h, _FMIX_C1)
        h ^= h >> 13
        h = mul32(h, _FMIX_C2)
        return h ^ (h >> 16)
    for shift, constant in ((16, _FMIX_C1), (13, _FMIX_C2), (16, None)):
        t = h >> shift
        t &= MASK32 >> shift  # the arithmetic shift of a negative word, made logical
        h ^= t
        if constant is not None:
            h *= as_int32(constant)  # wraps modulo 2**32
    return h


def check_count(name: str, value) -> int:
    """``value`` as an int if it is a non-negative integer below 2**32 (Python or NumPy, not bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer in [0, 2**32), got {value!r}")
    if not 0 <= int(value) <= MASK32:
        raise ValueError(f"{name} must lie in [0, 2**32), got {value}")
    return int(value)


def stream_key(seed: int, step: int, stream: int) -> int:
    """The 32-bit key of one (seed, step, stream) triple; each must be an integer in [0, 2**32)."""
    seed, step, stream = (check_count(n, v) for n, v in (("seed", seed), ("step", step), ("stream", stream)))
    key = fmix32(seed ^ GOLDEN)
    key = fmix32(key ^ step)
    return fmix32((key + mul32(stream, GOLDEN)) & MASK32)


def hash_index(key: int, index):
    """The 32-bit hash of element ``index`` (an int32 array or tensor: the index's low 32 bits) under ``key``;
    int32 words out."""
    k = as_int32(key)
    h = fmix32(index ^ k)  # index ^ k is a fresh array: fmix32 mixes it in place
    h ^= k
    return fmix32(h)


def bits_to_uniforms(h):
    """The top 24 bits of int32 words as k / 2**24 (float32 in NumPy; for torch see ``torch_birder``)."""
    return ((h >> (32 - UNIFORM_BITS)) & ((1 << UNIFORM_BITS) - 1)).astype(np.float32) * np.float32(2.0**-UNIFORM_BITS)


def index_words(offset: int, n: int) -> np.ndarray:
    """Element indices offset .. offset + n - 1 as int32 words (their low 32 bits)."""
    if offset + n <= 1 << 31:
        return np.arange(offset, offset + n, dtype=np.int32)
    return np.arange(offset, offset + n, dtype=np.int64).astype(np.int32)  # wraps to the low 32 bits


def uniforms(seed: int, step: int, stream: int, n: int, offset: int = 0) -> np.ndarray:
    """float32 uniforms on the grid k / 2**24 in [0, 1) for element indices offset .. offset + n - 1."""
    n, offset = check_count("n", n), check_count("offset", offset)
    if offset + n > 2**32:
        raise ValueError(f"element indices must lie in [0, 2**32), got offset={offset}, n={n}")
    return bits_to_uniforms(hash_index(stream_key(seed, step, stream), index_words(offset, n)))


def worker_uniforms(seed: int, step: int, n_workers: int, dim: int) -> np.ndarray:
    """The (n_workers, dim) worker draws of one step of Algorithm 1 (worker i uses stream i)."""
    n_workers = check_count("n_workers", n_workers)
    return np.stack([uniforms(seed, step, i, dim) for i in range(n_workers)]) if n_workers else np.zeros(
        (0, check_count("dim", dim)), np.float32
    )


def server_uniforms(seed: int, step: int, dim: int) -> np.ndarray:
    """The (dim,) server draws of one step of Algorithm 1."""
    return uniforms(seed, step, SERVER_STREAM, dim)
