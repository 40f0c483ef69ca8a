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

import { hexOf } from "./hashing.js";

export const DAY_SECONDS = 86_400;
export const MAX_WINDOW_AHEAD_DAYS = 2;
export const CLOCK_MARGIN = 2;
export const EPOCH_SLOTS = 16;
export const OPEN_AFTER = DAY_SECONDS + CLOCK_MARGIN;

/** An elapsed-clock reading: [epoch id, whole seconds of that epoch's clock]. */
export type Reading = [string, number];
/** A clock that never runs faster than real time (see the module comment). */
export type ElapsedClock = () => Reading;

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
  const c = { window: null, left: null, epochs: [], opened: 0, held: 0, redated: 0, ...d };
  const ok = (v: unknown) => v === null || Number.isSafeInteger(v);
  if (typeof d !== "object" || d === null || ![c.window, c.left].every(ok) || ![c.opened, c.held, c.redated].every(Number.isSafeInteger)
    || !c.epochs.every((e: Epoch) => typeof e.id === "string" && e.since.length === 2 && e.since.every(ok))) {
    throw new Error("bad clock");   // caught: the book is unreadable (null, or epochs no array: a TypeError too)
  }
  return { window: c.window, left: c.left, epochs: c.epochs.slice(-EPOCH_SLOTS), opened: c.opened, held: c.held, redated: c.redated };
}

/** 16 random hex digits: a realm's epoch id, a ledger write's generation tag. */
export function randomTag(): string {
  return hexOf(crypto.getRandomValues(new Uint8Array(8)));
}

let runId: string | undefined;

/** This realm's elapsed clock: performance.now() in whole seconds, epoch `run:<random>` (once per
 *  process or page). It stops in some browsers while asleep, which only delays new windows. */
export function realmElapsed(): Reading {
  return [(runId ??= "run:" + randomTag()), Math.floor(performance.now() / 1000)];
}
