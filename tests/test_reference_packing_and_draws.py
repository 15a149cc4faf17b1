"""Bit packing (MSB first, 1 for +1, zero pad bits) and the counter-based draws."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from birder_ref import draws, pack_signs, quantize, unpack_signs
from proofs_checks import draws_pairs


def test_pack_is_msb_first_one_for_plus_and_pads_with_zero():
    q = np.array([1, -1, -1, -1, -1, -1, -1, 1, 1, 1], np.float32)
    bits = pack_signs(q)
    assert bits.dtype == np.uint8 and bits.tolist() == [0b10000001, 0b11000000]


@given(st.integers(0, 200), st.integers(0, 2**32 - 1))
def test_unpack_inverts_pack(d, seed):
    q = quantize(np.zeros(d, np.float32), draws.uniforms(seed, 0, 0, d))
    bits = pack_signs(q)
    assert bits.size == -(-d // 8)
    back = unpack_signs(bits, d)
    assert back.dtype == np.float32 and np.array_equal(back, q)


@pytest.mark.parametrize("call, message", [
    (lambda: pack_signs(np.array([1, 0, -1], np.float32)), "element 1 is 0"),
    (lambda: pack_signs(np.ones((2, 8), np.float32)), "1-D"),
    (lambda: unpack_signs(np.zeros(2, np.uint8), 17), "cannot hold exactly d=17"),
    (lambda: unpack_signs(np.zeros(2, np.int32), 16), "uint8"),
    # the contract's pad bits are 0: a set one is a corrupt message, not a sign (trial t9)
    (lambda: unpack_signs(np.array([0xFF, 0x81], np.uint8), 9),
     "pad bits \\(its low 7\\) are not 0 \\(byte 0x81 for d=9\\)"),
    (lambda: unpack_signs(np.array([0x01], np.uint8), 7), "its low 1\\) are not 0"),
])
def test_packing_rejects_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def fmix32_python(h: int) -> int:
    """MurmurHash3's fmix32 with Python's unbounded ints (an independent oracle for the wrapping int32 words)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def hash16_python(x: int) -> int:
    """The 16-bit permutation of the draws' index with Python ints (an oracle): xorshift-multiply, shifts 8, 7, 9."""
    x ^= x >> 8
    x = (x * 0x88B5) & 0xFFFF
    x ^= x >> 7
    x = (x * 0xDB2D) & 0xFFFF
    return x ^ (x >> 9)


def index_mix_python(i: int) -> int:
    """A(i) = T(i mod 2**16) ^ (hash16(floor(i / 2**16)) << 16), T(lo) = fmix32(lo)'s high half | hash16(lo)."""
    low, high = i & 0xFFFF, i >> 16
    return ((fmix32_python(low) & 0xFFFF0000) | hash16_python(low)) ^ (hash16_python(high) << 16)


def test_hash16_is_a_permutation_of_16_bit_words_in_numpy_and_torch():
    """All 2**16 words map to distinct words, the same in NumPy, torch and Python ints: what makes A injective."""
    words = np.arange(1 << 16, dtype=np.int32)
    images = draws.hash16(words)
    assert np.array_equal(np.sort(images), words)
    assert np.array_equal(draws.hash16(torch.from_numpy(words)).numpy(), images)
    assert [draws.hash16(x) for x in (0, 1, 255, 40000, 65535)] == [
        hash16_python(x) for x in (0, 1, 255, 40000, 65535)] == images[[0, 1, 255, 40000, 65535]].tolist()


def _invert_index_mix(a: np.ndarray) -> np.ndarray:
    """i from A(i) as uint32 (the docstring's proof run backwards): the low half of A is hash16(lo), which the
    inverse table of hash16 undoes; then the high half XOR T(lo)'s high half is hash16(hi)."""
    inverse = np.empty(1 << 16, np.int64)
    inverse[draws.hash16(np.arange(1 << 16, dtype=np.int32))] = np.arange(1 << 16)
    a = a.astype(np.int64) & draws.MASK32
    low = inverse[a & 0xFFFF]
    table_high = draws.low_half_word(np.arange(1 << 16, dtype=np.int32)).astype(np.int64) >> 16 & 0xFFFF
    high = inverse[(a >> 16) ^ table_high[low]]
    return high << 16 | low


