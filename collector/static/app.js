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

// Numbers as the tables show them, thousands separated as the CLI prints them (tests compare
// these with the API's values).
const grouped = (v, digits) => v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
const fmt = {
  count: (v) => (v === null ? "" : grouped(v, 1)),
  int: (v) => (v === null ? "" : grouped(v, 0)),
  prop: (v) => (v === null ? "" : v.toFixed(4)),
  p: (v) => (v === null ? "" : v.toPrecision(2)),
  num: (v) => (v === null ? "" : Math.abs(v) >= 1e4 && Math.abs(v) < 1e15 ? grouped(v, 0) : v.toPrecision(4)),
};

const plural = (n, word, words) => `${fmt.int(n)} ${n === 1 ? word : words || word + "s"}`;

// Histogram buckets are labelled "[lo, hi)": their widths, to tell unequal buckets (null if not).
function bucketWidths(labels) {
  const widths = [];
  for (const label of labels) {
    const m = /^\[([^,]+), ([^\])]+)[)\]]$/.exec(label);
    if (!m) return null;
    widths.push(Number(m[2]) - Number(m[1]));
  }
  return widths.every(Number.isFinite) ? widths : null;
}

const unequalBuckets = (w) => w !== null && w.length > 1 && Math.max(...w) - Math.min(...w) > 1e-9 * Math.max(...w.map(Math.abs));

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

// A table in its own horizontally scrolling box, so a narrow screen scrolls the table, not the page.
function scrolling(t) { return el("div", { class: "table-wrap" }, t); }

function showError(err) {
  if (err instanceof ApiError && err.status === 401) { signOut("the token was refused (401): " + err.message); return; }
  const box = $("error");
  box.textContent = err.message;
  box.hidden = false;
}

async function chart(container, path) {
  container.textContent = "loading…";
  // the collector draws the chart for this width (a phone gets a narrow layout, not tiny text)
  const width = Math.max(300, Math.floor(container.clientWidth) - 2);
  try {
    container.innerHTML = await api(path + (path.includes("?") ? "&" : "?") + "width=" + width);  // SVG drawn and escaped by the collector
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
    { title: "kind", key: "kind", show: (r) => r.kind + (r.histogram ? " (histogram)" : r.mean ? " (mean)" : "") +
      (r.unit ? `, ${r.unit}` : "") },
    { title: "protocol", key: "protocol", show: (r) => r.protocol },
    { title: "ε per report", key: "epsilon", show: (r) => r.epsilon.toPrecision(3) },
    { title: "reports (n)", key: "n_reports", show: (r) => fmt.int(r.n_reports) },
    { title: "windows", key: "windows", show: (r) => fmt.int(r.windows.length) },
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
  view.append(scrolling(t));
}

async function metricPage(view, metric) {
  view.append(el("h1", { text: metric.name }),
    el("p", { class: "meta", text: `${metric.kind}${metric.unit ? " in " + metric.unit : ""}, protocol ${metric.protocol}, ` +
      `ε = ${metric.epsilon.toPrecision(3)}, ${plural(metric.n_reports, "report")} in ` +
      `${plural(metric.windows.length, "window")}. ${metric.description || ""}` }));
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
  let est = { estimates: [] };
  try {
    est = await apiJson(`${base}/estimates?${qs({ window: latest, format: "json" })}`);
    latestTable.append(estimateTable(est, metric));
  } catch (err) {  // e.g. a RAPPOR string metric, decoded only against candidate strings
    if (err instanceof ApiError && err.status === 401) throw err;
    latestTable.append(el("p", { class: "error", text: err.message }));
  }

  // 1b. Breakdowns: one chart per public dimension of the metric (suppressed segments counted only).
  for (const dim of metric.dimensions || []) {
    breakdownSection(view, dim, latest, base, charts);
  }

  // 2. The series over a chosen range (frequency metrics: of the values ticked below the dates).
  const since = el("input", { type: "date", id: "series-since", value: days[Math.max(0, days.length - 30)] });
  const until = el("input", { type: "date", id: "series-until", value: days[days.length - 1] });
  const go = el("button", { type: "button", id: "series-go", text: "Show" });
  const seriesChart = el("div", { class: "chart", id: "series-chart" });
  const numeric = metric.kind === "numeric";
  const picker = numeric ? null : valuePicker(est.estimates);
  view.append(el("h2", { text: "Series" }),
    el("p", { class: "meta", text: metric.histogram ? `median (p50) and 90th percentile (p90) per window${metric.unit ? ", in " + metric.unit : ""}`
      : metric.mean ? `the mean per window${metric.unit ? ", in " + metric.unit : ""}`
        : `proportion of each window's reports; pick up to ${SERIES_MAX} values` }),
    el("div", { class: "controls" }, "from", since, "to", until, go), ...(picker ? [picker.node] : []), seriesChart);
  const drawSeries = () => {
    const params = new URLSearchParams(qs({ since: since.value, until: until.value }));
    if (picker) for (const v of picker.chosen()) params.append("value", v);
    chart(seriesChart, `${charts}/series.svg?${params.toString()}`);
  };
  go.addEventListener("click", drawSeries);
  if (picker) picker.node.addEventListener("change", drawSeries);
  drawSeries();

  // 3. Compare two windows (not offered where it cannot work).
  if (metric.kind === "string") {
    view.append(el("h2", { text: "Compare two windows" }),
      el("p", { class: "muted", id: "compare-note", text: "compare works on boolean, categorical and numeric metrics, not on strings" }));
    return;
  }
  const usable = metric.windows.filter(([, n]) => n >= Math.max(1, overview.min_reports)).map(([w]) => w);
  if (usable.length < 2) {
    view.append(el("h2", { text: "Compare two windows" }),
      el("p", { class: "muted", id: "compare-note", text: `a comparison needs two windows with at least ` +
        `${plural(Math.max(1, overview.min_reports), "report")}; this metric has ${plural(usable.length, "such window")}` }));
    return;
  }
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
    cmpTable.textContent = "";
    if (a.value === b.value) {
      cmpChart.textContent = "";
      cmpChart.append(el("p", { class: "muted", text: "A and B are the same window: pick two different windows" }));
      return;
    }
    chart(cmpChart, `${charts}/compare.svg?${qs({ a: a.value, b: b.value })}`);
    try {
      cmpTable.append(compareTable(await apiJson(`${base}/compare?${qs({ a: a.value, b: b.value, format: "json" })}`)));
    } catch (err) { showError(err); }
  };
  cmp.addEventListener("click", drawCompare);
  drawCompare();
}

