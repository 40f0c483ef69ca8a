/**
 * An exclusive lock shared by every Node process of one state directory: a lock file that
 * appears whole (its text written to a temporary file, then hard-linked into place, which
 * fails if the lock exists), holding `pid hostname start-time nonce`, removed on release.
 *
 * Node has no flock(2), so a process killed while holding the lock leaves the file behind.
 * A waiter takes it over only when its holder is provably gone: on the same host, `kill(pid,
 * 0)` says no such process, or the process of that pid started at another time than the
 * holder did (the pid was reused; Linux's /proc/<pid>/stat). A live holder on the same host —
 * however long it holds the lock, paused (SIGSTOP), swapped out or stepped in a debugger — is
 * waited for, never taken over by age. Only a holder on another host (a state directory on a
 * shared file system) cannot be checked: it refreshes the file's modification time every
 * `staleAfter / 3` seconds while it holds the lock, and a waiter on another host takes the
 * lock over when that lease is `staleAfter` seconds old. A holder paused past its lease can
 * then resume believing it holds the lock; the ledger's compare-and-swap before its rename
 * (storage/node.ts) refuses its write, so it re-reads the book and charges against it.
 *
 * A takeover renames the file away first, so two waiters never both remove it.
 */

import { promises as fs, readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

/** Seconds of an unrefreshed lease after which a lock of another host is taken over. */
export const LOCK_STALE_AFTER = 30;
const FIRST_WAIT_MS = 1;
const MAX_WAIT_MS = 50;

export interface LockOptions {
  /** The lease of a holder on another host, in seconds (LOCK_STALE_AFTER). */
  staleAfter?: number;
  /** Called with the holder's lock text each time the lock is found held by a live holder. */
  onWait?: (holder: string) => void;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (exc) {
    return (exc as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** When process `pid` started (clock ticks since boot, /proc/<pid>/stat field 22); "-" where unknown. */
export function startTime(pid: number | "self"): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const field = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]; // fields 3.. after "(comm)"
    return /^\d+$/.test(field ?? "") ? field : "-";
  } catch {
    return "-";
  }
}

const OWN_START = startTime("self");

/** Whether the holder named by a lock file's text is gone (its lock may be taken over). */
function holderGone(text: string, mtimeMs: number, staleAfter: number): boolean {
  const [pid, host, start] = text.trim().split(" ");
  if (host !== hostname() || !/^\d+$/.test(pid ?? "")) {
    return Date.now() - mtimeMs > staleAfter * 1000; // another host's lease (or no holder named)
  }
  const n = Number(pid);
  if (n === process.pid) return start !== OWN_START && start !== "-" && OWN_START !== "-";
  if (!alive(n)) return true;
  const now = startTime(n); // the pid is taken: by the holder, or by a later process
  return start !== undefined && start !== "-" && now !== "-" && now !== start;
}

/** The lock file's text when its holder is gone (null: held, or released meanwhile). */
async function abandoned(path: string, staleAfter: number, onWait?: (holder: string) => void): Promise<string | null> {
  let text: string;
  let mtime: number;
  try {
    [text, mtime] = await Promise.all([fs.readFile(path, "utf8"), fs.stat(path).then((s) => s.mtimeMs)]);
  } catch {
    return null; // released meanwhile: just retry
  }
  if (holderGone(text, mtime, staleAfter)) return text;
  onWait?.(text);
  return null;
}

/** Create the lock file whole with `text`; false when it exists. */
async function create(path: string, text: string): Promise<boolean> {
  const tmp = `${path}.new-${process.pid}-${randomBytes(4).toString("hex")}`;
  await fs.writeFile(tmp, text, { mode: 0o600, flag: "wx" });
  try {
    await fs.link(tmp, path);
    return true;
  } catch (exc) {
    if ((exc as NodeJS.ErrnoException).code !== "EEXIST") throw exc;
    return false;
  } finally {
    await fs.rm(tmp, { force: true });
  }
}

/** Run `fn` holding the lock file `path` (created 0600); released even when `fn` throws. */
export async function withFileLock<T>(path: string, fn: () => Promise<T> | T,
  options: LockOptions | number = {}): Promise<T> {
  const { staleAfter = LOCK_STALE_AFTER, onWait } = typeof options === "number" ? { staleAfter: options } : options;
  const mine = `${process.pid} ${hostname()} ${OWN_START} ${randomBytes(8).toString("hex")}\n`;
  let wait = FIRST_WAIT_MS;
  for (;;) {
    if (await create(path, mine)) {
      const lease = setInterval(() => {
        const now = new Date();
        fs.utimes(path, now, now).catch(() => undefined);
      }, (staleAfter * 1000) / 3);
      lease.unref();
      try {
        return await fn();
      } finally {
        clearInterval(lease);
        // ours unless a waiter of another host judged our lease expired and took it over
        if ((await fs.readFile(path, "utf8").catch(() => null)) === mine) await fs.rm(path, { force: true });
      }
    }
    const stale = await abandoned(path, staleAfter, onWait);
    if (stale !== null) {
      const aside = `${path}.stale-${process.pid}-${randomBytes(4).toString("hex")}`;
      try {
        await fs.rename(path, aside); // only one waiter wins the rename
        // a waiter that judged the same dead holder may have renamed it first and locked anew:
        // what we moved aside is then a live lock, which goes back (link fails if it exists)
        if ((await fs.readFile(aside, "utf8")) !== stale) await fs.link(aside, path).catch(() => undefined);
        await fs.rm(aside, { force: true });
      } catch {
        /* another waiter took it over first */
      }
      continue;
    }
    await new Promise((resolve) => setTimeout(resolve, wait));
    wait = Math.min(MAX_WAIT_MS, wait * 2);
  }
}