def test_index_mix_determines_the_index():
    """A(i) determines i for every index in [0, 2**32): hash16 is a permutation of the 2**16 half-words (all of them
    checked) and A(i) = T(lo) ^ (hash16(hi) << 16) with T(lo)'s low half hash16(lo) (checked on the first 2**20
    indices and across the range), which is the module docstring's proof; the inversion run backwards recovers the
    first 2**20 indices (under the simple tabulation it replaced, 188 of them shared their A(i) with another) and
    indices at and past 2**31; torch gives the same bits."""
    halves = np.arange(1 << 16, dtype=np.int32)
    assert np.array_equal(np.sort(draws.hash16(halves)), halves)  # a permutation
    first = draws.index_words(0, 1 << 20)
    mixed = draws.index_mix(first)
    lo, hi = first & 0xFFFF, (first >> 16) & 0xFFFF
    assert np.array_equal(mixed & 0xFFFF, draws.hash16(lo))
    assert np.array_equal((mixed >> 16) & 0xFFFF, ((draws.low_half_word(lo) >> 16) & 0xFFFF) ^ draws.hash16(hi))
    assert np.array_equal(_invert_index_mix(mixed), np.arange(1 << 20))
    assert np.array_equal(draws.index_mix(torch.from_numpy(first)).numpy(), mixed)
    wide = np.random.default_rng(21).integers(0, 2**32, 1 << 16, dtype=np.int64)
    wide[:3] = 2**31 - 1, 2**31, 2**32 - 1
    words = wide.astype(np.uint32).view(np.int32)
    assert np.array_equal(_invert_index_mix(draws.index_mix(words)), wide)
    assert np.array_equal(draws.index_mix(torch.from_numpy(words)).numpy(), draws.index_mix(words))
    assert [int(a) & draws.MASK32 for a in draws.index_mix(words[:3])] == [
        index_mix_python(int(w)) for w in wide[:3]] == [draws.index_mix(int(w)) for w in wide[:3]]


@given(st.integers(0, 2**32 - 1))
def test_fmix32_without_overflow_equals_the_plain_hash(h):
    assert draws.fmix32(h) == fmix32_python(h)
    word = draws.as_int32(h)
    assert int(draws.fmix32(np.array([word, word], np.int32))[0]) & draws.MASK32 == fmix32_python(h)
    assert int(draws.fmix32(torch.tensor([word, word], dtype=torch.int32))[0]) & draws.MASK32 == fmix32_python(h)


def test_uniforms_lie_on_the_2_to_minus_24_grid_in_0_1():
    u = draws.uniforms(3, 1, 0, 1 << 16)
    assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
    assert np.array_equal(u * 2**24, np.floor(u * 2**24))


def test_uniforms_are_a_pure_function_of_seed_step_stream_index():
    full = draws.uniforms(5, 7, 2, 1000)
    assert np.array_equal(full, draws.uniforms(5, 7, 2, 1000))
    assert np.array_equal(full[300:700], draws.uniforms(5, 7, 2, 400, offset=300))
    for other in (draws.uniforms(6, 7, 2, 1000), draws.uniforms(5, 8, 2, 1000), draws.uniforms(5, 7, 3, 1000)):
        assert np.mean(other == full) < 0.01  # any changed coordinate gives an unrelated sequence


def test_torch_computes_the_same_uniforms():
    key = draws.stream_key(11, 4, draws.SERVER_STREAM)
    index = torch.arange(0, 5000, dtype=torch.int32)
    u_torch = ((draws.hash_index(key, index) >> 8) & 0xFFFFFF).to(torch.float32) * 2.0**-24
    assert np.array_equal(u_torch.numpy(), draws.uniforms(11, 4, draws.SERVER_STREAM, 5000))


