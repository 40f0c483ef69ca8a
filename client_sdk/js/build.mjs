// Browser bundle: dist/ldpt.min.js (ES module, minified), and its gzip size against the budget.
// `node build.mjs --size` prints the sizes of the whole bundle and of the core alone.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { existsSync } from "node:fs";

const BUDGET = 20_000; // minified + gzip bytes of the whole browser bundle: "<= 20 KB", read strictly
const SEALED_BUDGET = 25_000; // the bundle with sealed delivery (dist/ldpt-sealed.min.js): "<= 25 KB", read strictly

/**
 * Private members of the client (src/client.ts) that the minifier may rename: names used nowhere
 * else in src/ — not as option, platform, counter or stored-JSON keys — so renaming them all at
 * once cannot break a lookup (a test in tests/test_js_sdk.py checks the list against the source).
 */
export const MANGLED = ["attempts", "backoffUntil", "batchDue", "disabledReason", "drainRefusals", "failures",
  "flushing", "hurry", "logged", "mirror", "notReporting", "pump", "rebuildMirror", "reportOne", "schedule",
  "sendNow", "serverBackoff", "timerAt", "uncommitted", "unhide", "wake", "mono", "timer", "refusals",
  "queue", "fail", "cycle", "buildOne", "chargeQueued", "store_", "resolveRegistry", "domainLists", "recordRefusals",
  "bySecret", "written", "room", "upClock", "disabledCounter", "handle", "disable", "found", "ctx", "labels"];

async function bundle(entry, outfile) {
  const result = await build({
    entryPoints: [entry], bundle: true, minify: true, format: "esm", platform: "browser",
    target: ["es2020"], outfile, write: true, metafile: false, legalComments: "none",
    mangleProps: new RegExp(`^(${MANGLED.join("|")})$`),
  });
  if (result.errors.length) throw new Error(`esbuild failed for ${entry}`);
  const { readFileSync } = await import("node:fs");
  const raw = readFileSync(outfile);
  return { raw: raw.length, gzip: gzipSync(raw, { level: 9 }).length };
}

const sizes = {};
if (existsSync("src/index.ts")) sizes.bundle = await bundle("src/index.ts", "dist/ldpt.min.js");
if (existsSync("src/index.sealed.ts")) sizes.sealed = await bundle("src/index.sealed.ts", "dist/ldpt-sealed.min.js");
sizes.core = await bundle("src/registry.ts", "build/core.min.js");
// The conformance checks for a browser page (tests/test_js_browser.py runs them in Chromium).
if (existsSync("test/conformance_check.ts")) await bundle("test/conformance_check.ts", "build/conformance.browser.js");
if (process.argv.includes("--size")) {
  for (const [name, s] of Object.entries(sizes)) {
    console.log(`${name}: ${s.raw} bytes minified, ${s.gzip} bytes gzip (budgets: ${BUDGET} for the bundle, ${SEALED_BUDGET} with sealing)`);
  }
}
if (sizes.bundle && sizes.bundle.gzip > BUDGET) {
  console.error(`browser bundle is ${sizes.bundle.gzip} bytes gzip, above the ${BUDGET}-byte budget`);
  process.exit(1);
}
if (sizes.sealed && sizes.sealed.gzip > SEALED_BUDGET) {
  console.error(`sealed browser bundle is ${sizes.sealed.gzip} bytes gzip, above the ${SEALED_BUDGET}-byte budget`);
  process.exit(1);
}
