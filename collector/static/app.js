// ldp-telemetry dashboard (docs/operations.md, "Dashboard"). Plain JavaScript, no library,
// no build step. The query token lives in sessionStorage (this tab only) and is sent as an
// Authorization header; tables are filled from the query API's JSON, charts are SVG drawn by
// the collector from the same estimates. All data goes into the page as text, never as HTML,
// except the collector's own escaped SVG.
"use strict";

const TOKEN_KEY = "ldpt-query-token";
const $ = (id) => document.getElementById(id);

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path) {
  const resp = await fetch(path, { headers: { Authorization: "Bearer " + token() }, cache: "no-store" });
  const text = await resp.text();
  if (!resp.ok) {
    let detail = text;
    try { detail = JSON.parse(text).detail || detail; } catch (e) { /* not problem+json */ }
    throw new ApiError(resp.status, detail);
  }
  return text;
}

async function apiJson(path) { return JSON.parse(await api(path)); }

function qs(params) {
  return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== null && v !== undefined)).toString();
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

// Numbers as the tables show them (tests compare these with the API's values).
const fmt = {
  count: (v) => (v === null ? "" : v.toFixed(1)),
  prop: (v) => (v === null ? "" : v.toFixed(4)),
  p: (v) => (v === null ? "" : v.toPrecision(2)),
  num: (v) => (v === null ? "" : Math.abs(v) >= 1e4 ? v.toFixed(0) : v.toPrecision(4)),
};

function table(columns, rows, rowKey) {
  const head = el("tr", {}, ...columns.map((c) => el("th", { text: c.title })));
  const body = rows.map((r) => {
    const tr = el("tr", { "data-key": String(r[rowKey]) });
    for (const c of columns) {
      const td = el("td", { text: c.show(r), "data-col": c.key });
      if (c.flag && c.flag(r)) td.className = "flag";
      tr.append(td);
    }
    return tr;
  });
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
}

function showError(err) {
  if (err instanceof ApiError && err.status === 401) { signOut("the token was refused (401): " + err.message); return; }
  const box = $("error");
  box.textContent = err.message;
  box.hidden = false;
}

async function chart(container, path) {
  container.textContent = "loading…";
  try {
    container.innerHTML = await api(path);  // SVG drawn and escaped by the collector
  } catch (err) {
    container.textContent = "";
    container.append(el("p", { class: "error", text: err.message }));
  }
}

let overview = null;

async function loadOverview() {
  overview = await apiJson("/ui/api/overview");
  return overview;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  overview = null;
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  const box = $("login-error");
  box.hidden = !message;
  box.textContent = message || "";
}

async function signIn(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  await start();
}

async function start() {
  if (!token()) { signOut(""); return; }
  try {
    await loadOverview();
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      signOut("the collector refused this token: " + err.message);
    } else {
      signOut("cannot reach the collector: " + err.message);
    }
    return;
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  route();
}