const SERIES_MAX = 8;

// A dimension's breakdown of the latest window: the collector's chart and a line saying how many
// segments were suppressed (fewer reports than min_reports: never shown, only counted).
function breakdownSection(view, dim, latest, base, charts) {
  const box = el("div", { class: "breakdown", id: "breakdown-" + dim });
  const note = el("p", { class: "meta", id: "breakdown-note-" + dim, text: "" });
  const plot = el("div", { class: "chart", id: "breakdown-chart-" + dim });
  box.append(el("h2", { text: `By ${dim} (window ${latest})` }), note, plot);
  view.append(box);  // in the page before the chart is asked for: it is drawn for the box's width
  chart(plot, `${charts}/breakdown.svg?${qs({ window: latest, by: dim })}`);
  apiJson(`${base}/estimates?${qs({ window: latest, by: dim, format: "json" })}`).then((doc) => {
    const m = doc.meta;
    note.textContent = `${plural(m.segments, "segment")} shown, ${plural(m.suppressed, "segment")} suppressed ` +
      `(fewer than ${fmt.int(m.min_reports)} reports each)`;
  }).catch((err) => { note.textContent = err.message; });
}

// Checkboxes of a frequency metric's values, largest (latest window) first; the top 5 ticked.
function valuePicker(rows) {
  const values = [...rows].sort((x, y) => y.estimate - x.estimate).map((r) => String(r.value));
  const node = el("details", { class: "picker", id: "series-values" },
    el("summary", { text: `values (${plural(values.length, "value")})` }));
  const boxes = values.map((v, i) => {
    const box = el("input", { type: "checkbox", value: v });
    box.checked = i < 5;
    node.append(el("label", {}, box, " " + v));
    return box;
  });
  node.addEventListener("change", () => {  // at most SERIES_MAX lines
    const ticked = boxes.filter((b) => b.checked);
    for (const b of boxes) b.disabled = !b.checked && ticked.length >= SERIES_MAX;
  });
  return { node, chosen: () => boxes.filter((b) => b.checked).map((b) => b.value) };
}

