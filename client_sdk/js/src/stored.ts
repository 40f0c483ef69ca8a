/**
 * The outbox's entry for a sealed batch (the same bytes as client_sdk/queue.py stored_bytes):
 * MAGIC, then the batch, the envelope, enc and the response secret, each with a 4-byte
 * big-endian length, then the key id. A plain batch (a msgpack map) never starts with 0x00.
 * Kept apart from ohttp.ts so the core client can read an entry without the sealing code.
 */

/** An encapsulated request and what reading its answer needs (client_sdk/ohttp.py SealedRequest). */
export interface SealedRequest { envelope: Uint8Array; enc: Uint8Array; secret: Uint8Array; keyId: number }

const MAGIC = new TextEncoder().encode("\u0000ldpt-sealed-1\n");

/** What the outbox stores for a sealed batch. */
export function storedBytes(body: Uint8Array, s: SealedRequest): Uint8Array {
  const parts = [body, s.envelope, s.enc, s.secret];
  const out = new Uint8Array(MAGIC.length + parts.reduce((n, p) => n + 4 + p.length, 0) + 1);
  out.set(MAGIC);
  let pos = MAGIC.length;
  for (const p of parts) {
    new DataView(out.buffer).setUint32(pos, p.length);
    out.set(p, pos + 4);
    pos += 4 + p.length;
  }
  out[pos] = s.keyId;
  return out;
}

/** (batch, envelope or null) of an outbox entry; a plain batch is returned as it is. */
export function parseStored(data: Uint8Array): { body: Uint8Array; sealed: SealedRequest | null } {
  if (data.length < MAGIC.length || MAGIC.some((b, i) => data[i] !== b)) return { body: data, sealed: null };
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const parts: Uint8Array[] = [];
  let pos = MAGIC.length;
  for (let i = 0; i < 4; i++) {
    if (pos + 4 > data.length) throw new Error("a sealed batch entry is torn");
    const n = view.getUint32(pos);
    parts.push(data.slice(pos + 4, pos + 4 + n));
    pos += 4 + n;
  }
  if (pos + 1 !== data.length) throw new Error("a sealed batch entry is torn");
  return { body: parts[0], sealed: { envelope: parts[1], enc: parts[2], secret: parts[3], keyId: data[pos] } };
}
