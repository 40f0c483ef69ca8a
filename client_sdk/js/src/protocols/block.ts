// Generated from conformance/encoder-block.schema.json by `python -m conformance.block_types`;
// do not edit (docs/conformance.md, "The encoder object").

/** The `$id` of the schema these types are read from. */
export type BlockSchemaId = "https://ldp-telemetry.dev/schemas/encoder-block/1.1";

/** A nested Duchi draw (hybrid's): no version, no protocol. */
export interface DuchiParams {
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** A: P(1 | grid point 0) out of 2^64 */
  readonly low: string;
  /** D: the increase per grid point, out of 2^64 */
  readonly step: string;
}

/** A nested piecewise draw (hybrid's): no version, no protocol. */
export interface PiecewiseParams {
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** w: the cells of the high-probability window */
  readonly window: number;
  /** weight of a window cell */
  readonly a: number;
  /** weight of another cell */
  readonly b: number;
}

/** What k reports of a memoised metric cost in one window where that exceeds k·ε₁ (client_sdk/window_charge.py; docs/privacy.md, "Memoisation"): C(k) = cumulative[k − 1] for k ≤ its length, else k·slope. */
export interface WindowChargesParams {
  /** C(1) … C(J), J = min(reports_per_window, 64), binary64 */
  readonly cumulative: readonly number[];
  /** s: C(k) = k·s for k > J */
  readonly slope: number;
}

/** Randomised response over {0, 1}. */
export interface RrBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "rr";
  /** always 2 */
  readonly d: 2;
  /** P(keep x) out of 2^32 */
  readonly keep_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Generalised (k-ary) randomised response. */
export interface GrrBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "grr";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** P(keep x) out of 2^32 */
  readonly keep_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Optimised unary encoding. */
export interface OueBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "oue";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** P(bit of x is 1) out of 2^32 */
  readonly p_threshold: number;
  /** P(another bit is 1) out of 2^32 */
  readonly q_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Symmetric unary encoding (basic one-time RAPPOR). */
export interface SueBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "sue";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** P(bit of x is 1) out of 2^32 */
  readonly p_threshold: number;
  /** P(another bit is 1) out of 2^32 */
  readonly q_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Subset selection. */
export interface SsBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "ss";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** the subset size */
  readonly s: number;
  /** P(x in the subset) out of 2^32 */
  readonly include_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Optimised local hashing; `t` with the linear family, and only with it. */
export interface OlhBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "olh";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** cohorts (hash functions) */
  readonly m: number;
  /** hash range */
  readonly g: number;
  readonly family: "random" | "linear";
  /** P(keep the hash) out of 2^32 */
  readonly keep_threshold: number;
  /** linear family: base-g digits of a value */
  readonly t?: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Hadamard-style response over projective directions. */
export interface HrBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "hr";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** field size */
  readonly g: number;
  /** base-g digits of a value */
  readonly t: number;
  /** directions */
  readonly m: number;
  /** P(keep the inner product) out of 2^32 */
  readonly keep_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** RAPPOR (Erlingsson, Pihur and Korolova 2014): Bloom filter, permanent and instantaneous randomised response. */
export interface RapporBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "rappor";
  /** Bloom filter bits */
  readonly k: number;
  /** hashes per value */
  readonly h: number;
  /** cohorts */
  readonly m: number;
  /** f/2 out of 2^32 (the PRR) */
  readonly half_f_threshold: number;
  /** P(report 1 | PRR bit 0) out of 2^32 */
  readonly p_threshold: number;
  /** P(report 1 | PRR bit 1) out of 2^32; may be 2^32 */
  readonly q_threshold: number;
}

/** String discovery by prefix levels (docs/discovery.md). */
export interface DiscoverBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "discover";
  /** UTF-8 bytes kept on the device */
  readonly max_length: number;
  /** = max_length + 1 */
  readonly groups: number;
  /** hash seeds */
  readonly seeds: number;
  /** hash range */
  readonly g: number;
  /** P(keep the hash) out of 2^32 */
  readonly keep_threshold: number;
}

/** Longitudinal GRR (memoised first round at ε∞, fresh second round). */
export interface LgrrBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "lgrr";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** round 1: P(keep x) out of 2^32 */
  readonly p1_threshold: number;
  /** round 2: P(keep z) out of 2^32 */
  readonly p2_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
  /** memoised, reports_per_window > 1, when k reports in a window reveal more than k·ε₁ */
  readonly window_charges?: WindowChargesParams;
}

/** Longitudinal OUE/SUE. */
export interface LosueBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "losue";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** round 1: P(bit of x is 1), = 2^31 */
  readonly p1_threshold: number;
  /** round 1: P(another bit is 1) */
  readonly q1_threshold: number;
  /** round 2: P(keep a bit) */
  readonly p2_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Longitudinal local hashing (LOLOHA). */
