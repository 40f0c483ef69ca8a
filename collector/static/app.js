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

// Requests in flight, on <html data-pending>, and data-ready once a page has asked for all it
// shows: the browser tests wait for both instead of guessing how long a chart takes.
let pending = 0;
function busy(delta) { pending += delta; document.documentElement.dataset.pending = String(pending); }
function ready(flag) { document.documentElement.dataset.ready = flag ? "1" : "0"; }

// GET ``path``, or POST ``body`` as JSON (a RAPPOR metric's candidate strings: too many for a URL).
async function api(path, body) {
  busy(1);
  try {
    const init = { headers: { Authorization: "Bearer " + token() }, cache: "no-store" };
    if (body !== undefined && body !== null) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const text = await resp.text();
    if (!resp.ok) {
      let detail = text;
      try { detail = JSON.parse(text).detail || detail; } catch (e) { /* not problem+json */ }
      throw new ApiError(resp.status, detail);
    }
    return text;
  } finally {
    busy(-1);
  }
}

async function apiJson(path, body) { return JSON.parse(await api(path, body)); }

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

// Numbers as the tables show them, one style per column as the CLI prints them (tests compare
// these with the API's values): fixed-point, thousands separated; counts to 0.1, shares to 4
// decimals, values in a metric's units to 4 significant digits; p-values in scientific notation,
// "<1e-300" for one too small for a float (the API's 0).
// toFixed rounds the float's exact value, as Python's format does (toLocaleString rounds its
// shortest decimal string, which differs on a few values such as 0.00012345)
const grouped = (v, digits) => {
  const [whole, frac] = v.toFixed(digits).split(".");
  return whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (frac === undefined ? "" : "." + frac);
};
const missing = (v) => v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
const fmt = {
  count: (v) => (missing(v) ? "" : grouped(v, 1)),
  int: (v) => (missing(v) ? "" : grouped(v, 0)),
  prop: (v) => (missing(v) ? "" : v.toFixed(4)),
  p: (v) => (missing(v) ? "" : v < 1e-300 ? "<1e-300" : v.toExponential(1).replace(/e([+-])(\d)$/, "e$10$2")),
  num: (v) => {
    if (missing(v)) return "";
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e15) return v.toPrecision(4).replace(/\.?0+e/, "e");  // as Python's "{:.4g}"
    return grouped(v, Math.min(12, Math.max(0, 3 - Math.floor(Math.log10(a)))));
  },
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
  // a column of words (values, labels) is aligned left, one of numbers right (`text: true` marks words)
  const head = el("tr", {}, ...columns.map((c) => el("th", { text: c.title, ...(c.text ? { class: "text" } : {}) })));
  const body = rows.map((r) => {
    const tr = el("tr", { "data-key": String(r[rowKey]) });
    for (const c of columns) {
      const td = el("td", { text: c.show(r), "data-col": c.key });
      if (c.text) td.classList.add("text");
      if (c.flag && c.flag(r)) td.classList.add("flag");
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

async function chart(container, path, body) {
  container.textContent = "loading…";
  // the collector draws the chart for this width (a phone gets a narrow layout, not tiny text)
  const width = Math.max(300, Math.floor(container.clientWidth) - 2);
  try {
    container.innerHTML = await api(path + (path.includes("?") ? "&" : "?") + "width=" + width, body);  // SVG drawn and escaped by the collector
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
  ready(false);
  const view = $("view");
  view.textContent = "";
  const m = location.hash.match(/^#\/metric\/(.+)$/);
  const metric = m && overview.metrics.find((x) => x.name === decodeURIComponent(m[1]));
  if (metric) metricPage(view, metric).catch(showError).finally(() => ready(true));
  else { metricList(view); ready(true); }
}

function latestUsable(metric) {
  const ok = metric.windows.filter(([, n]) => n >= Math.max(1, overview.min_reports));
  return ok.length ? ok[ok.length - 1][0] : null;
}

function metricList(view) {
  view.append(el("h1", { text: "Metrics" }));
  const rows = overview.metrics.map((x) => ({ ...x, latest: latestUsable(x) }));
  const t = table([
    { title: "metric", key: "name", text: true, show: (r) => r.name },
    { title: "kind", key: "kind", text: true, show: (r) => r.kind + (r.histogram ? " (histogram)" : r.mean ? " (mean)" : "") +
      (r.unit ? `, ${r.unit}` : "") },
    { title: "protocol", key: "protocol", text: true, show: (r) => r.protocol },
    { title: "ε per report", key: "epsilon", show: (r) => r.epsilon.toPrecision(3) },
    { title: "reports (n)", key: "n_reports", show: (r) => fmt.int(r.n_reports) },
    { title: "windows", key: "windows", show: (r) => fmt.int(r.windows.length) },
    { title: "latest window", key: "latest", text: true, show: (r) => r.latest || "" },
    { title: "description", key: "description", text: true, show: (r) => r.description || "" },
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
  const ctx = {
    metric, latest, candidates: null,
    days: [...new Set(metric.windows.map(([w]) => w.slice(0, 10)))],
    base: "/v1/metrics/" + encodeURIComponent(metric.name),
    charts: "/ui/charts/" + encodeURIComponent(metric.name),
  };
  if (metric.protocol === "rappor") { await candidatesForm(view, ctx); return; }
  await metricSections(view, ctx);
}

// A RAPPOR string metric is decoded against strings the analyst names (Erlingsson et al., 2014):
// one explanation and a box for them, then the usual sections for those strings. The list is kept
// for this tab (sessionStorage), like the token.
async function candidatesForm(view, ctx) {
  const key = "ldpt-candidates:" + ctx.metric.name;
  const box = el("textarea", { id: "candidates", rows: "5", spellcheck: "false",
    placeholder: "news.example\nmail.example\nsearch.example" });
  box.value = sessionStorage.getItem(key) || "";
  const go = el("button", { type: "button", id: "candidates-go", text: "Decode" });
  const note = el("p", { class: "muted", id: "candidates-note", text: "" });
  const out = el("div", { id: "decoded" });
  view.append(el("h2", { text: "Candidate strings" }),
    el("p", { class: "meta", id: "candidates-help", text: "RAPPOR reports carry Bloom filters, not strings: the collector " +
      "estimates how many reports hold each string you list, and tests it against zero. Give the strings to look for, " +
      "one per line (on the command line: ldpt estimate --candidates FILE). Strings you do not list are not found; " +
      "a discover metric finds them without a list." }),
    box, el("div", { class: "controls" }, go), note, out);
  const decode = async () => {
    const list = [...new Set(box.value.split("\n").map((v) => v.trim()).filter((v) => v))];
    sessionStorage.setItem(key, list.join("\n"));
    out.textContent = "";
    if (!list.length) { note.textContent = "no candidate strings yet: list one per line above"; return; }
    note.textContent = `${plural(list.length, "candidate string")}`;
    ready(false);
    try {
      await metricSections(out, { ...ctx, candidates: list });
    } finally { ready(true); }
  };
  go.addEventListener("click", () => { decode().catch(showError); });
  if (box.value.trim()) await decode();
}

async function metricSections(view, ctx) {
  const { metric, latest, base, charts, days } = ctx;
  const body = ctx.candidates ? { candidates: ctx.candidates } : null;
  const joint = metric.kind === "joint";

  // 1. The latest window: interval bars, largest first, and the numbers.
  const latestChart = el("div", { class: "chart", id: "latest-chart" });
  const latestTable = el("div", { id: "latest-table" });
  view.append(el("h2", { text: joint ? `Latest window ${latest}: cells` : `Latest window ${latest}` }), latestChart, latestTable);
  chart(latestChart, `${charts}/estimates.svg?${qs({ window: latest })}`, body);
  let est = { estimates: [] };
  try {
    est = await apiJson(`${base}/estimates?${qs({ window: latest, format: "json" })}`, body ? { window: latest, ...body } : undefined);
    const claim = centralClaim(est.meta.privacy);
    if (claim) latestTable.append(claim);
    if (joint) jointSections(view, latestTable, est, ctx); else latestTable.append(estimateTable(est, metric));
  } catch (err) {
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
  // the values a series can draw: a joint metric's cells (its other rows are not per-window series)
  const picker = numeric ? null : valuePicker(joint ? est.estimates.filter((r) => r.statistic === "count") : est.estimates,
    joint ? "cell" : "value");
  view.append(el("h2", { text: "Series" }),
    el("p", { class: "meta", text: metric.histogram ? `median (p50) and 90th percentile (p90) per window${metric.unit ? ", in " + metric.unit : ""}`
      : metric.mean ? `the mean per window${metric.unit ? ", in " + metric.unit : ""}`
        : joint ? `proportion of each window's reports in each cell; pick up to ${SERIES_MAX} cells`
          : `proportion of each window's reports; pick up to ${SERIES_MAX} values` }),
    el("div", { class: "controls" }, "from", since, "to", until, go), ...(picker ? [picker.node] : []), seriesChart);
  const drawSeries = () => {
    const params = new URLSearchParams(qs({ since: since.value, until: until.value }));
    if (picker) for (const v of picker.chosen()) params.append("value", v);
    return chart(seriesChart, `${charts}/series.svg?${params.toString()}`, body);
  };
  go.addEventListener("click", drawSeries);
  if (picker) picker.node.addEventListener("change", drawSeries);
  drawSeries();

  // 3. Compare two windows (not offered where it cannot work).
  if (metric.kind === "string") {
    view.append(el("h2", { text: "Compare two windows" }),
      el("p", { class: "muted", id: "compare-note", text: "compare works on boolean, categorical, joint and numeric metrics, not on strings" }));
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
  view.append(el("h2", { text: joint ? "Compare two windows: cells" : "Compare two windows" }),
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
  cmp.addEventListener("click", () => { drawCompare().catch(showError); });
  await drawCompare();
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
      `(fewer than ${fmt.int(m.min_reports)} reports each)` +
      // reports the segment cap kept out of every segment: in the metric's total, not in these groups
      (m.unsegmented ? `; ${plural(m.unsegmented, "report")} in no segment (the collector's segment cap ` +
        `was reached): the total counts them, these groups do not` : "");
  }).catch((err) => { note.textContent = err.message; });
}

// Checkboxes of a frequency metric's values, largest (latest window) first; the top 5 ticked.
function valuePicker(rows, noun = "value") {
  const values = [...rows].sort((x, y) => y.estimate - x.estimate).map((r) => String(r.value));
  const node = el("details", { class: "picker", id: "series-values" },
    el("summary", { text: `${noun}s (${plural(values.length, noun)})` }));
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

// The window's central (ε, δ) next to the local ε (meta.privacy, collector/claims.py), where the
// estimate states one: its reports came through a shuffler, or the metric requires one. Absent
// otherwise: the header's ε is then the only claim.
function centralClaim(privacy) {
  const row = privacy && privacy.windows && privacy.windows[0];
  if (!row) return null;
  const local = `each report's local ε = ${row.local_epsilon.toPrecision(3)}`;
  const text = row.amplified
    ? `central (ε, δ) = (${row.epsilon.toPrecision(3)}, ${row.delta.toExponential(0)}) for this window by ${row.theorem}; ` +
      `${row.reason}; ${local}, all that holds if the shuffler and the collector collude`
    : `central ε: none for this window (${row.reason}); ${local} stands`;
  return el("p", { class: "meta", id: "central-claim", "data-amplified": row.amplified ? "1" : "0", text });
}

function estimateTable(doc, metric) {
  const meta = doc.meta;
  const unit = meta.unit || (metric && metric.unit) || "";
  const inUnit = unit ? ` (${unit})` : "";
  let rows = doc.estimates;
  const numeric = String(meta.kind || "").startsWith("numeric");
  if (meta.kind === "numeric-mean") {
    const t = table([
      { title: "statistic", key: "statistic", text: true, show: (r) => r.statistic },
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
    { title: numeric ? "bucket" + inUnit : "value", key: "value", text: true, show: (r) => String(r.value) },
    { title: "estimate (count)", key: "estimate", show: (r) => fmt.count(r.estimate) },
    { title: "proportion", key: "proportion", show: (r) => fmt.prop(r.proportion) },
    { title: "CI low", key: "ci_low", show: (r) => fmt.count(r.ci_low) },
    { title: "CI high", key: "ci_high", show: (r) => fmt.count(r.ci_high) },
    { title: "detected", key: "detected", show: (r) => (r.detected === null || r.detected === undefined ? "" : r.detected ? "yes" : "no") },
  ];
  if (density) {
    cols.splice(3, 0, { title: `density (per ${unit || "unit"})`, key: "density", show: (r) => (missing(r.proportion) ? "" : fmt.num(r.proportion / r._width)) });
  }
  const t = table(cols, buckets.map((r, i) => ({ ...r, _key: r.value, _width: widths ? widths[i] : 1 })), "_key");
  t.id = "estimates";
  const scale = "estimate and interval are counts of reports, proportion = estimate / n" +
    (density ? "; the buckets differ in width, so the chart draws densities (proportion per " + (unit || "unit") + "), not shares" : "");
  const parts = [el("p", { class: "meta", text: `n = ${fmt.int(meta.n_reports)}, ${Math.round(100 * meta.confidence)}% intervals; ${scale}` }), scrolling(t)];
  if (numeric) {  // mean and quantiles: in the metric's units, apart from the bucket counts
    const stats = table([
      { title: "statistic", key: "statistic", text: true, show: (r) => r.statistic },
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

// A joint metric's breakdown (estimators/joint.py; docs/guide-analysts.md, "Breakdowns by private
// attributes"): its rows come in groups named by `statistic` — the cells ("count"), each part's
// marginal ("count PART"), the shares P(T | G), the means per category ("mean NUM | G") and the
// independence tests. The cells go under the latest window's chart; each other group gets a
// section of its own, with a chart for the marginals, shares and means.
function jointSections(view, cellsBox, doc, ctx) {
  const meta = doc.meta;
  const n = meta.n_reports;
  const parts = meta.joint_parts || [];
  const unitOf = (name) => (parts.find((p) => p.name === name) || {}).unit || "";
  const groups = new Map();
  for (const r of doc.estimates) {
    if (!groups.has(r.statistic)) groups.set(r.statistic, []);
    groups.get(r.statistic).push(r);
  }
  const conf = `${Math.round(100 * meta.confidence)}% intervals`;
  const keyed = (rows) => rows.map((r) => ({ ...r, _key: String(r.value) }));
  const tagged = (t, statistic) => { t.dataset.statistic = statistic; t.classList.add("joint"); return t; };
  const detectedCell = (r) => (r.detected === null || r.detected === undefined ? "" : r.detected ? "yes" : "no");

  const cells = groups.get("count") || [];
  const cellTable = tagged(table([
    { title: parts.map((p) => p.name).join(" | "), key: "value", text: true, show: (r) => String(r.value) },
    { title: "estimate (count)", key: "estimate", show: (r) => fmt.count(r.estimate) },
    { title: "share of reports", key: "share", show: (r) => (missing(r.estimate) || !n ? "" : fmt.prop(r.estimate / n)) },
    { title: "CI low", key: "ci_low", show: (r) => fmt.count(r.ci_low) },
    { title: "CI high", key: "ci_high", show: (r) => fmt.count(r.ci_high) },
    { title: "p-value", key: "p_value", show: (r) => fmt.p(r.p_value) },
    { title: "detected", key: "detected", show: detectedCell },
  ], keyed(cells), "_key"), "count");
  cellTable.id = "estimates";
  cellsBox.append(el("p", { class: "meta", text: `n = ${fmt.int(n)}, ${conf}; a cell is one combination of the parts ` +
    `(${parts.map((p) => p.name).join(" × ")}), counted in reports; detected: count > 0 (Holm)` }), scrolling(cellTable));

  const charted = [];  // [container, statistic]: drawn once the sections are in the page
  const section = (title, id, note, statistic, t, withChart) => {
    const box = el("div", { class: "joint-section", id });
    box.append(el("h2", { text: title }));
    if (note) box.append(el("p", { class: "meta", text: note }));
    if (withChart) {
      const c = el("div", { class: "chart", id: id + "-chart" });
      box.append(c);
      charted.push([c, statistic]);
    }
    box.append(scrolling(tagged(t, statistic)));
    view.append(box);
  };
  let k = 0;
  for (const [statistic, rows] of groups) {
    k += 1;
    if (statistic.startsWith("count ")) {
      const part = statistic.slice(6);
      section(`Marginal: ${part}`, `joint-${k}`, `each value of ${part} summed over the other parts' values, with the ` +
        "cells' covariances in its interval; counts of reports", statistic, table([
        { title: part, key: "value", text: true, show: (r) => String(r.value) },
        { title: "estimate (count)", key: "estimate", show: (r) => fmt.count(r.estimate) },
        { title: "share of reports", key: "share", show: (r) => (missing(r.estimate) || !n ? "" : fmt.prop(r.estimate / n)) },
        { title: "std err", key: "std_err", show: (r) => fmt.count(r.std_err) },
        { title: "CI low", key: "ci_low", show: (r) => fmt.count(r.ci_low) },
        { title: "CI high", key: "ci_high", show: (r) => fmt.count(r.ci_high) },
      ], keyed(rows), "_key"), false);
    } else if (statistic.startsWith("P(")) {
      const m = /^P\((.+) \| (.+)\)$/.exec(statistic);
      const [t, g] = m ? [m[1], m[2]] : ["value", "given"];
      section(`Shares: ${statistic}`, `joint-${k}`, `P(${t} = a | ${g} = b): the share of devices with ${t} = a among those with ${g} = b; ` +
        `${conf} by Fieller's method, within [0, 1] (all of [0, 1] where b is too rare to say)`, statistic, table([
        { title: g, key: "given", text: true, show: (r) => String(r.value).split(" | ")[1] ?? "" },
        { title: t, key: "value", text: true, show: (r) => String(r.value).split(" | ")[0] },
        { title: "share", key: "estimate", show: (r) => fmt.prop(r.estimate) },
        { title: "std err", key: "std_err", show: (r) => fmt.prop(r.std_err) },
        { title: "CI low", key: "ci_low", show: (r) => fmt.prop(r.ci_low) },
        { title: "CI high", key: "ci_high", show: (r) => fmt.prop(r.ci_high) },
      ], keyed(rows), "_key"), true);
    } else if (statistic.startsWith("mean ")) {
      const [num, g] = statistic.slice(5).split(" | ");
      const unit = unitOf(num);
      const bias = (meta.mean_bias_bound || {})[num];
      section(`Means: ${num} per ${g}${unit ? " (" + unit + ")" : ""}`, `joint-${k}`, `the mean of ${num} among the devices of ` +
        `each ${g}, from bucket midpoints: within ${missing(bias) ? "half a bucket" : "± " + fmt.num(bias) + (unit ? " " + unit : "")} ` +
        `of the true mean besides the noise; ${conf} (Fieller)`, statistic, table([
        { title: g, key: "value", text: true, show: (r) => String(r.value) },
        { title: "mean" + (unit ? ` (${unit})` : ""), key: "estimate", show: (r) => fmt.num(r.estimate) },
        { title: "std err", key: "std_err", show: (r) => fmt.num(r.std_err) },
        { title: "CI low", key: "ci_low", show: (r) => fmt.num(r.ci_low) },
        { title: "CI high", key: "ci_high", show: (r) => fmt.num(r.ci_high) },
      ], keyed(rows), "_key"), true);
    } else if (statistic.startsWith("independence ")) {
      const pair = statistic.slice(13);
      section(`Independence: ${pair}`, `joint-${k}`, `Wald χ² test that ${pair.replace(", ", " and ")} are independent ` +
        "(no share of one differs between the other's values); a small p-value says they depend on each other", statistic, table([
        { title: "test", key: "value", text: true, show: (r) => String(r.value) },
        { title: "χ²", key: "estimate", show: (r) => fmt.num(r.estimate) },
        { title: "p-value", key: "p_value", show: (r) => fmt.p(r.p_value) },
        { title: "at α = 0.05", key: "reading", text: true, show: (r) => (missing(r.p_value) ? "" : r.p_value <= 0.05
          ? "dependent (independence rejected)" : "no dependence detected") },
      ], keyed(rows), "_key"), false);
    }
  }
  for (const [container, statistic] of charted) {
    chart(container, `${ctx.charts}/estimates.svg?${qs({ window: ctx.latest, statistic })}`);
  }
}

function compareTable(doc) {
  const m = doc.meta;
  const unit = m.unit && m.scale !== "proportion" ? ` (${m.unit})` : "";
  const v = m.scale === "proportion" ? fmt.prop : fmt.num;
  const t = table([
    { title: "value", key: "value", text: true, show: (r) => String(r.value) },
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
