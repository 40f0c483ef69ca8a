/**
 * The conformance checks as plain functions, free of Node APIs, so the same code runs in Node
 * (test/conformance.test.ts) and in a browser page (bundle this module, fetch the vector files,
 * call `checkAll`): each returns the list of failures, empty when every vector passes.
 */

import {
  MemoStream, bloomBits, deriveCohort, discoverBucket, discoverFingerprint, ledgerKey, memoKey, olhHash, prrKey,
  prrWords, utf8, valueDigest,
} from "../src/hashing.js";
import { directionCode, inner } from "../src/protocols/frequency.js";
import { memoBits, memoGrr } from "../src/protocols/memoised.js";
import { alphaRound, discretise, memoBit } from "../src/protocols/numeric.js";
import { prrBits, truncate } from "../src/protocols/strings.js";
import { encoderFor, loadRegistry } from "../src/registry.js";
import { ByteSource, type RandomSource, TWO32, cryptoRandom, reduce64 } from "../src/random.js";
import { type DeviceClock, type Reading, clockFromJson } from "../src/deviceClock.js";
import { type Charge, type MetricAccount, Book, apply, parseLedger, recordRefusal } from "../src/ledger.js";
import { type WireValue, packBatch } from "../src/wire.js";
import { decodeKeyConfigs, decodeResponse, innerRequest, openResponse, paddedLength, sealRequest } from "../src/ohttp.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Doc = any;

export const fromHex = (h: string): Uint8Array => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
export const toHex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

/** A payload from the vectors' JSON ({"bin": hex} for bytes). */
export function payloadFromJson(p: any): unknown {
  if (Array.isArray(p)) return p.map(payloadFromJson);
  if (p !== null && typeof p === "object" && "bin" in p) return fromHex(p.bin);
  return p;
}

/** Canonical text of a payload for comparisons (bytes as hex). */
function show(p: unknown): string {
  return JSON.stringify(p, (_k, v) => (v instanceof Uint8Array ? { bin: toHex(v) } : v));
}

class Failures {
  readonly list: string[] = [];
  eq(got: unknown, want: unknown, what: string): void {
    if (show(got) !== show(want)) this.list.push(`${what}: got ${show(got)}, want ${show(want)}`);
  }
}

export function checkDerivations(der: Doc): string[] {
  const f = new Failures();
  const secrets: Uint8Array[] = der.secrets.map(fromHex);
  for (const c of der.text) f.eq(toHex(utf8(c.text)), c.utf8, `utf8 ${JSON.stringify(c.text)}`);
  for (const c of der.below64) {
    const u = BigInt(c.word);
    f.eq(reduce64(Number(u & 0xffffffffn), Number(u >> 32n), c.h), c.value === null ? -1 : c.value, `BELOW h=${c.h} u=${c.word}`);
  }
  for (const c of der.ledger_key) f.eq(toHex(ledgerKey(secrets[c.secret])), c.key, `ledger key ${c.secret}`);
  for (const c of der.value_digest) {
    f.eq(valueDigest(ledgerKey(secrets[c.secret]), c.fingerprint, c.key), c.digest, `digest ${JSON.stringify(c.key)}`);
  }
  for (const c of der.cohort) f.eq(deriveCohort(secrets[c.secret], c.scope, c.m), c.cohort, `cohort ${JSON.stringify(c.scope)} m=${c.m}`);
  for (const c of der.prr) {
    f.eq(toHex(prrKey(secrets[c.secret], c.metric, c.value)), c.key, `PRR key ${c.value}`);
    f.eq(Array.from(prrWords(secrets[c.secret], c.metric, c.value, c.k)), c.words, `PRR words ${c.value}`);
  }
  for (const c of der.bloom) f.eq(bloomBits(c.value, c.cohort, c.k, c.h), c.bits, `Bloom ${JSON.stringify(c)}`);
  for (const c of der.memo) {
    f.eq(toHex(memoKey(secrets[c.secret], c.metric, c.key)), c.memo_key, `memo key ${c.key}`);
    const words = new MemoStream(secrets[c.secret], c.metric, c.key);
    f.eq(Array.from({ length: c.words.length }, () => words.word()), c.words, `memo words ${c.key}`);
    const draws = new MemoStream(secrets[c.secret], c.metric, c.key);
    for (const d of c.draws) f.eq(draws.below(d.below), d.value, `memo below(${d.below}) ${c.key}`);
  }
  for (const c of der.olh_hash) f.eq(olhHash(c.cohort, c.value, c.g), c.bucket, `OLH hash ${JSON.stringify(c)}`);
  for (const c of der.projective) {
    f.eq(directionCode(c.s, c.g, c.t), c.code, `direction ${c.s} g=${c.g} t=${c.t}`);
    const step = Math.max(1, Math.floor(c.g ** c.t / 16));
    c.inner.forEach((want: number, i: number) => f.eq(inner(c.code, i * step, c.g), want, `inner ${c.code}·${i * step}`));
  }
  for (const c of der.discover) {
    const b = truncate(c.value, c.max_length);
    const key = b.length >= c.level ? Uint8Array.of(1, ...b.subarray(0, c.level)) : Uint8Array.of(2, ...b);
    f.eq(toHex(key), c.key_bytes, `discover key ${JSON.stringify(c.value)} level ${c.level}`);
    const fp = discoverFingerprint(key);
    f.eq(fp.toString(), c.fingerprint, `discover fingerprint ${c.key_bytes}`);
    for (const bk of c.buckets) f.eq(discoverBucket(bk.seed, fp, bk.g), bk.bucket, `discover bucket ${JSON.stringify(bk)}`);
  }
  for (const c of der.discover_fingerprint) {
    f.eq(discoverFingerprint(fromHex(c.key_bytes)).toString(), c.fingerprint, `BLAKE2b-64 of ${c.key_bytes.length / 2} bytes`);
  }
  return f.list;
}

