/** The ledger charges exactly as the Python reference (conformance/vectors/ledger.json), and its
 *  file is the Python SDK's ledger.json format. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { type MetricAccount, apply, dumpLedger, parseLedger, LedgerError } from "../src/ledger.js";
import { chargeFromJson } from "./conformance_check.js";
import { vectors } from "./support.js";

/** An account as Python's to_json writes it: digests sorted, keys in any order. */
function normal(a: MetricAccount): unknown {
  const memo = Object.fromEntries(Object.keys(a.memo).sort().map((fp) => [fp, a.memo[fp].slice().sort()]));
  return Object.fromEntries(Object.entries({ ...a, memo }).sort());
}

test("every ledger vector: outcome and every account after every step", () => {
  const doc = vectors("ledger.json");
  assert.ok(doc.sequences.length >= 5);
  for (const seq of doc.sequences) {
    const accounts = new Map<string, MetricAccount>();
    seq.steps.forEach((step: any, i: number) => {
      const outcome = apply(accounts, chargeFromJson(step.charge));
      assert.equal(outcome, step.outcome, `${seq.label}, step ${i}`);
      const got = Object.fromEntries([...accounts].map(([k, v]) => [k, normal(v)]));
      const want = Object.fromEntries(Object.entries(step.accounts).map(([k, v]) => [k, normal(v as MetricAccount)]));
      assert.deepEqual(got, want, `${seq.label}, step ${i}`);
    });
  }
});

test("the file round-trips and refuses what is not a ledger", () => {
  const doc = vectors("ledger.json");
  const accounts = new Map<string, MetricAccount>();
  for (const step of doc.sequences[1].steps) apply(accounts, chargeFromJson(step.charge));
  const text = dumpLedger(accounts, "tag");
  const back = parseLedger(text);
  assert.equal(back.generation, "tag");
  assert.deepEqual([...back.accounts].map(([k, v]) => [k, normal(v)]), [...accounts].map(([k, v]) => [k, normal(v)]));
  assert.equal(JSON.parse(text).format, "ldpt-ledger");
  for (const bad of ["{", "[]", '{"format":"x"}', '{"format":"ldpt-ledger","version":99,"metrics":{}}',
    '{"format":"ldpt-ledger","version":1,"metrics":{"m":{"window":"2024-01-01","window_reports":"1"}}}']) {
    assert.throws(() => parseLedger(bad, "ledger.json"), LedgerError, bad);
  }
});

test("books written by the Python SDK parse to the same accounts", () => {
  for (const seq of vectors("ledger.json").sequences) {
    const last = seq.steps[seq.steps.length - 1].accounts; // MetricAccount.to_json() of each metric
    const text = JSON.stringify({ format: "ldpt-ledger", version: 1, generation: "py", metrics: last });
    const { accounts, generation } = parseLedger(text);
    assert.equal(generation, "py");
    assert.deepEqual(Object.fromEntries([...accounts].map(([k, v]) => [k, normal(v)])),
      Object.fromEntries(Object.entries(last).map(([k, v]) => [k, normal(v as MetricAccount)])));
  }
});
