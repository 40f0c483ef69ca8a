/**
 * One fixed header set for every SDK (issue 26 §5): the exact bytes of every request the Node
 * SDK sends (node:http, not fetch) — a plain batch, a sealed one, the registry, the key
 * configurations, a file domain — recorded by a raw TCP server on 127.0.0.1 and compared with
 * conformance/vectors/headers.json (tests/test_sdk_headers.py and the Kotlin HeadersTest read it too).
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { type AddressInfo, type Socket, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { NodeHttpTransport, TelemetryClient } from "../src/node.js";
import { GATEWAY_PATH, KEYS_TYPE, REQUEST_TYPE, RESPONSE_TYPE } from "../src/ohttp.js";
import { getRegistry, postBatch } from "../src/transport.js";
import { vectors } from "./support.js";

const doc = vectors("headers.json");
const registryText = JSON.stringify(vectors("registry.json").registry);

function expected(name: string, authority: string, length?: number, path?: string): string {
  const r = doc.requests.find((x: { name: string }) => x.name === name);
  const lines = [`${r.method} ${path ?? r.path} HTTP/1.1`];
  for (const [k, v] of r.headers) lines.push(`${k}: ${v.replace("{authority}", authority).replace("{length}", String(length))}`);
  return lines.join("\r\n") + "\r\n\r\n";
}

/** HTTP/1.1 on a raw socket: each request's head as received, answered by path. */
async function captureServer(): Promise<{ url: string; authority: string; heads: string[]; close: () => Promise<void> }> {
  const heads: string[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((sock) => {
    sockets.add(sock);
    let buf = Buffer.alloc(0);
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = buf.subarray(0, end + 4).toString("latin1");
        const m = /\r\ncontent-length: *(\d+)/i.exec(head);
        const length = m ? Number(m[1]) : 0;
        if (buf.length < end + 4 + length) return;
        buf = buf.subarray(end + 4 + length);
        heads.push(head);
        const path = head.split(" ")[1];
        const [ctype, body] = path === "/v1/registry" ? ["application/json", registryText]
          : path.startsWith("/v1/registry/domains/") ? ["text/plain", "a\n"]
          : path === GATEWAY_PATH ? [KEYS_TYPE, "\u0000"] : ["application/json", '{"accepted": 1, "duplicate": false}'];
        sock.write(`HTTP/1.1 200 OK\r\nContent-Type: ${ctype}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      }
    });
    sock.on("close", () => sockets.delete(sock));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`, authority: `127.0.0.1:${port}`, heads,
    close: () => new Promise<void>((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }),
  };
}

test("every request of the Node transport is the vector byte for byte (node:http, no undici headers)", async () => {
  const s = await captureServer();
  try {
    const t = new NodeHttpTransport(s.url);
    assert.equal((await postBatch(t, new Uint8Array(37).fill(0x80))).status, 200);
    assert.equal((await t.request("POST", GATEWAY_PATH, new Uint8Array(1079), { Accept: RESPONSE_TYPE, "Content-Type": REQUEST_TYPE })).status, 200);
    assert.equal((await getRegistry(t)).status, 200);
    assert.equal((await t.request("GET", GATEWAY_PATH, undefined, { Accept: KEYS_TYPE })).status, 200);
    assert.equal((await t.request("GET", "/v1/registry/domains/app", undefined, { Accept: "text/plain", "Accept-Encoding": "gzip" })).status, 200);
    assert.deepEqual(s.heads, [expected("report", s.authority, 37), expected("sealed report", s.authority, 1079),
      expected("registry", s.authority), expected("key configurations", s.authority),
      expected("domain", s.authority, undefined, "/v1/registry/domains/app")]);
  } finally {
    await s.close();
  }
});

test("a Node client fetching its registry and reporting sends exactly the vector", async () => {
  const s = await captureServer();
  const dir = mkdtempSync(join(tmpdir(), "ldpt-headers-"));
  try {
    const client = new TelemetryClient({ endpoint: s.url, stateDir: dir, flushOnHide: false });
    await client.ready;
    assert.equal(client.report("crash", true), true);
    assert.equal(await client.flush(10), true);
    await client.close(5);
    assert.equal(s.heads.length, 2, s.heads.join("\n"));
    assert.equal(s.heads[0], expected("registry", s.authority));
    const length = Number(/Content-Length: (\d+)/.exec(s.heads[1])?.[1]);
    assert.equal(s.heads[1], expected("report", s.authority, length));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await s.close();
  }
});
