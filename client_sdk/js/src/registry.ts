/**
 * The registry as the collector publishes it (`GET /v1/registry`; docs/conformance.md): per
 * metric its published constants (fingerprint, ε per report, ε∞, limits) and an `encoder`
 * object holding every resolved integer of its protocol. Nothing is re-derived here from ε:
 * thresholds computed with another libm could differ in the last bit, so the Python reference
 * derives them once and every SDK encodes from the same integers.
 */

import { ledgerKey, sha256Hex, utf8, valueDigest } from "./hashing.js";
import type { DeviceCaps, Found, Metric, Registry } from "./metrics.js";
import { dbitflip, lgrr, loloha, losue } from "./protocols/memoised.js";
import { grr, hr, olh, rr, ss, unary } from "./protocols/frequency.js";
import { checkBlock } from "./protocols/checks.js";
import { alphaRound, alphaWord, discretise, duchi, hybrid, laplace, memobitmean, piecewise } from "./protocols/numeric.js";
import { discover, rappor } from "./protocols/strings.js";
import { type Block, type BlockOf, type Context, type Encoder, SecretCache } from "./protocols/types.js";
import { type RandomSource, cryptoRandom } from "./random.js";
import type { WireValue } from "./wire.js";

/** The encoder layout this SDK understands. */
export const ENCODER_VERSION = 1;

export class RegistryError extends Error {
  override name = "RegistryError";
}

/** One encoder per protocol of the schema, each typed by its protocol's block (a missing one does not compile). */
const ENCODERS: { [P in Block["protocol"]]: (b: BlockOf<P>) => Encoder } = {
  rr, grr, oue: unary, sue: unary, ss, olh, hr, rappor, discover, lgrr, losue, loloha, dbitflip,
  duchi, bitmean: duchi, laplace, piecewise, hybrid, memobitmean,
};

/** The one-report encoder of a published encoder object: a RegistryError naming the member if the
 * block fails a check of docs/conformance.md (never a silent encode), or if it is unknown. */
export function encoderFor(block: Block): Encoder {
  checkBlock(block, (field, check) => {
    throw new RegistryError(`field ${field}: ${check ? `the encoder block fails check ${check} of docs/conformance.md, `
      + "\"Checks an SDK applies to a block\"" : `encoder version ${block.version} is unknown: upgrade this SDK`}`);
  });
  const make = ENCODERS[block.protocol] as ((b: Block) => Encoder) | undefined;   // unknown: a newer block
  if (make === undefined) throw new RegistryError(`protocol ${block.protocol} is unknown: upgrade this SDK`);
  return make(block);
}

/** The members of a block the value lookup reads, whichever protocol it is of (schema: `max_length`
 * of discover, `range` and `grid` of mean metrics, `edges` of histograms). */
interface LookupView {
  readonly protocol: string;
  readonly max_length?: number;
  readonly range?: readonly [number, number];
  readonly edges?: readonly number[];
  readonly grid?: number;
  /** lgrr, loloha: what k reports cost in one window (the ledger's, not the lookup's) */
  readonly window_charges?: { readonly cumulative: readonly number[]; readonly slope: number };
}

const ledgerKeys = new SecretCache<Uint8Array>();

const digestOf = (secret: Uint8Array, fingerprint: string, key: string): string =>
  valueDigest(ledgerKeys.get(secret, "", () => ledgerKey(secret)), fingerprint, key);

