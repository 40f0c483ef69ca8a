/** What a protocol's one-report encoder gets and gives (registry.ts builds one per metric). */

import type { RandomSource } from "../random.js";
import type { WireValue } from "../wire.js";

/** Everything a report may depend on besides the value: the device secret, the metric, the UTC day. */
export interface Context {
  secret: Uint8Array;
  metric: string;
  day: number;
  random: RandomSource;
}

export interface Encoder {
  /** Two-round protocols: the memo key of a domain index (the ledger charges ε∞ once per key). */
  memoKey?(index: number, ctx: Context): string;
  /** The randomised wire payload of domain index `index` (string metrics: of `key`). */
  encode(index: number, key: string, ctx: Context): WireValue;
}

/** The published `encoder` object of a metric: the union of conformance/encoder-block.schema.json's
 * blocks (generated into block.ts; docs/conformance.md, "The encoder object"). */
export type { Block, BlockOf } from "./block.js";

/** Bounded per-secret caches of values derived from the secret (deterministic, memory only). */
export class SecretCache<T> {
  private readonly bySecret = new WeakMap<Uint8Array, Map<string, T>>();
  get(secret: Uint8Array, key: string, make: () => T): T {
    let map = this.bySecret.get(secret);
    if (map === undefined) this.bySecret.set(secret, (map = new Map()));
    let value = map.get(key);
    if (value === undefined) {
      if (map.size >= 4096) map.clear();
      value = make();
      map.set(key, value);
    }
    return value;
  }
}

/** Bits packed little-endian: bit i is bit i mod 8 of byte ⌊i/8⌋. */
export function packBits(bits: ArrayLike<boolean | number>): Uint8Array {
  const out = new Uint8Array((bits.length + 7) >> 3);
  for (let i = 0; i < bits.length; i++) if (bits[i]) out[i >> 3] |= 1 << (i & 7);
  return out;
}