export interface LolohaBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "loloha";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** cohorts (permanent hash functions) */
  readonly m: number;
  /** hash range */
  readonly g: number;
  /** round 1: P(keep the hash) */
  readonly p1_threshold: number;
  /** round 2: P(keep z) */
  readonly p2_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
  /** memoised, reports_per_window > 1, when k reports in a window reveal more than k·ε₁ */
  readonly window_charges?: WindowChargesParams;
}

/** dBitFlipPM (Ding, Kulkarni and Yekhanin 2017) over sampled buckets. */
export interface DbitflipBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "dbitflip";
  /** d: the number of domain values (domain indices 0 … d−1) */
  readonly d: number;
  /** buckets a device reports */
  readonly sampled: number;
  /** round 1: P(bit of x is 1) */
  readonly p1_threshold: number;
  /** round 2: P(keep a bit) */
  readonly p2_threshold: number;
  /** histogram metrics: bucket edges e_0 = lo … e_B = hi (binary64); bucket i is [e_i, e_{i+1}) */
  readonly edges?: readonly number[];
}

/** Duchi, Jordan and Wainwright's (2013) one-bit mechanism on the input grid. */
export interface DuchiBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "duchi";
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** A: P(1 | grid point 0) out of 2^64 */
  readonly low: string;
  /** D: the increase per grid point, out of 2^64 */
  readonly step: string;
  /** mean metrics: [lo, hi], the metric's range */
  readonly range: readonly [number, number];
}

/** One-bit mean (Ding, Kulkarni and Yekhanin 2017) on the input grid. */
export interface BitmeanBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "bitmean";
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** A: P(1 | grid point 0) out of 2^64 */
  readonly low: string;
  /** D: the increase per grid point, out of 2^64 */
  readonly step: string;
  /** mean metrics: [lo, hi], the metric's range */
  readonly range: readonly [number, number];
}

/** Piecewise mechanism (Wang et al. 2019) on the input grid. */
export interface PiecewiseBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "piecewise";
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** w: the cells of the high-probability window */
  readonly window: number;
  /** weight of a window cell */
  readonly a: number;
  /** weight of another cell */
  readonly b: number;
  /** mean metrics: [lo, hi], the metric's range */
  readonly range: readonly [number, number];
}

/** Hybrid of piecewise and Duchi (Wang et al. 2019). */
export interface HybridBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "hybrid";
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** P(piecewise) out of 2^32 */
  readonly h: number;
  /** A nested piecewise draw (hybrid's): no version, no protocol. */
  readonly piecewise: PiecewiseParams;
  /** A nested Duchi draw (hybrid's): no version, no protocol. */
  readonly duchi: DuchiParams;
  /** mean metrics: [lo, hi], the metric's range */
  readonly range: readonly [number, number];
}

/** Discrete Laplace on the input grid, truncated to a window. */
export interface LaplaceBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "laplace";
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** L: output cells beyond each end of the grid */
  readonly window: number;
  /** inverse-CDF boundaries out of 2^64 */
  readonly bounds: readonly string[];
  /** mean metrics: [lo, hi], the metric's range */
  readonly range: readonly [number, number];
}

/** Memoised one-bit mean: round 1 at ε∞ from the memo stream, round 2 a fresh flip. */
export interface MemobitmeanBlock {
  /** the block's layout version */
  readonly version: 1;
  readonly protocol: "memobitmean";
  /** K: input grid points 0 … K */
  readonly grid: number;
  /** round 1: A out of 2^64 */
  readonly low: string;
  /** round 1: D out of 2^64 */
  readonly step: string;
  /** round 2: P(flip) out of 2^32 */
  readonly gamma_threshold: number;
  /** mean metrics: [lo, hi], the metric's range */
  readonly range: readonly [number, number];
}

/** The `encoder` object of each metric of GET /v1/registry (block version 1): every resolved integer a protocol's one-report encoder needs, so that an SDK in any language encodes without re-deriving them (docs/conformance.md, "The encoder object"). Thresholds are out of 2^32; members out of 2^64 are decimal strings (JSON numbers beyond 2^53 are not exact in JavaScript). A new member or protocol is a new block version: an SDK refuses a version it does not know. Schema version 1.1 (the `$id`): the major number is the blocks' `version`; a minor revision refuses more inconsistent blocks and adds no member. What JSON Schema cannot say (primes, m = (g^t − 1)/(g − 1), increasing edges, ordered ranges, …) an SDK checks itself: docs/conformance.md, "Checks an SDK applies to a block". */
export type Block =
  | RrBlock
  | GrrBlock
  | OueBlock
  | SueBlock
  | SsBlock
  | OlhBlock
  | HrBlock
  | RapporBlock
  | DiscoverBlock
  | LgrrBlock
  | LosueBlock
  | LolohaBlock
  | DbitflipBlock
  | DuchiBlock
  | BitmeanBlock
  | PiecewiseBlock
  | HybridBlock
  | LaplaceBlock
  | MemobitmeanBlock;

/** The block of one protocol, by name. */
export type BlockOf<P extends Block["protocol"]> = Extract<Block, { protocol: P }>;
