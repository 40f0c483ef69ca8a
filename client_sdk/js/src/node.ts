/**
 * The Node entry of the SDK (package.json `exports`, condition "node"): device state in a
 * directory (`stateDir`, or $LDPT_STATE_DIR) — files replaced atomically under a lock file —
 * and a flush when the process is about to exit on its own (`beforeExit`).
 */

import { type ClientOptions, type Platform, TelemetryClient as Core } from "./client.js";
import { StateError } from "./state.js";
import { FileStore } from "./storage/node.js";

/** One `beforeExit` listener for every client of the process (no listener-count warning). */
const exitHooks = new Set<() => void>();
const flushAll = () => { for (const flush of exitHooks) flush(); };

export const nodePlatform: Platform = {
  async openStore(options) {
    const dir = options.stateDir ?? process.env.LDPT_STATE_DIR;
    if (!dir) throw new StateError("give stateDir (where the client secret and privacy ledger live), or store");
    return new FileStore(dir, options.outboxLimits).open();
  },
  onHide(flush) {
    if (!exitHooks.size) process.on("beforeExit", flushAll);
    exitHooks.add(flush);
    return () => {
      exitHooks.delete(flush);
      if (!exitHooks.size) process.off("beforeExit", flushAll);
    };
  },
};

/** The SDK for Node apps: `new TelemetryClient({endpoint, stateDir})`. */
export class TelemetryClient extends Core {
  constructor(options: ClientOptions) {
    super({ ...options, endpoint: options.endpoint ?? process.env.LDPT_ENDPOINT }, nodePlatform);
  }
}

export { FileStore } from "./storage/node.js";
export { MemoryStore } from "./storage/memory.js";
export { summarise } from "./ledger.js";
export * from "./exports.js";