export function checkRoundings(registryDoc: Doc, rounding: Doc): string[] {
  const f = new Failures();
  const block = (name: string) => registryDoc.metrics.find((m: { name: string }) => m.name === name).encoder;
  for (const c of rounding.randomised) {
    const b = block(c.metric);
    const [lo, hi] = b.range;
    const x = Math.min(hi, Math.max(lo, c.value));
    f.eq((x - lo) * (2.0 / (hi - lo)) - 1.0, c.t, `t of ${c.metric} ${c.value}`);
    const word = new Uint8Array(4);
    new DataView(word.buffer).setUint32(0, c.word, true);
    const src = new ByteSource(word);
    f.eq(discretise(c.t, b.grid, src), c.index, `rounding ${c.metric} t=${c.t} word=${c.word}`);
    f.eq(src.consumed, 4, "rounding consumes one word");
  }
  for (const c of rounding.alpha_point) {
    const secret = fromHex(rounding.secrets?.[c.secret] ?? "");
    if (secret.length) f.eq(new MemoStream(secret, c.metric, "alpha").word(), c.alpha_word, `alpha word ${c.secret}`);
    f.eq(alphaRound(c.t, block(c.metric).grid, c.alpha_word), c.index, `alpha rounding ${c.metric} t=${c.t}`);
  }
  return f.list;
}

/** Every report vector: the given bytes are the only randomness, and all of them are consumed. */
export function checkReports(registryDoc: Doc, reports: Doc): string[] {
  const f = new Failures();
  let current = new ByteSource(new Uint8Array(0));
  const source: RandomSource = { fill: (out) => current.fill(out) };
  const registry = loadRegistry(registryDoc, undefined, source);
  const secrets: Uint8Array[] = reports.secrets.map(fromHex);
  const seen = new Set<string>();
  for (const c of reports.cases) {
    const what = `${c.metric} ${JSON.stringify(c.value)} secret ${c.secret} day ${c.day} random ${c.random.slice(0, 16)}`;
    const metric = registry.get(c.metric);
    if (metric === undefined) {
      f.list.push(`${what}: metric not loaded`);
      continue;
    }
    const bytes = fromHex(c.random);
    current = new ByteSource(bytes);
    const secret = secrets[c.secret];
    try {
      const found = metric.lookup(c.value, secret, c.day);
      if (found === null) {
        f.list.push(`${what}: not found`);
        continue;
      }
      f.eq([found.key, found.index, found.clipped, found.digest], [c.key, c.index, c.clipped, c.digest], what);
      f.eq(metric.encode(found, secret, c.day), payloadFromJson(c.payload), `${what}: payload`);
      f.eq(current.consumed, bytes.length, `${what}: bytes consumed`);
    } catch (e) {
      f.list.push(`${what}: ${(e as Error).message}`);
    }
    seen.add(c.metric);
  }
  f.eq([...seen].sort(), [...registry.names].sort(), "metrics covered");
  return f.list;
}

