/**
 * Frequency oracles over a fixed domain, one report each (client_sdk/protocols/rr.py, grr.py,
 * _unary.py, ss.py, olh.py, hr.py): the same integer threshold tests on the same words, in the
 * same order (docs/conformance.md, "Consumption order"), so P(y|x) is the Python SDK's table.
 */

import { deriveCohort, olhHash } from "../hashing.js";
import { type RandomSource, below, reduce64, word32, words32 } from "../random.js";
import type { GrrBlock, HrBlock, OlhBlock, OueBlock, RrBlock, SsBlock, SueBlock } from "./block.js";
import { type Encoder, SecretCache, packBits } from "./types.js";

/** GRR on [d] in the SDK's single-report form: u = W32; keep, else BELOW(d−1) shifted past x. */
export function grrOne(rnd: RandomSource, x: number, d: number, keep: number): number {
  if (word32(rnd) < keep) return x;
  const o = below(rnd, d - 1);
  return o + (o >= x ? 1 : 0);
}

export const rr = (b: RrBlock): Encoder => ({
  encode: (x, _k, c) => (word32(c.random) < b.keep_threshold ? x : 1 - x),
});

export const grr = (b: GrrBlock): Encoder => ({
  encode: (x, _k, c) => grrOne(c.random, x, b.d, b.keep_threshold),
});

/** Unary encoding (OUE, SUE): d words, bit i = u_i < (i = x ? p : q). */
export const unary = (b: OueBlock | SueBlock): Encoder => ({
  encode(x, _k, c) {
    const u = words32(c.random, b.d);
    return packBits(Array.from(u, (w, i) => w < (i === x ? b.p_threshold : b.q_threshold)));
  },
});

/** Subset selection: s+1 W64 words at once, rejected ones redrawn in order, then Floyd. */
export function ss(b: SsBlock): Encoder {
  const d: number = b.d, s: number = b.s;
  return {
    encode(x, _k, c) {
      const w = words32(c.random, 2 * (s + 1));
      // draw 0 is u mod 2^32 (never rejected); draw i >= 1 is uniform on [0, d − s + i − 1)
      const draws = Array.from({ length: s + 1 }, (_, i) => (i === 0 ? w[0] : reduce64(w[2 * i], w[2 * i + 1], d - s + i - 1)));
      for (let i = 1; i <= s; i++) if (draws[i] < 0) draws[i] = below(c.random, d - s + i - 1);
      const include = draws[0] < b.include_threshold;
      const first = include ? 1 : 0;
      const chosen = new Set<number>(include ? [x] : []);
      for (let j = d - 1 - s + first, i = 1 + first; j < d - 1; j++, i++) {
        let t = draws[i];
        if (t >= x) t += 1;
        chosen.add(chosen.has(t) ? (j >= x ? j + 1 : j) : t);
      }
      const sorted = [...chosen].sort((p, q) => p - q);
      const wide = d > 65536;
      const out = new Uint8Array(sorted.length * (wide ? 4 : 2));
      const view = new DataView(out.buffer);
      sorted.forEach((v, i) => (wide ? view.setUint32(4 * i, v, true) : view.setUint16(2 * i, v, true)));
      return out;
    },
  };
}

// --- projective geometry over F_g (HR, OLH's linear family; client_sdk/protocols/_projective.py) ----------
/** Code of the s-th projective direction of F_g^t: g^j + (s − start_j). */
export function directionCode(s: number, g: number, t: number): number {
  let j = t - 1;
  const start = (k: number): number => (g ** k - 1) / (g - 1);
  while (start(j) > s) j--;
  return g ** j + s - start(j);
}

/** ⟨u, x⟩ mod g of base-g digit vectors. */
export function inner(u: number, x: number, g: number): number {
  let acc = 0;
  while (u && x) {
    acc += (u % g) * (x % g);
    u = Math.floor(u / g);
    x = Math.floor(x / g);
  }
  return acc % g;
}

const cohorts = new SecretCache<number>();

/** OLH: the cohort of the metric and UTC day from the secret; GRR on [g] of H_s(x). */
export function olh(b: OlhBlock): Encoder {
  const hash = b.family === "linear"
    ? (s: number, x: number) => inner(directionCode(s, b.g, b.t!), x, b.g)   // t: the linear family's (schema)
    : (s: number, x: number) => olhHash(s, x, b.g);
  return {
    encode(x, _k, c) {
      const scope = `olh\u0000${c.metric}\u0000${c.day}`;
      const s = cohorts.get(c.secret, `${scope}\u0000${b.m}`, () => deriveCohort(c.secret, scope, b.m));
      return [s, grrOne(c.random, hash(s, x), b.g, b.keep_threshold)];
    },
  };
}

/** Hadamard response over F_g: a fresh direction s = BELOW(m), GRR on [g] of ⟨a_s, x⟩. */
export const hr = (b: HrBlock): Encoder => ({
  encode(x, _k, c) {
    const s = below(c.random, b.m);
    return s * b.g + grrOne(c.random, inner(directionCode(s, b.g, b.t), x, b.g), b.g, b.keep_threshold);
  },
});
