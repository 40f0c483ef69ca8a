/**
 * Stable hashes and HMAC derivations, byte for byte those of client_sdk/hashing.py, memo.py and
 * state.py (docs/conformance.md, "Derivations"): the client secret never leaves the device, and
 * every value derived from it is pinned by conformance/vectors/derivations.json.
 *
 *   lp(x)  = 4-byte big-endian length ‖ x;   text = UTF-8, lone surrogates as 3 bytes (WTF-8)
 */

import { sha256 } from "./sha256.js";
import { keccakP } from "@noble/hashes/sha3";

/** Lower-case hex of bytes. */
export const hexOf = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

/** SHA-256 (hex) of a string's UTF-8 (a domain list's digest: docs/wire-format.md). */
export const sha256Hex = (text: string): string => hexOf(sha256(new TextEncoder().encode(text)));

/** UTF-8 of a string, lone surrogates passed through as 3-byte sequences (Python's "surrogatepass"). */
export function utf8(text: string): Uint8Array {
  const out: number[] = [];
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length) {
      const n = text.charCodeAt(i + 1);
      if (n >= 0xdc00 && n < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (n - 0xdc00);
        i++;
      }
    }
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

const ascii = (s: string): Uint8Array => Uint8Array.from(s, (c) => c.charCodeAt(0));

export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Length-prefixed concatenation: 4-byte big-endian length, then the bytes, per part. */
export function lp(...parts: Uint8Array[]): Uint8Array {
  return concat(...parts.flatMap((p) => [be32(p.length), p]));
}

function be32(n: number): Uint8Array {
  return Uint8Array.of(n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255);
}

/** HMAC-SHA256 (RFC 2104) over src/sha256.ts; pinned by every keyed derivation vector. */
export function hmacSha256(key: Uint8Array, msg: Uint8Array): Uint8Array {
  const k = new Uint8Array(64);
  k.set(key.length > 64 ? sha256(key) : key);
  const inner = sha256(concat(k.map((b) => b ^ 0x36), msg));
  return sha256(concat(k.map((b) => b ^ 0x5c), inner));
}

/** Little-endian uint32 words of a byte string. */
export function le32(bytes: Uint8Array): Uint32Array {
  const out = new Uint32Array(bytes.length >> 2);
  for (let i = 0; i < out.length; i++) {
    const j = 4 * i;
    out[i] = (bytes[j] | (bytes[j + 1] << 8) | (bytes[j + 2] << 16)) + bytes[j + 3] * 16777216;
  }
  return out;
}

/**
 * The first `n` little-endian words of SHAKE-256(msg) (FIPS 202: rate 136 bytes, suffix 0x1F, pad10*1;
 * an XOF, so prefixes agree), the sponge over noble's Keccak-f[1600] permutation: the state as 50
 * little-endian words, so the output words are read from it directly.
 */
export function shakeWords(msg: Uint8Array, n: number): Uint32Array {
  const state = new Uint32Array(50);
  const out = new Uint32Array(n);
  const padded = new Uint8Array(msg.length + 136 - (msg.length % 136));
  padded.set(msg);
  padded[msg.length] ^= 0x1f;
  padded[padded.length - 1] ^= 0x80;
  const words = le32(padded);
  for (let i = 0; i < words.length; i += 34) {
    for (let j = 0; j < 34; j++) state[j] ^= words[i + j];
    keccakP(state);
  }
  for (let i = 0; i < n; i++) {
    if (i && i % 34 === 0) keccakP(state);
    out[i] = state[i % 34];
  }
  return out;
}

/** ⌊2^32/k⌋·k: words below it reduce mod k without bias. */
export const acceptLimit = (k: number): number => Math.floor(4294967296 / k) * k;

const TAG_COHORT = ascii("ldpt/rappor/cohort/v1");
const TAG_PRR = ascii("ldpt/rappor/prr/v1");
const TAG_BLOOM = ascii("ldpt/rappor/bloom/v1");
const TAG_MEMO = ascii("ldpt/memo/v1");
const TAG_KEY = ascii("ldpt/discover/key/v1");

