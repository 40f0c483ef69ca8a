/**
 * Two-round memoised protocols (client_sdk/protocols/lgrr.py, losue.py, loloha.py, dbitflip.py):
 * round 1 is drawn from the memo stream of (secret, metric, memo key) — the same response every
 * time, nothing stored — and round 2 from fresh CSPRNG words. These follow the Python SDK's
 * vectorised rounds on a batch of one: a GRR round draws its "other value" even when it keeps.
 */

import { MemoStream, deriveCohort, olhHash } from "../hashing.js";
import { type RandomSource, TWO32, below, word32, words32 } from "../random.js";
import type { DbitflipBlock, LgrrBlock, LolohaBlock, LosueBlock } from "./block.js";
import { type Context, type Encoder, SecretCache, packBits } from "./types.js";

const memos = new SecretCache<number | boolean[]>();
const cohorts = new SecretCache<number>();

/** The memoised first-round response of `key` (cached in memory; deterministic). */
function memo<T extends number | boolean[]>(c: Context, key: string, make: (m: MemoStream) => T): T {
  return memos.get(c.secret, `${c.metric}\u0000${key}`, () => make(new MemoStream(c.secret, c.metric, key))) as T;
}

function permanent(c: Context, scope: string, size: number): number {
  return cohorts.get(c.secret, `${scope}\u0000${size}\u0000${c.metric}`, () => deriveCohort(c.secret, scope + c.metric, size));
}

/** A GRR round as the vectorised path draws it: keep word, then the other value (always). */
function grrRound(word: number, other: number, x: number, keep: number): number {
  return keep >= TWO32 || word < keep ? x : other + (other >= x ? 1 : 0);
}

/** Where a memoised round reads its coins: the memo stream of (secret, metric, key). */
export interface Coins {
  word(): number;
  below(h: number): number;
}

/** Round 1 of L-GRR and LOLOHA: GRR_{ε∞} on [k] of x from memo coins. */
export function memoGrr(m: Coins, x: number, k: number, keep: number): number {
  const w = keep >= TWO32 ? 0 : m.word();
  return grrRound(w, m.below(k - 1), x, keep);
}

/** Round 1 of bit chains: bit i = M32 < one(i) (L-OSUE: OUE at ε∞; dBitFlipPM: SUE at ε∞). */
export const memoBits = (m: Coins, n: number, one: (i: number) => number): boolean[] =>
  Array.from({ length: n }, (_, i) => m.word() < one(i));

function freshGrr(rnd: RandomSource, z: number, k: number, keep: number): number {
  const w = keep >= TWO32 ? 0 : word32(rnd);
  return grrRound(w, below(rnd, k - 1), z, keep);
}

/** Bits through a symmetric round: 1 w.p. p (bit set) or 1 − p (bit clear). */
const flipRound = (u: ArrayLike<number>, bits: boolean[], p: number): boolean[] =>
  bits.map((one, i) => u[i] < (one ? p : TWO32 - p));

export const lgrr = (b: LgrrBlock): Encoder => ({
  memoKey: (x) => `lgrr:${x}`,
  encode(x, _k, c) {
    const z = memo(c, `lgrr:${x}`, (m) => memoGrr(m, x, b.d, b.p1_threshold));
    return freshGrr(c.random, z, b.d, b.p2_threshold);
  },
});

export const losue = (b: LosueBlock): Encoder => ({
  memoKey: (x) => `losue:${x}`,
  encode(x, _k, c) {
    const z = memo(c, `losue:${x}`, (m) => memoBits(m, b.d, (i) => (i === x ? b.p1_threshold : b.q1_threshold)));
    return packBits(flipRound(words32(c.random, b.d), z, b.p2_threshold));
  },
});

export function loloha(b: LolohaBlock): Encoder {
  const hashed = (x: number, c: Context): number => olhHash(permanent(c, "loloha\u0000", b.m), x, b.g);
  return {
    memoKey: (x, c) => `loloha:${hashed(x, c)}`,
    encode(x, _k, c) {
      const h = hashed(x, c);
      const z = memo(c, `loloha:${h}`, (m) => memoGrr(m, h, b.g, b.p1_threshold));
      return [permanent(c, "loloha\u0000", b.m), freshGrr(c.random, z, b.g, b.p2_threshold)];
    },
  };
}

export function dbitflip(b: DbitflipBlock): Encoder {
  const position = (x: number, c: Context): number => {
    const pos = (((x - permanent(c, "dbitflip\u0000", b.d)) % b.d) + b.d) % b.d;
    return pos < b.sampled ? pos : b.sampled;
  };
  return {
    memoKey: (x, c) => `dbitflip:${position(x, c)}`,
    encode(x, _k, c) {
      const pos = position(x, c);
      const z = memo(c, `dbitflip:${pos}`, (m) => memoBits(m, b.sampled, (i) => (i === pos ? b.p1_threshold : TWO32 - b.p1_threshold)));
      const y = flipRound(words32(c.random, b.sampled), z, b.p2_threshold);
      return [permanent(c, "dbitflip\u0000", b.d), y.reduce((acc, one, i) => acc + (one ? 2 ** i : 0), 0)];
    },
  };
}
