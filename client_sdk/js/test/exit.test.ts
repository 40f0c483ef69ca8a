/** Node: what is queued when the process ends on its own is charged and sent (beforeExit). */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { unpack } from "../src/wire.js";

test("a process that reports and ends without flush() still delivers", async () => {
  const bodies: Uint8Array[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = new Uint8Array(Buffer.concat(chunks));
      bodies.push(body);
      const n = (unpack(body) as { reports: unknown[] }).reports.length;
      res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ accepted: n, duplicate: false }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  try {
    const child = fileURLToPath(new URL("./exit_child.js", import.meta.url));
    const dir = mkdtempSync(join(tmpdir(), "ldpt-js-exit-"));
    await promisify(execFile)(process.execPath, [child, `http://127.0.0.1:${port}`, dir], { timeout: 60_000 });
    assert.equal(bodies.length, 1);
    assert.deepEqual((unpack(bodies[0]) as { reports: Array<{ m: string }> }).reports.map((r) => r.m), ["crash"]);
  } finally {
    server.close();
  }
});
