/**
 * A child process of state.test.ts: `node charge_worker.js DIR N [RPW [stop]]` commits N
 * one-report charges of metric "m" (ε = 1, up to RPW = 1,000 per window) under a [device] cap
 * of 10 per window to the ledger of state directory DIR, one transaction each, and prints how
 * many were charged. With `stop`, the process SIGSTOPs itself inside its first transaction,
 * holding the ledger's lock with the book read (the elapsed clock is read there), until the
 * test sends SIGCONT.
 */

import type { Charge } from "../src/ledger.js";
import { DeviceLedger } from "../src/state.js";
import { FileStore } from "../src/storage/node.js";

const [dir, n, rpw, stop] = process.argv.slice(2);
// run without arguments (a test runner collecting every file under test/): nothing to do
const ledger = dir === undefined ? null : new DeviceLedger(await new FileStore(dir).open());
const charge: Charge = {
  metric: "m", fingerprint: "a".repeat(32), day: 20_000, epsilon: 1, epsilonLongitudinal: null, digest: null,
  reportsPerWindow: Number(rpw ?? 1000), lifetimeBudget: null, deviceWindowBudget: 10, deviceLifetimeBudget: null,
};
let charged = 0;
for (let i = 0; ledger !== null && i < Number(n); i++) {
  const { outcomes } = await ledger.commit([charge], [], () => {
    if (stop === "stop" && i === 0) process.kill(process.pid, "SIGSTOP"); // paused holding the lock
    return ["boot:worker", 1000];
  });
  if (outcomes[0] === null) charged += 1;
}
if (ledger !== null) process.stdout.write(`${charged}\n`);
