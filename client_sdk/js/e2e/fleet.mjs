/**
 * A simulated fleet for the end-to-end tests (tests/test_js_browser.py, tests/test_js_node.py):
 * `n` devices, each a TelemetryClient with its own state (an IndexedDB namespace in a browser,
 * a state directory in Node) and so its own secret and ledger, report one value of each metric
 * of e2e/metrics.toml to a real `ldpt serve` and flush. Device j's true values are fixed
 * functions of j (`truth`), so the test knows the population exactly.
 */

export const THEMES = ["light", "dark", "system"];
export const URLS = ["/", "/docs", "/pricing", "/blog"];

/** Device j's true values: theme 50/30/20 %, url 40/30/20/10 %, load in [0, 100]. */
export function truth(j) {
  const t = j % 10;
  const u = j % 10;
  return {
    theme: THEMES[t < 5 ? 0 : t < 8 ? 1 : 2],
    url: URLS[u < 4 ? 0 : u < 7 ? 1 : u < 9 ? 2 : 3],
    load: (j * 37) % 101,
  };
}

/**
 * Run devices [0, n), `concurrency` at a time. `makeClient(j)` builds device j's client;
 * `progress(done)` is told how far it got. Returns counts the test compares with the collector.
 */
export async function runFleet({ n, makeClient, concurrency = 50, progress = () => undefined }) {
  const out = { devices: 0, flushed: 0, reported: 0, acked: 0, refused: 0, disabled: [], counts: {} };
  let next = 0;
  async function device(j) {
    const client = makeClient(j);
    await client.ready;
    const values = truth(j);
    for (const [metric, value] of Object.entries(values)) {
      if (client.report(metric, value)) out.reported += 1;
      const key = `${metric}=${metric === "load" ? "sum" : value}`;
      out.counts[key] = (out.counts[key] ?? 0) + (metric === "load" ? value : 1);
    }
    if (await client.flush(60)) out.flushed += 1;
    const stats = await client.stats();
    out.acked += stats.reports_acked;
    out.refused += stats.refused_window + stats.refused_lifetime + stats.refused_device_window + stats.refused_device_lifetime;
    if (stats.disabled_reason) out.disabled.push(stats.disabled_reason);
    await client.close(0);
    out.devices += 1;
    progress(out.devices);
  }
  async function worker() {
    while (next < n) await device(next++);
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return out;
}

/**
 * One device budget shared by several tabs or processes: report `tries` values of `load`
 * (ε = 2, reports_per_window = 20) on the device `makeClient()` opens, under the registry's
 * [device] epsilon_per_window; return what this tab/process got charged and acknowledged.
 * `gate` (a promise) holds the reports until every tab has loaded the book: each tab's
 * in-memory mirror then allows the whole budget, and only the locked commit can keep the cap.
 */
export async function spendShared({ makeClient, tries, gate = Promise.resolve() }) {
  const client = makeClient();
  await client.ready;
  await gate;
  let accepted = 0;
  for (let i = 0; i < tries; i++) if (client.report("load", i)) accepted += 1;
  await client.flush(60);
  const stats = await client.stats();
  await client.close(0);
  return { accepted, charged: stats.charged, acked: stats.reports_acked, refusedAtCommit: stats.reports_refused_at_commit };
}
