/**
 * The privacy ledger: the device's budget book (docs/privacy.md), the same book as the Python
 * SDK's `client_sdk/ledger.py`, charge for charge (pinned by the conformance suite's ledger
 * vectors, docs/conformance.md).
 *
 * What a report costs (docs/math.md §10):
 * - without memoisation: ε per report, in the window (a UTC day) and over the lifetime;
 * - memoised (RAPPOR, `epsilon_inf`): ε₁ per report in the window — or, where reports sharing a
 *   GRR or OUE memo reveal more (`windowCharges`, from the registry's encoder block), what brings
 *   the window to C(n + 1) (`windowCost`) — and ε∞ over the lifetime the first time a *distinct*
 *   value is reported (recognised by a keyed digest, never the value).
 * A report beyond `reports_per_window`, the metric's `lifetime_epsilon`, or the registry's
 * `[device]` caps (sums over all metrics) is refused, counted, and never sent.
 *
 * Which window a charge counts in is the device clock rule (deviceClock.ts): one window for the
 * device, opened no faster than its elapsed clock allows, whatever the wall clock says.
 *
 * Everything here is pure: the storage layer (state.ts) runs `commit` inside one locked
 * read-modify-write, so two tabs or two processes never overspend together. The book's JSON is
 * the Python SDK's `ledger.json` format, so `ldpt ledger --state-dir` reads a Node state dir.
 */

import {
  type DeviceClock, type Reading, DAY_SECONDS, EPOCH_SLOTS, MAX_WINDOW_AHEAD_DAYS, OPEN_AFTER, clockFromJson,
} from "./deviceClock.js";

export { MAX_WINDOW_AHEAD_DAYS } from "./deviceClock.js";

/** Relative slack when comparing spends with a budget (realised epsilons are quantised floats). */
export const BUDGET_SLACK = 1e-9;
export const SECONDS_PER_DAY = DAY_SECONDS;
export const LEDGER_FORMAT = "ldpt-ledger";
/** 2: the device clock state (`clock`, deviceClock.ts); version-1 books are read. */
export const LEDGER_VERSION = 2;
/** The last day a window can name (9999-12-31): a wall clock beyond it charges that day. */
export const LAST_DAY = 2_932_896;

/** Why a report was refused (never sent). */
export type Refusal = "window" | "lifetime" | "device_window" | "device_lifetime";

/** One report asking to be charged: what it costs and the limits that apply. */
export interface Charge {
  metric: string;
  fingerprint: string;
  /** UTC day of the report (days since 1970-01-01): the window. */
  day: number;
  /** ε per report (ε₁ for memoised protocols). */
  epsilon: number;
  /** ε∞ when the protocol is memoised, else null. */
  epsilonLongitudinal: number | null;
  /** Keyed digest of the value (memoised protocols), else null. */
  digest: string | null;
  reportsPerWindow: number;
  lifetimeBudget: number | null;
  deviceWindowBudget: number | null;
  deviceLifetimeBudget: number | null;
  /** Memoised, r reports > r·ε₁: the window charges C(1) … C(J) then the slope s, the encoder
   *  block's `window_charges` as one list (C(k) = k·s for k > J), else null/absent. */
  windowCharges?: number[] | null;
}

/** Window epsilon this report adds: ε, or max(C(n+1) − C(n), C(n+1) − spent) for the n reports
 *  already spending `spent` in the charge's window (window_charge.next_charge). */
export function windowCost(a: MetricAccount | undefined, c: Charge): number {
  const w = c.windowCharges, n = a && windowName(c.day) <= a.window ? a.window_reports : 0;
  const total = (k: number) => (k < w!.length ? w![k - 1] : k * w![w!.length - 1]);
  return w ? total(n + 1) - (n && Math.min(total(n), a!.window_epsilon)) : c.epsilon;   // max(C − C(n), C − spent)
}