/** Memoised first-round responses and RAPPOR's PRR bits of given (secret, metric, value). */
export function checkMemo(registryDoc: Doc, memo: Doc): string[] {
  const f = new Failures();
  const block = (name: string) => registryDoc.metrics.find((m: { name: string }) => m.name === name).encoder;
  const secrets: Uint8Array[] = memo.secrets.map(fromHex);
  for (const c of memo.responses) {
    const b = block(c.metric);
    const secret = secrets[c.secret];
    const ctx = { secret, metric: c.metric, day: 0, random: cryptoRandom };
    f.eq(encoderFor(b).memoKey?.(c.index, ctx), c.key, `memo key ${c.metric} ${c.index}`);
    const m = new MemoStream(secret, c.metric, c.key);
    const x = c.memo_input;
    const bits = (v: boolean[]) => v.map(Number);
    const got = b.protocol === "lgrr" ? memoGrr(m, x, b.d, b.p1_threshold)
      : b.protocol === "loloha" ? memoGrr(m, x, b.g, b.p1_threshold)
      : b.protocol === "losue" ? bits(memoBits(m, b.d, (i) => (i === x ? b.p1_threshold : b.q1_threshold)))
      : b.protocol === "dbitflip" ? bits(memoBits(m, b.sampled, (i) => (i === x ? b.p1_threshold : TWO32 - b.p1_threshold)))
      : memoBit(b, x, m);
    f.eq(got, c.response, `memoised response ${c.metric} secret ${c.secret} index ${c.index}`);
  }
  for (const c of memo.prr) {
    const b = block(c.metric);
    const secret = secrets[c.secret];
    const cohort = deriveCohort(secret, "rappor", b.m);
    f.eq(cohort, c.cohort, `RAPPOR cohort ${c.secret}`);
    const bloom = bloomBits(c.value, cohort, b.k, b.h);
    f.eq(bloom, c.bloom, `Bloom bits ${JSON.stringify(c.value)}`);
    const set = Array.from({ length: b.k }, (_, i) => bloom.includes(i));
    f.eq(prrBits(prrWords(secret, c.metric, c.value, b.k), set, b.half_f_threshold).map(Number), c.prr,
      `PRR ${JSON.stringify(c.value)} secret ${c.secret}`);
  }
  return f.list;
}

/** A ledger charge from its vector form (the Python Charge's field names). */
export function chargeFromJson(c: Doc): Charge {
  return {
    metric: c.metric, fingerprint: c.fingerprint, day: c.day, epsilon: c.epsilon,
    epsilonLongitudinal: c.epsilon_longitudinal, digest: c.digest, reportsPerWindow: c.reports_per_window,
    lifetimeBudget: c.lifetime_budget, deviceWindowBudget: c.device_window_budget ?? null,
    deviceLifetimeBudget: c.device_lifetime_budget ?? null, windowCharges: c.window_charges ? [...c.window_charges.cumulative, c.window_charges.slope] : null,
  };
}

/** An account in a canonical form (digests sorted, keys sorted) for comparison. */
function canonicalAccount(a: MetricAccount): string {
  const memo = Object.fromEntries(Object.keys(a.memo).sort().map((fp) => [fp, a.memo[fp].slice().sort()]));
  return JSON.stringify(Object.fromEntries(Object.entries({ ...a, memo }).sort()));
}

/** A clock object in a canonical form (keys sorted, as parsed) for comparison. */
function canonicalClock(c: Doc | DeviceClock): string {
  const d = clockFromJson(c) as unknown as Record<string, unknown>;
  return JSON.stringify(Object.fromEntries(Object.keys(d).sort().map((k) => [k, d[k]])));
}

/** ledger.json: every sequence of charges (or recorded refusals) with the elapsed reading of
 *  each step, each step's outcome, every account and the device clock after it; and the
 *  version-1 books read with their clock. */
export function checkLedger(doc: Doc): string[] {
  const failures: string[] = [];
  for (const seq of doc.sequences) {
    const book = new Book();
    seq.steps.forEach((step: Doc, i: number) => {
      const reading: Reading = [step.elapsed[0], step.elapsed[1]];
      const where = `ledger ${seq.label}, step ${i}`;
      if (step.record_refusal !== undefined) {
        recordRefusal(book, chargeFromJson(step.charge), step.record_refusal, step.count, reading);
      } else {
        const outcome = apply(book, chargeFromJson(step.charge), reading);
        if (outcome !== step.outcome) failures.push(`${where}: outcome ${outcome}, expected ${step.outcome}`);
      }
      const names = new Set([...book.keys(), ...Object.keys(step.accounts)]);
      for (const name of names) {
        const got = book.get(name);
        const want = step.accounts[name] as MetricAccount | undefined;
        if (got === undefined || want === undefined || canonicalAccount(got) !== canonicalAccount(want)) {
          failures.push(`${where}: account ${name} differs`);
        }
      }
      if (canonicalClock(book.clock) !== canonicalClock(step.clock)) failures.push(`${where}: clock differs`);
    });
  }
  for (const [i, m] of (doc.migrations ?? []).entries()) {
    const { accounts } = parseLedger(JSON.stringify(m.file));
    if (canonicalClock(accounts.clock) !== canonicalClock(m.clock)) failures.push(`ledger migration ${i}: clock differs`);
  }
  return failures;
}

