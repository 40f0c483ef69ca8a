/**
 * A child process of exit.test.ts: `node exit_child.js ENDPOINT STATE_DIR` reports one value
 * and ends without flush() or close(): the Node entry's beforeExit hook must send it.
 * Run without arguments (a test runner collecting every file under test/) it does nothing.
 */

import { TelemetryClient } from "../src/node.js";
import { vectors } from "./support.js";

const [endpoint, stateDir] = process.argv.slice(2);
if (endpoint !== undefined) {
  const client = new TelemetryClient({ endpoint, stateDir, registry: vectors("registry.json").registry });
  client.report("crash", true);
}
