/**
 * The Node end-to-end driver (tests/test_js_node.py), on the built package (`npm run build`):
 *
 *   node e2e/node-fleet.mjs fleet  ENDPOINT STATES_ROOT N     N devices, one state dir each
 *   node e2e/node-fleet.mjs shared ENDPOINT STATE_DIR TRIES GATE
 *       one device's budget (run it twice at once): once its state is loaded, writes GATE.<pid>
 *       and waits for the file GATE before reporting
 *
 * prints one JSON document (fleet.mjs's counts) on stdout.
 */

import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { TelemetryClient } from "../dist/node.js";
import { runFleet, spendShared } from "./fleet.mjs";

const [mode, endpoint, where, count, gateFile] = process.argv.slice(2);
const registry = await (await fetch(`${endpoint}/v1/registry`)).json();
let result;
if (mode === "fleet") {
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
