"""Birder's numerics (Algorithm 1) as pure functions on torch tensors: one code path for CPU and CUDA.

Every function mirrors its NumPy counterpart in ``birder_ref`` operation for operation, in float32, with the
Python-float coefficients rounded to float32 exactly as NumPy 2 rounds them, and nothing fused (no addcmul,
lerp or FMA), so that the same inputs and draws give the same bits as ``birder_ref.algorithm1.step``.

Draws reuse ``birder_ref.draws`` (its 32-bit hash on int32 tensors; the optimizer's piecewise stages hash in place,
on CPU on NumPy uint32 views of their buffers, the same bits): the draw of element ``i``
at Algorithm 1 step ``t`` (1-based: the step being computed, ``state.t + 1``) for worker ``k`` is
``uniform(seed, t, k, i)``, for the server ``uniform(seed, t, SERVER_STREAM, i)``; ``i`` is the element's
position in the flattened parameter vector (``torch.nn.utils.parameters_to_vector`` order).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np
import torch

from birder_ref.draws import (
    _FMIX_C1,
    _FMIX_C2,
    MASK32,
    SERVER_STREAM,
    UNIFORM_BITS,
    as_int32,
    hash16,
    hash_index,
    low_half_word,
    mul32,
    stream_key,
)

__all__ = [
    "SERVER_STREAM",
    "WorkerState",
    "uniforms",
    "quantize",
    "pack_signs",
    "unpack_signs",
    "count_plus",
    "worker_step",
    "server_step",
    "mean_of_signs",
    "true_divide",
]

_BIT_SHIFTS = (7, 6, 5, 4, 3, 2, 1, 0)  # most significant bit first, as np.packbits(bitorder="big")
_CPU_PIECE = 1 << 16  # elements per piece of the CPU draws: int64 temporaries stay in cache
_HALF = 1 << 16  # indices per aligned block with one high half (``birder_ref.draws.index_mix``)


@dataclass(frozen=True)
class WorkerState:
    """One worker's m, b_hat, b (Algorithm 1 lines 5-7) and error e (line 9) on a slice of the vector."""

    m: torch.Tensor
    b_hat: torch.Tensor
    b: torch.Tensor
    e: torch.Tensor

    @staticmethod
    def zeros(n: int, device: torch.device | str = "cpu") -> WorkerState:
        """Algorithm 1 line 1: m_0 = b_0 = e_0 = 0."""
        return WorkerState(*(torch.zeros(n, dtype=torch.float32, device=device) for _ in range(4)))


def uniforms(seed: int, step: int, stream: int, index: torch.Tensor) -> torch.Tensor:
    """float32 draws k / 2**24 in [0, 1) for the int64 element indices ``index``; equal to
    ``birder_ref.draws.uniforms(seed, step, stream, ...)`` at the same indices.

    On CPU the hash runs over cache-sized pieces (about 3x faster than whole-vector temporaries); elsewhere in
    one pass. Either way each element's draw is the same function of its index.
    """
    key = stream_key(seed, step, stream)
    if index.device.type != "cpu" or index.numel() <= _CPU_PIECE:
        return _uniforms_of(key, index)
    out = torch.empty(index.shape, dtype=torch.float32)
    for piece, dest in zip(index.reshape(-1).split(_CPU_PIECE), out.view(-1).split(_CPU_PIECE), strict=True):
        dest.copy_(_uniforms_of(key, piece))
    return out


def _uniforms_of(key: int, index: torch.Tensor) -> torch.Tensor:
    """``birder_ref.draws``' hash on int32 words (the indices' low 32 bits), top 24 bits as k / 2**24."""
    words = index if index.dtype == torch.int32 else index.to(torch.int32)  # keeps the low 32 bits
    bits = (hash_index(key, words) >> (32 - UNIFORM_BITS)) & ((1 << UNIFORM_BITS) - 1)
    return bits.to(torch.float32) * 2.0**-UNIFORM_BITS