/** An edge as a bucket label writes it (Python's int, or float repr). */
function edgeText(x: number): string {
  if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
  const [mant, exp] = x.toExponential().split("e");
  const e = Number(exp);
  const digits = mant.replace("-", "").replace(".", "");
  const sign = x < 0 ? "-" : "";
  if (e < -4 || e >= 16) return `${sign}${digits[0]}${digits.length > 1 ? "." + digits.slice(1) : ""}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  if (e < 0) return `${sign}0.${"0".repeat(-e - 1)}${digits}`;
  const whole = digits.padEnd(e + 1, "0");
  return `${sign}${whole.slice(0, e + 1)}.${whole.slice(e + 1) || "0"}`;
}

type Entry = Record<string, unknown>;

/** A file domain as the registry publishes it (`categories: {file, size, sha256}`). */
export interface PublishedDomain {
  name: string;
  size: number;
  sha256: string;
}

/** The file domains of a published registry: fetch each from `GET /v1/registry/domains/{name}`. */
export function fileDomains(doc: unknown): PublishedDomain[] {
  const metrics = ((typeof doc === "string" ? JSON.parse(doc) : doc) as { metrics?: Entry[] } | null)?.metrics;
  return !Array.isArray(metrics) ? [] : metrics.filter((e) => typeof (e.categories as Entry | null)?.sha256 === "string")
    .map((e) => ({ name: String(e.name), ...(e.categories as { size: number; sha256: string }) }));
}

/** The values of a domain text (each followed by "\n"), if it is the published one. */
export function domainValues(text: string, d: PublishedDomain): string[] {
  const values = text.slice(0, -1).split("\n");
  if (!text.endsWith("\n") || values.length !== d.size || sha256Hex(text) !== d.sha256) {
    throw new RegistryError(`metric ${d.name}: not the published domain list`);
  }
  return values;
}

/** A metric's value -> index: a map, or the size of a numbered domain ("0" .. "d-1"). */
type Domain = Map<string, number> | number;

function domainOf(name: string, kind: string, c: any, domains?: Record<string, string[]>): Domain {
  if (kind === "categorical" && c.ids) return c.ids;
  const list = kind === "boolean" ? ["false", "true"] : kind !== "categorical" ? [] : Array.isArray(c) ? c : domains?.[name];
  if (!list) throw new RegistryError(`metric ${name}: no domain list`);
  return new Map(list.map((v: string, i: number) => [v, i]));
}

function number(v: unknown, what: string): number {
  if (!Number.isFinite(v)) throw new RegistryError(`${what} must be a finite number`);   // a non-number too
  return v as number;
}

class PublishedMetric implements Metric {
  readonly name: string;
  readonly fingerprint: string;
  readonly epsilon: number;
  readonly epsilonLongitudinal: number | null;
  readonly reportsPerWindow: number;
  readonly lifetimeEpsilon: number | null;
  readonly windowCharges: number[] | null;
  private readonly kind: string;
  private readonly encoder: Encoder;
  private readonly block: LookupView;
  private readonly domain: Domain;
  private readonly labels: string[] = [];

  constructor(entry: Entry, private readonly random: RandomSource, domains?: Record<string, string[]>) {
    this.name = String(entry.name);
    const block = entry.encoder as (Block & LookupView) | undefined;
    if (block === undefined || typeof block !== "object" || block === null) {
      throw new RegistryError(`metric ${this.name}: no encoder object (an older collector)`);
    }
    try {
      this.encoder = encoderFor(block);
    } catch (e) {
      throw new RegistryError(`metric ${this.name}: ${(e as Error).message}`);
    }
    this.block = block;
    this.kind = String(entry.kind);
    if (this.kind === "numeric" && block.range == null && block.edges == null) {   // what lookup() scales by
      throw new RegistryError(`metric ${this.name}: field range: a numeric metric's block needs range (or edges)`);
    }
    this.fingerprint = String(entry.fingerprint);
    this.epsilon = number(entry.epsilon_per_report, `metric ${this.name}: epsilon_per_report`);
    this.epsilonLongitudinal = entry.epsilon_longitudinal == null ? null
      : number(entry.epsilon_longitudinal, `metric ${this.name}: epsilon_longitudinal`);
    this.reportsPerWindow = entry.reports_per_window == null ? 1 : number(entry.reports_per_window, "reports_per_window");
    this.lifetimeEpsilon = entry.lifetime_epsilon == null ? null : number(entry.lifetime_epsilon, "lifetime_epsilon");
    const w = block.window_charges;   // finite numbers or refused (a NaN would pass every budget check)
    this.windowCharges = w ? [...w.cumulative, w.slope].map((x) => number(x, "window_charges")) : null;
    this.domain = domainOf(this.name, this.kind, entry.categories, domains);
    const size = typeof this.domain === "number" ? this.domain : this.domain.size;
    if ((this.kind === "categorical" || this.kind === "boolean") && (block as { d?: number }).d !== size) {   // GRR at a larger d: a larger ε
      throw new RegistryError(`metric ${this.name}: field d: the encoder block is over d = ${(block as { d?: number }).d} values, the domain has ${size}`);
    }
    if (block.edges) {
      const e = block.edges.map(edgeText);
      for (let i = 0; i + 1 < e.length; i++) this.labels.push(`[${e[i]}, ${e[i + 1]}${i === e.length - 2 ? "]" : ")"}`);
    }
  }

  private ctx(secret: Uint8Array, day: number): Context {
    return { secret, metric: this.name, day, random: this.random };
  }

  private found(key: string, index: number, clipped: boolean, secret: Uint8Array, day: number): Found {
    if (this.encoder.memoKey) key = this.encoder.memoKey(index, this.ctx(secret, day));
    const digest = this.epsilonLongitudinal === null ? null : digestOf(secret, this.fingerprint, key);
    return { key, index, clipped, digest };
  }

  lookup(value: unknown, secret: Uint8Array, day: number): Found | null {
    const b = this.block;
    if (this.kind === "string") {
      if (typeof value !== "string") return null;
      const clipped = b.max_length !== undefined && utf8(value).length > b.max_length;
      return this.found(value, -1, clipped, secret, day);
    }
    if (this.kind === "numeric") {
      if (typeof value !== "number" || !Number.isFinite(value)) return null;
      const [lo, hi] = b.range ?? [b.edges![0], b.edges![b.edges!.length - 1]];
      const clipped = value < lo || value > hi;
      const x = value < lo ? lo : value > hi ? hi : value;
      if (b.edges) {
        let i = 0;   // bisect right over the inner edges
        while (i + 2 < b.edges.length && b.edges[i + 1] <= x) i++;
        return this.found(this.labels[i], i, clipped, secret, day);
      }
      const t = (x - lo) * (2.0 / (hi - lo)) - 1.0;
      const j = this.encoder.memoKey
        ? alphaRound(t, b.grid!, alphaWord(this.ctx(secret, day)))
        : discretise(t, b.grid!, this.random);   // a mean metric's block has grid and range
      return this.found("", j, clipped, secret, day);
    }
    let key: string | null = null;
    if (typeof value === "string") key = this.kind === "boolean" ? value.trim().toLowerCase() : value;
    else if (this.kind === "boolean" && (value === true || value === false || value === 0 || value === 1)) {
      key = value === true || value === 1 ? "true" : "false";
    } else if (typeof value === "number" && Number.isInteger(value)) key = String(value);
    const index = key === null ? undefined : this.indexOf(key);
    return index === undefined ? null : this.found(key as string, index, false, secret, day);
  }

  private indexOf(key: string): number | undefined {
    const d = this.domain;
    if (typeof d !== "number") return d.get(key);
    return /^(0|[1-9]\d{0,18})$/.test(key) && Number(key) < d ? Number(key) : undefined; // ids (domains.py)
  }

  encode(found: Found, secret: Uint8Array, day: number): WireValue {
    return this.encoder.encode(found.index, found.key, this.ctx(secret, day));
  }
}

