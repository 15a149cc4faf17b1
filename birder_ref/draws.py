"""Counter-based uniform draws: u = uniform(seed, step, stream, index), a pure function.

One implementation serves NumPy and torch (CPU or CUDA): the hash works on 32-bit words held in int32 arrays or
tensors and uses only XOR, AND, OR, right shifts followed by a mask (so an arithmetic shift acts as a logical
one) and multiplications that wrap modulo 2**32 (two's complement int32 multiplication wraps identically in
NumPy, on CPUs and in CUDA's mul.lo.s32). The mixing function is MurmurHash3's 32-bit finaliser fmix32
(Appleby, SMHasher). The index i is split into 16-bit halves lo = i mod 2**16 and hi = floor(i / 2**16) and
combined in one Feistel-like round, each half through a table as in tabulation hashing (Zobrist 1970; Patrascu
and Thorup, "The power of simple tabulation hashing", STOC 2011):
A(i) = T(lo) ^ (hash16(hi) << 16) with T(lo) = (the high 16 bits of fmix32(lo)) << 16 | hash16(lo), where hash16
is a 16-bit xorshift-multiply permutation; then h = fmix32(A(i) ^ key). The top 24 bits of h become a float32 on
the grid k / 2**24, so u lies in [0, 1) exactly and every value is representable. An element index i in
[0, 2**32) is held as the int32 with the same low 32 bits. Python ints (the per-stream key) run the same function
in the unsigned domain.

A is a bijection of 32-bit words. hash16 is one: x ^= x >> s (s >= 1) keeps x's top s bits and recovers each
lower bit from the bits above it, and a multiplication by an odd constant is invertible modulo 2**16. The low 16
bits of A(i) are hash16(lo) (the high half's term lies above bit 15), so A(i) determines lo; its high 16 bits
are (fmix32(lo) >> 16) ^ hash16(hi), so with lo known they determine hash16(hi), hence hi. Two indices therefore
never share A(i), nor, under any key, their draws. (The simple tabulation fmix32(lo) ^ fmix32(2**16 + hi) used
before was not injective: the first 2**20 indices took 94 fewer distinct values than indices (188 indices in
pairs sharing one), the first 2**24 took 32,638 fewer (65,232 indices sharing), and indices sharing A(i) got the
same draw in every step and stream.)

Quality. Eq. 5 needs each draw uniform (Lemma 1): for a uniform key, A(i) ^ key is uniform and fmix32 is a
bijection, so every draw is exactly uniform on the grid. The analysis sums one coordinate's noise over steps and
workers: the same A(i) under distinct keys (``stream_key`` keeps keys distinct across one stream's steps and one
step's streams), distinct inputs of a bijection differing by a hashed key difference. Across coordinates, two
indices' inputs to the final fmix32 differ by a dense difference rather than by a few low or high bits: within a
block of 2**16 (same hi) by T(lo) ^ T(lo'), hash outputs in both halves; with the same lo by
(hash16(hi) ^ hash16(hi')) << 16, whose dense high half fmix32's first step (h ^= h >> 16) copies into the low
half; so fmix32's residual bias on sparse input differences does not reach the draws. Measured with 16 x 16
chi-square tests on disjoint pairs (u(i), u(i + d)) (seeds 2024, 7, 99; top 4 bits and bits 4-7 of the 24): a
single fmix32(i ^ key) fails at p < 1e-100 (d = 2**14, 2**22 draws); fmix32(i * 0x9E3779B9 + key) (SplitMix's
Weyl step) passes at 2**22 draws but fails at d = 2**23 (p 1e-8 to 7e-7, 2**24 draws); this hash passed all 174
checks of d = 2**b, b < 22, d = 3, 65535, 65537, 1000003 and the pairs of streams, of steps and with the server's
stream at 2**22 draws (largest statistic 332 against the chi2(255) quantile 414.5 at 1 - 1e-9), and all 72 of
d = 2**b, 12 <= b < 24, at 2**24 (largest 315) (``python -m proofs_checks.draws_pairs [--log2-draws 24]`` prints
these; tests/test_reference_packing_and_draws.py keeps such checks at 2**20 draws, false-failure probability 1e-9
each). In the optimizer A(i) costs one pass: within an aligned block of 2**16
indices it is a cached table of T(j) XOR one constant hash16(hi) << 16 (fmix32's first step, linear over XOR,
folded into both), so the hash takes 9 passes per element where the two rounds fmix32(fmix32(i ^ key) ^ key) of
an earlier version took 19 (``gpu_validation.torch_birder._grid_into``).

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
# hash16's shifts (8, 7, 9) and multipliers: hash16_xm2 of C. Wellons' hash-prospector (github.com/skeeto/
# hash-prospector, README, "16-bit hashes"; avalanche bias 0.0086 measured there)
_HASH16_C1 = 0x88B5
_HASH16_C2 = 0xDB2D


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


def hash16(x):
    """A bijection of 16-bit words (a Python int or an int32 array/tensor with values in [0, 2**16)): three
    xorshifts x ^= x >> s and two multiplications by odd constants modulo 2**16, each invertible on 16 bits."""
    for shift, constant in ((8, _HASH16_C1), (7, _HASH16_C2), (9, None)):
        x = x ^ (x >> shift)  # x >= 0, so the shift is logical
        if constant is not None:
            x = (x * constant) & 0xFFFF  # int32 products wrap modulo 2**32; their low 16 bits are exact
    return x


def low_half_word(low):
    """T(j) = (fmix32(j) with its low 16 bits replaced by hash16(j)) for j in [0, 2**16): a Python int or an int32
    array/tensor (a fresh one); ``index_mix``'s table of the index's low half."""
    return (fmix32(low ^ 0) & ~0xFFFF) | hash16(low)  # low ^ 0: a fresh copy, as fmix32 mixes arrays in place


def index_mix(index):
    """A(i) = T(i mod 2**16) ^ (hash16(floor(i / 2**16)) << 16) of int32 words (the indices' low 32 bits), a
    bijection of 32-bit words (the module docstring proves it); a fresh array or tensor."""
    high = (index >> 16) & 0xFFFF  # the arithmetic shift made logical
    return low_half_word(index & 0xFFFF) ^ mul32(hash16(high), 1 << 16)  # the shift left as a wrapping product


def hash_index(key: int, index):
    """The 32-bit hash fmix32(index_mix(index) ^ key) of element ``index`` (an int32 array or tensor: the index's
    low 32 bits) under ``key``; int32 words out."""
    h = index_mix(index)
    h ^= as_int32(key)
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