def quantize(y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Eq. 5 with an injected draw: +1.0 where u < (clip(y, -1, 1) + 1) / 2, else -1.0 (float32)."""
    threshold = (y.clamp(-1.0, 1.0) + 1.0) / 2.0
    return torch.where(u < threshold, 1.0, -1.0).to(torch.float32)


@functools.cache
def _shifts(device: torch.device) -> torch.Tensor:
    """The bit positions of one byte on ``device``, made once (a host-to-device copy per call would stall)."""
    return torch.tensor(_BIT_SHIFTS, dtype=torch.uint8, device=device)


def pack_signs(q: torch.Tensor) -> torch.Tensor:
    """+-1 values (length a multiple of 8) to uint8, most significant bit first, bit 1 for +1."""
    if q.numel() % 8:
        raise ValueError(f"pack_signs takes a multiple of 8 signs, got {q.numel()}")
    return ((q > 0).to(torch.uint8).view(-1, 8) << _shifts(q.device)).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor) -> torch.Tensor:
    """uint8 bytes (any leading shape) to their bits as uint8 0/1, most significant bit first."""
    return ((packed.unsqueeze(-1) >> _shifts(packed.device)) & 1).flatten(-2)


def unpack_signs(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_signs``: float32 +-1, eight per byte."""
    return unpack_bits(packed).to(torch.float32) * 2.0 - 1.0


def count_plus(packed_rows: torch.Tensor) -> torch.Tensor:
    """The number of +1s per element over the rows of a (senders, bytes) uint8 tensor, as int32."""
    return unpack_bits(packed_rows).sum(dim=0, dtype=torch.int32)


def true_divide(x: torch.Tensor, divisor: float) -> torch.Tensor:
    """x / float32(divisor), correctly rounded on every device, as NumPy divides.

    On CUDA, torch divides by a Python number (a CPU scalar) as x * (1 / divisor), which differs in the last
    bit for divisors that are not powers of two (ATen's div_true_kernel_cuda says so); a 0-dim tensor on x's
    device takes the true division path (made once per divisor and device: no host-to-device copy per step).
    """
    return x / _divisor(float(divisor), x.device)


@functools.cache
def _divisor(divisor: float, device: torch.device) -> torch.Tensor:
    return torch.tensor(divisor, dtype=torch.float32, device=device)


def mean_of_signs(plus_counts: torch.Tensor, n_workers: int) -> torch.Tensor:
    """Line 12's (1/n) sum_i u_i from counts of +1, the same float32 operations as
    ``birder_ref.algorithm1.mean_of_signs``."""
    return true_divide(2 * plus_counts.to(torch.float32) - float(n_workers), float(n_workers))


def worker_step(
    state: WorkerState,
    grad: torch.Tensor,
    beta: float,
    eps: float,
    u_worker: torch.Tensor,
    t: int,
    T0: int | None = None,
) -> tuple[torch.Tensor, WorkerState]:
    """Algorithm 1 lines 5-9 for one worker at step t (1-based); returns (u, new state), u of +-1.

    m = beta m + (1-beta) g; b_hat = beta b_hat + (1-beta)|g|; b = max(b, b_hat) once t > T0 (else b_hat);
    u = Q(m / (b + eps) + e, U); e = m / (b + eps) + e - u.
    """
    m = state.m * beta + grad * (1 - beta)
    b_hat = state.b_hat * beta + grad.abs() * (1 - beta)
    b = torch.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat
    y = m / (b + eps) + state.e
    u = quantize(y, u_worker)
    return u, WorkerState(m, b_hat, b, y - u)


def server_step(mean_u: torch.Tensor, server_error: torch.Tensor, u_server: torch.Tensor):
    """Algorithm 1 lines 12-13 on a slice: z = mean(u) + e_server, u_bar = Q(z, V); returns (u_bar, z - u_bar)."""
    z = mean_u + server_error
    u_bar = quantize(z, u_server)
    return u_bar, z - u_bar


# ---- in-place, piecewise forms of the worker and server steps (the optimizer's path) ----
#
# The same float32 operations as ``worker_step`` / ``server_step`` (and ``birder_ref.algorithm1.step``), applied
# over cache-sized pieces with preallocated temporaries: quantization, error feedback and bit packing of a piece
# happen while it is in cache, and no full-length temporary is made. The state is updated in place, so the caller
# must decide beforehand that the step counts (the optimizer checks the gradients first).

PIECE = 1 << 16  # elements per piece on a CPU: a few float32 temporaries of this size stay in L2
# elements per piece on a GPU: each piece costs some 30 kernel launches (about 10 us each) whatever its size, so a
# GPU's pieces are large (the H200 spent 80 ms on 2**24 elements in pieces of 2**16, 0.16% of its copy bandwidth);
# its workspace is about 14 bytes per element (224 MiB)
GPU_PIECE = 1 << 24


def piece_elements(device: torch.device | str) -> int:
    """Elements per piece of the piecewise stages on ``device``: ``PIECE`` on a CPU, ``GPU_PIECE`` elsewhere.
    Every stage is element-wise, so the piece size changes no bit."""
    return PIECE if torch.device(device).type == "cpu" else GPU_PIECE
_PACK_MAGIC = as_int32(0x80402010) << 32 | 0x08040201  # (0x8040201008040201 as int64): see _pack_into
_GRID_SCALE = float(2**UNIFORM_BITS)  # u = k / 2**24, so u < x exactly when k < x * 2**24


@dataclass
class _Workspace:
    """The temporaries of one piecewise call, allocated once per call and reused for every piece."""

    a: torch.Tensor  # float32: y (the worker's) or z (the server's)
    work: torch.Tensor  # float32: threshold, then Q(y)
    grid: torch.Tensor  # float32: the draws' k (u = k / 2**24)
    h: torch.Tensor  # int32: the hash, in grid's memory (dead once its top bits are copied into grid)
    t: torch.Tensor  # int32: the hash's shifted word, in work's memory (dead before work is written)
    plus: torch.Tensor  # bool: "+1"
    word: torch.Tensor  # int64: eight "+1" bytes, then their packed byte
    cpu: bool  # on the CPU: the NumPy forms run

    @functools.cached_property
    def arrays(self) -> tuple[np.ndarray, ...]:
        """NumPy views of a CPU workspace, made once: (a, work, grid, h and t as uint32, plus, word's bytes)."""
        return (self.a.numpy(), self.work.numpy(), self.grid.numpy(), self.h.numpy().view(np.uint32),
                self.t.numpy().view(np.uint32), self.plus.numpy(), self.word.numpy().view(np.uint8))

    @staticmethod
    def make(n: int, device) -> _Workspace:
        size = max(8, min(piece_elements(device), n))
        a, work, grid = (torch.empty(size, dtype=torch.float32, device=device) for _ in range(3))
        return _Workspace(a, work, grid, grid.view(torch.int32), work.view(torch.int32),  # fewer bytes in cache
                          torch.empty(size, dtype=torch.bool, device=device),
                          torch.empty(size // 8, dtype=torch.int64, device=device), torch.device(device).type == "cpu")


def _xorshift16(word: int) -> int:
    """fmix32's first step, h ^ (h >> 16), on a 32-bit Python int. It is linear over XOR (a logical shift), so
    xorshift16(a ^ b) = xorshift16(a) ^ xorshift16(b): applied to the cached table and to each block's constant
    apart, it costs no pass over the elements."""
    return word ^ (word >> 16)


@functools.cache
def _low_half_table(device: torch.device) -> torch.Tensor:
    """xorshift16(low_half_word(j)) for j < 2**16 as int32 words: ``birder_ref.draws.index_mix``'s table of the
    low half, with the first step of the fmix32 that follows already applied."""
    words = low_half_word(torch.arange(_HALF, dtype=torch.int32, device=device))
    return words ^ ((words >> 16) & 0xFFFF)  # the arithmetic shift made logical


def _grid_into(key: int, start: int, n: int, ws: _Workspace) -> torch.Tensor:
    """k = the top 24 bits of ``birder_ref.draws.hash_index(key, start + i)`` as float32 (exact), i < n, in the
    workspace: the draw is k / 2**24 (``uniforms``' value), left unscaled so that the comparison can scale the
    threshold instead (both multiplications by powers of two are exact).

    The hash's input index_mix(i) ^ key, with fmix32's first step applied, is formed in one pass: within an
    aligned block of 2**16 indices the high half is fixed, so it is the cached table of the low halves' words
    XOR the block's constant, (hash16(floor(i / 2**16)) << 16) ^ key (``_xorshift16`` of both; a piece spans at
    most n / 2**16 + 1 blocks). The rest of fmix32 and the top 24 bits take 8 more passes."""
    _hash_inputs_into(key, start, n, ws)
    return _mix_numpy(n, ws) if ws.cpu else _mix_torch(n, ws)


def _hash_inputs_into(key: int, start: int, n: int, ws: _Workspace) -> None:
    """xorshift16(index_mix(start + i) ^ key) into ``ws.h[:n]`` (``_grid_into``'s first pass)."""
    if ws.cpu:  # NumPy views: less dispatch per call than torch's
        h, table, xor, word = ws.arrays[3][:n], _low_half_numpy(), np.bitwise_xor, np.uint32
    else:
        h, table, xor, word = ws.h[:n], _low_half_table(ws.h.device), torch.bitwise_xor, as_int32
    end = start + n
    first_whole, last_whole = -(-start // _HALF) * _HALF, end - end % _HALF
    whole = not ws.cpu and last_whole - first_whole >= 2 * _HALF  # on a GPU, whole blocks in one launch
    lo = start
    while lo < end:
        if whole and lo == first_whole:
            blocks = (last_whole - first_whole) // _HALF
            constants = _block_constants_torch(key, first_whole >> 16, blocks, h.device)
            xor(table.unsqueeze(0), constants.unsqueeze(1), out=h[lo - start: last_whole - start].view(blocks, _HALF))
            lo = last_whole
            continue
        block = lo - lo % _HALF
        hi = min(end, block + _HALF)
        constant = word(_xorshift16((hash16((block >> 16) & 0xFFFF) << 16) ^ key))
        xor(table[lo - block: hi - block], constant, out=h[lo - start: hi - start])
        lo = hi


def _block_constants_torch(key: int, first_block: int, blocks: int, device: torch.device) -> torch.Tensor:
    """``_hash_inputs_into``'s per-block constant xorshift16((hash16(hi) << 16) ^ key) for the ``blocks`` aligned
    blocks of 2**16 indices from block number ``first_block``, as int32 words on ``device`` (formed there, as the
    Python ints of the block-by-block loop are: the same words)."""
    high = torch.arange(first_block, first_block + blocks, dtype=torch.int64, device=device).remainder_(1 << 16)
    words = mul32(hash16(high.to(torch.int32)), 1 << 16) ^ as_int32(key)
    return words ^ ((words >> 16) & 0xFFFF)  # the arithmetic shift made logical


@functools.cache
def _low_half_numpy() -> np.ndarray:
    return _low_half_table(torch.device("cpu")).numpy().view(np.uint32)


def _mix_torch(n: int, ws: _Workspace) -> torch.Tensor:
    """The rest of fmix32 (after its first step) on the words in ``ws.h`` and their top 24 bits into ``ws.grid``,
    on torch int32 words (any device): arithmetic shifts masked to logical ones."""
    h, t = ws.h[:n], ws.t[:n]
    h *= as_int32(_FMIX_C1)  # wraps modulo 2**32
    for shift, constant in ((13, _FMIX_C2), (16, None)):
        torch.bitwise_right_shift(h, shift, out=t)
        t &= MASK32 >> shift
        h ^= t
        if constant is not None:
            h *= as_int32(constant)
    torch.bitwise_right_shift(h, 32 - UNIFORM_BITS, out=t)
    t &= (1 << UNIFORM_BITS) - 1
    return ws.grid[:n].copy_(t)


def _mix_numpy(n: int, ws: _Workspace) -> torch.Tensor:
    """``_mix_torch`` on CPU, on NumPy uint32 views of the workspace, where a right shift is logical (no mask after
    it) and multiplication wraps modulo 2**32: 8 passes where torch takes 10, the same bits."""
    _, _, grid, h, t, _, _ = (x[:n] for x in ws.arrays)
    np.multiply(h, _C1, out=h)
    np.right_shift(h, _S13, out=t)
    h ^= t
    np.multiply(h, _C2, out=h)
    np.right_shift(h, _S16, out=t)
    h ^= t
    np.right_shift(h, _S8, out=t)  # the top 24 bits
    np.copyto(grid, t.view(np.int32))  # integers below 2**24: exact in float32
    return ws.grid[:n]


_C1, _C2, _S8, _S13, _S16 = (np.uint32(x) for x in (_FMIX_C1, _FMIX_C2, 32 - UNIFORM_BITS, 13, 16))


def _quantize_grid_(y: torch.Tensor, grid: torch.Tensor, ws: _Workspace, error: torch.Tensor) -> torch.Tensor:
    """Eq. 5 on y with draws k / 2**24 (``grid`` holds k), writing y - Q(y) into ``error``; returns the "+1" mask.

    ``birder_ref.quantize.quantize_unchecked``'s test u < fl(y + 1) / 2 (no clip: its docstring shows every
    decision equals the clipped one) taken as k < fl(y + 1) * 2**23: the same truth value, since multiplying both
    sides by 2**24 is exact (a power of two; an overflow to inf keeps k < inf true, as u < fl(y + 1) / 2 is).
    """
    n = y.numel()
    work, plus = ws.work[:n], ws.plus[:n]
    torch.add(y, 1.0, out=work).mul_(_GRID_SCALE / 2)
    torch.lt(grid, work, out=plus)
    torch.mul(plus, 2.0, out=work)  # +-1 exactly: 2 * {0, 1} - 1
    work.sub_(1.0)
    torch.sub(y, work, out=error)
    return plus


def _pack_into(plus: torch.Tensor, ws: _Workspace, out: torch.Tensor) -> None:
    """``pack_signs`` of a bool mask (a multiple of 8) into ``out``: each eight bytes (0/1) read as one
    little-endian int64 x, the byte is the top byte of x * 0x8040201008040201 (bit 63 - 9j of the constant
    carries byte j to bit 63 - j; every other product lands below bit 56 at a distinct position, or above
    bit 63, so nothing carries into the top byte)."""
    if sys.byteorder != "little":
        return out.copy_(_pack_mask(plus))
    word = ws.word[:plus.numel() // 8]
    torch.mul(plus.view(torch.uint8).view(torch.int64), _PACK_MAGIC, out=word)
    word >>= 56
    word &= 0xFF
    out.copy_(word)


def _pack_mask(plus: torch.Tensor) -> torch.Tensor:
    return (plus.view(-1, 8).to(torch.uint8) << _shifts(plus.device)).sum(dim=1, dtype=torch.uint8)


def _node_mean(rows: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The worker's gradient from the (G, n) rows its G GPUs sent: added in rank order, divided by G (G > 1)."""
    if rows.shape[0] == 1:
        return rows[0]
    if out is None:
        total = rows[0].clone()
        total += rows[1]
    else:
        total = torch.add(rows[0], rows[1], out=out)  # rows 0 + 1 in one pass: the same sum
    for row in rows[2:]:
        total += row
    if out is None:
        return true_divide(total, float(rows.shape[0]))
    return total.div_(_divisor(float(rows.shape[0]), total.device))


def worker_step_packed_(m: torch.Tensor, b_hat: torch.Tensor, e: torch.Tensor, grad: torch.Tensor, beta: float,
                        eps: float, key: int, start: int) -> torch.Tensor:
    """Algorithm 1 lines 5-9 in place on (m, b_hat, e) with b = b_hat (T0 off); returns u packed as ``pack_signs``.

    m = beta m + (1-beta) g; b_hat = beta b_hat + (1-beta)|g|; y = m / (b_hat + eps) + e; u = Q(y, U);
    e = y - u. The draw of position i is ``uniforms``' at index start + i under ``key`` (``stream_key``).
    Bit for bit ``worker_step`` (T0=None) followed by ``pack_signs``; length a multiple of 8. ``grad`` may also
    be the (G, n) rows of the node's GPUs: the node mean (``comm.node_mean_shard``'s operations) is then taken
    piece by piece.
    """
    rows = grad if grad.dim() == 2 else grad.reshape(1, -1)
    n = rows.shape[1]
    if n % 8:
        raise ValueError(f"worker_step_packed_ takes a multiple of 8 elements, got {n}")
    out = torch.empty(n // 8, dtype=torch.uint8, device=rows.device)
    ws = _Workspace.make(n, rows.device)
    mean = torch.empty_like(ws.a) if rows.shape[0] > 1 else None
    if rows.device.type == "cpu" and all(x.is_contiguous() and x.dtype == torch.float32 for x in (m, b_hat, e, rows)):
        with np.errstate(all="ignore"):  # overflow / NaN propagate as in torch, without NumPy's warnings
            _worker_pieces_numpy(m, b_hat, e, rows, beta, eps, key, start, ws, mean, out)
        return out
    for lo in range(0, n, ws.a.numel()):
        hi = min(lo + ws.a.numel(), n)
        k = hi - lo
        mp, bp, ep, a = m[lo:hi], b_hat[lo:hi], e[lo:hi], ws.a[:k]
        gp = _node_mean(rows[:, lo:hi], None if mean is None else mean[:k])
        mp.mul_(beta)
        torch.mul(gp, 1 - beta, out=a)
        mp.add_(a)
        bp.mul_(beta)
        torch.abs(gp, out=a)
        a.mul_(1 - beta)
        bp.add_(a)
        torch.add(bp, eps, out=a)
        torch.div(mp, a, out=a)
        a.add_(ep)  # a = y
        plus = _quantize_grid_(a, _grid_into(key, start + lo, k, ws), ws, ep)
        _pack_into(plus, ws, out[lo // 8: hi // 8])
    return out


def _worker_pieces_numpy(m, b_hat, e, rows, beta, eps, key, start, ws, mean, out) -> None:
    """``worker_step_packed_``'s loop on CPU, on NumPy views of the same tensors: the same float32 operations in the
    same order (NumPy rounds each to float32 as torch does, the Python coefficients rounded to float32 first; no
    contraction), with less per-operation overhead than torch's eager dispatch on pieces this small."""
    n = rows.shape[1]
    f32 = np.float32
    beta32, rest32, eps32 = f32(beta), f32(1 - beta), f32(eps)
    M, B, E, R, packed = m.numpy(), b_hat.numpy(), e.numpy(), rows.numpy(), out.numpy()
    A, W, G, _, _, PLUS, BYTES = ws.arrays
    total = None if mean is None else mean.numpy()
    divisor = f32(rows.shape[0])
    for lo in range(0, n, ws.a.numel()):
        hi = min(lo + ws.a.numel(), n)
        k = hi - lo
        mp, bp, ep, a, w, plus = M[lo:hi], B[lo:hi], E[lo:hi], A[:k], W[:k], PLUS[:k]
        if total is None:
            gp = R[0, lo:hi]
        else:  # the node mean: rows added in rank order, divided by G (``_node_mean``)
            gp = np.add(R[0, lo:hi], R[1, lo:hi], out=total[:k])
            for r in range(2, R.shape[0]):
                gp += R[r, lo:hi]
            gp /= divisor
        mp *= beta32
        np.multiply(gp, rest32, out=a)
        mp += a
        bp *= beta32
        np.abs(a, out=a)  # |g| (1-beta) as |g (1-beta)|: the same value (rounding is symmetric, 1-beta > 0)
        bp += a
        np.add(bp, eps32, out=a)
        np.divide(mp, a, out=a)
        a += ep  # a = y
        _grid_into(key, start + lo, k, ws)
        _quantize_numpy(a, G[:k], w, plus, BYTES[:k], ep)
        packed[lo // 8: hi // 8] = np.packbits(plus)  # most significant bit first, as pack_signs


def _quantize_numpy(y: np.ndarray, grid: np.ndarray, work: np.ndarray, plus: np.ndarray, scratch: np.ndarray,
                    error: np.ndarray) -> None:
    """``_quantize_grid_``'s operations on NumPy views (the same float32 results); Q(y) = 2 [plus] - 1 is formed
    in bytes (``scratch``: 2 p - 1 wraps to 255 for p = 0, -1 read as int8), then converted exactly."""
    f32 = np.float32
    np.add(y, f32(1.0), out=work)
    work *= f32(_GRID_SCALE / 2)
    np.less(grid, work, out=plus)
    np.add(plus.view(np.uint8), plus.view(np.uint8), out=scratch)
    scratch -= np.uint8(1)
    np.copyto(work, scratch.view(np.int8))  # +-1 exactly
    np.subtract(y, work, out=error)


def _server_pieces_numpy(mean_u, server_error, key, start, n_workers, ws, out) -> None:
    """``server_step_packed_``'s loop on CPU, on NumPy views: the same operations (line 12's mean as
    ``mean_of_signs`` forms it from the count c of +1s, (2 c - n) / n, with c from the unpacked bits, then
    z = mean + e_s, Q(z), e_s = z - Q(z), packing)."""
    n = server_error.numel()
    f32 = np.float32
    S, U, packed = server_error.numpy(), mean_u.numpy(), out.numpy()
    A, W, G, _, _, PLUS, BYTES = ws.arrays
    for lo in range(0, n, PIECE):
        hi = min(lo + PIECE, n)
        k = hi - lo
        z, w, sp = A[:k], W[:k], S[lo:hi]
        if n_workers is None:
            mean = U[lo:hi]
        else:
            count = np.unpackbits(U[0, lo // 8: hi // 8])  # 0/1 per element, most significant bit first
            if U.shape[0] > 255:  # uint8 would wrap
                count = count.astype(np.int32)
            for r in range(1, U.shape[0]):
                count += np.unpackbits(U[r, lo // 8: hi // 8])
            mean = w
            np.copyto(mean, count)  # small integers: exact
            mean *= f32(2.0)
            mean -= f32(U.shape[0])
            mean /= f32(U.shape[0])
        np.add(mean, sp, out=z)
        _grid_into(key, start + lo, k, ws)
        _quantize_numpy(z, G[:k], w, PLUS[:k], BYTES[:k], sp)
        packed[lo // 8: hi // 8] = np.packbits(PLUS[:k])  # most significant bit first, as pack_signs


def _mean_of_packed_signs(packed_rows: torch.Tensor, ws: _Workspace) -> torch.Tensor:
    """Line 12's (1/n) sum_i u_i from the (n, bytes) packed signs, in the workspace's ``work``: each row's bytes
    looked up as eight +-1 each (``_sign_table``) and added, giving 2 c - n exactly (small integers in float32),
    the value ``mean_of_signs`` forms from the count c of +1s; then the same true division by n."""
    n_rows, n_bytes = packed_rows.shape
    total, row_signs, index = ws.work[:8 * n_bytes], ws.grid[:8 * n_bytes], ws.word[:n_bytes]
    table = _sign_table(torch.float32, packed_rows.device)
    for r in range(n_rows):
        index.copy_(packed_rows[r])
        torch.index_select(table, 0, index, out=(total if r == 0 else row_signs).view(n_bytes, 8))
        if r:
            total.add_(row_signs)
    return total.div_(_divisor(float(n_rows), total.device))


def server_step_packed_(mean_u: torch.Tensor, server_error: torch.Tensor, key: int, start: int,
                        n_workers: int | None = None) -> torch.Tensor:
    """Algorithm 1 lines 12-13 in place on the server error: z = mean_u + e_s, u_bar = Q(z, V), e_s = z - u_bar;
    returns u_bar packed. Bit for bit ``server_step`` followed by ``pack_signs``. With ``n_workers``, ``mean_u``
    is instead the (n_workers, n / 8) packed signs received, and line 12's mean (``count_plus`` then
    ``mean_of_signs``) is taken piece by piece."""
    n = server_error.numel()
    if n % 8:
        raise ValueError(f"server_step_packed_ takes a multiple of 8 elements, got {n}")
    out = torch.empty(n // 8, dtype=torch.uint8, device=server_error.device)
    ws = _Workspace.make(n, server_error.device)
    if server_error.device.type == "cpu" and server_error.is_contiguous() and server_error.dtype == torch.float32 \
            and (n_workers is not None or mean_u.dtype == torch.float32):
        with np.errstate(all="ignore"):
            _server_pieces_numpy(mean_u, server_error, key, start, n_workers, ws, out)
        return out
    for lo in range(0, n, ws.a.numel()):
        hi = min(lo + ws.a.numel(), n)
        k = hi - lo
        z, sp = ws.a[:k], server_error[lo:hi]
        mean = mean_u[lo:hi] if n_workers is None else _mean_of_packed_signs(mean_u[:, lo // 8: hi // 8], ws)
        torch.add(mean, sp, out=z)
        plus = _quantize_grid_(z, _grid_into(key, start + lo, k, ws), ws, sp)
        _pack_into(plus, ws, out[lo // 8: hi // 8])
    return out


@functools.cache
def _sign_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(256, 8): the eight signs (+-1, most significant bit first) of every byte, made once per dtype and device."""
    bits = unpack_bits(torch.arange(256, dtype=torch.uint8, device=device))
    return (bits.to(dtype) * 2 - 1).view(256, 8)


def unpack_range(packed: torch.Tensor, start: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Signs start .. start + n - 1 of a packed vector as +-1 in ``dtype`` (any bit offset): one table lookup per
    byte (the same +-1 values as ``unpack_signs``)."""
    first, last = start // 8, -(-(start + n) // 8)
    signs = _sign_table(dtype, packed.device).index_select(0, packed[first:last].to(torch.int32)).view(-1)
    return signs[start - 8 * first: start - 8 * first + n]
