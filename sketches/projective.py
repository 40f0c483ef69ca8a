"""Linear hashing over a prime field on the server: the array forms of the direction codes and
the inner product, and the two DFTs over Z_g^t that decode Hadamard response and OLH's linear
family (client_sdk.protocols.projective's module docstring derives them; the plain-Python parts
a device needs stay there)."""

from __future__ import annotations

import functools
import math

import numpy as np

from client_sdk.protocols.projective import direction_starts, directions

#: Rows of the (m, g) table transformed at once by ``line_sums``: the float64 copy numpy makes of
#: an integer table is then one block's (1 MB at g = 11), reused, not a second table of fresh pages.
RFFT_ROWS = 1 << 14


def direction_codes(s: np.ndarray, g: int, t: int) -> np.ndarray:
    """Integer code of direction s: g^j + (s − start_j) for the j whose block holds s."""
    starts = np.array(direction_starts(g, t), dtype=np.int64)
    j = np.searchsorted(starts, s, side="right") - 1
    powers = np.array([g ** i for i in range(t)], dtype=np.int64)
    return powers[j] + (s - starts[j])


def inner(u: np.ndarray, x: np.ndarray, g: int, t: int) -> np.ndarray:
    """⟨u, x⟩ mod g of the base-g digit vectors of u and x (int64 arrays, broadcast)."""
    if g == 2:
        v = np.asarray(u & x, dtype=np.int64)
        count = getattr(np, "bitwise_count", None)
        if count is not None:
            return (count(v) & 1).astype(np.int64)
        acc = np.zeros_like(v)
        for _ in range(t):
            acc ^= v & 1
            v = v >> 1
        return acc
    acc = np.zeros(np.broadcast(u, x).shape, dtype=np.int64)
    for _ in range(t):
        acc += (u % g) * (x % g)
        u, x = u // g, x // g
    return acc % g



@functools.lru_cache(maxsize=4)
def multiples(g: int, t: int) -> np.ndarray:
    """idx[s, k] = code of k·a_s (digit-wise mod g), shape (m, g); idx[:, 0] = 0.

    The entries idx[:, 1:] enumerate every nonzero vector of F_g^t exactly once. Built a block of
    directions at a time: block j holds a = e_j + r with r < g^j (``direction_codes``), so
    k·a = k·g^j + M_k(r), and M_k over r < g^(j+1) follows from M_k over r < g^j digit by digit,
    M_k(r) = M_k(r div g)·g + (k·(r mod g) mod g), for every k at once — m·g writes instead of
    t·g passes over the whole (m, g) table (at g^t = 1.8·10⁶: ~4x faster, docs/benchmarks.md).
    """
    m = directions(g, t)
    idx = np.empty((m, g), dtype=np.int64)
    ks = np.arange(g, dtype=np.int64)
    digit_products = (ks[:, None] * ks[None, :]) % g           # [k, digit] = k·digit mod g
    low = np.zeros((g, 1), dtype=np.int64)                      # M_k(r) for r < g^0, per k
    start = 0
    for j in range(t):
        size = g ** j
        idx[start:start + size] = ks[None, :] * size + low.T    # k·(e_j + r) = k·g^j + M_k(r)
        start += size
        if j + 1 < t:
            low = (low[:, :, None] * g + digit_products[:, None, :]).reshape(g, -1)
    idx.setflags(write=False)
    return idx


