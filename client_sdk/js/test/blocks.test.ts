/**
 * The block checks (docs/conformance.md, "Checks an SDK applies to a block"; src/protocols/checks.ts):
 * every inconsistent block of conformance/vectors/invalid_blocks.json is refused while the registry
 * loads, with an error naming the metric and the member the vector gives, and registry.json itself
 * loads.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { loadRegistry, RegistryError } from "../src/registry.js";
import { repoRoot, vectors } from "./support.js";

const REGISTRY = vectors("registry.json").registry;
const CASES: { reason: string; metric: string; field: string; block: unknown }[] = vectors("invalid_blocks.json").cases;

/** registry.json's document with one metric's encoder block replaced. */
function withBlock(metric: string, block: unknown): unknown {
  const doc = structuredClone(REGISTRY);
  doc.metrics.find((m: { name: string }) => m.name === metric).encoder = block;
  return doc;
}

test("registry.json loads: every published block passes the checks", () => {
  assert.equal(loadRegistry(REGISTRY).names.length, REGISTRY.metrics.length);
});

for (const c of CASES) {
  test(`invalid block refused: ${c.reason}`, () => {
    assert.throws(() => loadRegistry(withBlock(c.metric, c.block)), (e: Error) =>
      e instanceof RegistryError && e.message.startsWith(`metric ${c.metric}: field ${c.field}: `));
  });
}

test("a non-integer integer member is refused by name (4.5, a string, a boolean; JSON cannot tell 4.0 from 4)", () => {
  const theme = REGISTRY.metrics.find((m: { name: string }) => m.name === "theme").encoder;
  for (const [member, value] of [["d", 4.5], ["d", "5"], ["d", true], ["keep_threshold", 2 ** 32 + 1], ["keep_threshold", -1]]) {
    assert.throws(() => loadRegistry(withBlock("theme", { ...theme, [member as string]: value })),
      (e: Error) => e.message.startsWith(`metric theme: field ${member}: `), `${member} = ${value}`);
  }
});

test("a block without a member its protocol needs is refused by name (the schema's required members)", () => {
  const defs = JSON.parse(readFileSync(join(repoRoot(), "conformance", "encoder-block.schema.json"), "utf8")).$defs;
  for (const m of REGISTRY.metrics) {
    for (const member of defs[m.encoder.protocol].required.filter((k: string) => k !== "version" && k !== "protocol")) {
      for (const value of [undefined, null]) {
        const block = { ...m.encoder, [member]: value };
        if (value === undefined) delete block[member];
        assert.throws(() => loadRegistry(withBlock(m.name, block)), (e: Error) =>
          e instanceof RegistryError && e.message.startsWith(`metric ${m.name}: field ${member}: `), `${m.name} without ${member}`);
      }
    }
  }
});

test("a block over another domain than its metric's is refused (GRR at d = 2^40 for five themes: ε ≈ 28, not 2)", () => {
  for (const [metric, d] of [["theme", 2 ** 40], ["theme", 6], ["theme", 4], ["crash", 3], ["country", 41]] as const) {
    const block = { ...REGISTRY.metrics.find((m: { name: string }) => m.name === metric).encoder, d };
    assert.throws(() => loadRegistry(withBlock(metric, block)), (e: Error) =>
      e instanceof RegistryError && e.message.startsWith(`metric ${metric}: field d: `), `${metric} at d = ${d}`);
  }
});

test("a metric listed twice is refused, not overwritten by the later entry", () => {
  const doc = structuredClone(REGISTRY);
  const theme = doc.metrics.find((m: { name: string }) => m.name === "theme");
  doc.metrics.push({ ...structuredClone(theme), encoder: { ...theme.encoder } });
  assert.throws(() => loadRegistry(doc), (e: Error) => e instanceof RegistryError && e.message === "metric theme: field name: listed twice");
});
