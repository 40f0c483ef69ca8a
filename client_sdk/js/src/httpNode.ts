/**
 * HTTP for Node apps over node:http / node:https, not `fetch`: Node's fetch (undici) adds
 * headers no caller can remove (`accept-language: *`, `sec-fetch-mode: cors`, `user-agent: node`,
 * `accept-encoding`, `pragma`, `cache-control`) — a fingerprint of the runtime beside ours. Here
 * every header line is written by `wireHeaders`, in the order every SDK uses
 * (client_sdk/transport.py `wire_headers`; docs/wire-format.md, "Request headers";
 * conformance/vectors/headers.json). Redirects are not followed (as `redirect: "manual"`), and a
 * gzip-encoded answer (a file domain's values) is decoded.
 */

import { Agent as HttpAgent, type IncomingMessage, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { gunzipSync } from "node:zlib";

import { DEFAULT_TIMEOUT, Response, type Transport, TransportError } from "./transport.js";

export const USER_AGENT = "ldpt-sdk";
/** Lines only `wireHeaders` writes: a caller's are ignored. */
const FIXED = new Set(["user-agent", "cache-control", "pragma", "host", "connection", "content-length"]);

/**
 * The exact header lines of a request, in order: `User-Agent: ldpt-sdk`, the request's own
 * (Accept, Accept-Encoding, Content-Type), `Cache-Control` and `Pragma: no-cache`, `Host`,
 * `Connection: keep-alive` and, with a body, `Content-Length` — the order the JVM's
 * HttpURLConnection writes, so every SDK sends the same bytes.
 */
export function wireHeaders(headers: Record<string, string>, authority: string, length?: number): Array<[string, string]> {
  const lines: Array<[string, string]> = [["User-Agent", USER_AGENT]];
  for (const [k, v] of Object.entries(headers)) if (!FIXED.has(k.toLowerCase())) lines.push([k, v]);
  lines.push(["Cache-Control", "no-cache"], ["Pragma", "no-cache"], ["Host", authority], ["Connection", "keep-alive"]);
  if (length !== undefined) lines.push(["Content-Length", String(length)]);
  return lines;
}

/** One keep-alive connection pool per endpoint; idle sockets never keep the process alive. */
export class NodeHttpTransport implements Transport {
  private readonly url: URL;
  private readonly prefix: string;
  private readonly agent: HttpAgent;

  constructor(readonly endpoint: string, private readonly timeout: number = DEFAULT_TIMEOUT) {
    this.url = new URL(endpoint);
    if (this.url.protocol !== "http:" && this.url.protocol !== "https:") {
      throw new TypeError(`endpoint ${JSON.stringify(endpoint)} must be an http:// or https:// URL`);
    }
    this.prefix = this.url.pathname.replace(/\/+$/, "");
    this.agent = new (this.url.protocol === "https:" ? HttpsAgent : HttpAgent)({ keepAlive: true });
  }

  request(method: string, path: string, body?: Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
    const url = this.url;
    // URL.host: the host (IPv6 in brackets) and the port unless it is the scheme's default
    const lines = wireHeaders(headers, url.host, body?.length);
    return new Promise<Response>((resolve, reject) => {
      const fail = (exc: Error) => reject(new TransportError(`${this.endpoint}: ${exc.name}: ${exc.message}`));
      const req = (url.protocol === "https:" ? httpsRequest : httpRequest)({
        hostname: url.hostname.replace(/^\[|\]$/g, ""), port: url.port || undefined, method,
        path: this.prefix + path, agent: this.agent, setHost: false,
        headers: lines.flat(), // a raw list: these lines, in this order, and nothing else
      }, (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", fail);
        res.on("end", () => {
          try {
            const raw = Buffer.concat(chunks);
            const data = res.headers["content-encoding"] === "gzip" ? gunzipSync(raw) : raw;
            const hdrs: Record<string, string> = {};
            for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) hdrs[k] = Array.isArray(v) ? v.join(", ") : v;
            resolve(new Response(res.statusCode ?? 0, hdrs, new Uint8Array(data)));
          } catch (exc) {
            fail(exc as Error);
          }
        });
      });
      req.setTimeout(this.timeout * 1000, () => req.destroy(new Error(`no answer within ${this.timeout} s`)));
      req.on("error", fail);
      req.end(body === undefined ? undefined : Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    });
  }
}