/** What one metric has spent on this device (field names as in ledger.json). */
export interface MetricAccount {
  window: string;
  window_reports: number;
  window_epsilon: number;
  lifetime_reports: number;
  lifetime_epsilon: number;
  refused_window: number;
  refused_lifetime: number;
  refused_device_window: number;
  refused_device_lifetime: number;
  fingerprint: string;
  epsilon_per_report: number;
  epsilon_longitudinal: number | null;
  reports_per_window: number;
  lifetime_budget: number | null;
  /** fingerprint -> digests of the distinct values charged at ε∞. */
  memo: Record<string, string[]>;
  /** The window before `window` and its spend (after a re-date: the window left, spend 0). */
  previous_window: string;
  previous_reports: number;
  previous_epsilon: number;
}

/**
 * The whole book: every metric's account, in insertion order (device sums add in this order,
 * as Python's dict), and the device clock state (deviceClock.ts): every charge counts in
 * `clock.window`.
 */
export class Book extends Map<string, MetricAccount> {
  clock: DeviceClock = { window: null, left: null, epochs: [], opened: 0, held: 0, redated: 0 };
}

/** The book (the name apps and older code use). */
export type Accounts = Book;

/** UTC day number of a POSIX timestamp in seconds: the ledger's window. Any reading maps to a
 *  day a window can name (before 1970 or NaN: day 0; after 9999: the last day). */
export function dayOf(seconds: number): number {
  if (!(seconds >= 0)) return 0;
  return Math.min(LAST_DAY, Math.floor(seconds / SECONDS_PER_DAY));
}

/** The window as shown to users and in the file: YYYY-MM-DD (UTC). */
export function windowName(day: number): string {
  return new Date(day * SECONDS_PER_DAY * 1000).toISOString().slice(0, 10);
}



function isMemoised(c: Charge): boolean {
  return c.epsilonLongitudinal !== null;
}

/** A deep copy of the book, accounts and clock (all of it plain JSON values: exact). */
export function copyAccounts(book: Book): Book {
  const out = new Book(JSON.parse(JSON.stringify([...book])));
  out.clock = JSON.parse(JSON.stringify(book.clock));
  return out;
}

/** Every field of an account but `window` and `memo`, at its value in a new account. */
const ACCOUNT_DEFAULTS = {
  window_reports: 0, window_epsilon: 0, lifetime_reports: 0, lifetime_epsilon: 0, refused_window: 0,
  refused_lifetime: 0, refused_device_window: 0, refused_device_lifetime: 0, fingerprint: "", epsilon_per_report: 0,
  epsilon_longitudinal: null as number | null, reports_per_window: 1, lifetime_budget: null as number | null,
  previous_window: "", previous_reports: 0, previous_epsilon: 0,
};

function newAccount(c: Charge, window: string): MetricAccount {
  return {
    ...ACCOUNT_DEFAULTS, window, fingerprint: c.fingerprint, epsilon_per_report: c.epsilon,
    epsilon_longitudinal: c.epsilonLongitudinal, reports_per_window: c.reportsPerWindow,
    lifetime_budget: c.lifetimeBudget, memo: {},
  };
}

/** Start a new window when the charge is later; a late charge counts in the current one. The
 *  window left and its spend are remembered: a re-date back onto that day adds them. */
function roll(a: MetricAccount, window: string): void {
  if (window > a.window) {
    a.previous_window = a.window;
    a.previous_reports = a.window_reports;
    a.previous_epsilon = a.window_epsilon;
    a.window = window;
    a.window_reports = 0;
    a.window_epsilon = 0;
  }
}

/**
 * The device clock rule (deviceClock.ts; docs/conformance.md, "The device clock"): the charge
 * re-dated to the window it counts in, updating the book's clock and, on a re-date or a
 * resume, its accounts. `mayOpen` false: recording a refusal, which never opens a window.
 */
