/**
 * Node devices in shuffler mode (tests/test_shuffle_e2e.py, bench/shuffle_e2e.py), on the built
 * package (`npm run build`):
 *
 *   node e2e/node-shuffle.mjs SPEC_JSON
 *
 * SPEC_JSON is a file: {"shuffler": URL, "keyConfig": the base64 of the application/ohttp-keys
 * document the shuffler serves (the collector's), "registry": the collector's published registry,
 * "metric": name, "values": [one value per device], "concurrency": devices at once (default 50),
 * "envelopes": record each acknowledged envelope (default true), "failedFile": a file written when
 * a POST to the shuffler fails (it was down)}. Device j is its own Node
 * `TelemetryClient` (its own `MemoryStore`: secret, ledger and outbox), reports values[j] once,
 * sealed with `Seal.shuffler(URL + "/v1/envelopes")`, and flushes: one envelope per device. The
 * key configuration is pinned (`keyConfig`), as an app built with `ldpt keys config` would have
 * it: the devices make no request but their envelopes' POSTs, and nothing goes to the collector.
 *
 * Prints one JSON document: devices, flushed, reported, acked (the SDK's reports_acked),
 * duplicates, retries, refused, disabled reasons, latencies (seconds of each POST to the shuffler
 * until its answer), and (with "envelopes") each envelope the shuffler answered 202 to, as
 * [wall-clock seconds of the answer, base64 of the envelope's bytes] in the order answered.
 */

import { readFileSync, writeFileSync } from "node:fs";

import { FetchTransport, MemoryStore, TelemetryClient } from "../dist/node.js";
import { Seal } from "../dist/sealed.js";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const { shuffler, keyConfig, registry, metric, values } = spec;
const concurrency = spec.concurrency ?? 50;
const record = spec.envelopes ?? true;

/** The devices' one transport to the shuffler, keeping every envelope it acknowledged (202). */
const post = new FetchTransport(`${shuffler}/v1/envelopes`, 60);
const acknowledged = [];
const latencies = [];
const transport = {
  async request(method, path, body, headers) {
    const start = performance.now();
    let r;
    try {
      r = await post.request(method, path, body, headers);
    } catch (exc) {
      if (spec.failedFile) writeFileSync(spec.failedFile, ""); // the test knows a device found the shuffler down
      throw exc;
    }
    if (method === "POST") latencies.push((performance.now() - start) / 1000);
    if (record && method === "POST" && r.status === 202 && body !== undefined) {
      acknowledged.push([(performance.timeOrigin + performance.now()) / 1000, Buffer.from(body).toString("base64")]);
    }
    return r;
  },
};
const seal = Seal.shuffler(`${shuffler}/v1/envelopes`, { keyConfig, transport });

const out = { devices: 0, flushed: 0, reported: 0, acked: 0, duplicates: 0, retries: 0, refused: 0, disabled: [] };
let next = 0;
async function device(j) {
  const client = new TelemetryClient({ endpoint: shuffler, registry, store: new MemoryStore({ name: `device-${j}` }),
    flushOnHide: false, batchSize: 1, seal, retry: { initial: 0.05, maximum: 0.5 } });
  await client.ready;
  if (client.report(metric, values[j])) out.reported += 1;
  if (await client.flush(600)) out.flushed += 1;
  const stats = await client.stats();
  out.acked += stats.reports_acked;
  out.duplicates += stats.duplicates;
  out.retries += stats.retries;
  out.refused += stats.refused_window + stats.refused_lifetime + stats.refused_device_window + stats.refused_device_lifetime;
  if (stats.disabled_reason) out.disabled.push(stats.disabled_reason);
  await client.close(0);
  out.devices += 1;
}
async function worker() {
  while (next < values.length) await device(next++);
}
await Promise.all(Array.from({ length: concurrency }, worker));
out.latencies = latencies;
if (record) out.envelopes = acknowledged;
process.stdout.write(JSON.stringify(out) + "\n");
