/**
 * Statistical check of every protocol's encoder against its exact P(y|x) table
 * (conformance/vectors/tables.json): for each input of a small configuration, N = 100,000
 * reports through the SDK's own encoder, then Pearson's chi-square goodness of fit against the
 * exact rationals (cells with expected count < 5 pooled). Memoised protocols: the memoised
 * round's mechanism on uniform coins against the `memo*` table (its coins are SHAKE-256 of an
 * HMAC of the secret, pinned byte for byte by the derivation vectors), and the reports of one
 * device, whose memoised response is then fixed, against the row of `report_given_memo`.
 *
 * Randomness: a seeded SHAKE-256 stream in place of the CSPRNG (deterministic, as the Python
 * statistical tests use fixed seeds). Threshold: family-wise α = 1e-3 over every chi-square test
 * run here (Bonferroni: each p must exceed 1e-3 / number of tests; the count is printed).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { shake256 } from "@noble/hashes/sha3";

import { MemoStream, acceptLimit, bloomBits, deriveCohort, prrWords } from "../src/hashing.js";
import { type Coins, memoBits, memoGrr } from "../src/protocols/memoised.js";
import { memoBit } from "../src/protocols/numeric.js";
import { prrBits } from "../src/protocols/strings.js";
import { encoderFor } from "../src/registry.js";
import type { Block, BlockOf, Context } from "../src/protocols/types.js";
import { type RandomSource, TWO32, words32 } from "../src/random.js";
import { vectors } from "./support.js";

const N = 100_000;
const FAMILY_ALPHA = 1e-3;

/** A deterministic byte stream: SHAKE-256 of a seed (an XOF read in order). */
function seeded(seed: string): RandomSource {
  const xof = shake256.create({}).update(new TextEncoder().encode(seed));
  return { fill: (out: Uint8Array) => void xof.xofInto(out) };
}

