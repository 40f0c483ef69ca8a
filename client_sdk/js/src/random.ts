/**
 * Randomness for the one-report encoders: the platform CSPRNG (`crypto.getRandomValues`,
 * never `Math.random`), read as one byte stream (docs/conformance.md, "Randomness"):
 *
 * - W32: the next 4 bytes, little-endian; W64: the next 8 bytes, little-endian (a BigInt);
 * - BELOW(h): W64 until u < ⌊2^64/h⌋·h, then u mod h — exactly uniform, no modulo bias.
 *
 * Every probabilistic choice is an integer threshold test "u < T" on such words, so P(y|x) is
 * the same rational table as in the Python SDK. A `RandomSource` is injectable: the
 * conformance tests feed the vectors' bytes and check every byte is consumed.
 */

export interface RandomSource {
  /** Fill `out` with uniform random bytes. */
  fill(out: Uint8Array): void;
}

/** Largest request `getRandomValues` serves at once. */
const MAX_FILL = 65536;

/** The platform CSPRNG: WebCrypto's `getRandomValues` (browsers, Node >= 18's globalThis.crypto). */
export const cryptoRandom: RandomSource = {
  fill(out: Uint8Array): void {
    const c = (globalThis as { crypto?: { getRandomValues<T extends ArrayBufferView>(a: T): T } }).crypto;
    if (c === undefined) throw new Error("no crypto.getRandomValues: a CSPRNG is required");
    for (let i = 0; i < out.length; i += MAX_FILL) c.getRandomValues(out.subarray(i, i + MAX_FILL));
  },
};

/** Fixed bytes served in order (tests); throws when exhausted. */
export class ByteSource implements RandomSource {
  consumed = 0;
  constructor(private readonly data: Uint8Array) {}
  fill(out: Uint8Array): void {
    if (this.consumed + out.length > this.data.length) throw new Error("random byte stream exhausted");
    out.set(this.data.subarray(this.consumed, this.consumed + out.length));
    this.consumed += out.length;
  }
}

export const TWO32 = 4294967296;
const TWO64 = 1n << 64n;

/** `n` W32 words. */
export function words32(src: RandomSource, n: number): Uint32Array {
  const bytes = new Uint8Array(4 * n);
  src.fill(bytes);
  const out = new Uint32Array(n);
  for (let i = 0, j = 0; i < n; i++, j += 4) {
    out[i] = (bytes[j] | (bytes[j + 1] << 8) | (bytes[j + 2] << 16)) + bytes[j + 3] * 16777216;
  }
  return out;
}

/** One W32 word. */
export function word32(src: RandomSource): number {
  return words32(src, 1)[0];
}

/** `n` W64 words (BigInt). */
export function words64(src: RandomSource, n: number): bigint[] {
  const w = words32(src, 2 * n);
  const out: bigint[] = [];
  for (let i = 0; i < n; i++) out.push(BigInt(w[2 * i]) | (BigInt(w[2 * i + 1]) << 32n));
  return out;
}

/** One W64 word. */
export function word64(src: RandomSource): bigint {
  return words64(src, 1)[0];
}

/**
 * A W64 word (low and high 32-bit halves) reduced mod h, or −1 when it is at or above
 * ⌊2^64/h⌋·h (rejected). Small bounds stay in exact double arithmetic; larger ones use BigInt.
 */
export function reduce64(lo: number, hi: number, h: number): number {
  if (h <= 2097152) {   // every product below stays under 2^53
    const m32 = TWO32 % h;
    const r = (m32 * m32) % h;   // 2^64 mod h: the top r values of u are rejected
    if (r > 0 && hi === 0xffffffff && lo >= TWO32 - r) return -1;
    return ((hi % h) * m32 + lo) % h;
  }
  const hb = BigInt(h);
  const u = (BigInt(hi) << 32n) | BigInt(lo);
  return u < (TWO64 / hb) * hb ? Number(u % hb) : -1;
}

/** BELOW(h): a uniform integer in [0, h) by rejection on W64 words. */
export function below(src: RandomSource, h: number): number {
  if (!(h >= 1)) throw new RangeError("below() needs h >= 1");
  for (;;) {
    const w = words32(src, 2);
    const v = reduce64(w[0], w[1], h);
    if (v >= 0) return v;
  }
}
