/**
 * Large domains as the collector publishes them (conformance/vectors/domains.json): a numbered
 * domain ({ids}) maps ids without any list; a file domain ({file, size, sha256}) takes its values
 * from the domain text, checked against sha256, fetched once from /v1/registry/domains/{name} and
 * cached by digest.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { TelemetryClient, type Platform } from "../src/client.js";
import { domainValues, fileDomains, loadRegistry, RegistryError } from "../src/registry.js";
import { MemoryStore } from "../src/storage/memory.js";
import { Response, type Transport } from "../src/transport.js";
import { unpack } from "../src/wire.js";
import { json, vectors } from "./support.js";

const V = vectors("domains.json");
const SECRET = new Uint8Array(32);
const noPlatform: Platform = {
  openStore: async () => { throw new Error("tests pass a store"); },
  onHide: () => () => undefined,
};

function published() {
  return fileDomains(V.registry);
}

test("the published registry names its file domains and their digests", () => {
  assert.deepEqual(published().map((d) => [d.name, d.size]), [["app", 12]]);
  const metrics = V.registry.metrics as any[];
  assert.deepEqual(metrics.find((m) => m.name === "app_id").categories, { ids: 1000 });
  assert.ok(JSON.stringify(V.registry).length < 4000); // no values inline
});

test("every lookup of the vectors: a numbered and a file domain", () => {
  const [d] = published();
  const reg = loadRegistry(V.registry, V.fingerprints, undefined, { app: domainValues(V.domain_texts.app, d) });
  for (const { metric, value, index } of V.lookups) {
    const found = reg.get(metric)!.lookup(value, SECRET, 20_000);
    assert.equal(found === null ? null : found.index, index, `${metric} ${JSON.stringify(value)}`);
  }
});

test("a domain text that is not the published one is refused", () => {
  const [d] = published();
  assert.throws(() => domainValues(V.domain_texts.app.replace("beta", "bets"), d), RegistryError);
  assert.throws(() => domainValues(V.domain_texts.app + "extra\n", d), RegistryError);
  assert.throws(() => loadRegistry(V.registry), /no domain list/); // file domain without its values
});

class DomainCollector implements Transport {
  readonly gets: string[] = [];
  readonly reports: any[] = [];
  async request(method: string, path: string, body?: Uint8Array): Promise<Response> {
    if (method === "GET") {
      this.gets.push(path);
      if (path === "/v1/registry") return json(200, V.registry);
      if (path === "/v1/registry/domains/app") return json(200, V.domain_texts.app);
      return json(404, {});
    }
    const doc = unpack(body as Uint8Array) as any;
    this.reports.push(...doc.reports);
    return json(200, { accepted: doc.reports.length, duplicate: false });
  }
}

test("the client fetches a file domain once, then reads it from its store", async () => {
  const store = new MemoryStore();
  for (let round = 0; round < 2; round++) {
    const collector = new DomainCollector();
    const c = new TelemetryClient({ transport: collector, store, flushOnHide: false, batchSize: 10 }, noPlatform);
    await c.ready;
    assert.equal(c.report("app_id", 1000), false);   // not an id of this domain
    if (round === 0) {
      assert.ok(c.report("app", "日本"));
      assert.ok(c.report("app_id", 999));
      assert.ok(await c.flush(5));
      assert.deepEqual(collector.reports.map((r) => r.m), ["app", "app_id"]);
    }
    assert.equal((await c.stats()).invalid_value, 1);
    await c.close(5);
    // the second client, on the same device store, reads the domain list from it
    assert.deepEqual(collector.gets, round === 0 ? ["/v1/registry", "/v1/registry/domains/app"] : ["/v1/registry"]);
  }
});