// --- chi-square --------------------------------------------------------------------------------------
/** ln Γ(x) (Lanczos, g = 7). */
function lnGamma(x: number): number {
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - lnGamma(1 - x);
  x -= 1;
  let a = c[0];
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += c[i] / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Q(a, x): the regularised upper incomplete gamma function (series or continued fraction). */
function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  if (x < a + 1) {
    let sum = 1 / a, term = sum;
    for (let n = 1; n < 10_000; n++) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1 - sum * Math.exp(-x + a * Math.log(x) - lnGamma(a));
  }
  let b = x + 1 - a, c = 1 / 1e-300, d = 1 / b, h = d;
  for (let i = 1; i < 10_000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (Math.abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return Math.exp(-x + a * Math.log(x) - lnGamma(a)) * h;
}

/** p-value of Pearson's statistic for observed counts against exact probabilities num/den. */
function chiSquareP(observed: number[], row: string[], den: string): number {
  const n = observed.reduce((a, b) => a + b, 0);
  const D = BigInt(den);
  const expected = row.map((v) => Number((BigInt(v) * BigInt(n) * 1_000_000n) / D) / 1_000_000);
  let stat = 0, df = -1, poolO = 0, poolE = 0;
  expected.forEach((e, i) => {
    if (e === 0) assert.equal(observed[i], 0, `output ${i} has probability 0 but was drawn`);
    else if (e < 5) {
      poolO += observed[i];
      poolE += e;
    } else {
      stat += (observed[i] - e) ** 2 / e;
      df += 1;
    }
  });
  if (poolE > 0) {
    stat += (poolO - poolE) ** 2 / poolE;
    df += 1;
  }
  return df <= 0 ? 1 : gammaQ(df / 2, stat / 2);
}

// --- sampling --------------------------------------------------------------------------------------
const results: Array<{ label: string; p: number }> = [];
// each configuration's members are read by protocol below: the union's members, any of them
const configs: Array<{ label: string; protocol: string; encoder: Block & Record<string, any>; tables: Record<string, any> }> =
  vectors("tables.json").configs;

/** Output index of a payload (docs/conformance.md, "Output index of a payload"). */
function outputIndex(protocol: string, y: unknown, g = 0): number {
  const bits = (b: Uint8Array): number => b.reduce((acc, byte, i) => acc + byte * 256 ** i, 0);
  if (typeof y === "number") return y;
  if (y instanceof Uint8Array) return bits(y);
  const a = y as unknown[];
  if (protocol === "rappor") return bits(a[1] as Uint8Array);
  if (protocol === "discover") return (a[1] as number) * g + (a[2] as number);
  return a[1] as number;   // olh, loloha, dbitflip: y given the cohort
}

function subsetRank(d: number, s: number): (payload: Uint8Array) => number {
  const ranks = new Map<string, number>();
  let r = 0;
  const rec = (start: number, chosen: number[]): void => {
    if (chosen.length === s) {
      ranks.set(chosen.join(","), r++);
      return;
    }
    for (let v = start; v < d; v++) rec(v + 1, [...chosen, v]);
  };
  rec(0, []);
  return (p) => ranks.get(Array.from(new Uint16Array(p.buffer, p.byteOffset, s)).join(",")) as number;
}

function check(label: string, observed: number[], row: string[], den: string): void {
  results.push({ label, p: chiSquareP(observed, row, den) });
}

/** Uniform coins for a memoised round: 32-bit words, bounded draws by 32-bit rejection (MBELOW). */
function seededCoins(rnd: RandomSource): Coins {
  const word = (): number => words32(rnd, 1)[0];
  return {
    word,
    below(h: number): number {
      const limit = acceptLimit(h);
      for (;;) {
        const u = word();
        if (u < limit) return u % h;
      }
    },
  };
}

const secretOf = (rnd: RandomSource): Uint8Array => {
  const s = new Uint8Array(32);
  rnd.fill(s);
  return s;
};

for (const cfg of configs) {
  test(`${cfg.label}: ${N} reports per input against the exact table`, () => {
    const enc = encoderFor(cfg.encoder);
    const b = cfg.encoder;
    const rnd = seeded(`ldpt chi-square ${cfg.label}`);
    const fixed: Context = { secret: secretOf(rnd), metric: "chi", day: 20_000, random: rnd };
    const t = cfg.tables;
    if (t.report) {
      const rank = cfg.protocol === "ss" ? subsetRank(b.d, b.s) : null;
      t.report.inputs.forEach((x: number, i: number) => {
        const counts = new Array<number>(t.report.outputs).fill(0);
        for (let n = 0; n < N; n++) {
          const y = enc.encode(x, "", fixed);
          counts[rank ? rank(y as Uint8Array) : outputIndex(cfg.protocol, y)] += 1;
        }
        check(`${cfg.label} x=${x}`, counts, t.report.rows[i], t.report.denominator);
      });
    } else if (t.report_given_hash) {            // OLH: the cohort of (secret, metric, day)
      const s = deriveCohort(fixed.secret, `olh\u0000chi\u0000${fixed.day}`, b.m);
      const tab = t.report_given_hash.by_cohort[s];
      for (let x = 0; x < b.d; x++) {
        const counts = new Array<number>(b.g).fill(0);
        for (let n = 0; n < N; n++) {
          const y = enc.encode(x, "", fixed) as number[];
          assert.equal(y[0], s);
          counts[y[1]] += 1;
        }
        check(`${cfg.label} x=${x} cohort ${s}`, counts, tab.rows[tab.hashed[x]], tab.denominator);
      }
    } else if (t.report_given_prr) {             // RAPPOR: the IRR given this secret's PRR of each value
      const cohort = deriveCohort(fixed.secret, "rappor", b.m);
      for (const value of ["a", "b", "example.com"]) {
        const bloom = new Set(bloomBits(value, cohort, b.k, b.h));
        const prr = Array.from(prrWords(fixed.secret, "chi", value, b.k),
          (u, i) => (u < 2 * b.half_f_threshold ? u < b.half_f_threshold : bloom.has(i)));
        const pattern = prr.reduce((acc, one, i) => acc + (one ? 2 ** i : 0), 0);
        const counts = new Array<number>(2 ** b.k).fill(0);
        for (let n = 0; n < N; n++) counts[outputIndex("rappor", enc.encode(-1, value, fixed))] += 1;
        check(`${cfg.label} ${value} prr=${pattern}`, counts, t.report_given_prr.rows[pattern], t.report_given_prr.denominator);
      }
      // the PRR's mechanism on uniform words (the words are SHAKE-256 of an HMAC of the secret)
      for (const bloom of [0b0101, 0b0011]) {
        const bloomBitsArr = Array.from({ length: b.k }, (_, i) => ((bloom >> i) & 1) === 1);
        const counts = new Array<number>(2 ** b.k).fill(0);
        for (let n = 0; n < N; n++) {
          counts[prrBits(words32(rnd, b.k), bloomBitsArr, b.half_f_threshold).reduce((a, on, i) => a + (on ? 2 ** i : 0), 0)] += 1;
        }
        const tab = t.prr_given_bloom;
        check(`${cfg.label} PRR bloom=${bloom}`, counts, tab.rows[bloom], tab.denominator);
      }
    } else if (t.report_by_group) {              // discover: the group of (secret, metric)
      const group = deriveCohort(fixed.secret, "discover\u0000chi", b.groups);
      const tab = t.report_by_group.by_group[group];
      tab.inputs.forEach((value: string, i: number) => {
        const counts = new Array<number>(tab.outputs).fill(0);
        for (let n = 0; n < N; n++) counts[outputIndex("discover", enc.encode(-1, value, fixed), b.g)] += 1;
        check(`${cfg.label} ${JSON.stringify(value)} group ${group}`, counts, tab.rows[i], tab.denominator);
      });
    } else {                                      // memoised: round 1 on coins, then one device's reports
      const memoTab = t.memo ?? t.memo_given_hash ?? t.memo_given_position;
      const coins = seededCoins(rnd);
      const z = (m: Coins, x: number): number => {
        if (cfg.protocol === "lgrr") return memoGrr(m, x, b.d, b.p1_threshold);
        if (cfg.protocol === "loloha") return memoGrr(m, x, b.g, b.p1_threshold);
        if (cfg.protocol === "memobitmean") return memoBit(b as BlockOf<"memobitmean">, x, m);
        const one = cfg.protocol === "losue" ? (i: number) => (i === x ? b.p1_threshold : b.q1_threshold)
          : (i: number) => (i === x ? b.p1_threshold : TWO32 - b.p1_threshold);
        return memoBits(m, cfg.protocol === "losue" ? b.d : b.sampled, one).reduce((a, on, i) => a + (on ? 2 ** i : 0), 0);
      };
      memoTab.inputs.forEach((x: number, i: number) => {
        const counts = new Array<number>(memoTab.outputs).fill(0);
        for (let n = 0; n < N; n++) counts[z(coins, x)] += 1;
        check(`${cfg.label} memo x=${x}`, counts, memoTab.rows[i], memoTab.denominator);
      });
      const second = t.report_given_memo;
      const inputs = cfg.protocol === "memobitmean" ? [0, 2, b.grid] : [0, 1, 2];
      for (const x of inputs) {
        let key = `${cfg.protocol}:${x}`, zx = x, cohort: number | null = null;
        if (cfg.protocol === "loloha") {
          cohort = deriveCohort(fixed.secret, "loloha\u0000chi", b.m);
          zx = t.hashed[cohort][x];
          key = `loloha:${zx}`;
        } else if (cfg.protocol === "dbitflip") {
          cohort = deriveCohort(fixed.secret, "dbitflip\u0000chi", b.d);
          const pos = (((x - cohort) % b.d) + b.d) % b.d;
          zx = pos < b.sampled ? pos : b.sampled;
          key = `dbitflip:${zx}`;
        }
        const memoised = z(new MemoStream(fixed.secret, "chi", key), zx);
        const counts = new Array<number>(second.outputs).fill(0);
        for (let n = 0; n < N; n++) {
          const y = enc.encode(x, "", fixed);
          if (cohort !== null) assert.equal((y as number[])[0], cohort);
          counts[outputIndex(cfg.protocol, y)] += 1;
        }
        check(`${cfg.label} report x=${x} memo=${memoised}`, counts, second.rows[memoised], second.denominator);
      }
    }
  });
}

test("every chi-square p-value clears the Bonferroni threshold", () => {
  const threshold = FAMILY_ALPHA / results.length;
  const worst = results.reduce((a, b) => (b.p < a.p ? b : a));
  console.log(`chi-square: ${results.length} tests, N = ${N} per input, family α = ${FAMILY_ALPHA}, ` +
    `threshold p > ${threshold.toExponential(2)}; smallest p = ${worst.p.toExponential(3)} (${worst.label})`);
  for (const r of results) assert.ok(r.p > threshold, `${r.label}: p = ${r.p}`);
});