def test_indices_past_2_to_the_31_use_their_low_32_bits_in_numpy_and_torch():
    """The int32 words of indices >= 2**31 are negative; the hash of the word is the hash of the index."""
    from gpu_validation import torch_birder as tb

    offset = 2**31 - 1000
    u = draws.uniforms(9, 2, 1, 2000, offset=offset)
    assert np.array_equal(u, tb.uniforms(9, 2, 1, torch.arange(offset, offset + 2000)).numpy())
    key = draws.stream_key(9, 2, 1)
    oracle = [fmix32_python(index_mix_python(i) ^ key) >> 8 for i in (offset, 2**31, 2**32 - 1)]
    got = draws.uniforms(9, 2, 1, 1, offset=offset)[0], draws.uniforms(9, 2, 1, 1, offset=2**31)[0], \
        draws.uniforms(9, 2, 1, 1, offset=2**32 - 1)[0]
    assert [int(g * 2**24) for g in got] == oracle


@pytest.mark.parametrize("seed", [1.5, -1, True, "3", 2**32, np.float32(2.0)])
def test_seeds_must_be_non_negative_integers(seed):
    with pytest.raises(ValueError, match="seed must"):
        draws.server_uniforms(seed, 1, 8)


def test_numpy_integer_seeds_equal_python_ones():
    assert np.array_equal(draws.server_uniforms(np.int64(7), np.uint32(2), 16), draws.server_uniforms(7, 2, 16))


def test_uniforms_pass_a_chi_square_test_at_false_failure_probability_1e_9():
    """2**20 draws in 256 bins: the statistic exceeds the chi2(255) quantile at 1 - 1e-9 with probability 1e-9
    for truly uniform draws (the draws are fixed, so the outcome is too)."""
    counts = np.bincount((draws.uniforms(2024, 1, 0, 1 << 20) * 256).astype(np.int64), minlength=256)
    statistic = ((counts - 4096.0) ** 2 / 4096.0).sum()
    assert statistic < stats.chi2.isf(1e-9, 255)


@pytest.mark.parametrize("bits", ["high", "low"])
@pytest.mark.parametrize("pair", [1, 2**7, 2**14, 2**16, 2**19, 65537, "next stream", "next step", "server stream"])
def test_pairs_of_draws_pass_a_chi_square_test_at_false_failure_probability_1e_9(pair, bits):
    """Disjoint pairs of draws, 2**19 of them: (u(i), u(i + d)) of one stream (i runs over the indices whose
    block of d is even, so no draw is in two pairs), or the same index under the next stream, step or the
    server's stream. For independent uniforms the statistic exceeds the chi2(255) quantile at 1 - 1e-9 with
    probability 1e-9 (the draws are fixed, so the outcome is too). A single fmix32(index ^ key) fails lag 2**14
    here (statistic 455 against the quantile 415; this hash: 243)."""
    n = 1 << 20
    u = draws.uniforms(2024, 1, 0, n)
    if isinstance(pair, int):  # the lag d
        a, b = draws_pairs.lag_pairs(u, pair)
    else:
        step, stream = draws_pairs.OTHER_KEYS[pair]
        a, b = u[: n // 2], draws.uniforms(2024, step, stream, n // 2)
    assert draws_pairs.pair_chi_square(a, b, bits) < stats.chi2.isf(1e-9, 255)


def test_quantize_mean_with_grid_draws_is_exact():
    """Over all 2**24 grid draws, P(Q(y) = +1) = (y + 1) / 2 up to one grid step (Lemma 1 with the draws)."""
    grid = np.arange(2**24, dtype=np.float32) / np.float32(2**24)
    for y in np.array([-1.0, -0.3, 0.0, 0.123456, 0.75, 1.0], np.float32):
        plus = np.count_nonzero(quantize(np.full(grid.size, y, np.float32), grid) > 0) / 2**24
        assert abs(plus - (float(y) + 1) / 2) <= 2**-24


@pytest.mark.parametrize("args", [(-1, 0, 0), (0, 2**32, 0), (0, 0, -3)])
def test_keys_outside_32_bits_are_rejected(args):
    with pytest.raises(ValueError, match="must lie in"):
        draws.stream_key(*args)
