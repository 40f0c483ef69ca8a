/** The ledger charges exactly as the Python reference (conformance/vectors/ledger.json), and its
 *  file is the Python SDK's ledger.json format. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { type MetricAccount, Book, apply, dumpLedger, parseLedger, LedgerError } from "../src/ledger.js";
import { checkLedger, chargeFromJson } from "./conformance_check.js";
import { vectors } from "./support.js";

/** An account as Python's to_json writes it: digests sorted, keys in any order. */
function normal(a: MetricAccount): unknown {
  const memo = Object.fromEntries(Object.keys(a.memo).sort().map((fp) => [fp, a.memo[fp].slice().sort()]));
  return Object.fromEntries(Object.entries({ ...a, memo }).sort());
}

test("every ledger vector: outcome, every account and the device clock after every step", () => {
  const doc = vectors("ledger.json");
  assert.ok(doc.sequences.length >= 12 && doc.migrations.length >= 1);
  assert.deepEqual(checkLedger(doc), []);
});

test("the file round-trips and refuses what is not a ledger", () => {
  const doc = vectors("ledger.json");
  const accounts = new Book();
  for (const step of doc.sequences[1].steps) apply(accounts, chargeFromJson(step.charge), step.elapsed);
  const text = dumpLedger(accounts, "tag");
  const back = parseLedger(text);
  assert.equal(back.generation, "tag");
  assert.deepEqual([...back.accounts].map(([k, v]) => [k, normal(v)]), [...accounts].map(([k, v]) => [k, normal(v)]));
  assert.deepEqual(back.accounts.clock, accounts.clock);
  assert.equal(JSON.parse(text).format, "ldpt-ledger");
  assert.equal(JSON.parse(text).version, 2);
  for (const bad of ["{", "[]", '{"format":"x"}', '{"format":"ldpt-ledger","version":99,"metrics":{}}',
    '{"format":"ldpt-ledger","version":1,"metrics":{"m":{"window":"2024-01-01","window_reports":"1"}}}',
    '{"format":"ldpt-ledger","version":2,"metrics":{},"clock":{"window":"x"}}',
    '{"format":"ldpt-ledger","version":2,"metrics":{},"clock":{"window":1,"epochs":[{"id":"a","since":[1]}]}}']) {
    assert.throws(() => parseLedger(bad, "ledger.json"), LedgerError, bad);
  }
});

test("books written by the Python SDK parse to the same accounts", () => {
  for (const seq of vectors("ledger.json").sequences) {
    const step = seq.steps[seq.steps.length - 1];
    const last = step.accounts; // MetricAccount.to_json() of each metric
    const text = JSON.stringify({ format: "ldpt-ledger", version: 2, generation: "py", metrics: last, clock: step.clock });
    const { accounts, generation } = parseLedger(text);
    assert.equal(generation, "py");
    assert.equal(accounts.clock.window, step.clock.window);
    assert.deepEqual(Object.fromEntries([...accounts].map(([k, v]) => [k, normal(v)])),
      Object.fromEntries(Object.entries(last).map(([k, v]) => [k, normal(v as MetricAccount)])));
  }
});
