/**
 * Sealed batches in Node: HPKE against RFC 9180 A.1.1, Oblivious HTTP against RFC 9458 Appendix
 * A, the Python reference's sealed.json, @hpke/core on random keys (it opens what this SDK seals),
 * and the client sending sealed: the one option, the same envelope on resend, resealing after a
 * key rotation, the shuffler's ack, never a plain batch.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { TelemetryClient } from "../src/node.js";
import {
  GATEWAY_PATH, KEYS_TYPE, KEY_PROBLEM_TYPE, type KeyConfig, aeadSeal, decodeKeyConfigs, decodeResponse, exportSecret,
  innerRequest, openResponse, paddedLength, sealRequest, setupBaseS,
} from "../src/ohttp.js";
import { Seal, Sealer } from "../src/sealed.js";
import { MemoryStore } from "../src/storage/memory.js";
import { parseStored } from "../src/stored.js";
import { Response, type Transport } from "../src/transport.js";
import { unpack } from "../src/wire.js";
import { checkSealed, fromHex, toHex } from "./conformance_check.js";
import { bhttpResponse, cat, extractContent, gatewayKey, keysDoc, sealAnswer, suite, te } from "./gateway.js";
import { toyRegistry, vectors } from "./support.js";


test("HPKE base mode reproduces RFC 9180 A.1.1 (X25519, HKDF-SHA256, AES-128-GCM)", async () => {
  const ctx = await setupBaseS(fromHex("3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d"),
    fromHex("4f6465206f6e2061204772656369616e2055726e"),
    fromHex("52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736"));
  assert.equal(toHex(ctx.enc), "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431");
  assert.equal(toHex(ctx.key), "4531685d41d65f03dc48f6b8302c05b0");
  assert.equal(toHex(ctx.baseNonce), "56d890e5accaaf011cff4b7d");
  assert.equal(toHex(ctx.exporterSecret), "45ff1c2e220db587171952c0592d5f5ebe103f1561a2614e38f2ffd47e99e3f8");
  const pt = fromHex("4265617574792069732074727574682c20747275746820626561757479");
  assert.equal(toHex(await aeadSeal(ctx.key, ctx.baseNonce, te.encode("Count-0"), pt)),
    "f938558b5d72f1a23810b4be2ab4f84331acc02fc97babc53a52ae8218a355a96d8770ac83d07bea87e13c512a");
  assert.equal(toHex(exportSecret(ctx.exporterSecret, new Uint8Array(0), 32)),
    "3853fe2b4035195a573ffc53856e77058e15d9ea064de3e59f4961d0095250ee");
  assert.equal(toHex(exportSecret(ctx.exporterSecret, te.encode("TestContext"), 32)),
    "e9e43065102c3836401bed8c3c3c75ae46be1639869391d62c61f1ec7af54931");
});

test("RFC 9458 Appendix A: the encapsulated request and response, byte for byte", async () => {
  const config = "01002031e1f05a740102115220e9af918f738674aec95f54db6e04eb705aae8e79815500080001000100010003";
  const [c] = decodeKeyConfigs(fromHex((config.length / 2).toString(16).padStart(4, "0") + config));
  assert.deepEqual([c.keyId, c.kemId, c.suites], [1, 32, [[1, 1], [1, 3]]]);
  const s = await sealRequest(c, fromHex("00034745540568747470730b6578616d706c652e636f6d012f"),
    fromHex("bc51d5e930bda26589890ac7032f70ad12e4ecb37abb1b65b1256c9c48999c73"));
  assert.equal(toHex(s.envelope), "010020000100014b28f881333e7c164ffc499ad9796f877f4e1051ee6d31bad19dec96c208b472"
    + "6374e469135906992e1268c594d2a10c695d858c40a026e7965e7d86b83dd440b2c0185204b4d63525");
  assert.equal(toHex(s.secret), "62d87a6ba569ee81014c2641f52bea36");
  const answer = await openResponse(s, fromHex("c789e7151fcba46158ca84b04464910d86f9013e404feea014e7be4a441f234f857fbd"));
  assert.equal(toHex(answer), "0140c8");
  assert.equal(decodeResponse(answer).status, 200);
});

test("the sealed conformance vectors (the checks a browser page runs too)", async () => {
  assert.deepEqual(await checkSealed(vectors("sealed.json")), []);
});

// --- a gateway in the test, on @hpke/core (its helpers: test/gateway.ts) ----------------------------------
class FakeGateway implements Transport {
  keys: Array<{ config: KeyConfig; priv: CryptoKey }> = [];
  posts: Array<{ path: string; headers: Record<string, string>; body: Uint8Array }> = [];
  batches: Uint8Array[] = [];
  failNext: Response[] = [];
  down: Response | null = null;   // answer every POST with this while set

  async request(method: string, path: string, body?: Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
    if (method === "GET" && path === GATEWAY_PATH) return new Response(200, { "content-type": KEYS_TYPE }, keysDoc(this.keys.map((k) => k.config)));
    this.posts.push({ path, headers, body: body as Uint8Array });
    const fail = this.down ?? this.failNext.shift();
    if (fail) return fail;
    const env = body as Uint8Array;
    const key = this.keys.find((k) => k.config.keyId === env[0]);
    if (!key) return new Response(400, { "content-type": "application/problem+json" }, te.encode(JSON.stringify({ type: KEY_PROBLEM_TYPE })));
    const info = cat(te.encode("message/bhttp request"), new Uint8Array([0]), env.subarray(0, 7));
    const enc = env.slice(7, 39);
    const rctx = await suite.createRecipientContext({ recipientKey: key.priv, enc: enc.buffer, info: info.buffer });
    const message = new Uint8Array(await rctx.open(env.slice(39).buffer));
    // the batch: content of the known-length request (control data and one field, as innerRequest writes)
    const batch = extractContent(message);
    this.batches.push(batch);
    const secret = new Uint8Array(await rctx.export(te.encode("message/bhttp response").buffer, 16));
    const ack = te.encode(JSON.stringify({ accepted: (unpack(batch) as { reports: unknown[] }).reports.length, duplicate: false }));
    return new Response(200, { "content-type": "message/ohttp-res" }, await sealAnswer(secret, enc, bhttpResponse(200, "application/json", ack)));
  }
}

const REGISTRY = toyRegistry([{ name: "crash", reportsPerWindow: 9 }]);

function client(transport: Transport, seal: ReturnType<typeof Seal.gateway>, store = new MemoryStore()) {
  return new TelemetryClient({ transport, registry: REGISTRY, store, seal, strict: true, flushOnHide: false,
    maxBatchAge: 0.01, retry: { initial: 0.01, maximum: 0.05, flushInterval: 0.01 } });
}

test("@hpke/core opens what this SDK seals, on random keys (and the exports agree)", async () => {
  for (let i = 0; i < 20; i++) {
    const key = await gatewayKey(i);
    const msg = crypto.getRandomValues(new Uint8Array(1 + (i * 97) % 900));
    const s = await sealRequest(key.config, msg);
    const info = cat(te.encode("message/bhttp request"), new Uint8Array([0]), s.envelope.subarray(0, 7));
    const rctx = await suite.createRecipientContext({ recipientKey: key.priv, enc: s.enc.slice().buffer, info: info.buffer });
    assert.deepEqual(new Uint8Array(await rctx.open(s.envelope.slice(39).buffer)), msg);
    assert.deepEqual(new Uint8Array(await rctx.export(te.encode("message/bhttp response").buffer, 16)), s.secret);
  }
});

test("padding: every usual batch is one envelope size", () => {
  for (const n of [10, 300, 900]) assert.equal(innerRequest(new Uint8Array(n)).length, 1024);
  assert.equal(innerRequest(new Uint8Array(2000)).length, 4096);
  assert.equal(paddedLength(3 << 20), 3 << 20);
});

test("a sealed client posts only envelopes, the same bytes on every retry, and settles on the inner answer", async () => {
  const gw = new FakeGateway();
  gw.keys = [await gatewayKey(3)];
  gw.failNext = [new Response(503, { "retry-after": "0", "content-type": "application/problem+json" },
    te.encode(JSON.stringify({ type: "https://ldp-telemetry.dev/problems/overloaded", status: 503 })))];
  const store = new MemoryStore();
  const c = client(gw, Seal.gateway(), store);
  await c.ready;
  c.report("crash", "a");
  assert.equal(await c.flush(5), true);
  const stats = await c.stats();
  assert.equal(stats.reports_acked, 1);
  assert.deepEqual(gw.posts.map((p) => p.path), [GATEWAY_PATH, GATEWAY_PATH]);
  assert.deepEqual(toHex(gw.posts[0].body), toHex(gw.posts[1].body));        // the retry: the same envelope
  assert.deepEqual(gw.posts[0].headers, { Accept: "message/ohttp-res", "Content-Type": "message/ohttp-req" });
  assert.equal(gw.posts[0].body.length, 1024 + 55);
  assert.equal(gw.batches.length, 1);
  await c.close(1);
});

test("a rotated key is refetched and the batch sealed again, once; a pinned key is never fetched", async () => {
  const gw = new FakeGateway();
  const old = await gatewayKey(1);
  gw.keys = [old];
  const c = client(gw, Seal.gateway());
  await c.ready;
  c.report("crash", "a");
  assert.equal(await c.flush(5), true);
  gw.keys = [await gatewayKey(2)];
  c.report("crash", "b");
  assert.equal(await c.flush(5), true);
  assert.deepEqual(gw.posts.map((p) => p.body[0]), [1, 1, 2]);
  assert.equal(gw.batches.length, 2);
  await c.close(1);
  // pinned to a key the gateway no longer holds: dropped, never sent in plain, never fetched
  const pinned = new FakeGateway();
  pinned.keys = [await gatewayKey(9)];
  const p = client(pinned, Seal.gateway({ keyConfig: keysDoc([old.config]) }));
  await p.ready;
  p.report("crash", "a");
  assert.equal(await p.flush(1), false);
  assert.equal((await p.stats()).reports_rejected, 1);
  assert.equal(pinned.posts.length, 1);
  await p.close(0);
});

test("shuffler mode settles on the 202 acknowledgement only", async () => {
  const gw = new FakeGateway();
  gw.keys = [await gatewayKey(4)];
  const stored: Uint8Array[] = [];
  const shuffler: Transport = {
    async request(_m, _p, body) {
      stored.push(body as Uint8Array);
      if (stored.length === 1) return new Response(200, { "content-type": "text/html" }, te.encode("<html>portal</html>"));
      return new Response(202, { "content-type": "application/json" }, te.encode('{"stored": true, "duplicate": false}'));
    },
  };
  const c = client(gw, Seal.shuffler("https://shuffler.example/v1/envelopes", { transport: shuffler }));
  await c.ready;
  c.report("crash", "a");
  assert.equal(await c.flush(5), true);
  assert.equal(stored.length, 2);
  assert.equal(toHex(stored[0]), toHex(stored[1]));
  assert.equal(gw.posts.length, 0);                        // nothing went to the collector
  const back = await gw.request("POST", GATEWAY_PATH, stored[0], {});   // what the shuffler forwards opens
  assert.equal(back.status, 200);
  await c.close(1);
});

test("the outbox entry holds the batch and its envelope, so a restart resends the same bytes", async () => {
  const gw = new FakeGateway();
  gw.keys = [await gatewayKey(5)];
  const store = new MemoryStore();
  gw.down = new Response(503, {}, new Uint8Array(0));   // down for the whole first flush
  const c = client(gw, Seal.gateway(), store);
  await c.ready;
  c.report("crash", "a");
  assert.equal(await c.flush(0.2), false);
  await c.close(0);
  const entry = await store.outbox.claim(Date.now() / 1000 + 1000);
  assert.ok(entry);
  const { body, sealed } = parseStored(entry.body);
  assert.ok(sealed && toHex(sealed.envelope) === toHex(gw.posts[0].body));
  assert.equal((unpack(body) as { reports: unknown[] }).reports.length, 1);
  await store.outbox.release(entry);
  gw.down = null;
  const again = client(gw, Seal.gateway(), store);
  await again.ready;
  assert.equal(await again.flush(5), true);
  assert.equal(toHex(gw.posts[gw.posts.length - 1].body), toHex(sealed.envelope));
  await again.close(0);
});

test("Seal options are checked when the app starts", () => {
  assert.throws(() => Seal.relay(""), /URL/);
  assert.throws(() => Seal.gateway({ keyConfig: "%%%" }), /base64/);
  assert.throws(() => Seal.gateway({ keyConfig: new Uint8Array([0, 3, 1, 2, 3]) }));
  assert.equal(new Sealer("shuffler", "https://s.example/", null, new FakeGateway()).shuffler, true);
});
