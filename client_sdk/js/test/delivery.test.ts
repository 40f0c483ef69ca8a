/**
 * The delivery vectors (conformance/vectors/delivery.json; docs/conformance.md, "Delivery"): the
 * back-off schedule with the CSPRNG's jitter word fixed, Retry-After, and whole conversations — a
 * real TelemetryClient reports, flushes, and a scripted collector or shuffler answers its POSTs;
 * which answers settle a batch, what is sent again (the same bytes, or the survivors under a new
 * id with the very same payloads), what flush() returns and what stats() counts. The Python SDK
 * runs the same file (tests/test_delivery_vectors.py).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { TelemetryClient, type Platform } from "../src/client.js";
import { GATEWAY_PATH, KEYS_TYPE } from "../src/ohttp.js";
import { Seal, Sealer } from "../src/sealed.js";
import { MemoryStore } from "../src/storage/memory.js";
import { DEFAULT_RETRY, type RetryPolicy, Response, type Transport, TransportError, retryDelay } from "../src/transport.js";
import { unpack } from "../src/wire.js";
import { gatewayKey, keysDoc, openEnvelope } from "./gateway.js";
import { toHex, vectors } from "./support.js";

const V = vectors("delivery.json");
const noPlatform: Platform = {
  openStore: async () => { throw new Error("tests pass a store"); },
  onHide: () => () => undefined,
};

/** The vectors' policy (Python's field names) as the SDK's RetryPolicy. */
function policyOf(p: Record<string, number>): RetryPolicy {
  return {
    initial: p.initial ?? DEFAULT_RETRY.initial, maximum: p.maximum ?? DEFAULT_RETRY.maximum,
    multiplier: p.multiplier ?? DEFAULT_RETRY.multiplier, maxRetryAfter: p.max_retry_after ?? DEFAULT_RETRY.maxRetryAfter,
    flushInterval: p.flush_interval ?? DEFAULT_RETRY.flushInterval,
  };
}

test("retry delays: the schedule for every policy, attempt and jitter of the vectors", () => {
  const real = globalThis.crypto.getRandomValues.bind(globalThis.crypto);
  try {
    for (const c of V.retry_delays) {
      // uniform() reads two words: u = (w0·2^21 + (w1 >>> 11)) / 2^53, so u = k/2^53 is w0 = ⌊k/2^21⌋, w1 = (k mod 2^21)·2^11
      const k = c.u * 2 ** 53;
      const words = [Math.floor(k / 2 ** 21), (k % 2 ** 21) * 2 ** 11];
      (globalThis.crypto as { getRandomValues: unknown }).getRandomValues = <T extends ArrayBufferView>(a: T): T => {
        (a as unknown as Uint32Array).set(words);
        return a;
      };
      assert.equal(retryDelay(policyOf(c.policy), c.attempt, c.retry_after), c.delay, JSON.stringify(c));
    }
  } finally {
    (globalThis.crypto as { getRandomValues: unknown }).getRandomValues = real;
  }
});

test("Retry-After: delay-seconds, HTTP-dates, the problem's retry_after, and what is ignored", () => {
  for (const c of V.retry_after) {
    const headers: Record<string, string> = c.header === null ? {} : { "retry-after": c.header };
    const r = new Response(503, headers, new TextEncoder().encode(c.body));
    assert.equal(r.retryAfter(c.now), c.seconds, JSON.stringify(c));
  }
});

type Answer = "drop" | { status: number; headers: Record<string, string>; body: string };

/** A collector (or shuffler) answering POSTs from a script, then acknowledging. */
class Scripted implements Transport {
  readonly posts: Array<{ at: number; body: Uint8Array }> = [];
  constructor(private readonly answers: Answer[], private readonly shuffler: boolean) {}

  async request(method: string, path: string, body?: Uint8Array): Promise<Response> {
    assert.deepEqual([method, path], ["POST", "/v1/reports"]);
    this.posts.push({ at: performance.now() / 1000, body: body as Uint8Array });
    const next = this.answers.shift();
    if (next === "drop") throw new TransportError("connection dropped (scripted)");
    const text = (s: string) => new TextEncoder().encode(s);
    if (next !== undefined) return new Response(next.status, next.headers, text(next.body));
    if (this.shuffler) return new Response(202, { "content-type": "application/json" }, text('{"stored": true}'));
    const n = (unpack(body as Uint8Array) as { reports: unknown[] }).reports.length;
    return new Response(200, { "content-type": "application/json" }, text(JSON.stringify({ accepted: n, duplicate: false })));
  }
}

/**
 * Shuffler sending, minus the sealing: the sealer's answer mapping (Sealer's `acked`: only the
 * shuffler's 202 {"stored": true} settles) over the scripted shuffler; the sealed bytes are
 * pinned by sealed.json.
 */
function shufflerSending(inner: Transport): Transport {
  const sealer = new Sealer("shuffler", "https://shuffler.example/", null, inner) as unknown as { acked(r: Response): Response };
  return { request: async (m, p, b, h) => sealer.acked(await inner.request(m, p, b, h)) };
}

const metricsOf = (body: Uint8Array): string[] =>
  (unpack(body) as { reports: Array<{ m: string }> }).reports.map((r) => r.m);

type Post = { same_bytes_as: number | null; metrics: string[] };

