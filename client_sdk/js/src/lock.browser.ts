/**
 * The device lock in a browser: the Web Locks API (`navigator.locks`), an exclusive lock per
 * name shared by every tab and worker of the origin, released when the callback settles or the
 * tab dies. Where the API is missing (very old browsers), the IndexedDB readwrite transaction
 * the callback runs in is still serialised across tabs, so the ledger stays consistent.
 */

export async function withWebLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const locks = typeof navigator !== "undefined" ? (navigator as Navigator).locks : undefined;
  if (locks === undefined) return fn();
  return locks.request(name, { mode: "exclusive" }, fn) as Promise<T>;
}
