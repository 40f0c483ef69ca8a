/**
 * What the client needs of each metric, over the registry the collector publishes
 * (registry.ts parses and checks it; protocols/ encode): the budget constants the ledger
 * charges, the value lookup (domain index, clipping, memo key, the ledger's keyed digest) and
 * the one-report encoder. Resolved once per registry, so `report()` does no parsing.
 */

import type { WireValue } from "./wire.js";

/** A value looked up in a metric's domain (the true value goes no further than `encode`). */
export interface Found {
  /** Canonical key (memoised protocols: the memo key the ledger counts once). */
  key: string;
  /** Domain index, grid point or bucket. */
  index: number;
  /** A number outside the range (clipped) or a discover string truncated on the device. */
  clipped: boolean;
  /** HMAC(ledger key, fingerprint ‖ key), 32 hex: memoised metrics only, else null. */
  digest: string | null;
}

export interface Metric {
  readonly name: string;
  readonly fingerprint: string;
  /** ε per report (ε₁ for memoised protocols), as published (`epsilon_per_report`). */
  readonly epsilon: number;
  /** ε∞ of memoised protocols, else null. */
  readonly epsilonLongitudinal: number | null;
  readonly reportsPerWindow: number;
  readonly lifetimeEpsilon: number | null;
  /** What k reports in a window cost where that exceeds k·ε₁ (the encoder block's), else null. */
  readonly windowCharges: number[] | null;
  /** The value in this metric's domain, or null when it cannot be reported. */
  lookup(value: unknown, secret: Uint8Array, day: number): Found | null;
  /** The randomised wire payload of a found value (CSPRNG; memoised parts from the secret). */
  encode(found: Found, secret: Uint8Array, day: number): WireValue;
}

export interface DeviceCaps {
  epsilonPerWindow: number | null;
  lifetimeEpsilon: number | null;
}

export interface Registry {
  get(name: string): Metric | undefined;
  readonly device: DeviceCaps | null;
  readonly names: readonly string[];
}
