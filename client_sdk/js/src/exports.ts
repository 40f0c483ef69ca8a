/**
 * What both entries (index.ts for browsers, node.ts for Node) export besides `TelemetryClient`.
 * Test and inspection helpers (`MemoryStore`, `summarise`) are in the Node entry only: the
 * browser bundle carries what a page needs (its size budget: bench/js_sdk.py).
 */

export { COUNTERS, type ClientOptions, type Platform, ReportError } from "./client.js";
export type { Accounts, Book, Charge, MetricAccount, Refusal } from "./ledger.js";
export type { DeviceClock, ElapsedClock, Reading } from "./deviceClock.js";
export { type DeviceStore, type Outbox, type OutboxLimits, DEFAULT_OUTBOX_LIMITS, StateError } from "./state.js";
export { type RetryPolicy, type Transport, DEFAULT_RETRY, FetchTransport, Response, TransportError } from "./transport.js";
export { type Found, type Metric, type Registry } from "./metrics.js";
export { domainValues, fileDomains, loadRegistry, type PublishedDomain, RegistryError } from "./registry.js";
