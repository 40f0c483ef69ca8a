"""Linear hashing over a prime field on the server: the array forms of the direction codes and
the inner product, and the two DFTs over Z_g^t that decode Hadamard response and OLH's linear
family (client_sdk.protocols.projective's module docstring derives them; the plain-Python parts
a device needs stay there)."""

from __future__ import annotations

import functools
import math

import numpy as np

from client_sdk.protocols.projective import direction_starts, directions

#: Cells (rows × inner × outer dimension) of each matrix product ``line_sums`` and
#: ``line_masses`` make. OpenBLAS runs a product above ~2^16 complex (2^18 real) multiply-adds on
#: several threads, whose spinning after the call costs a fresh process more CPU than the product
#: itself; below it, the calling thread does all of it.
PRODUCT_CELLS = 1 << 16


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

    The table is real, so its spectrum is Hermitian (F(−ξ) = conj F(ξ)): only half of F is built
    and the last inverse is a real one. Each length-g DFT is a product with a g × g matrix
    (``_dft_matrices``), made by BLAS in blocks of rows: pocketfft's transforms of a prime
    length g > 7 are its generic radix, O(g²) per point with a loop's overhead, ~3x the
    instructions of the product. The half spectrum is gathered block by block
    (``_block_spectrum``): the codes whose leading nonzero digit j is k are k·a_s for the
    directions s of block j, a digit-wise permutation of the block's rows — no (m, g) direction
    table, no index array; k > g//2 reads the conjugate at g − k. The inverse transforms take
    the digit axes first to last, each product writing its output axis last, so after the t − 1
    complex axes the half axis leads and the real inverse over it leaves x in C order; the first
    product keeps only the leading digits some x < d has. Over g^t = 1.8·10⁶ cells this takes
    ~0.5–0.8x a numpy fast Walsh–Hadamard transform of 2²⁰ (bench/estimate.py's floor)."""
    table = np.asarray(table)
    half, m = g // 2 + 1, table.shape[0]
    real_forward, _, inverse, real_inverse = _dft_matrices(g)
    hat = np.empty((half, m), dtype=np.complex128)         # k = 0 .. g//2, a row per k: gathers read a row
    rows = max(1, PRODUCT_CELLS // (2 * half * g))
    block = np.empty((min(rows, m), g))                    # the table a block at a time, as float64
    spectra = np.empty((min(rows, m), half), dtype=np.complex128)
    for start in range(0, m, rows):
        part, out = block[:min(rows, m - start)], spectra[:min(rows, m - start)]
        part[...] = table[start:start + rows]
        np.matmul(part, real_forward, out=out.view(np.float64))
        hat[:, start:start + rows] = out.T
    flat = hat.reshape(-1)
    spectrum = np.empty(g ** (t - 1) * half, dtype=np.complex128)
    spectrum[0] = float(table.sum())                       # F(0)
    spectrum[1:half] = flat[m:half * m:m]                  # block 0: a = e_0, the codes k < half
    for j in range(1, t):                                  # block j fills the codes k·g^j + low
        size = g ** (j - 1) * half
        for k in range(1, g):
            _block_spectrum(hat, g, j, k, spectrum[k * size:(k + 1) * size])
    # numpy's C-order reshape puts digit t−1−j on axis j, for F and for x alike; the products
    # alternate between the spectrum's memory and the rfft table's (both >= g^(t−1)·(g//2 + 1))
    current, free = spectrum, flat
    for axis in range(t - 1):
        leading = current.reshape(g, -1)
        width = -(-d // g ** (t - 1)) if axis == 0 else g   # digit t−1 of x < d
        out = free[:leading.shape[1] * width].reshape(-1, width)
        _products(leading.T, inverse[:, :width], out)
        current, free = out.reshape(-1), current
    halves = current.reshape(half, -1)
    full = free.view(np.float64)[:halves.shape[1] * g].reshape(-1, g)
    _products(halves.T, real_inverse, full, real=True)
    return full.reshape(-1)[:d]


@functools.lru_cache(maxsize=8)
def _dft_matrices(g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The DFT of length g as matrices, each of a product ``line_sums`` or ``line_masses`` makes:

    - ``real_forward`` (g, 2·(g//2 + 1)) real: a row of reals to (Re, Im) of its
      F_k = Σ_y row[y] ω^{−ky} for k = 0 .. g//2, interleaved as numpy lays out complex numbers
      (one product per block of rows for every k: BLAS packs the block once, not once per k);
    - ``forward`` and ``inverse`` (g, g) complex: ω^{−ky} and ω^{+ky}, unnormalised;
    - ``real_inverse`` (g//2 + 1, g) complex: the real inverse from the half axis, 1/g · w_k ω^{ky}
      with w_k = 2 for the k whose conjugate −k is not in the half (1 for 0 and, g even, g/2); a
      product keeps the real part (the imaginary parts of F_0 and F_{g/2} are dropped, as irfft's)."""
    half, angle = g // 2 + 1, 2 * math.pi / g
    ks, ys = np.arange(half), np.arange(g)
    phase = angle * (np.outer(ks, ys) % g)                 # reduced mod g: exact angles
    real_forward = np.stack([np.cos(phase.T), -np.sin(phase.T)], axis=2).reshape(g, 2 * half)
    inverse = np.exp(1j * angle * (np.outer(ys, ys) % g))
    forward = np.conj(inverse)
    weights = np.where((2 * ks) % g == 0, 1.0, 2.0) / g
    real_inverse = weights[:, None] * np.exp(1j * phase)
    for matrix in (real_forward, forward, inverse, real_inverse):
        matrix.setflags(write=False)
    return real_forward, forward, inverse, real_inverse


def _products(a: np.ndarray, b: np.ndarray, out: np.ndarray, real: bool = False) -> None:
    """out = a @ b (its real part if ``real``) in blocks of rows of at most ``PRODUCT_CELLS``
    multiply-adds each (one thread; ``a`` may be a transposed view, read as BLAS reads it)."""
    rows = max(1, PRODUCT_CELLS // (a.shape[1] * b.shape[1]))
    scratch = np.empty((min(rows, a.shape[0]), b.shape[1]), dtype=np.complex128) if real else None
    for start in range(0, a.shape[0], rows):
        if scratch is None:
            np.matmul(a[start:start + rows], b, out=out[start:start + rows])
        else:
            part = scratch[:min(rows, a.shape[0] - start)]
            np.matmul(a[start:start + rows], b, out=part)
            out[start:start + rows] = part.real


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


def line_masses(c: np.ndarray, g: int, t: int) -> np.ndarray:
    """M[s, y] = Σ_{x: ⟨a_s,x⟩ = y} c(x), shape (m, g), for c over the first len(c) values.

    c is real: its DFT is computed over half the last axis (a real product per row of g values,
    then one complex product per other digit axis, each writing its output axis last, so the half
    axis ends up leading: ``_rotated_half_index``), F at a code whose last digit is above g//2 read
    as the conjugate at the opposite code, and each line's masses are a real inverse over
    k = 0 .. g//2 — the matrices of ``line_sums`` (pocketfft's generic radix for prime g > 7 took
    ~3x the instructions)."""
    half = g // 2 + 1
    real_forward, forward, _, real_inverse = _dft_matrices(g)
    padded = np.zeros((g ** (t - 1), g))
    padded.reshape(-1)[:c.shape[0]] = c
    current = np.empty(g ** (t - 1) * half, dtype=np.complex128)
    _products(padded, real_forward, current.view(np.float64).reshape(g ** (t - 1), 2 * half))
    del padded
    free = np.empty_like(current)
    for _ in range(t - 1):
        leading = current.reshape(g, -1)
        out = free.reshape(-1, g)
        _products(leading.T, forward, out)
        current, free = free, current
    del free
    idx = multiples(g, t)
    hat = np.empty((idx.shape[0], half), dtype=np.complex128)
    for k in range(half):
        code, opposite = idx[:, k], idx[:, (g - k) % g]
        direct = code % g < half
        hat[:, k] = np.where(direct, current[_rotated_half_index(np.where(direct, code, 0), g, t)],
                             np.conj(current[_rotated_half_index(np.where(direct, 0, opposite), g, t)]))
    del current
    masses = np.empty((idx.shape[0], g))
    _products(hat, real_inverse, masses, real=True)
    return masses


def _rotated_half_index(code: np.ndarray, g: int, t: int) -> np.ndarray:
    """Position of each code (last digit at most g//2) in ``line_masses``'s half spectrum, whose
    axes the products left as (last digit, then the others in C order): (code mod g)·g^(t−1)
    + code div g."""
    return (code % g) * g ** (t - 1) + code // g


__all__ = ["direction_codes", "inner", "line_masses", "line_sums", "multiples"]
