/**
 * An exclusive lock shared by every Node process of one state directory: a lock file created
 * with O_EXCL (`open(..., "wx")`), holding `pid hostname`, removed on release.
 *
 * Node has no flock(2). A process killed while holding the lock leaves the file behind; a
 * waiter takes it over when its holder is provably gone — the same host and `kill(pid, 0)`
 * says no such process — or when the file is older than `staleAfter` seconds (the lock is held
 * for one ledger read-modify-write: milliseconds). A takeover renames the file away first, so
 * two waiters never both remove it.
 */

import { promises as fs } from "node:fs";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

/** Seconds after which a lock file is considered abandoned whatever its holder. */
export const LOCK_STALE_AFTER = 30;
const FIRST_WAIT_MS = 1;
const MAX_WAIT_MS = 50;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (exc) {
    return (exc as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The lock file's text when its holder is gone (null: held, or released meanwhile). */
async function abandoned(path: string, staleAfter: number): Promise<string | null> {
  let text: string;
  let mtime: number;
  try {
    [text, mtime] = await Promise.all([fs.readFile(path, "utf8"), fs.stat(path).then((s) => s.mtimeMs)]);
  } catch {
    return null; // released meanwhile: just retry
  }
  if (Date.now() - mtime > staleAfter * 1000) return text;
  const [pid, host] = text.trim().split(" ");
  if (host !== hostname() || !/^\d+$/.test(pid ?? "")) return null;
  return Number(pid) !== process.pid && !alive(Number(pid)) ? text : null;
}

/** Run `fn` holding the lock file `path` (created 0600); released even when `fn` throws. */
export async function withFileLock<T>(path: string, fn: () => Promise<T> | T,
  staleAfter = LOCK_STALE_AFTER): Promise<T> {
  let wait = FIRST_WAIT_MS;
  for (;;) {
    let handle: fs.FileHandle | null = null;
    try {
      handle = await fs.open(path, "wx", 0o600);
    } catch (exc) {
      if ((exc as NodeJS.ErrnoException).code !== "EEXIST") throw exc;
    }
    if (handle !== null) {
      try {
        await handle.writeFile(`${process.pid} ${hostname()}\n`);
      } finally {
        await handle.close();
      }
      try {
        return await fn();
      } finally {
        await fs.rm(path, { force: true });
      }
    }
    const stale = await abandoned(path, staleAfter);
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