/** This client's cohort in [0, m) for a scope: HMAC(secret, lp(tag) ‖ lp(scope) ‖ lp(counter)) words. */
export function deriveCohort(secret: Uint8Array, scope: string, m: number): number {
  const limit = acceptLimit(m);
  const scopeBytes = utf8(scope);
  for (let counter = 0; ; counter++) {
    for (const u of le32(hmacSha256(secret, lp(TAG_COHORT, scopeBytes, be32(counter))))) {
      if (u < limit) return u % m;
    }
  }
}

/** K of a value's permanent randomised response (RAPPOR). */
export const prrKey = (secret: Uint8Array, metric: string, value: string): Uint8Array =>
  hmacSha256(secret, lp(TAG_PRR, utf8(metric), utf8(value)));

/** The k words behind the PRR of `value`: SHAKE-256(K). */
export const prrWords = (secret: Uint8Array, metric: string, value: string, k: number): Uint32Array =>
  shakeWords(prrKey(secret, metric, value), k);

/** The h Bloom bits of `value` in `cohort` (public hash: the server hashes candidates alike). */
export function bloomBits(value: string, cohort: number, k: number, h: number): number[] {
  const need = (cohort + 1) * h;
  const limit = acceptLimit(k);
  const seed = concat(TAG_BLOOM, lp(utf8(value)));
  for (let count = need + 8; ; count *= 2) {
    const ok: number[] = [];
    for (const u of shakeWords(seed, count)) if (u < limit) ok.push(u % k);
    if (ok.length >= need) return ok.slice(cohort * h, need);
  }
}

/** K of one memoised response: HMAC(secret, lp(tag) ‖ lp(metric) ‖ lp(key)). */
export const memoKey = (secret: Uint8Array, metric: string, key: string): Uint8Array =>
  hmacSha256(secret, lp(TAG_MEMO, utf8(metric), utf8(key)));

/** The memo stream: SHAKE-256(K) as M32 words, and MBELOW(h) by 32-bit rejection. */
export class MemoStream {
  private words: Uint32Array = new Uint32Array(0);
  private pos = 0;
  private readonly key: Uint8Array;
  constructor(secret: Uint8Array, metric: string, key: string) {
    this.key = memoKey(secret, metric, key);
  }
  word(): number {
    if (this.pos >= this.words.length) this.words = shakeWords(this.key, Math.max(64, 2 * this.words.length));
    return this.words[this.pos++];
  }
  below(h: number): number {
    const limit = acceptLimit(h);
    for (;;) {
      const u = this.word();
      if (u < limit) return u % h;
    }
  }
}

/** Key of the ledger's memoisation digests: HMAC(secret, "ldpt/ledger-key"). */
export const ledgerKey = (secret: Uint8Array): Uint8Array => hmacSha256(secret, ascii("ldpt/ledger-key"));

/** HMAC(ledger key, fingerprint ‖ 0 ‖ key) as hex, first 32 characters. */
export function valueDigest(key: Uint8Array, fingerprint: string, value: string): string {
  const mac = hmacSha256(key, concat(utf8(fingerprint), Uint8Array.of(0), utf8(value)));
  return hexOf(mac.subarray(0, 16));
}

// --- 64-bit mixing (OLH/LOLOHA hash family, discover buckets) ------------------------------------------
const M64 = (1n << 64n) - 1n;
const GAMMA = 0x9e3779b97f4a7c15n;

/** SplitMix64's finaliser (a bijection of uint64). */
export function mix(z: bigint): bigint {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}

/** ⌊mix(base + (i+1)·γ)·g/2^64⌋. */
const reduce = (base: bigint, i: number, g: number): number =>
  Number((mix((base + BigInt(i + 1) * GAMMA) & M64) * BigInt(g)) >> 64n);