function wireFromJson(p: Doc): WireValue {
  if (Array.isArray(p)) return p.map(wireFromJson);
  if (p !== null && typeof p === "object" && "bin" in p) return fromHex(p.bin);
  return p;
}

/** batches.json: the exact bytes of each encoded batch. */
export function checkBatches(doc: Doc): string[] {
  const failures: string[] = [];
  for (const [i, c] of (doc.cases as Doc[]).entries()) {
    const reports = c.reports.map((r: Doc) => ({ m: r.m, f: r.f, p: wireFromJson(r.p) }));
    if (toHex(packBatch(reports, fromHex(c.batch_id))) !== c.body) failures.push(`batch ${i}: bytes differ`);
  }
  return failures;
}

/** All of the above from the parsed vector files (name -> document); ledger.json and
 * batches.json are checked when given. */
export function checkAll(files: Record<string, Doc>): string[] {
  const registry = files["registry.json"].registry;
  return [
    ...checkDerivations(files["derivations.json"]),
    ...checkRoundings(registry, { ...files["roundings.json"], secrets: files["derivations.json"].secrets }),
    ...checkReports(registry, files["reports.json"]),
    ...checkMemo(registry, files["memo.json"]),
    ...(files["ledger.json"] ? checkLedger(files["ledger.json"]) : []),
    ...(files["batches.json"] ? checkBatches(files["batches.json"]) : []),
  ];
}

/** sealed.json: the padded inner request, the envelope for the given ephemeral key, the response
 * secret, and what each encapsulated response opens to (asynchronous: WebCrypto). */
export async function checkSealed(doc: Doc): Promise<string[]> {
  const failures: string[] = [];
  const [config] = decodeKeyConfigs(fromHex(doc.ohttp_keys));
  if (toHex(config.publicKey) !== doc.key_config.slice(6, 70) || config.keyId !== 7) failures.push("sealed: key config");
  for (const [n, want] of doc.padded_lengths as Array<[number, number]>) {
    if (paddedLength(n) !== want) failures.push(`sealed: padded length of ${n}`);
  }
  const sealed = [];
  for (const [i, c] of (doc.requests as Doc[]).entries()) {
    const inner = innerRequest(fromHex(c.batch));
    if (toHex(inner) !== c.inner_request) failures.push(`sealed request ${i}: inner request differs`);
    const s = await sealRequest(config, inner, fromHex(c.ephemeral_private_key));
    if (toHex(s.envelope) !== c.envelope) failures.push(`sealed request ${i}: envelope differs`);
    if (toHex(s.secret) !== c.response_secret) failures.push(`sealed request ${i}: response secret differs`);
    sealed.push(s);
  }
  for (const [i, c] of (doc.responses as Doc[]).entries()) {
    try {
      const back = decodeResponse(await openResponse(sealed[c.request], fromHex(c.encapsulated_response)));
      const headers = Object.entries(back.headers);
      if (back.status !== c.status || new TextDecoder().decode(back.body) !== c.body
          || JSON.stringify(headers) !== JSON.stringify(c.headers)) failures.push(`sealed response ${i}: opens to something else`);
    } catch (exc) {
      failures.push(`sealed response ${i}: ${(exc as Error).message}`);
    }
  }
  return failures;
}

/** What checkOutbox drives: an outbox made for one case (its limits: max_age from the vectors). */
export interface OutboxUnderTest {
  readonly counters: { expiredReports: number };
  add(batchId: Uint8Array, body: Uint8Array, reports: number, created: number): Promise<void>;
  claim(now: number): Promise<{ created: number } | null>;
  release(batch: never): Promise<void>;
  pending(): Promise<number>;
}

/** outbox.json: one batch added with `created`, then claimed (and released) at each wall reading. */
export async function checkOutbox(doc: Doc, make: (maxAge: number, i: number) => Promise<OutboxUnderTest> | OutboxUnderTest): Promise<string[]> {
  const f = new Failures();
  for (const [i, c] of (doc.cases as Doc[]).entries()) {
    const outbox = await make(doc.max_age, i);
    await outbox.add(new Uint8Array(16), Uint8Array.of(0x80), c.reports, c.created);
    for (const step of c.steps) {
      const batch = await outbox.claim(step.now);
      f.eq(batch === null ? null : batch.created, step.created, `outbox "${c.name}" at ${step.now}`);
      if (batch !== null) await outbox.release(batch as never);
    }
    f.eq(outbox.counters.expiredReports, c.expired_reports, `outbox "${c.name}" expired reports`);
    f.eq(await outbox.pending(), 0, `outbox "${c.name}" pending at the end`);
  }
  return f.list;
}