export function placeCharge(book: Book, c: Charge, [id, r]: Reading, mayOpen = true): Charge {
  const clock = book.clock;
  // touch: fill the epoch's empty slots, most recently used last; a new epoch gets one opening
  let epoch = clock.epochs.find((x) => x.id === id);
  if (epoch) epoch.since = [epoch.since[0] ?? r, epoch.since[1] ?? r];
  else epoch = { id, since: [r - OPEN_AFTER, r] };
  clock.epochs = [...clock.epochs.filter((x) => x !== epoch), epoch].slice(-EPOCH_SLOTS);
  const w = clock.window;
  const day = c.day;
  if (w === null || day === w) {
    clock.window = day; // create, or the same window
  } else if (day < w) {
    if (w - day > MAX_WINDOW_AHEAD_DAYS) { // re-date (else late): later accounts move there, spend kept
      clock.window = day;
      clock.left = w;
      clock.redated += 1;
      const window = windowName(day);
      for (const a of book.values()) {
        if (a.window > window) {
          if (a.previous_window === window) {
            a.window_reports += a.previous_reports;
            a.window_epsilon += a.previous_epsilon;
          }
          a.window = window;
          a.previous_window = "";
          a.previous_reports = a.previous_epsilon = 0;
        }
      }
    }
  } else if (day === clock.left) { // resume: the accounts of the window continue there
    clock.window = day;
    clock.left = null;
    const from = windowName(w);
    for (const a of book.values()) if (a.window === from) a.window = windowName(day);
  } else if (mayOpen && epoch.since[0] !== null && r - epoch.since[0] >= OPEN_AFTER) { // open
    for (const e of clock.epochs) e.since = [e.since[1], null];
    epoch.since[1] = r;
    clock.window = day;
    clock.left = null;
    clock.opened += 1;
  } else if (mayOpen) clock.held += 1; // held
  return { ...c, day: clock.window as number };
}

/** Distinct values charged at ε∞ over all fingerprints. */
export function distinctValues(a: MetricAccount): number {
  let n = 0;
  for (const fp of Object.keys(a.memo)) n += a.memo[fp].length;
  return n;
}

/** Lifetime epsilon this report adds: ε, or ε∞ for a value not seen before (memoised). */
export function lifetimeCost(a: MetricAccount | undefined, c: Charge): number {
  if (!isMemoised(c)) return c.epsilon;
  const seen = a !== undefined && (a.memo[c.fingerprint] ?? []).includes(c.digest as string);
  return seen ? 0 : (c.epsilonLongitudinal as number);
}

/** [epsilon charged in `window`, lifetime epsilon], summed over every metric of the device. */
export function deviceTotals(accounts: Accounts, window: string): [number, number] {
  let inWindow = 0;
  let lifetime = 0;
  for (const a of accounts.values()) if (a.window === window) inWindow += a.window_epsilon;
  for (const a of accounts.values()) lifetime += a.lifetime_epsilon;
  return [inWindow, lifetime];
}

/** Whether `c` fits the device-wide caps (null: it fits). */
export function decideDevice(accounts: Accounts, c: Charge): Refusal | null {
  if (c.deviceWindowBudget === null && c.deviceLifetimeBudget === null) return null;
  const [windowSpent, lifetimeSpent] = deviceTotals(accounts, windowName(c.day));
  if (c.deviceWindowBudget !== null && windowSpent + windowCost(accounts.get(c.metric), c) > c.deviceWindowBudget * (1 + BUDGET_SLACK)) {
    return "device_window";
  }
  if (c.deviceLifetimeBudget !== null) {
    const cost = lifetimeCost(accounts.get(c.metric), c);
    if (lifetimeSpent + cost > c.deviceLifetimeBudget * (1 + BUDGET_SLACK)) return "device_lifetime";
  }
  return null;
}

/** Whether `c` fits the budget of account `a` (null: it fits). */
export function decide(a: MetricAccount | undefined, c: Charge): Refusal | null {
  const window = windowName(c.day);
  const inWindow = a === undefined || window > a.window ? 0 : a.window_reports;
  if (inWindow + 1 > c.reportsPerWindow) return "window";
  if (c.lifetimeBudget !== null) {
    const spent = a === undefined ? 0 : a.lifetime_epsilon;
    if (spent + lifetimeCost(a, c) > c.lifetimeBudget * (1 + BUDGET_SLACK)) return "lifetime";
  }
  return null;
}

