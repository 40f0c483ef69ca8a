/**
 * How batches reach the collector: `fetch` (browsers, and Node ≥ 18), and the retry rules of
 * the Python SDK's `client_sdk/transport.py` and `uploader.py`.
 *
 * A transport sends one request and returns the response, or throws `TransportError` when no
 * HTTP response came back. Only fixed headers go on the wire (Accept, Content-Type): no cookie
 * (`credentials: "omit"`), no referrer, no client identifier. In browsers a batch POST uses
 * `keepalive: true`, so a batch sent while the page is being hidden or closed still arrives; the
 * browser adds its own headers, which no page can remove (docs/privacy.md, "What leaves the
 * device"). Node apps send through node:http instead (httpNode.ts), every line the SDK's.
 */

export const REPORTS_PATH = "/v1/reports";
export const REGISTRY_PATH = "/v1/registry";
/** A file domain's values, one per line (`fetch` decodes the gzip the collector sends). */
export const DOMAINS_PATH = "/v1/registry/domains/";
export const MSGPACK = "application/msgpack";
export const DEFAULT_TIMEOUT = 10;
/** Browsers refuse keepalive bodies beyond 64 KiB in flight; larger batches go without it. */
const KEEPALIVE_MAX_BYTES = 60 * 1024;

/** No HTTP response came back (connection refused or dropped, timeout, CORS refusal). */
export class TransportError extends Error {
  override name = "TransportError";
}

/** An HTTP response: status, headers (lower-case names) and body. */
export class Response {
  constructor(readonly status: number, readonly headers: Record<string, string>, readonly body: Uint8Array) {}

  /** The body parsed as JSON (undefined when it is not JSON). */
  json(): unknown {
    try {
      return JSON.parse(new TextDecoder().decode(this.body));
    } catch {
      return undefined;
    }
  }

  /** The slug of an RFC 9457 problem document's `type` (e.g. "fingerprint-mismatch"). */
  get problemType(): string | null {
    const doc = this.json() as { type?: unknown } | undefined;
    if (doc === null || typeof doc !== "object" || typeof doc.type !== "string") return null;
    return doc.type.slice(doc.type.lastIndexOf("/") + 1);
  }

  /** Seconds to wait from `Retry-After` (delay-seconds, or an HTTP-date: it starts with a day name)
   *  or the `retry_after` member; any other value is ignored (conformance/vectors/delivery.json). */
  retryAfter(nowSeconds: number): number | null {
    const raw = this.headers["retry-after"];
    if (raw !== undefined) {
      const text = raw.trim();
      if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
      const when = /^[a-z]{3}/i.test(text) ? Date.parse(text) : NaN;   // Date.parse alone reads "-1" as 2001
      if (Number.isFinite(when)) return Math.max(0, when / 1000 - nowSeconds);
    }
    const after = (this.json() as { retry_after?: number } | null | undefined)?.retry_after;
    return Number.isFinite(after) ? Math.max(0, after as number) : null;   // isFinite: numbers only
  }
}

/** Interface: one request, one response (throws TransportError without one). */
export interface Transport {
  request(method: string, path: string, body?: Uint8Array, headers?: Record<string, string>): Promise<Response>;
}

export function postBatch(t: Transport, body: Uint8Array): Promise<Response> {
  return t.request("POST", REPORTS_PATH, body, { Accept: "application/json", "Content-Type": MSGPACK });
}

export function getRegistry(t: Transport): Promise<Response> {
  return t.request("GET", REGISTRY_PATH, undefined, { Accept: "application/json" });
}

/** The transport sealed delivery gives a relay's or shuffler's URL: `fetch`'s; the Node entry
 *  installs node:http's (httpNode.ts), as its platform's `http` for the collector. */
export const http = { make: (endpoint: string, timeout: number): Transport => new FetchTransport(endpoint, timeout) };

/** HTTP through the platform's `fetch`. */
export class FetchTransport implements Transport {
  private readonly prefix: string;

  constructor(readonly endpoint: string, private readonly timeout: number = DEFAULT_TIMEOUT) {
    const url = new URL(endpoint);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`endpoint ${JSON.stringify(endpoint)} must be an http:// or https:// URL`);
    }
    this.prefix = endpoint.replace(/\/+$/, "");
  }

  async request(method: string, path: string, body?: Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.timeout * 1000);
    try {
      const resp = await fetch(this.prefix + path, {
        method, headers, body: body as BodyInit | undefined, signal: controller.signal, credentials: "omit", cache: "no-store",
        referrerPolicy: "no-referrer", // the page's address is not the collector's business
        redirect: "manual", // a redirect is not the collector's answer: the batch is kept and retried
        keepalive: body !== undefined && body.length <= KEEPALIVE_MAX_BYTES,
      });
      const data = new Uint8Array(await resp.arrayBuffer());
      const hdrs: Record<string, string> = {};
      resp.headers.forEach((v, k) => { hdrs[k] = v; }); // a Headers object's names are lower-case already
      return new Response(resp.status, hdrs, data);
    } catch (exc) {
      throw new TransportError(`${this.endpoint}: ${(exc as Error).name}: ${(exc as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }
}

// --- retry rules (client_sdk/uploader.py) ------------------------------------------------------

/**
 * Exponential backoff with jitter; the server's `Retry-After` wins when present. Attempt k waits
 * d/2 + U(0, d/2) seconds, d = min(maximum, initial·multiplier^(k−1)); while the app flushes,
 * waits are capped at `flushInterval`.
 */
export interface RetryPolicy {
  initial: number;
  maximum: number;
  multiplier: number;
  maxRetryAfter: number;
  flushInterval: number;
}

export const DEFAULT_RETRY: RetryPolicy = { initial: 1, maximum: 300, multiplier: 2, maxRetryAfter: 3600, flushInterval: 1 };

/** A uniform double in [0, 1) from the CSPRNG (jitter: like every SDK draw, never Math.random). */
function uniform(): number {
  const w = crypto.getRandomValues(new Uint32Array(2));
  return (w[0] * 2 ** 21 + (w[1] >>> 11)) / 2 ** 53;
}

export function retryDelay(policy: RetryPolicy, attempt: number, retryAfter: number | null): number {
  if (retryAfter !== null) return Math.min(Math.max(retryAfter, 0), policy.maxRetryAfter);
  const nominal = Math.min(policy.maximum, policy.initial * policy.multiplier ** Math.max(0, attempt - 1));
  return nominal / 2 + uniform() * nominal / 2;
}

/** Network errors aside: 408, 429 and 5xx are retried; every other status is final. */
export function isRetryable(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status <= 599);
}

/**
 * Whether an answer is the collector's: its JSON ack (200), or a problem document (4xx). A proxy,
 * a captive portal or a wrong endpoint path answers otherwise (an HTML 200 or 404, a redirect);
 * such an answer neither deletes a batch as acknowledged nor drops it as rejected. 413 counts as
 * the collector's whoever sent it: a smaller batch is the remedy.
 */
export function fromCollector(r: Response): boolean {
  if (r.status === 200) {
    const doc = r.json() as Record<string, unknown> | undefined;
    return doc !== null && typeof doc === "object" && !Array.isArray(doc) && "accepted" in doc;
  }
  if (r.status >= 400 && r.status <= 499) return r.status === 413 || r.problemType !== null;
  return r.status >= 500;
}
