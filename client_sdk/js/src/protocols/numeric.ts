/**
 * Numeric mean mechanisms (client_sdk/protocols/numeric.py, duchi.py, laplace.py, piecewise.py,
 * hybrid.py, memobitmean.py). A value is first rounded at random to the input grid
 * t_j = −1 + 2j/K (IEEE-754 arithmetic only, identical in every language), then its grid index
 * j is randomised by integer threshold tests out of 2^32 or 2^64 (BigInt).
 */

import { MemoStream } from "../hashing.js";
import { TWO32, type RandomSource, word32, word64 } from "../random.js";
import type { DuchiParams, HybridBlock, LaplaceBlock, MemobitmeanBlock, PiecewiseParams } from "./block.js";
import { type Context, type Encoder, SecretCache } from "./types.js";

/** pos = (clip(t) + 1)·(K/2): the grid index below it and the threshold of rounding up. */
function position(t: number, grid: number): [number, number] {
  const pos = (Math.min(1, Math.max(-1, t)) + 1) * (grid / 2);
  const low = Math.floor(pos);
  return [low, Math.floor((pos - low) * TWO32)];
}

/** Randomised rounding to the grid: up iff R < ⌊frac·2^32⌋ (one W32 word). */
export function discretise(t: number, grid: number, rnd: RandomSource): number {
  const [low, up] = position(t, grid);
  return Math.min(low + (word32(rnd) < up ? 1 : 0), grid);
}

/** α-point rounding: the device's α is the first word of the memo stream "alpha". */
export function alphaRound(t: number, grid: number, alpha: number): number {
  const [low, up] = position(t, grid);
  return Math.min(low + (alpha < up ? 1 : 0), grid);
}

const duchiBit = (b: DuchiParams, j: number, u: bigint): number => (u < BigInt(b.low) + BigInt(b.step) * BigInt(j) ? 1 : 0);

export const duchi = (b: DuchiParams): Encoder => ({ encode: (j, _k, c) => duchiBit(b, j, word64(c.random)) });

export function laplace(b: LaplaceBlock): Encoder {
  const bounds = b.bounds.map(BigInt);
  const cells = b.grid + 2 * b.window + 1;
  return {
    encode(j, _k, c) {
      const u = word64(c.random);
      let lo = 0, hi = bounds.length;          // i = number of bounds <= u (bisect right)
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (bounds[mid] <= u) lo = mid + 1;
        else hi = mid;
      }
      return Math.min(Math.max(j + lo - b.grid, 0), cells - 1);
    },
  };
}

/** The Piecewise cell of grid index j: r uniform on [0, T) by rejection on W32 words. */
function piecewiseCell(b: PiecewiseParams, j: number, rnd: RandomSource): number {
  const total = b.window * b.a + b.grid * b.b;
  const accept = Math.floor(TWO32 / total) * total;
  let u = word32(rnd);
  while (u >= accept) u = word32(rnd);
  const r = u % total;
  const inside = b.window * b.a;
  if (r < inside) return j + Math.floor(r / b.a);
  const rest = Math.floor((r - inside) / b.b);
  return rest >= j ? rest + b.window : rest;
}

export const piecewise = (b: PiecewiseParams): Encoder => ({ encode: (j, _k, c) => piecewiseCell(b, j, c.random) });

export function hybrid(b: HybridBlock): Encoder {
  const cells = b.piecewise.grid + b.piecewise.window;
  return {
    encode: (j, _k, c) => (word32(c.random) < b.h
      ? piecewiseCell(b.piecewise, j, c.random)
      : cells + duchiBit(b.duchi, j, word64(c.random))),
  };
}

const bits = new SecretCache<number>();

/** The device's α for a memoised mean metric (first word of the memo stream "alpha"). */
export const alphaWord = (c: Context): number =>
  bits.get(c.secret, `alpha\u0000${c.metric}`, () => new MemoStream(c.secret, c.metric, "alpha").word());

/** Round 1 of memobitmean: Duchi's bit at ε∞ from two memo words (the first the low half). */
export function memoBit(b: DuchiParams, j: number, m: { word(): number }): number {
  const lo = m.word();
  return duchiBit(b, j, BigInt(lo) | (BigInt(m.word()) << 32n));
}

/** memobitmean: the memoised 1BitMean bit of grid index j (two memo words, low first), flipped w.p. γ. */
export const memobitmean = (b: MemobitmeanBlock): Encoder => ({
  memoKey: (j) => `memobitmean:${j}`,
  encode(j, _k, c) {
    const bit = bits.get(c.secret, `${c.metric}\u0000memobitmean:${j}`,
      () => memoBit(b, j, new MemoStream(c.secret, c.metric, `memobitmean:${j}`)));
    return bit ^ (word32(c.random) < b.gamma_threshold ? 1 : 0);
  },
});