export function countRefusal(a: MetricAccount, reason: Refusal, n = 1): void {
  if (reason === "window") a.refused_window += n;
  else if (reason === "lifetime") a.refused_lifetime += n;
  else if (reason === "device_window") a.refused_device_window += n;
  else a.refused_device_lifetime += n;
}

/** The account a placed charge counts in, created and rolled to its window. (Deciding after
 *  the roll decides as before it: a new or rolled account has nothing spent in the window.) */
function accountFor(book: Book, c: Charge): MetricAccount {
  const window = windowName(c.day);
  let a = book.get(c.metric);
  if (a === undefined) book.set(c.metric, (a = newAccount(c, window)));
  roll(a, window);
  return a;
}

/** Charge `book` in place if the report fits; otherwise count the refusal and return why.
 *  `reading` is the elapsed clock read when the book is updated (under its lock). */
export function apply(book: Book, charge: Charge, reading: Reading): Refusal | null {
  const c = placeCharge(book, charge, reading);
  const a = accountFor(book, c);
  const refusal = decide(a, c) ?? decideDevice(book, c);
  if (refusal !== null) {
    countRefusal(a, refusal);
    return refusal;
  }
  const cost = lifetimeCost(a, c);
  a.window_epsilon += windowCost(a, c);
  a.window_reports += 1;
  a.lifetime_reports += 1;
  a.lifetime_epsilon += cost;
  if (isMemoised(c) && cost > 0) (a.memo[c.fingerprint] ??= []).push(c.digest as string);
  a.fingerprint = c.fingerprint;
  a.epsilon_per_report = c.epsilon;
  a.epsilon_longitudinal = c.epsilonLongitudinal;
  a.reports_per_window = c.reportsPerWindow;
  a.lifetime_budget = c.lifetimeBudget;
  return null;
}

/** Count `n` refusals decided earlier (on the app's side); never opens a window. */
export function recordRefusal(book: Book, charge: Charge, reason: Refusal, n: number, reading: Reading): void {
  countRefusal(accountFor(book, placeCharge(book, charge, reading, false)), reason, n);
}

/** Refusals decided on the app's side, to be recorded in the book: [charge, reason, count]. */
export type RefusalCounts = Array<[Charge, Refusal, number]>;

/** Apply refusal counts, then charges in order (one transaction, one reading); the outcomes. */
export function commitCharges(book: Book, charges: readonly Charge[], refusals: RefusalCounts,
  reading: Reading): Array<Refusal | null> {
  for (const [c, reason, n] of refusals) recordRefusal(book, c, reason, n, reading);
  return charges.map((c) => apply(book, c, reading));
}

/** Drop the memoisation digests (opt-out: the secret they are keyed by is gone). */
export function forgetValues(accounts: Accounts): boolean {
  let changed = false;
  for (const a of accounts.values()) {
    if (Object.keys(a.memo).length) changed = true;
    a.memo = {};
  }
  return changed;
}

// --- the file ---------------------------------------------------------------------------------

export class LedgerError extends Error {
  override name = "LedgerError";
}

const COUNT_FIELDS = ["window_reports", "lifetime_reports", "refused_window", "refused_lifetime",
  "reports_per_window", "refused_device_window", "refused_device_lifetime", "previous_reports"] as const;
const EPSILON_FIELDS = ["window_epsilon", "lifetime_epsilon", "epsilon_per_report", "previous_epsilon"] as const;
const OPTIONAL_EPSILON_FIELDS = ["epsilon_longitudinal", "lifetime_budget"] as const;

/** The book in the Python SDK's ledger.json format (metrics sorted by name; each memo set's
 *  digests sorted, so the file does not tell in which order values were first reported). */
