"""The stochastic 1-bit quantizer of Eq. 5 and the packing of its signs into bytes."""

from __future__ import annotations

import numpy as np

from birder_ref.validation import check_array, check_draws, check_int, native


def quantize(y: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Eq. 5: +1 with probability (y + 1) / 2, else -1, for y clipped to [-1, 1]; the draw u is injected.

    Returns float32 +1.0 where ``u < (clip(y, -1, 1) + 1) / 2`` and -1.0 elsewhere. With u uniform on
    [0, 1), E[Q(y)] = y for |y| <= 1 (Lemma 1); |y| > 1 gives sign(y) deterministically.
    """
    y = check_array("y", native(y))
    return quantize_unchecked(y, check_draws("u", native(u), y.shape))


def quantize_unchecked(y: np.ndarray, u: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``quantize`` for inputs already checked; ``out`` (float32, y's shape, may not alias y or u) is reused.

    The clip is skipped: for y > 1, fl(y + 1) / 2 >= 1 > u, and for y < -1, fl(y + 1) / 2 < 0 <= u, so every
    decision equals the clipped one (at y = 1 + 2**-23, y + 1 rounds to 2; at y = -1 - 2**-23 it is -2**-23).
    """
    out = np.add(y, np.float32(1.0), out=np.empty(y.shape, np.float32) if out is None else out)  # 0-d: an array
    out /= np.float32(2.0)
    plus = np.less(u, out, out=np.empty(out.shape, bool))
    np.multiply(plus, np.float32(2.0), out=out)  # 2 * [u < threshold] - 1, exactly +-1
    out -= np.float32(1.0)
    return out


def pack_signs(q: np.ndarray) -> np.ndarray:
    """+-1 values to uint8, ceil(d / 8) bytes, most significant bit first, bit 1 for +1, pad bits 0."""
    q = np.asarray(q)
    if q.ndim != 1:
        raise ValueError(f"pack_signs takes a 1-D array, got shape {q.shape}")
    bad = np.flatnonzero((q != 1) & (q != -1))
    if bad.size:
        raise ValueError(f"pack_signs takes +-1 values; element {bad[0]} is {q[bad[0]]}")
    return np.packbits(q > 0, bitorder="big")


def unpack_signs(bits: np.ndarray, d: int) -> np.ndarray:
    """Inverse of ``pack_signs``: float32 +-1 of length d."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint8 or bits.ndim != 1:
        raise ValueError(f"unpack_signs takes a 1-D uint8 array, got {bits.dtype} of shape {bits.shape}")
    d = check_int("d", d, 0)
    if bits.size != -(-d // 8):
        raise ValueError(f"{bits.size} bytes cannot hold exactly d={d} signs (need {-(-d // 8)})")
    pad = (8 - d % 8) % 8
    if pad and int(bits[-1]) & ((1 << pad) - 1):  # pack_signs writes them 0: a set one is a corrupt message
        raise ValueError(f"the last byte's pad bits (its low {pad}) are not 0 (byte {int(bits[-1]):#04x} for "
                         f"d={d}): not pack_signs output")
    plus = np.unpackbits(bits, count=d, bitorder="big").astype(bool)
    return np.where(plus, np.float32(1.0), np.float32(-1.0))