def line_sums(table: np.ndarray, g: int, t: int, d: int) -> np.ndarray:
    """Σ_s table[s, ⟨a_s, x⟩] for x ∈ [d] (float64), table of shape (m, g) (int64 or float64).

    The table is real, so its spectrum is Hermitian (F(−ξ) = conj F(ξ)): the inverse transform
    is a real one over half the last axis, and only that half of F is built, one axis
    transformed at a time, in place. The half spectrum is gathered block by block
    (``_block_spectrum``): the codes whose leading nonzero digit j is k are k·a_s for the
    directions s of block j, a digit-wise permutation of the block's rows — no (m, g) direction
    table, no index array; k > g//2 reads the conjugate at g − k. Over g^t = 1.8·10⁶ cells
    this takes ~1.2x a numpy fast Walsh–Hadamard transform of 2²⁰ (bench/estimate.py's floor)."""
    table = np.asarray(table)
    half, m = g // 2 + 1, table.shape[0]
    hat = np.empty((half, m), dtype=np.complex128)         # k = 0 .. g//2, a row per k: gathers read a row
    for start in range(0, m, RFFT_ROWS):   # numpy converts an integer table to float64 first: a block at a time
        np.fft.rfft(table[start:start + RFFT_ROWS].T, axis=0, out=hat[:, start:start + RFFT_ROWS])
    hat = hat.reshape(-1)
    spectrum = np.empty(g ** (t - 1) * half, dtype=np.complex128)
    spectrum[0] = float(table.sum())                       # F(0)
    spectrum[1:half] = hat[m:half * m:m]                   # block 0: a = e_0, the codes k < half
    rows = hat.reshape(half, m)
    for j in range(1, t):                                  # block j fills the codes k·g^j + low
        size = g ** (j - 1) * half
        for k in range(1, g):
            _block_spectrum(rows, g, j, k, spectrum[k * size:(k + 1) * size])
    # numpy's C-order reshape puts digit t−1−j on axis j, for F and for x alike. After the
    # first axis only its rows that hold some x < d are transformed further, and the real
    # inverse writes them into the rfft table's memory (2·(g//2 + 1)·m >= g^t doubles)
    a = spectrum.reshape((g,) * (t - 1) + (half,))
    for axis in range(t - 1):
        np.fft.ifft(a, axis=axis, out=a)
        if axis == 0:
            a = a[:-(-d // g ** (t - 1))]
    shape = a.shape[:-1] + (g,)
    out = hat.view(np.float64)[:math.prod(shape)].reshape(shape)
    full = np.fft.irfft(a, n=g, axis=t - 1, out=out).reshape(-1)[:d]
    full *= float(g ** (t - 1))
    return full


def _block_spectrum(rows: np.ndarray, g: int, j: int, k: int, out: np.ndarray) -> None:
    """Write into ``out`` the half spectrum at the codes u = k·g^j + low (low < g^j, its last
    digit at most g//2), in the spectrum's order (digit j−1 first, the last digit over g//2 + 1),
    from the rfft table ``rows`` of shape (g//2 + 1, m): u = k·a_s for the direction a_s = e_j + r
    of block j with r = k⁻¹·low digit by digit, i.e. F(u) = rows[k, s] (or the conjugate of
    rows[g − k, s] for k > g//2). The block's g^j directions, viewed as a (g,)*j array over r's
    digits, are permuted by v -> k⁻¹·v on every digit axis: one take per axis, each reading runs
    of contiguous memory (2x faster than one gather through a g^j-entry index array)."""
    half = g // 2 + 1
    start = (g ** j - 1) // (g - 1)
    block = rows[k if k < half else g - k, start:start + g ** j].reshape((g,) * j)
    scaled = (pow(k, -1, g) * np.arange(g, dtype=np.intp)) % g    # digit v of low -> digit k⁻¹·v of r
    block = block.take(scaled[:half], axis=j - 1)          # the last digit: g//2 + 1 of them
    for axis in range(j - 1):
        block = block.take(scaled, axis=axis)
    target = out.reshape(block.shape)
    if k >= half:
        np.conjugate(block, out=target)
    else:
        target[...] = block


def _half_index(code: np.ndarray, g: int) -> np.ndarray:
    """Position of each code (whose last digit, code mod g, is at most g//2) in the flattened
    half spectrum of shape (g,)*(t−1) + (g//2 + 1,)."""
    return (code // g) * (g // 2 + 1) + code % g


def line_masses(c: np.ndarray, g: int, t: int) -> np.ndarray:
    """M[s, y] = Σ_{x: ⟨a_s,x⟩ = y} c(x), shape (m, g), for c over the first len(c) values.

    c is real: its DFT is computed over half the last axis (rfft, then the other axes), F at a
    code whose last digit is above g//2 read as the conjugate at the opposite code, and each
    line's masses are a real inverse transform over k = 0 .. g//2 (irfft) — ~3x faster than
    the complex transforms and ~40 % of their memory."""
    half = g // 2 + 1
    padded = np.zeros(g ** t)
    padded[:c.shape[0]] = c
    a = np.fft.rfft(padded.reshape((g,) * t), axis=t - 1)
    del padded
    for axis in range(t - 1):
        a = np.fft.fft(a, axis=axis)
    a = a.ravel()
    idx = multiples(g, t)
    hat = np.empty((idx.shape[0], half), dtype=np.complex128)
    for k in range(half):
        code, opposite = idx[:, k], idx[:, (g - k) % g]
        direct = code % g < half
        hat[:, k] = np.where(direct, a[_half_index(np.where(direct, code, 0), g)],
                             np.conj(a[_half_index(np.where(direct, 0, opposite), g)]))
    del a
    return np.fft.irfft(hat, n=g, axis=1)


__all__ = ["direction_codes", "inner", "line_masses", "line_sums", "multiples"]
