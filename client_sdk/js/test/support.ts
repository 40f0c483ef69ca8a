/** Test helpers of the runtime tests: the conformance vectors, a fake collector, a toy registry. */

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import type { Found, Metric, Registry } from "../src/metrics.js";
import { Response, type Transport } from "../src/transport.js";
import { type WireValue, unpack } from "../src/wire.js";

/** The repository root (the directory holding conformance/vectors), found from this file
 * (source or compiled) upwards; client_sdk/ has a pyproject.toml of its own. */
export function repoRoot(): string {
  if (process.env.LDPT_REPO_ROOT) return process.env.LDPT_REPO_ROOT;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    try {
      readFileSync(join(dir, "conformance", "vectors", "registry.json"));
      return dir;
    } catch {
      dir = dirname(dir);
    }
  }
  throw new Error("repository root not found");
}

export function vectors(name: string): any {
  return JSON.parse(readFileSync(join(repoRoot(), "conformance", "vectors", name), "utf8"));
}

export function hex(h: string): Uint8Array {
  return Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
}

export function toHex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** A payload from the vectors' JSON ({"bin": hex} for bytes). */
export function wireFromJson(p: any): WireValue {
  if (Array.isArray(p)) return p.map(wireFromJson);
  if (p !== null && typeof p === "object" && "bin" in p) return hex(p.bin);
  return p;
}

/**
 * A toy registry for the client's own logic (delivery, budgets, state): categorical metrics
 * whose "encoder" sends the index unchanged. Never a privacy mechanism — the protocols are
 * js-core's and pinned by the conformance suite; these tests check what happens around them.
 */
export function toyRegistry(specs: Array<Partial<Metric> & { name: string; domain?: string[]; memo?: boolean }>,
  device: Registry["device"] = null): Registry {
  const metrics = new Map<string, Metric>();
  for (const s of specs) {
    const domain = s.domain ?? ["a", "b", "c"];
    metrics.set(s.name, {
      name: s.name, fingerprint: s.fingerprint ?? "f".repeat(32), epsilon: s.epsilon ?? 1,
      epsilonLongitudinal: s.memo ? (s.epsilonLongitudinal ?? 2) : null,
      reportsPerWindow: s.reportsPerWindow ?? 1, lifetimeEpsilon: s.lifetimeEpsilon ?? null,
      windowCharges: s.windowCharges ?? null,
      lookup(value: unknown): Found | null {
        const index = domain.indexOf(value as string);
        return index < 0 ? null : { key: value as string, index, clipped: false, digest: s.memo ? `d-${value}` : null };
      },
      encode: (found: Found) => found.index,
    });
  }
  return { get: (n) => metrics.get(n), device, names: [...metrics.keys()] };
}

export type Answer = { status: number; body?: unknown; headers?: Record<string, string> } | "drop";

/** An in-memory collector: records every body, answers from a script (then acks). */
export class FakeCollector implements Transport {
  readonly bodies: Uint8Array[] = [];
  readonly accepted = new Map<string, number>();
  script: Answer[] = [];

  async request(method: string, path: string, body?: Uint8Array): Promise<Response> {
    if (method === "GET") return json(404, { type: "https://ldp-telemetry.dev/problems/not-found" });
    this.bodies.push(body as Uint8Array);
    const next = this.script.shift();
    if (next === "drop") throw new (await import("../src/transport.js")).TransportError("connection reset");
    if (next !== undefined) return json(next.status, next.body, next.headers);
    const doc = unpack(body as Uint8Array) as { batch_id: Uint8Array; reports: Array<{ m: string }> };
    const id = toHex(doc.batch_id);
    const duplicate = this.accepted.has(id);
    this.accepted.set(id, doc.reports.length);
    return json(200, { accepted: doc.reports.length, duplicate });
  }

  /** Reports of acknowledged batches, counted once per batch id. */
  get reports(): number {
    let n = 0;
    for (const v of this.accepted.values()) n += v;
    return n;
  }
}

export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  const text = typeof body === "string" ? body : JSON.stringify(body ?? {});
  return new Response(status, headers, new TextEncoder().encode(text));
}

export function problem(status: number, slug: string, extra: Record<string, unknown> = {}): Answer {
  return { status, body: { type: `https://ldp-telemetry.dev/problems/${slug}`, status, title: slug, detail: slug, ...extra } };
}
