/**
 * SHA-256 (FIPS 180-4) of a whole message, for the SDK's HMAC-SHA256 derivations and domain-list
 * digests: short one-shot messages, so one function over a padded copy rather than a streaming
 * hasher (noble's, with its cloning and buffer checks, was 2 KB gzip of the browser bundle).
 * conformance/vectors/derivations.json and domains.json pin it, and a test compares it with Node's.
 */

/** K: the first 32 bits of the fractional parts of the cube roots of the first 64 primes. */
const K = Uint32Array.from(("428a2f9871374491b5c0fbcfe9b5dba53956c25b59f111f1923f82a4ab1c5ed5d807aa9812835b01"
  + "243185be550c7dc372be5d7480deb1fe9bdc06a7c19bf174e49b69c1efbe47860fc19dc6240ca1cc2de92c6f4a7484aa5cb0a9dc76f9"
  + "88da983e5152a831c66db00327c8bf597fc7c6e00bf3d5a7914706ca63511429296727b70a852e1b21384d2c6dfc53380d13650a7354"
  + "766a0abb81c2c92e92722c85a2bfe8a1a81a664bc24b8b70c76c51a3d192e819d6990624f40e3585106aa07019a4c1161e376c0827"
  + "48774c34b0bcb5391c0cb34ed8aa4a5b9cca4f682e6ff3748f82ee78a5636f84c878148cc7020890befffaa4506cebbef9a3f7c67178f2")
  .match(/.{8}/g)!, (h) => parseInt(h, 16));
/** H(0): the first 32 bits of the fractional parts of the square roots of the first 8 primes. */
const IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

const rotr = (x: number, n: number): number => (x >>> n) | (x << (32 - n));

/** SHA-256 of `msg`: the 32-byte digest. */
export function sha256(msg: Uint8Array): Uint8Array {
  // pad: 0x80, zeros, the bit length as a 64-bit big-endian integer, to a multiple of 64 bytes
  const padded = new Uint8Array((msg.length + 72) & ~63);
  padded.set(msg);
  padded[msg.length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(msg.length / 2 ** 29));
  view.setUint32(padded.length - 4, msg.length * 8);
  const h = Uint32Array.from(IV);
  const w = new Uint32Array(64);
  for (let at = 0; at < padded.length; at += 64) {
    for (let t = 0; t < 64; t++) {
      w[t] = t < 16 ? view.getUint32(at + 4 * t)
        : (rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >>> 10)) + w[t - 7]
          + (rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >>> 3)) + w[t - 16];
    }
    let a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];   // k: FIPS's h
    for (let t = 0; t < 64; t++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      k = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
  }
  const out = new DataView(new ArrayBuffer(32));
  h.forEach((x, i) => out.setUint32(4 * i, x));
  return new Uint8Array(out.buffer);
}
