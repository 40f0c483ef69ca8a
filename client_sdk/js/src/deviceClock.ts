/**
 * The device clock rule — which window a charge counts in, whatever the wall clock says — as
 * the Python SDK's `client_sdk/device_clock.py`, step for step (pinned by the ledger vectors;
 * docs/conformance.md, "The device clock"; docs/privacy.md, "Clock errors").
 *
 * The book has one current window for the device. A charge dated before it counts in it (up to
 * MAX_WINDOW_AHEAD_DAYS) or re-dates it, spend kept; the day a re-date left resumes it; a later
 * day opens a fresh window only when the charging epoch's elapsed clock shows a day and
 * CLOCK_MARGIN seconds since the opening before the last (else the charge is held in the
 * window). A new epoch (a reboot, a process or page whose clock is its own) gets one opening.
 *
 * Elapsed readings are [epoch, whole seconds]: `boot:<kernel boot id>` with the system uptime on
 * Linux (Node: /proc/sys/kernel/random/boot_id and os.uptime(), the boot clock, shared by every
 * process of one boot), otherwise `run:<random>` with this process's or page's monotonic clock
 * (performance.now()), which no other process can compare with.
 */

export const DAY_SECONDS = 86_400;
export const MAX_WINDOW_AHEAD_DAYS = 2;
export const CLOCK_MARGIN = 2;
export const EPOCH_SLOTS = 16;
export const OPEN_AFTER = DAY_SECONDS + CLOCK_MARGIN;

/** An elapsed-clock reading: [epoch id, whole seconds of that epoch's clock]. */
export type Reading = [string, number];
/** A clock that never runs faster than real time (see the module comment). */
export type ElapsedClock = () => Reading;

export type Move = "create" | "same" | "late" | "redate" | "resume" | "open" | "held";

export interface Epoch {
  id: string;
  /** [first reading at/after the second-to-last opening, ... at/after the last] (null: none yet). */
  since: [number | null, number | null];
}

/** The device-wide clock state of a book (the ledger file's `clock` object). */
export interface DeviceClock {
  window: number | null;
  left: number | null;
  epochs: Epoch[];
  opened: number;
  held: number;
  redated: number;
}

/** Parse the `clock` object of a ledger file; throws when a field has the wrong type. */
export function clockFromJson(d: any): DeviceClock { // eslint-disable-line @typescript-eslint/no-explicit-any
  const int = (v: unknown, orNull = false): any => { // eslint-disable-line @typescript-eslint/no-explicit-any
    if (!(Number.isSafeInteger(v) || (orNull && v === null))) throw new Error("the clock object is malformed");
    return v;
  };
  if (typeof d !== "object" || !Array.isArray(d.epochs ?? [])) int(d); // null: d.epochs throws (caught)
  return {
    window: int(d.window ?? null, true), left: int(d.left ?? null, true),
    epochs: (d.epochs ?? []).map((e: any) => { // eslint-disable-line @typescript-eslint/no-explicit-any
      if (typeof e?.id !== "string" || e.since?.length !== 2) int(e);
      return { id: e.id, since: [int(e.since[0], true), int(e.since[1], true)] };
    }).slice(-EPOCH_SLOTS),
    opened: int(d.opened ?? 0), held: int(d.held ?? 0), redated: int(d.redated ?? 0),
  };
}

/** Record an update by the reading's epoch (fill its empty slots, most recently used); a new
 *  epoch gets one opening's credit (`since[0]` a day before its first reading). */
export function touch(c: DeviceClock, [id, seconds]: Reading): Epoch {
  let e = c.epochs.find((x) => x.id === id);
  if (e) e.since = [e.since[0] ?? seconds, e.since[1] ?? seconds];
  else e = { id, since: [seconds - OPEN_AFTER, seconds] };
  c.epochs = [...c.epochs.filter((x) => x !== e), e].slice(-EPOCH_SLOTS);
  return e;
}

/** The window a charge dated `day` counts in, updating `c` (`mayOpen` false: recording a refusal). */
export function place(c: DeviceClock, day: number, reading: Reading, mayOpen = true): [number, Move] {
  const epoch = touch(c, reading);
  const w = c.window;
  if (w === null) {
    c.window = day;
    return [day, "create"];
  }
  if (day === w) return [w, "same"];
  if (day < w) {
    if (w - day <= MAX_WINDOW_AHEAD_DAYS) return [w, "late"];
    c.window = day;
    c.left = w;
    c.redated += 1;
    return [day, "redate"];
  }
  if (day === c.left) {
    c.window = day;
    c.left = null;
    return [day, "resume"];
  }
  const start = epoch.since[0];
  if (mayOpen && start !== null && reading[1] - start >= OPEN_AFTER) {
    for (const e of c.epochs) e.since = [e.since[1], null];
    epoch.since[1] = reading[1];
    c.window = day;
    c.left = null;
    c.opened += 1;
    return [day, "open"];
  }
  if (mayOpen) c.held += 1;
  return [w, "held"];
}

let runId: string | null = null;

/** This process's (or page's) epoch id when there is no boot clock: random, once per realm. */
export function runEpoch(): string {
  return (runId ??= "run:" + Array.from(crypto.getRandomValues(new Uint8Array(8)), (x) => x.toString(16).padStart(2, "0")).join(""));
}

/** The monotonic clock of this realm: performance.now() (stops in some browsers while asleep,
 *  which only delays new windows). */
export function realmElapsed(): Reading {
  return [runEpoch(), Math.floor(performance.now() / 1000)];
}
