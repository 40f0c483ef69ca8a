/**
 * The Node end-to-end driver (tests/test_js_node.py), on the built package (`npm run build`):
 *
 *   node e2e/node-fleet.mjs fleet  ENDPOINT STATES_ROOT N     N devices, one state dir each
 *   node e2e/node-fleet.mjs shared ENDPOINT STATE_DIR TRIES GATE
 *       one device's budget (run it twice at once): once its state is loaded, writes GATE.<pid>
 *       and waits for the file GATE before reporting
 *   node e2e/node-fleet.mjs sealed ENDPOINT STATES_ROOT N [RELAY_URL]
 *       as fleet, every device sending sealed batches (Seal.gateway(), or Seal.relay(RELAY_URL))
 *   node e2e/node-fleet.mjs outage ENDPOINT STATE_DIR REGISTRY_JSON GATE
 *       the collector is down: report, flush (fails), write GATE.down, wait for GATE, flush again
 *   node e2e/node-fleet.mjs clock ENDPOINT STATE_DIR OFFSETS_JSON
 *       issue 26 §1: 91 reports of "vote", 15 real minutes apart (injected clocks), the wall
 *       clock at today + OFFSETS[i % length] days; each report flushed (charged) at its reading
 *
 * prints one JSON document (fleet.mjs's counts) on stdout.
 */

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { TelemetryClient } from "../dist/node.js";
import { Seal } from "../dist/sealed.js";
import { runFleet, spendShared } from "./fleet.mjs";

const [mode, endpoint, where, count, gateFile] = process.argv.slice(2);
const registry = mode === "outage" ? JSON.parse(readFileSync(count, "utf8"))
  : await (await fetch(`${endpoint}/v1/registry`)).json();
let result;
if (mode === "outage") {
  const client = new TelemetryClient({ endpoint, registry, stateDir: where, flushOnHide: false,
    retry: { initial: 0.05, maximum: 0.2 } });
  await client.ready;
  client.report("theme", "dark");
  const during = await client.flush(0.5);
  writeFileSync(`${gateFile}.down`, "");
  while (!existsSync(gateFile)) await new Promise((r) => setTimeout(r, 10));
  const after = await client.flush(30);
  result = { during, after, ...(await client.stats()) };
} else if (mode === "clock") {
  const offsets = JSON.parse(count);
  const today = 20_000 * 86_400 + 9 * 3600;
  let real = 0; // seconds of real time since the first reading
  let wall = today;
  const client = new TelemetryClient({ endpoint, registry, stateDir: where, flushOnHide: false,
    clock: () => wall, elapsedClock: () => ["boot:e2e-clock", 1000 + Math.floor(real)],
    retry: { initial: 0.05, maximum: 0.2 } });
  await client.ready;
  for (let i = 0; i < 91; i++) {
    wall = today + real + offsets[i % offsets.length] * 86_400;
    client.report("vote", true);
    await client.flush(10);
    real += 900;
  }
  result = await client.stats();
  await client.close(5);
} else if (mode === "sealed") {
  const seal = gateFile ? Seal.relay(gateFile) : Seal.gateway();
  result = await runFleet({
    n: Number(count),
    makeClient: (j) => new TelemetryClient({ endpoint, registry, stateDir: join(where, `device-${j}`), flushOnHide: false, seal }),
  });
} else if (mode === "fleet") {
  result = await runFleet({
    n: Number(count),
    makeClient: (j) => new TelemetryClient({ endpoint, registry, stateDir: join(where, `device-${j}`), flushOnHide: false }),
  });
} else {
  const gate = new Promise((go) => {
    const poll = setInterval(() => { if (existsSync(gateFile)) { clearInterval(poll); go(); } }, 10);
  });
  result = await spendShared({
    tries: Number(count), gate,
    makeClient: () => {
      const client = new TelemetryClient({ endpoint, registry, stateDir: where, flushOnHide: false });
      client.ready.then(() => writeFileSync(`${gateFile}.${process.pid}`, ""));
      return client;
    },
  });
}
process.stdout.write(JSON.stringify(result) + "\n");
