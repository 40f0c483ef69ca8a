/**
 * The checks an SDK applies to a published encoder block (docs/conformance.md, "Checks an SDK
 * applies to a block", numbered as there and applied in that order): how members relate, and the
 * schema's own conditions too, as this SDK does not validate against it. A block whose members
 * disagree is refused, never encoded from; conformance/vectors/invalid_blocks.json pins the member
 * each refusal names. Written for the browser bundle's budget: one failure path, the check's number.
 */

const U32 = 2 ** 32;
const U64 = 1n << 64n;
/** (1) members that are integers; JSON.parse cannot tell 4.0 from 4, so any safe integer passes */
const INTEGERS = "d m g t k h s sampled seeds max_length groups grid window a b".split(" ");
/** (3) r of keep_threshold × r > 2^32 (p′ > q′): a number, or the member holding it */
const KEEP_R: Record<string, string | number> = { rr: 2, grr: "d", olh: "g", hr: "g", discover: "g" };

type Members = Record<string, any>;

const GRR = "d keep_threshold", UNARY = "d p_threshold q_threshold", DUCHI = "grid low step";
/** (1) the members each protocol's encoder reads besides version and protocol (the schema's `required`
 * but a mean metric's `range`, which the value lookup reads: registry.ts):
 * an encoder reading a missing threshold as undefined would compare every word false, e.g. OUE
 * would never set the true value's bit, which a report then rules out */
const MEMBERS: Record<string, string> = {
  rr: GRR, grr: GRR, oue: UNARY, sue: UNARY, ss: "d s include_threshold", olh: "d m g family keep_threshold",
  hr: "d g t m keep_threshold", rappor: "k h m half_f_threshold p_threshold q_threshold",
  discover: "max_length groups seeds g keep_threshold", lgrr: "d p1_threshold p2_threshold",
  losue: "d p1_threshold q1_threshold p2_threshold", loloha: "d m g p1_threshold p2_threshold",
  dbitflip: "d sampled p1_threshold p2_threshold", duchi: DUCHI, bitmean: DUCHI, piecewise: "grid window a b",
  hybrid: "grid h piecewise duchi", laplace: "grid window bounds", memobitmean: "grid low step gamma_threshold",
};

/** Calls `fail(member, check)` (which throws) at the first check of the list block `b` breaks. */
export function checkBlock(b: Members, fail: (field: string, check: number) => never): void {
  const p = b.protocol;
  const hybrid = p === "hybrid";
  const need = (ok: unknown, field: string, check: number): void => {
    if (!ok) fail(field, check);
  };
  const int = (o: Members, k: string): number => (Number.isSafeInteger(o[k]) ? o[k] : fail(k, 1));
  const word = (x: unknown, field: string, check: number): bigint =>   // out of 2^64, as decimal text
    typeof x === "string" && /^(0|[1-9]\d*)$/.test(x) && BigInt(x) <= U64 ? BigInt(x) : fail(field, check);
  const rising = (x: unknown, n: number): unknown =>   // n finite numbers, strictly increasing
    Array.isArray(x) && x.length === n && x.every((e, i) => Number.isFinite(e) && !(i && x[i - 1] >= e));
  const nested = (k: string, check: number): Members => {   // hybrid's nested draw, on the block's grid
    const o = hybrid ? b[k] : b;
    need(o?.grid === b.grid, `${k}.grid`, check);
    return o;
  };

  need(b.version === 1, "version", 0);   // a newer layout: upgrade this SDK
  for (const k of MEMBERS[p]?.split(" ") ?? []) need(b[k] != null, k, 1);                                  // (1)
  for (const k of INTEGERS) if (k in b && !(hybrid && k === "h")) int(b, k);                              // (1)
  for (const k of Object.keys(b)) {
    if (k.endsWith("_threshold") || (hybrid && k === "h")) need(int(b, k) >= 0 && b[k] <= U32, k, 1);
  }
  const linear = b.family === "linear";
  need(p !== "olh" || linear === "t" in b, "t", 2);                                                        // (2)
  const r = KEEP_R[p];                                                                                      // (3)
  if (r !== undefined) need(int(b, "keep_threshold") * (typeof r === "number" ? r : int(b, r)) > U32, "keep_threshold", 3);
  if (p === "hr" || (p === "olh" && linear)) {                                                              // (4)
    const [d, g, t, m] = ["d", "g", "t", "m"].map((k) => int(b, k));
    let q = 2;
    while (g % q && q * q < g) q++;
    need(g > 1 && (g === q || g % q), "g", 4);   // no divisor q with q² ≤ g
    let digits = 1, points = 1;
    for (let size = g; size < d; size *= g) digits++, points = points * g + 1;
    need(t === digits, "t", 4);
    need(m === points, "m", 4);
  }
  if (p === "rappor") need(int(b, "h") <= int(b, "k"), "h", 5);
  if (p === "ss") need(int(b, "s") < int(b, "d"), "s", 6);
  if (p === "dbitflip") need(int(b, "sampled") <= int(b, "d"), "sampled", 7);
  if (p === "discover") need(int(b, "groups") === int(b, "max_length") + 1, "groups", 8);
  if (p === "losue") need(b.p1_threshold === 2 ** 31, "p1_threshold", 9);
  if (p === "piecewise" || hybrid) {                                                                        // (10)
    const o = nested("piecewise", 10), f = hybrid ? "piecewise." : "";
    const grid = int(b, "grid"), w = int(o, "window"), a = int(o, "a");
    need(w >= 1 && w <= grid && a >= 1 && int(o, "b") >= 0, f + "window", 10);
    need(w * a + grid * o.b <= U32, f + "a", 10);
  }
  if (p === "duchi" || p === "bitmean" || p === "memobitmean" || hybrid) {                                 // (11)
    const o = nested("duchi", 11), f = hybrid ? "duchi." : "";
    const low = word(o.low, f + "low", 11);
    need(low + BigInt(int(b, "grid")) * word(o.step, f + "step", 11) <= U64, f + "step", 11);
  }
  if (p === "laplace") {                                                                                    // (12)
    const x = b.bounds;
    need(Array.isArray(x) && x.length === 2 * (int(b, "grid") + int(b, "window")), "bounds", 12);
    const words: bigint[] = x.map((e: unknown) => word(e, "bounds", 12));
    need(words.every((e, i) => !(i && words[i - 1] > e)), "bounds", 12);
  }
  if ("edges" in b) need(rising(b.edges, (b.d ?? 2) + 1), "edges", 13);
  if ("range" in b) need(rising(b.range, 2), "range", 14);
}