function estimateTable(doc, metric) {
  const meta = doc.meta;
  const unit = meta.unit || (metric && metric.unit) || "";
  const inUnit = unit ? ` (${unit})` : "";
  let rows = doc.estimates;
  const numeric = String(meta.kind || "").startsWith("numeric");
  if (meta.kind === "numeric-mean") {
    const t = table([
      { title: "statistic", key: "statistic", show: (r) => r.statistic },
      { title: "estimate" + inUnit, key: "estimate", show: (r) => (r.statistic === "n" ? fmt.int(r.estimate) : fmt.num(r.estimate)) },
      { title: "std err", key: "std_err", show: (r) => fmt.num(r.std_err) },
      { title: "CI low", key: "ci_low", show: (r) => fmt.num(r.ci_low) },
      { title: "CI high", key: "ci_high", show: (r) => fmt.num(r.ci_high) },
    ], rows.map((r) => ({ ...r, _key: r.statistic })), "_key");
    t.id = "estimates";
    return el("div", {}, el("p", { class: "meta", text: `n = ${fmt.int(meta.n_reports)}, ${Math.round(100 * meta.confidence)}% intervals; ` +
      `mean and sum in the metric's units${unit ? " (" + unit + ")" : ""}` }), scrolling(t));
  }
  const buckets = numeric ? rows.filter((r) => r.statistic === "count") : [...rows].sort((x, y) => y.estimate - x.estimate);
  const widths = numeric ? bucketWidths(buckets.map((r) => String(r.value))) : null;
  const density = unequalBuckets(widths);
  const cols = [
    { title: numeric ? "bucket" + inUnit : "value", key: "value", show: (r) => String(r.value) },
    { title: "estimate (count)", key: "estimate", show: (r) => fmt.count(r.estimate) },
    { title: "proportion", key: "proportion", show: (r) => fmt.prop(r.proportion) },
    { title: "CI low", key: "ci_low", show: (r) => fmt.count(r.ci_low) },
    { title: "CI high", key: "ci_high", show: (r) => fmt.count(r.ci_high) },
    { title: "detected", key: "detected", show: (r) => (r.detected === null || r.detected === undefined ? "" : r.detected ? "yes" : "no") },
  ];
  if (density) {
    cols.splice(3, 0, { title: `density (per ${unit || "unit"})`, key: "density", show: (r) => (r.proportion === null ? "" : (r.proportion / r._width).toPrecision(3)) });
  }
  const t = table(cols, buckets.map((r, i) => ({ ...r, _key: r.value, _width: widths ? widths[i] : 1 })), "_key");
  t.id = "estimates";
  const scale = "estimate and interval are counts of reports, proportion = estimate / n" +
    (density ? "; the buckets differ in width, so the chart draws densities (proportion per " + (unit || "unit") + "), not shares" : "");
  const parts = [el("p", { class: "meta", text: `n = ${fmt.int(meta.n_reports)}, ${Math.round(100 * meta.confidence)}% intervals; ${scale}` }), scrolling(t)];
  if (numeric) {  // mean and quantiles: in the metric's units, apart from the bucket counts
    const stats = table([
      { title: "statistic", key: "statistic", show: (r) => r.statistic },
      { title: "estimate" + inUnit, key: "estimate", show: (r) => fmt.num(r.estimate) },
      { title: "CI low", key: "ci_low", show: (r) => fmt.num(r.ci_low) },
      { title: "CI high", key: "ci_high", show: (r) => fmt.num(r.ci_high) },
    ], rows.filter((r) => r.statistic !== "count").map((r) => ({ ...r, _key: r.statistic })), "_key");
    stats.id = "statistics";
    const bias = meta.mean_bias_bound;
    parts.push(el("h3", { text: "Mean and quantiles" + inUnit }),
      el("p", { class: "meta", id: "statistics-note", text: "From the bucket counts: the mean counts each report at its bucket's " +
        `midpoint, so its interval is widened by that bias bound (± ${bias === undefined || bias === null ? "?" : fmt.num(bias)}` +
        `${unit ? " " + unit : ""}) besides the noise; a quantile's interval is the bucket edges its band crosses.` }),
      scrolling(stats));
  }
  return el("div", {}, ...parts);
}

function compareTable(doc) {
  const m = doc.meta;
  const unit = m.unit && m.scale !== "proportion" ? ` (${m.unit})` : "";
  const v = m.scale === "proportion" ? fmt.prop : fmt.num;
  const t = table([
    { title: "value", key: "value", show: (r) => String(r.value) },
    { title: `A ${m.a}`, key: "estimate_a", show: (r) => v(r.estimate_a) },
    { title: `B ${m.b}`, key: "estimate_b", show: (r) => v(r.estimate_b) },
    { title: "B − A" + unit, key: "difference", show: (r) => v(r.difference) },
    { title: "CI low", key: "ci_low", show: (r) => v(r.ci_low) },
    { title: "CI high", key: "ci_high", show: (r) => v(r.ci_high) },
    { title: "p-value", key: "p_value", show: (r) => fmt.p(r.p_value) },
    { title: "changed", key: "changed", show: (r) => (r.changed ? "CHANGED" : ""), flag: (r) => r.changed },
  ], doc.estimates, "value");
  t.id = "compare";
  const flagged = doc.estimates.filter((r) => r.changed).length;
  return el("div", {}, el("p", { class: "meta", text: `${m.scale}s; n A = ${fmt.int(m.n_a)}, n B = ${fmt.int(m.n_b)}; ` +
    `changed: ${m.control === "fwer" ? "Holm" : "Benjamini–Hochberg"} at α = ${m.alpha}; ${fmt.int(flagged)} of ${fmt.int(doc.estimates.length)} changed` }), scrolling(t));
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (e) => { signIn(e).catch(showError); });
  $("logout").addEventListener("click", () => signOut(""));
  window.addEventListener("hashchange", route);
  start().catch(showError);
});