export function dumpLedger(accounts: Book, generation = ""): string {
  const metrics: Record<string, MetricAccount> = {};
  for (const name of [...accounts.keys()].sort()) {
    const a = accounts.get(name) as MetricAccount;
    const memo: Record<string, string[]> = {};
    for (const fp of Object.keys(a.memo).sort()) memo[fp] = a.memo[fp].slice().sort();
    metrics[name] = { ...a, memo };
  }
  return JSON.stringify({ format: LEDGER_FORMAT, version: LEDGER_VERSION, generation, clock: accounts.clock, metrics },
    null, 1) + "\n";
}

/** Parse a book written by `dumpLedger` or the Python SDK; LedgerError when it is not one. */
export function parseLedger(text: string | null, where = "ledger"): { accounts: Book; generation: string | null } {
  const accounts = new Book();
  if (text === null) return { accounts, generation: null };
  let doc: any;
  try {
    doc = JSON.parse(text);
    if (doc === null || typeof doc !== "object" || doc.format !== LEDGER_FORMAT) throw new Error("not an ldp-telemetry ledger");
    if (Number(doc.version ?? 0) > LEDGER_VERSION) throw new Error(`from a newer SDK (version ${doc.version})`);
    // (metrics null or missing: Object.keys throws, a TypeError caught below like every other fault)
    for (const name of Object.keys(doc.metrics)) accounts.set(name, accountFromJson(doc.metrics[name]));
    if ("clock" in doc) accounts.clock = clockFromJson(doc.clock); // (a version-1 book: a new clock)
  } catch (exc) {
    throw new LedgerError(`${where}: the privacy ledger is unreadable (${(exc as Error).message}); no reports ` +
      "until it is repaired or removed");
  }
  return { accounts, generation: typeof doc.generation === "string" ? doc.generation : null };
}

function accountFromJson(data: any): MetricAccount {
  // (null: reading a field throws a TypeError, which parseLedger turns into a LedgerError)
  const a: MetricAccount = { ...ACCOUNT_DEFAULTS, window: data.window, memo: {} };
  for (const k of Object.keys(ACCOUNT_DEFAULTS) as Array<keyof typeof ACCOUNT_DEFAULTS>) {
    (a as any)[k] = data[k] ?? ACCOUNT_DEFAULTS[k]; // eslint-disable-line @typescript-eslint/no-explicit-any
  }
  const bad: string[] = [];
  for (const f of COUNT_FIELDS) if (!Number.isInteger(a[f])) bad.push(f);
  // finite numbers (isFinite is false for a non-number); a null read above is already the default
  for (const f of [...EPSILON_FIELDS, ...OPTIONAL_EPSILON_FIELDS]) if (!Number.isFinite(a[f] ?? 0)) bad.push(f);
  for (const f of ["window", "fingerprint", "previous_window"] as const) if (typeof a[f] !== "string") bad.push(f);
  const memo = data.memo ?? {};
  if (memo === null || typeof memo !== "object" || Array.isArray(memo)) bad.push("memo");
  else {
    for (const fp of Object.keys(memo)) {
      const digests = memo[fp];
      if (!Array.isArray(digests) || !digests.every((d: unknown) => typeof d === "string")) bad.push("memo");
      else a.memo[fp] = digests.slice();
    }
  }
  if (bad.length) throw new Error(`field(s) ${bad}: wrong type`);
  return a;
}

/** One plain row per metric (what `ldpt ledger` prints), for apps that show the book. */
export function summarise(accounts: Accounts): Array<Record<string, unknown>> {
  return [...accounts.keys()].sort().map((name) => {
    const a = accounts.get(name) as MetricAccount;
    return {
      metric: name, window: a.window, window_reports: a.window_reports, reports_per_window: a.reports_per_window,
      window_epsilon: a.window_epsilon, lifetime_reports: a.lifetime_reports, lifetime_epsilon: a.lifetime_epsilon,
      lifetime_budget: a.lifetime_budget, epsilon_per_report: a.epsilon_per_report,
      epsilon_longitudinal: a.epsilon_longitudinal,
      distinct_values: a.epsilon_longitudinal !== null ? distinctValues(a) : null,
      refused_window: a.refused_window, refused_lifetime: a.refused_lifetime,
      refused_device: a.refused_device_window + a.refused_device_lifetime,
    };
  });
}
