/**
 * The browser entry of the SDK (package.json `exports`, condition "browser" and default):
 * device state in IndexedDB under the Web Locks API, batches sent with `fetch(..., {keepalive:
 * true})`, and a flush when the page is hidden (`visibilitychange`) or left (`pagehide`).
 * Node apps get `node.ts` instead (files under a state directory), by the same import.
 */

import { type ClientOptions, type Platform, TelemetryClient as Core } from "./client.js";
import { openBrowserStore } from "./storage/browser.js";

export const browserPlatform: Platform = {
  chargeEarly: true,
  openStore: (options) => openBrowserStore(options.namespace, options.outboxLimits), // namespace: "default" unless given
  onHide(flush) {
    if (typeof addEventListener !== "function" || typeof document === "undefined") return () => undefined;
    const onVisibility = () => { if (document.visibilityState === "hidden") flush(); };
    document.addEventListener("visibilitychange", onVisibility);
    addEventListener("pagehide", flush);
    return () => {
      document.removeEventListener("visibilitychange", onVisibility);
      removeEventListener("pagehide", flush);
    };
  },
};

/** The SDK for web pages: `new TelemetryClient({endpoint, namespace?})`. */
export class TelemetryClient extends Core {
  constructor(options: ClientOptions) {
    super(options, browserPlatform);
  }
}

export * from "./exports.js";
