/**
 * String metrics (client_sdk/protocols/rappor.py, discover.py): RAPPOR's permanent randomised
 * response is derived from the secret (memoised without storing anything) and only the IRR
 * draws fresh words; discover reports a fresh seed and GRR on [g] of the hashed prefix key.
 */

import { bloomBits, deriveCohort, discoverBucket, discoverFingerprint, prrWords, utf8 } from "../hashing.js";
import { below, word32, words32 } from "../random.js";
import type { DiscoverBlock, RapporBlock } from "./block.js";
import { type Encoder, SecretCache, packBits } from "./types.js";

const derived = new SecretCache<number>();
const prrs = new SecretCache<boolean[]>();

/** The PRR: B'ᵢ = 1 if uᵢ < T, 0 if T <= uᵢ < 2T, else Bᵢ (T/2^32 = f/2). */
export const prrBits = (words: ArrayLike<number>, bloom: boolean[], half: number): boolean[] =>
  Array.from(words, (u, i) => (u < 2 * half ? u < half : bloom[i]));

/** RAPPOR: [cohort, IRR bits]; B'ᵢ = uᵢ < 2T ? uᵢ < T : Bᵢ from the PRR words, Sᵢ = wᵢ < (B'ᵢ ? q : p). */
export function rappor(b: RapporBlock): Encoder {
  const { k, h, m } = b;
  const half = b.half_f_threshold;
  return {
    encode(_x, value, c) {
      const cohort = derived.get(c.secret, `rappor\u0000${m}`, () => deriveCohort(c.secret, "rappor", m));
      const prr = prrs.get(c.secret, `${k}\u0000${h}\u0000${half}\u0000${c.metric}\u0000${value}`, () => {
        const bloom = new Array<boolean>(k).fill(false);
        for (const bit of bloomBits(value, cohort, k, h)) bloom[bit] = true;
        return prrBits(prrWords(c.secret, c.metric, value, k), bloom, half);
      });
      const u = words32(c.random, k);
      return [cohort, packBits(prr.map((one, i) => u[i] < (one ? b.q_threshold : b.p_threshold)))];
    },
  };
}

/** The device's bytes of a discover value: UTF-8 cut to max_length bytes. */
export const truncate = (value: string, maxLength: number): Uint8Array => utf8(value).subarray(0, maxLength);

/** Fingerprints of recent keys (public hashes; the key never leaves the device). */
const fingerprints = new Map<string, bigint>();

/** discover: [group, seed, y], the group from the secret, key = 0x01 ‖ b[:ℓ] or 0x02 ‖ b. */
export function discover(b: DiscoverBlock): Encoder {
  const L = b.max_length;
  return {
    encode(_x, value, c) {
      const group = derived.get(c.secret, `discover\u0000${c.metric}\u0000${b.groups}`,
        () => deriveCohort(c.secret, `discover\u0000${c.metric}`, b.groups));
      const bytes = truncate(value, L);
      const level = Math.min(group + 1, L);
      const key = bytes.length >= level ? Uint8Array.of(1, ...bytes.subarray(0, level)) : Uint8Array.of(2, ...bytes);
      const seed = below(c.random, b.seeds);
      let fp = fingerprints.get(key.join());
      if (fp === undefined) {
        if (fingerprints.size >= 4096) fingerprints.clear();
        fingerprints.set(key.join(), (fp = discoverFingerprint(key)));
      }
      const h = discoverBucket(seed, fp, b.g);
      if (word32(c.random) < b.keep_threshold) return [group, seed, h];
      const o = below(c.random, b.g - 1);
      return [group, seed, o + (o >= h ? 1 : 0)];
    },
  };
}
