/**
 * Wire format v1 (docs/wire-format.md): one msgpack map {v, batch_id, reports: [{m, f, p}]}.
 *
 * A small msgpack encoder of our own (the subset the SDK sends: maps with string keys, arrays,
 * strings, binary, integers, booleans, nil) that writes the bytes Python's
 * `msgpack.packb(..., use_bin_type=True)` writes for the same objects — the smallest form of
 * every integer, string and container — so a batch is byte-for-byte the Python SDK's (pinned by
 * the conformance suite's batch vectors). A decoder for the same subset lets the SDK split a
 * stored batch when the collector rejects one of its reports.
 */

export const WIRE_VERSION = 1;
export const BATCH_ID_BYTES = 16;

/** What may appear in a payload: the protocols' wire objects. */
export type WireValue = number | boolean | null | string | Uint8Array | WireValue[] | { [key: string]: WireValue };

/** One randomised report as it goes on the wire. */
export interface WireReport {
  m: string;
  f: string;
  p: WireValue;
}

const utf8 = new TextEncoder();

class Writer {
  buf = new Uint8Array(256);
  len = 0;

  private room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }

  byte(b: number): void {
    this.room(1);
    this.buf[this.len++] = b;
  }

  /** `bytes` big-endian bytes of a non-negative integer below 2^53. */
  uint(value: number, bytes: number): void {
    this.room(bytes);
    for (let i = bytes - 1; i >= 0; i--) {
      this.buf[this.len + i] = value % 256;
      value = Math.floor(value / 256);
    }
    this.len += bytes;
  }

  raw(data: Uint8Array): void {
    this.room(data.length);
    this.buf.set(data, this.len);
    this.len += data.length;
  }
}

function writeInt(w: Writer, v: number): void {
  if (!Number.isSafeInteger(v)) throw new RangeError(`msgpack: ${v} is not a safe integer`);
  if (v >= 0) {
    if (v < 0x80) w.byte(v);
    else if (v < 0x100) { w.byte(0xcc); w.uint(v, 1); }
    else if (v < 0x10000) { w.byte(0xcd); w.uint(v, 2); }
    else if (v < 0x100000000) { w.byte(0xce); w.uint(v, 4); }
    else { w.byte(0xcf); w.uint(v, 8); }
  } else if (v >= -32) {
    w.byte(0x100 + v);
  } else if (v >= -0x80) { w.byte(0xd0); w.uint(0x100 + v, 1); }
  else if (v >= -0x8000) { w.byte(0xd1); w.uint(0x10000 + v, 2); }
  else if (v >= -0x80000000) { w.byte(0xd2); w.uint(0x100000000 + v, 4); }
  else {
    // two's complement in 8 bytes: high and low 32-bit halves
    w.byte(0xd3);
    const hi = Math.floor(v / 0x100000000);
    const lo = v - hi * 0x100000000;
    w.uint(hi + 0x100000000, 4);
    w.uint(lo, 4);
  }
}

function writeLength(w: Writer, n: number, fix: number, fixMax: number, codes: [number, number, number] | [null, number, number]): void {
  if (n < fixMax) w.byte(fix | n);
  else if (codes[0] !== null && n < 0x100) { w.byte(codes[0]); w.uint(n, 1); }
  else if (n < 0x10000) { w.byte(codes[1]); w.uint(n, 2); }
  else { w.byte(codes[2]); w.uint(n, 4); }
}

function write(w: Writer, v: WireValue): void {
  if (v === null) w.byte(0xc0);
  else if (v === false) w.byte(0xc2);
  else if (v === true) w.byte(0xc3);
  else if (typeof v === "number") writeInt(w, v);
  else if (typeof v === "string") {
    const data = utf8.encode(v);
    writeLength(w, data.length, 0xa0, 32, [0xd9, 0xda, 0xdb]);
    w.raw(data);
  } else if (v instanceof Uint8Array) {
    if (v.length < 0x100) { w.byte(0xc4); w.uint(v.length, 1); }
    else if (v.length < 0x10000) { w.byte(0xc5); w.uint(v.length, 2); }
    else { w.byte(0xc6); w.uint(v.length, 4); }
    w.raw(v);
  } else if (Array.isArray(v)) {
    writeLength(w, v.length, 0x90, 16, [null, 0xdc, 0xdd]);
    for (const item of v) write(w, item);
  } else {
    const keys = Object.keys(v);
    writeLength(w, keys.length, 0x80, 16, [null, 0xde, 0xdf]);
    for (const k of keys) {
      write(w, k);
      write(w, v[k]);
    }
  }
}