/**
 * A registry from the published document (an object or its JSON text). `pins` maps metric
 * names to the fingerprints the app was built against: a published metric whose fingerprint
 * differs, or a pinned metric that is missing, is a RegistryError. `random` replaces the CSPRNG
 * (tests only). `domains` holds the values of file domains (`fileDomains`, `domainValues`).
 */
export function loadRegistry(doc: unknown, pins?: Record<string, string>, random: RandomSource = cryptoRandom,
                             domains?: Record<string, string[]>): Registry {
  const parsed = (typeof doc === "string" ? JSON.parse(doc) : doc) as { metrics?: Entry[]; device?: Entry | null };
  if (parsed === null || typeof parsed !== "object" || !Array.isArray(parsed.metrics) || parsed.metrics.length === 0) {
    throw new RegistryError('expected {"metrics": [...]}, not empty');
  }
  const metrics = new Map<string, Metric>();
  for (const entry of parsed.metrics) {
    const metric = new PublishedMetric(entry, random, domains);
    if (metrics.has(metric.name)) throw new RegistryError(`metric ${metric.name}: field name: listed twice`);
    const pin = pins?.[metric.name];
    if (pin !== undefined && pin !== metric.fingerprint) {
      throw new RegistryError(`metric ${metric.name}: fingerprint ${metric.fingerprint}, pinned ${pin}`);
    }
    metrics.set(metric.name, metric);
  }
  const missing = Object.keys(pins ?? {}).filter((n) => !metrics.has(n));
  if (missing.length) throw new RegistryError(`pinned metric(s) ${missing.join(", ")} are not published`);
  const dev = parsed.device;
  const device: DeviceCaps | null = dev == null ? null : {
    epsilonPerWindow: (dev.epsilon_per_window as number | undefined) ?? null,
    lifetimeEpsilon: (dev.lifetime_epsilon as number | undefined) ?? null,
  };
  return { get: (n) => metrics.get(n), device, names: [...metrics.keys()] };
}