/** OLH's H_s(v) (random family): seed_s = mix(SALT + (s+1)·γ). */
export const olhHash = (s: number, v: number, g: number): number =>
  reduce(mix((0x6c6470742d6f6c68n + BigInt(s + 1) * GAMMA) & M64), v, g);

// --- BLAKE2b with an 8-byte digest (RFC 7693), for discover's public key fingerprints ----------------
const B2_IV = [0x6a09e667f3bcc908n, 0xbb67ae8584caa73bn, 0x3c6ef372fe94f82bn, 0xa54ff53a5f1d36f1n,
  0x510e527fade682d1n, 0x9b05688c2b3e6c1fn, 0x1f83d9abfb41bd6bn, 0x5be0cd19137e2179n];
const SIGMA = ("0123456789abcdefea489fd61c02b753b8c052fdae3671947931dcbe265a40f8905724afe1bc683d" +
  "2c6a0b834d75fe19c51fed4a0763928bdb7ec13950f4862a6fe9b308c2d714a5a2847615fb9e3cd0").split("").map((c) => parseInt(c, 16));

const rotr = (x: bigint, n: bigint): bigint => ((x >> n) | (x << (64n - n))) & M64;

function compress(h: bigint[], block: Uint8Array, t: number, last: boolean): void {
  const m = Array.from({ length: 16 }, (_, i) => {
    let w = 0n;
    for (let j = 7; j >= 0; j--) w = (w << 8n) | BigInt(block[8 * i + j]);
    return w;
  });
  const v = [...h, ...B2_IV];
  v[12] ^= BigInt(t);
  if (last) v[14] ^= M64;
  const g = (a: number, b: number, c: number, d: number, x: bigint, y: bigint): void => {
    v[a] = (v[a] + v[b] + x) & M64;
    v[d] = rotr(v[d] ^ v[a], 32n);
    v[c] = (v[c] + v[d]) & M64;
    v[b] = rotr(v[b] ^ v[c], 24n);
    v[a] = (v[a] + v[b] + y) & M64;
    v[d] = rotr(v[d] ^ v[a], 16n);
    v[c] = (v[c] + v[d]) & M64;
    v[b] = rotr(v[b] ^ v[c], 63n);
  };
  for (let r = 0; r < 12; r++) {
    const s = SIGMA.slice(16 * (r % 10), 16 * (r % 10) + 16).map((i) => m[i]);
    // G on the four columns (j = 0), then on the four diagonals (j = 1) of the 4×4 state (RFC 7693 §3.2)
    for (let i = 0; i < 8; i++) {
      const a = i & 3, j = i >> 2;
      g(a, 4 + ((a + j) & 3), 8 + ((a + 2 * j) & 3), 12 + ((a + 3 * j) & 3), s[2 * i], s[2 * i + 1]);
    }
  }
  for (let i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/** BLAKE2b-64 (unkeyed) of `msg` as the little-endian integer of its 8-byte digest. */
export function blake2b64(msg: Uint8Array): bigint {
  const h = [...B2_IV];
  h[0] ^= 0x01010008n;   // digest length 8, no key, fanout 1, depth 1
  let at = 0;
  while (msg.length - at > 128) {
    compress(h, msg.subarray(at, at + 128), at + 128, false);
    at += 128;
  }
  const last = new Uint8Array(128);
  last.set(msg.subarray(at));
  compress(h, last, msg.length, true);
  return h[0];
}

/** discover's fp(key): BLAKE2b-64 of the tagged key bytes, little-endian. */
export const discoverFingerprint = (key: Uint8Array): bigint => blake2b64(concat(TAG_KEY, key));

/** discover's H_seed(key) = ⌊mix(mix(fp ^ SALT) + (seed+1)·γ)·g/2^64⌋. */
export const discoverBucket = (seed: number, fp: bigint, g: number): number =>
  reduce(mix(fp ^ 0x6c6470742d646973n), seed, g);