/** msgpack bytes of `value` (the subset above; map keys in insertion order). */
export function pack(value: WireValue): Uint8Array {
  const w = new Writer();
  write(w, value);
  return w.buf.slice(0, w.len);
}

/** The body of one batch: wire format v1. */
export function packBatch(reports: readonly WireReport[], batchId: Uint8Array): Uint8Array {
  if (batchId.length !== BATCH_ID_BYTES) throw new RangeError(`a batch id is ${BATCH_ID_BYTES} bytes`);
  const items: WireValue[] = reports.map((r) => ({ m: r.m, f: r.f, p: r.p }));
  return pack({ v: WIRE_VERSION, batch_id: batchId, reports: items });
}

/** A fresh random batch id (CSPRNG: the same on every retry of that batch, never reused). */
export function newBatchId(): Uint8Array {
  return crypto.getRandomValues(new Uint8Array(BATCH_ID_BYTES));
}

// --- decoding (our own batches, to split one the collector partly rejected) -------------------------

const utf8d = new TextDecoder();

/** Decode one msgpack document of the subset `pack` writes. */
export function unpack(data: Uint8Array): WireValue {
  let pos = 0;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const need = (n: number) => {
    if (pos + n > data.length) throw new RangeError("msgpack: truncated");
  };
  const uint = (n: number): number => {
    need(n);
    let v = 0;
    for (let i = 0; i < n; i++) v = v * 256 + data[pos + i];
    pos += n;
    return v;
  };
  const bytes = (n: number): Uint8Array => {
    need(n);
    const out = data.slice(pos, pos + n);
    pos += n;
    return out;
  };
  const str = (n: number): string => utf8d.decode(bytes(n));
  const arr = (n: number): WireValue[] => Array.from({ length: n }, () => read());
  const map = (n: number): { [k: string]: WireValue } => {
    const out: { [k: string]: WireValue } = {};
    for (let i = 0; i < n; i++) {
      const k = read();
      if (typeof k !== "string") throw new TypeError("msgpack: a map key is not a string");
      out[k] = read();
    }
    return out;
  };
  const read = (): WireValue => {
    const b = uint(1);
    if (b < 0x80) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xf0) === 0x80) return map(b & 0x0f);
    if ((b & 0xf0) === 0x90) return arr(b & 0x0f);
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    // the sized families: 2^k-byte lengths (bin 8/16/32, str 8/16/32, array and map 16/32) and values
    const k = b & 3;
    if (b >= 0xc4 && b <= 0xc6) return bytes(uint(1 << k));
    if (b >= 0xcc && b <= 0xcf) return uint(1 << k);
    if (b >= 0xd0 && b <= 0xd2) {
      const v = uint(1 << k); // int 8/16/32, two's complement
      return v >= 2 ** (8 << k) / 2 ? v - 2 ** (8 << k) : v;
    }
    if (b === 0xd3) {
      need(8);
      pos += 8;
      return Number(view.getBigInt64(pos - 8));
    }
    if (b >= 0xd9 && b <= 0xdb) return str(uint(1 << (b - 0xd9)));
    if (b >= 0xdc && b <= 0xdf) return (b < 0xde ? arr : map)(uint(2 << (b & 1)));
    if (b === 0xc0 || b === 0xc2 || b === 0xc3) return b === 0xc0 ? null : b === 0xc3;
    throw new TypeError(`msgpack: type byte 0x${b.toString(16)} is not used by wire format v1`);
  };
  const out = read();
  if (pos !== data.length) throw new RangeError("msgpack: trailing bytes");
  return out;
}

/** The reports of a batch body written by `packBatch`. */
export function batchReports(body: Uint8Array): WireReport[] {
  const doc = unpack(body) as { reports?: WireValue };
  if (!Array.isArray(doc.reports)) throw new TypeError("not a wire-format batch");
  return doc.reports as unknown as WireReport[];
}
