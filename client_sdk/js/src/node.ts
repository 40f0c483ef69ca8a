/**
 * The Node entry of the SDK (package.json `exports`, condition "node"): device state in a
 * directory (`stateDir`, or $LDPT_STATE_DIR) — files replaced atomically under a lock file —
 * and a flush when the process is about to exit on its own (`beforeExit`).
 */

import { readFileSync } from "node:fs";
import { uptime } from "node:os";

import { type ClientOptions, type Platform, TelemetryClient as Core } from "./client.js";
import { type Reading, realmElapsed } from "./deviceClock.js";
import { NodeHttpTransport } from "./httpNode.js";
import { StateError } from "./state.js";
import { FileStore } from "./storage/node.js";
import { http } from "./transport.js";

// every endpoint of a Node app goes through node:http, not fetch: the collector's (nodePlatform.http)
// and a relay's or shuffler's (sealed delivery builds it with http.make)
http.make = (endpoint, timeout) => new NodeHttpTransport(endpoint, timeout);

let bootEpoch: string | null | undefined;

/**
 * The device's elapsed clock in Node: on Linux the boot clock — os.uptime() (the kernel's
 * CLOCK_BOOTTIME, counting suspend) named by the kernel's boot id, shared by every process of
 * one boot and by the Python SDK (client_sdk.device_clock); elsewhere this process's monotonic
 * clock (os.uptime() there may be derived from the settable wall clock, so it is not used).
 */
export function nodeElapsed(): Reading {
  if (bootEpoch === undefined) {
    bootEpoch = null;
    if (process.platform === "linux") {
      try {
        const id = readFileSync("/proc/sys/kernel/random/boot_id", "ascii").trim();
        if (id) bootEpoch = `boot:${id}`;
      } catch {
        bootEpoch = null;
      }
    }
  }
  return bootEpoch === null ? realmElapsed() : [bootEpoch, Math.floor(uptime())];
}

/** One `beforeExit` listener for every client of the process (no listener-count warning). */
const exitHooks = new Set<() => void>();
const flushAll = () => { for (const flush of exitHooks) flush(); };

export const nodePlatform: Platform = {
  elapsed: nodeElapsed,
  http: NodeHttpTransport,
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
export { NodeHttpTransport, wireHeaders } from "./httpNode.js";
export { MemoryStore } from "./storage/memory.js";
export { summarise } from "./ledger.js";
export * from "./exports.js";