function route() {
  if (!overview) return;
  $("error").hidden = true;
  const view = $("view");
  view.textContent = "";
  const m = location.hash.match(/^#\/metric\/(.+)$/);
  const metric = m && overview.metrics.find((x) => x.name === decodeURIComponent(m[1]));
  if (metric) metricPage(view, metric).catch(showError); else metricList(view);
}

function latestUsable(metric) {
  const ok = metric.windows.filter(([, n]) => n >= Math.max(1, overview.min_reports));
  return ok.length ? ok[ok.length - 1][0] : null;
}

function metricList(view) {
  view.append(el("h1", { text: "Metrics" }));
  const rows = overview.metrics.map((x) => ({ ...x, latest: latestUsable(x) }));
  const t = table([
    { title: "metric", key: "name", show: (r) => r.name },
    { title: "kind", key: "kind", show: (r) => r.kind + (r.histogram ? " (histogram)" : r.mean ? " (mean)" : "") },
    { title: "protocol", key: "protocol", show: (r) => r.protocol },
    { title: "ε per report", key: "epsilon", show: (r) => r.epsilon.toPrecision(3) },
    { title: "reports (n)", key: "n_reports", show: (r) => String(r.n_reports) },
    { title: "windows", key: "windows", show: (r) => String(r.windows.length) },
    { title: "latest window", key: "latest", show: (r) => r.latest || "" },
    { title: "description", key: "description", show: (r) => r.description || "" },
  ], rows, "name");
  t.id = "metrics";
  for (const tr of t.querySelectorAll("tbody tr")) {
    const cell = tr.firstChild;
    const name = cell.textContent;
    cell.textContent = "";
    cell.append(el("a", { href: "#/metric/" + encodeURIComponent(name), text: name }));
  }
  view.append(t);
}

async function metricPage(view, metric) {
  view.append(el("h1", { text: metric.name }),
    el("p", { class: "meta", text: `${metric.kind}, protocol ${metric.protocol}, ε = ${metric.epsilon.toPrecision(3)}, ` +
      `${metric.n_reports} reports in ${metric.windows.length} windows. ${metric.description || ""}` }));
  const latest = latestUsable(metric);
  if (!latest) {
    view.append(el("p", { class: "muted", text: `no window has ${overview.min_reports} reports yet` }));
    return;
  }
  const days = [...new Set(metric.windows.map(([w]) => w.slice(0, 10)))];
  const base = "/v1/metrics/" + encodeURIComponent(metric.name);
  const charts = "/ui/charts/" + encodeURIComponent(metric.name);

  // 1. The latest window: interval bars, largest first, and the numbers.
  const latestChart = el("div", { class: "chart", id: "latest-chart" });
  const latestTable = el("div", { id: "latest-table" });
  view.append(el("h2", { text: `Latest window ${latest}` }), latestChart, latestTable);
  chart(latestChart, `${charts}/estimates.svg?${qs({ window: latest })}`);
  const est = await apiJson(`${base}/estimates?${qs({ window: latest, format: "json" })}`);
  latestTable.append(estimateTable(est));

  // 2. The series over a chosen range.
  const since = el("input", { type: "date", id: "series-since", value: days[Math.max(0, days.length - 30)] });
  const until = el("input", { type: "date", id: "series-until", value: days[days.length - 1] });
  const go = el("button", { type: "button", id: "series-go", text: "Show" });
  const seriesChart = el("div", { class: "chart", id: "series-chart" });
  view.append(el("h2", { text: "Series" }),
    el("div", { class: "controls" }, "from", since, "to", until, go), seriesChart);
  const drawSeries = () => chart(seriesChart, `${charts}/series.svg?${qs({ since: since.value, until: until.value })}`);
  go.addEventListener("click", drawSeries);
  drawSeries();

  // 3. Compare two windows.
  const usable = metric.windows.filter(([, n]) => n >= Math.max(1, overview.min_reports)).map(([w]) => w);
  const pick = (id, chosen) => el("select", { id }, ...usable.map((w) => {
    const o = el("option", { value: w, text: w });
    if (w === chosen) o.selected = true;
    return o;
  }));
  const a = pick("compare-a", usable[Math.max(0, usable.length - 2)]);
  const b = pick("compare-b", usable[usable.length - 1]);
  const cmp = el("button", { type: "button", id: "compare-go", text: "Compare" });
  const cmpChart = el("div", { class: "chart", id: "compare-chart" });
  const cmpTable = el("div", { id: "compare-table" });
  view.append(el("h2", { text: "Compare two windows" }),
    el("div", { class: "controls" }, "A", a, "B", b, cmp), cmpChart, cmpTable);
  const drawCompare = async () => {
    chart(cmpChart, `${charts}/compare.svg?${qs({ a: a.value, b: b.value })}`);
    cmpTable.textContent = "";
    try {
      cmpTable.append(compareTable(await apiJson(`${base}/compare?${qs({ a: a.value, b: b.value, format: "json" })}`)));
    } catch (err) { showError(err); }
  };
  cmp.addEventListener("click", drawCompare);
  drawCompare();
}

function estimateTable(doc) {
  const meta = doc.meta;
  let rows = doc.estimates;
  const numeric = String(meta.kind || "").startsWith("numeric");
  if (!numeric) rows = [...rows].sort((x, y) => y.estimate - x.estimate);
  const cols = numeric && meta.kind === "numeric-mean" ? [
    { title: "statistic", key: "statistic", show: (r) => r.statistic },
    { title: "estimate", key: "estimate", show: (r) => fmt.num(r.estimate) },
    { title: "std err", key: "std_err", show: (r) => fmt.num(r.std_err) },
    { title: "CI low", key: "ci_low", show: (r) => fmt.num(r.ci_low) },
    { title: "CI high", key: "ci_high", show: (r) => fmt.num(r.ci_high) },
  ] : [
    { title: numeric ? "row" : "value", key: "value", show: (r) => (numeric && r.statistic !== "count" ? r.statistic : String(r.value)) },
    { title: "estimate (count)", key: "estimate", show: (r) => (numeric && r.statistic !== "count" ? fmt.num(r.estimate) : fmt.count(r.estimate)) },
    { title: "proportion", key: "proportion", show: (r) => fmt.prop(r.proportion) },
    { title: "CI low", key: "ci_low", show: (r) => (numeric && r.statistic !== "count" ? fmt.num(r.ci_low) : fmt.count(r.ci_low)) },
    { title: "CI high", key: "ci_high", show: (r) => (numeric && r.statistic !== "count" ? fmt.num(r.ci_high) : fmt.count(r.ci_high)) },
    { title: "detected", key: "detected", show: (r) => (r.detected === null || r.detected === undefined ? "" : r.detected ? "yes" : "no") },
  ];
  // a row's key: the value (a bucket label for histograms), or the statistic of a numeric row
  const t = table(cols, rows.map((r) => ({ ...r, _key: numeric && r.statistic !== "count" ? r.statistic : r.value })), "_key");
  t.id = "estimates";
  const scale = meta.kind === "numeric-mean" ? "estimates in the metric's units (mean, sum) and the report count n"
    : "estimate and interval are counts of reports, proportion = estimate / n" +
      (numeric ? "; mean and quantile rows in the metric's units" : "");
  const note = el("p", { class: "meta", text: `n = ${meta.n_reports}, ${Math.round(100 * meta.confidence)}% intervals; ${scale}` });
  return el("div", {}, note, t);
}

function compareTable(doc) {
  const m = doc.meta;
  const v = m.scale === "proportion" ? fmt.prop : fmt.num;
  const t = table([
    { title: "value", key: "value", show: (r) => String(r.value) },
    { title: `A ${m.a}`, key: "estimate_a", show: (r) => v(r.estimate_a) },
    { title: `B ${m.b}`, key: "estimate_b", show: (r) => v(r.estimate_b) },
    { title: "B − A", key: "difference", show: (r) => v(r.difference) },
    { title: "CI low", key: "ci_low", show: (r) => v(r.ci_low) },
    { title: "CI high", key: "ci_high", show: (r) => v(r.ci_high) },
    { title: "p-value", key: "p_value", show: (r) => fmt.p(r.p_value) },
    { title: "changed", key: "changed", show: (r) => (r.changed ? "CHANGED" : ""), flag: (r) => r.changed },
  ], doc.estimates, "value");
  t.id = "compare";
  const flagged = doc.estimates.filter((r) => r.changed).length;
  return el("div", {}, el("p", { class: "meta", text: `${m.scale}s; n A = ${m.n_a}, n B = ${m.n_b}; ` +
    `changed: ${m.control === "fwer" ? "Holm" : "Benjamini–Hochberg"} at α = ${m.alpha}; ${flagged} of ${doc.estimates.length} changed` }), t);
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (e) => { signIn(e).catch(showError); });
  $("logout").addEventListener("click", () => signOut(""));
  window.addEventListener("hashchange", route);
  start().catch(showError);
});