/** Every POST carries the expected metrics; repeats are byte-identical; a new batch has a new id and
 *  the very payloads sent before (never randomised again). */
function checkPosts(c: { posts: Post[]; any_order: boolean }, bodies: Uint8Array[]): void {
  assert.equal(bodies.length, c.posts.length);
  let posts = c.posts;
  if (c.any_order) {
    const order = bodies.slice(1).map((b) => metricsOf(b).join());
    posts = [posts[0], ...posts.slice(1).sort((p, q) => order.indexOf(p.metrics.join()) - order.indexOf(q.metrics.join()))];
  }
  const docs = bodies.map((b) => unpack(b) as { batch_id: Uint8Array; reports: Array<{ m: string; f: string; p: unknown }> });
  const first = new Map(docs[0].reports.map((r) => [r.m, r]));
  posts.forEach((post, i) => {
    assert.deepEqual(metricsOf(bodies[i]), post.metrics, `POST ${i}`);
    if (post.same_bytes_as !== null) assert.deepEqual(bodies[i], bodies[post.same_bytes_as], `POST ${i} repeats POST ${post.same_bytes_as}`);
    else for (const d of docs.slice(0, i)) assert.notEqual(toHex(d.batch_id), toHex(docs[i].batch_id), `POST ${i} needs a new id`);
    for (const r of docs[i].reports) assert.deepEqual(r, first.get(r.m), `POST ${i} re-randomised ${r.m}`);
  });
}

async function converse(c: any, transport: Transport, seal?: ReturnType<typeof Seal.gateway>): Promise<void> {
  const client = new TelemetryClient({
    transport, registry: V.registry, store: new MemoryStore(), batchSize: 100, maxBatchAge: 3600,
    retry: policyOf(V.policy), flushOnHide: false, seal,
  }, noPlatform);
  await client.ready;
  for (const [metric, value] of V.reports) assert.ok(client.report(metric, value), metric);
  assert.equal(await client.flush(30), c.flush);
  const stats = await client.stats() as unknown as Record<string, number>;
  for (const name of ["reports_acked", "reports_rejected", "duplicates"]) assert.equal(stats[name], c[name], name);
  for (const [metric, value] of V.reports) assert.equal(client.report(metric, value), !c.stale_metrics.includes(metric), metric);
  await client.close(0.5);
}

function checkGaps(c: any, at: number[]): void {
  for (const [index, gap] of Object.entries(c.min_gap as Record<string, number>)) {
    const i = Number(index);
    assert.ok(at[i] - at[i - 1] >= gap - 0.01, `POST ${i} waited less than ${gap} s`);
  }
}

for (const c of V.conversations) {
  test(`delivery: ${c.name}`, async () => {
    const scripted = new Scripted([...c.answers], c.sending === "shuffler");
    await converse(c, c.sending === "shuffler" ? shufflerSending(scripted) : scripted);
    checkPosts(c, scripted.posts.slice(0, c.posts.length).map((p) => p.body));
    checkGaps(c, scripted.posts.map((p) => p.at));
  });
}

/** A gateway answering from the script: each answer is the collector's, sealed back inside an
 *  encapsulated response ('drop': no outer response); then it acknowledges. */
class ScriptedGateway implements Transport {
  readonly envelopes: Uint8Array[] = [];
  readonly batches: Array<{ at: number; body: Uint8Array }> = [];
  constructor(private readonly key: Awaited<ReturnType<typeof gatewayKey>>, private readonly answers: Answer[]) {}

  async request(method: string, path: string, body?: Uint8Array): Promise<Response> {
    assert.equal(path, GATEWAY_PATH);
    if (method === "GET") return new Response(200, { "content-type": KEYS_TYPE }, keysDoc([this.key.config]));
    this.envelopes.push(body as Uint8Array);
    const opened = await openEnvelope(this.key, body as Uint8Array);
    this.batches.push({ at: performance.now() / 1000, body: opened.batch });
    const next = this.answers.shift();
    if (next === "drop") throw new TransportError("connection dropped (scripted)");
    const te = new TextEncoder();
    if (next !== undefined) return opened.answer(next.status, next.headers, te.encode(next.body));
    const n = (unpack(opened.batch) as { reports: unknown[] }).reports.length;
    return opened.answer(200, { "content-type": "application/json" }, te.encode(JSON.stringify({ accepted: n, duplicate: false })));
  }
}

for (const c of V.conversations.filter((x: { sending: string }) => x.sending === "plain")) {
  test(`delivery sealed to a gateway: ${c.name}`, async () => {
    const gateway = new ScriptedGateway(await gatewayKey(3), [...c.answers]);
    await converse(c, gateway, Seal.gateway());
    const n = c.posts.length;
    checkPosts(c, gateway.batches.slice(0, n).map((b) => b.body));
    (c.posts as Post[]).forEach((post, i) => {      // in arrival order: any_order cases repeat nothing
      if (post.same_bytes_as !== null) assert.deepEqual(gateway.envelopes[i], gateway.envelopes[post.same_bytes_as], `POST ${i}: the same envelope`);
      else for (const e of gateway.envelopes.slice(0, i)) assert.notDeepEqual(e, gateway.envelopes[i], `POST ${i}: a new envelope`);
    });
    checkGaps(c, gateway.batches.map((b) => b.at));
  });
}
