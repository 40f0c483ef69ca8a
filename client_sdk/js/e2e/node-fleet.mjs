/**
 * The Node end-to-end driver (tests/test_js_node.py), on the built package (`npm run build`):
 *
 *   node e2e/node-fleet.mjs fleet  ENDPOINT STATES_ROOT N     N devices, one state dir each
 *   node e2e/node-fleet.mjs shared ENDPOINT STATE_DIR TRIES   one device's budget (run it twice at once)
 *
 * prints one JSON document (fleet.mjs's counts) on stdout.
 */

import { join } from "node:path";

import { TelemetryClient } from "../dist/node.js";
import { runFleet, spendShared } from "./fleet.mjs";

const [mode, endpoint, where, count] = process.argv.slice(2);
const registry = await (await fetch(`${endpoint}/v1/registry`)).json();
let result;
if (mode === "fleet") {
  result = await runFleet({
    n: Number(count),
    makeClient: (j) => new TelemetryClient({ endpoint, registry, stateDir: join(where, `device-${j}`), flushOnHide: false }),
  });
} else {
  result = await spendShared({
    tries: Number(count),
    makeClient: () => new TelemetryClient({ endpoint, registry, stateDir: where, flushOnHide: false }),
  });
}
process.stdout.write(JSON.stringify(result) + "\n");
