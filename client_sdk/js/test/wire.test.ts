/** Batch bytes equal the Python reference's (conformance/vectors/batches.json), and decode back. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { BATCH_ID_BYTES, batchReports, newBatchId, pack, packBatch, unpack } from "../src/wire.js";
import { hex, toHex, vectors, wireFromJson } from "./support.js";

test("every batch vector: the exact bytes, and back", () => {
  const doc = vectors("batches.json");
  assert.ok(doc.cases.length >= 5);
  for (const c of doc.cases) {
    const reports = c.reports.map((r: any) => ({ m: r.m, f: r.f, p: wireFromJson(r.p) }));
    const body = packBatch(reports, hex(c.batch_id));
    assert.equal(toHex(body), c.body);
    assert.deepEqual(batchReports(body), reports);
  }
});

test("integers and containers of every width round-trip", () => {
  const values = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1, -1, -32, -33,
    -128, -129, -32_768, -32_769, -(2 ** 31), -(2 ** 31) - 1, -(2 ** 53) + 1, true, false, null, "", "é".repeat(40),
    "x".repeat(70_000), new Uint8Array(300), Array.from({ length: 20 }, (_, i) => i), "y".repeat(200),
    new Uint8Array(200), new Uint8Array(70_000).fill(7), Array.from({ length: 70_000 }, (_, i) => i % 3)];
  for (const v of values) assert.deepEqual(unpack(pack(v)), v);
  const big: Record<string, number> = {};
  for (let i = 0; i < 20; i++) big[`k${i}`] = i;
  assert.deepEqual(unpack(pack(big)), big);
  assert.throws(() => pack(0.5));
  assert.throws(() => unpack(new Uint8Array([0x01, 0x02])), /trailing/);
  for (const b of [0xc1, 0xc7, 0xca, 0xcb, 0xd4, 0xd8]) assert.throws(() => unpack(Uint8Array.of(b, 0, 0, 0, 0, 0, 0, 0, 0)), /not used/);
});

test("batch ids are fresh random 16 bytes", () => {
  const a = newBatchId();
  const b = newBatchId();
  assert.equal(a.length, BATCH_ID_BYTES);
  assert.notDeepEqual(a, b);
});
