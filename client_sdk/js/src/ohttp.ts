/**
 * Oblivious HTTP (RFC 9458) for sealed batches, the client's half, byte for byte that of
 * client_sdk/ohttp.py and bhttp.py (docs/wire-format.md, "Sealed batches"; pinned by
 * conformance/vectors/sealed.json): key configurations, the padded Binary HTTP request (RFC
 * 9292) carrying a batch, its HPKE encapsulation and the response's decapsulation.
 *
 * HPKE (RFC 9180, base mode) for the one suite DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 /
 * AES-128-GCM is composed here from the platform's WebCrypto (X25519 key generation and
 * exchange, AES-128-GCM) and the SDK's HMAC-SHA256 (src/hashing.ts) for the labeled HKDF steps:
 * the library @hpke/core adds 6.5 KB gzip to the bundle for the same operations, more than
 * the sealed bundle's budget allows (docs/benchmarks.md). The tests check this composition
 * against RFC 9180 A.1.1, RFC 9458 Appendix A, the Python reference's vectors, and @hpke/core
 * itself on random keys.
 */

import { hmacSha256 } from "./hashing.js";
import type { SealedRequest } from "./stored.js";

export { type SealedRequest, parseStored, storedBytes } from "./stored.js";

export const KEM_X25519 = 0x0020;
export const KDF_HKDF_SHA256 = 0x0001;
export const AEAD_AES_128_GCM = 0x0001;
export const GATEWAY_PATH = "/.well-known/ohttp-gateway";
export const REQUEST_TYPE = "message/ohttp-req";
export const RESPONSE_TYPE = "message/ohttp-res";
export const KEYS_TYPE = "application/ohttp-keys";
export const KEY_PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#ohttp-key";
/** Sizes a sealed request's Binary HTTP message is padded to (client_sdk/ohttp.py PAD_CLASSES). */
export const PAD_CLASSES = [1024, 4096, 16384, 65536, 262144, 1048576];
const TAG = 16;
const NONCE_R = 16;

/** One key configuration (RFC 9458 §3.1). */
export interface KeyConfig { keyId: number; kemId: number; publicKey: Uint8Array; suites: Array<[number, number]> }


const te = new TextEncoder();
const cat = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let i = 0;
  for (const p of parts) { out.set(p, i); i += p.length; }
  return out;
};
const u16 = (n: number): Uint8Array => new Uint8Array([n >> 8, n & 255]);

/** The smallest size class that holds `size` bytes (beyond the last: its multiples). */
export function paddedLength(size: number): number {
  for (const c of PAD_CLASSES) if (size <= c) return c;
  const top = PAD_CLASSES[PAD_CLASSES.length - 1];
  return Math.ceil(size / top) * top;
}

/** An `application/ohttp-keys` document: every configuration, or an Error for any encoding fault. */
export function decodeKeyConfigs(data: Uint8Array): KeyConfig[] {
  const out: KeyConfig[] = [];
  if (!data.length) throw new Error("an empty key configuration document");
  for (let pos = 0; pos < data.length;) {
    if (pos + 2 > data.length) throw new Error("a key configuration length runs past the end");
    const len = (data[pos] << 8) | data[pos + 1];
    const c = data.subarray(pos + 2, pos + 2 + len);
    if (c.length !== len || len < 3) throw new Error("a key configuration runs past the end");
    const kemId = (c[1] << 8) | c[2];
    const npk = ({ 16: 65, 17: 97, 18: 133, 32: 32, 33: 56 } as Record<number, number>)[kemId];
    if (npk === undefined) throw new Error(`unknown KEM ${kemId} in a key configuration`);
    const alen = c.length >= 5 + npk ? (c[3 + npk] << 8) | c[4 + npk] : -1;
    if (alen !== c.length - 5 - npk || alen <= 0 || alen % 4) throw new Error("malformed symmetric algorithms");
    const suites: Array<[number, number]> = [];
    for (let i = 5 + npk; i < c.length; i += 4) suites.push([(c[i] << 8) | c[i + 1], (c[i + 2] << 8) | c[i + 3]]);
    out.push({ keyId: c[0], kemId, publicKey: c.slice(3, 3 + npk), suites });
    pos += 2 + len;
  }
  return out;
}

/** The first configuration this SDK seals to (X25519, HKDF-SHA256, AES-128-GCM). */
export function chooseConfig(configs: KeyConfig[]): KeyConfig {
  const c = configs.find((k) => k.kemId === KEM_X25519 && k.publicKey.length === 32
    && k.suites.some(([kdf, aead]) => kdf === KDF_HKDF_SHA256 && aead === AEAD_AES_128_GCM));
  if (!c) throw new Error("no key configuration uses DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and AES-128-GCM");
  return c;
}

// --- Binary HTTP (RFC 9292) ---------------------------------------------------------------------------
function varint(n: number): Uint8Array {
  if (n < 0x40) return new Uint8Array([n]);
  if (n < 0x4000) return new Uint8Array([0x40 | (n >> 8), n & 255]);
  return new Uint8Array([0x80 | (n >>> 24), (n >>> 16) & 255, (n >>> 8) & 255, n & 255]); // < 2^30
}
const lv = (b: Uint8Array): Uint8Array => cat(varint(b.length), b);

/** The padded known-length request `POST https:///v1/reports` carrying `batch` (docs/wire-format.md). */
export function innerRequest(batch: Uint8Array): Uint8Array {
  const field = cat(lv(te.encode("content-type")), lv(te.encode("application/msgpack")));
  const raw = cat(varint(0), lv(te.encode("POST")), lv(te.encode("https")), lv(new Uint8Array(0)),
    lv(te.encode("/v1/reports")), lv(field), lv(batch), varint(0));
  const out = new Uint8Array(paddedLength(raw.length));
  out.set(raw);
  return out;
}

/** A known-length response: status, fields (lower-case names; the first of each kept), content. */
export function decodeResponse(data: Uint8Array): { status: number; headers: Record<string, string>; body: Uint8Array } {
  let pos = 0;
  const int = (): number => {
    if (pos >= data.length) throw new Error("the message ends inside a varint");
    const size = 1 << (data[pos] >> 6);
    if (pos + size > data.length) throw new Error("the message ends inside a varint");
    let v = data[pos] & 0x3f;
    for (let i = 1; i < size; i++) v = v * 256 + data[pos + i];
    pos += size;
    return v;
  };
  const take = (n: number): Uint8Array => {
    if (pos + n > data.length) throw new Error("a length runs past the end of the message");
    pos += n;
    return data.subarray(pos - n, pos);
  };
  const section = (): Uint8Array => (pos >= data.length ? new Uint8Array(0) : take(int()));
  const fields = (s: Uint8Array): Record<string, string> => {
    const saved = [data, pos] as const;
    data = s; pos = 0;
    const out: Record<string, string> = {};
    const td = new TextDecoder("latin1");
    while (pos < data.length) {
      const name = td.decode(take(int()));
      const value = td.decode(take(int()));
      if (!name || name !== name.toLowerCase()) throw new Error("a field name is empty or not lower case");
      out[name] ??= value;
    }
    [data, pos] = saved;
    return out;
  };
  if (int() !== 1) throw new Error("not a known-length Binary HTTP response");
  let status = int();
  while (status >= 100 && status < 200) { fields(take(int())); status = int(); }
  if (status < 200 || status > 599) throw new Error(`status ${status} is not a final status`);
  const headers = fields(section());
  const body = section().slice();
  fields(section());
  if (data.subarray(pos).some((b) => b !== 0)) throw new Error("non-zero bytes after the message");
  return { status, headers, body };
}

// --- HPKE base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM (RFC 9180) -------------------
const HPKE_V1 = te.encode("HPKE-v1");
const KEM_ID = cat(te.encode("KEM"), u16(KEM_X25519));
const SUITE_ID = cat(te.encode("HPKE"), u16(KEM_X25519), u16(KDF_HKDF_SHA256), u16(AEAD_AES_128_GCM));

/** LabeledExtract(salt, label, ikm) = HMAC(salt, "HPKE-v1" ‖ suite ‖ label ‖ ikm) (empty salt: zeros). */
const extract = (suite: Uint8Array, salt: Uint8Array, label: string, ikm: Uint8Array): Uint8Array =>
  hmacSha256(salt, cat(HPKE_V1, suite, te.encode(label), ikm));

/** LabeledExpand(prk, label, info, L), L <= 32 (one HMAC block is all this suite needs). */
const expand = (suite: Uint8Array, prk: Uint8Array, label: string, info: Uint8Array, L: number): Uint8Array =>
  hmacSha256(prk, cat(u16(L), HPKE_V1, suite, te.encode(label), info, new Uint8Array([1]))).slice(0, L);

const subtle = (): SubtleCrypto => globalThis.crypto.subtle;
const X25519 = { name: "X25519" } as unknown as AlgorithmIdentifier;
/** A typed array as WebCrypto's BufferSource (TypeScript's lib types want an ArrayBuffer-backed view). */
const bs = (b: Uint8Array): BufferSource => b as unknown as BufferSource;
const PKCS8_X25519 = new Uint8Array([48, 46, 2, 1, 0, 48, 5, 6, 3, 43, 101, 110, 4, 34, 4, 32]);

async function aesGcm(key: Uint8Array, nonce: Uint8Array, data: Uint8Array, decrypt: boolean,
  aad: Uint8Array = new Uint8Array(0)): Promise<Uint8Array> {
  const k = await subtle().importKey("raw", bs(key), "AES-GCM", false, [decrypt ? "decrypt" : "encrypt"]);
  const alg = { name: "AES-GCM", iv: bs(nonce), additionalData: bs(aad), tagLength: 128 };
  return new Uint8Array(await (decrypt ? subtle().decrypt(alg, k, bs(data)) : subtle().encrypt(alg, k, bs(data))));
}

/** An ephemeral X25519 pair: fresh from WebCrypto, or (test vectors only) from a given private key. */
async function ephemeral(given?: Uint8Array): Promise<{ priv: CryptoKey; pub: Uint8Array }> {
  if (given === undefined) {
    const kp = await subtle().generateKey(X25519, true, ["deriveBits"]) as CryptoKeyPair;
    return { priv: kp.privateKey, pub: new Uint8Array(await subtle().exportKey("raw", kp.publicKey)) };
  }
  const priv = await subtle().importKey("pkcs8", bs(cat(PKCS8_X25519, given)), X25519, true, ["deriveBits"]);
  const jwk = await subtle().exportKey("jwk", priv);
  const b64 = (jwk.x as string).replace(/-/g, "+").replace(/_/g, "/");
  return { priv, pub: Uint8Array.from(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0)) };
}

/** SetupBaseS(pkR, info): enc and the context's key, base nonce and exporter secret (RFC 9180 §5.1). */
export async function setupBaseS(pkR: Uint8Array, info: Uint8Array, ephemeralKey?: Uint8Array):
  Promise<{ enc: Uint8Array; key: Uint8Array; baseNonce: Uint8Array; exporterSecret: Uint8Array }> {
  const eph = await ephemeral(ephemeralKey);
  const peer = await subtle().importKey("raw", bs(pkR), X25519, false, []);
  const dh = new Uint8Array(await subtle().deriveBits({ name: "X25519", public: peer } as unknown as AlgorithmIdentifier,
    eph.priv, 256));
  const shared = expand(KEM_ID, extract(KEM_ID, new Uint8Array(0), "eae_prk", dh), "shared_secret", cat(eph.pub, pkR), 32);
  const none = new Uint8Array(0);
  const ctx = cat(new Uint8Array([0]), extract(SUITE_ID, none, "psk_id_hash", none), extract(SUITE_ID, none, "info_hash", info));
  const secret = extract(SUITE_ID, shared, "secret", none);
  return { enc: eph.pub, key: expand(SUITE_ID, secret, "key", ctx, 16), baseNonce: expand(SUITE_ID, secret, "base_nonce", ctx, 12),
    exporterSecret: expand(SUITE_ID, secret, "exp", ctx, 32) };
}

/** AES-128-GCM seal (exported for the RFC 9180 vectors, which use non-empty aad). */
export const aeadSeal = (key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, pt: Uint8Array): Promise<Uint8Array> =>
  aesGcm(key, nonce, pt, false, aad);

/** Export(exporter_context, L) of a context (RFC 9180 §5.3). */
export const exportSecret = (exporterSecret: Uint8Array, context: Uint8Array, L: number): Uint8Array =>
  expand(SUITE_ID, exporterSecret, "sec", context, L);

/**
 * Encapsulate a Binary HTTP request to `config` (RFC 9458 §4.3). `ephemeralKey` (the X25519
 * private key skE) is for test vectors only; production draws a fresh one per request.
 */
export async function sealRequest(config: KeyConfig, message: Uint8Array, ephemeralKey?: Uint8Array): Promise<SealedRequest> {
  const hdr = cat(new Uint8Array([config.keyId]), u16(KEM_X25519), u16(KDF_HKDF_SHA256), u16(AEAD_AES_128_GCM));
  const ctx = await setupBaseS(config.publicKey, cat(te.encode("message/bhttp request"), new Uint8Array([0]), hdr), ephemeralKey);
  const ct = await aesGcm(ctx.key, ctx.baseNonce, message, false);
  const secret = exportSecret(ctx.exporterSecret, te.encode("message/bhttp response"), NONCE_R);
  return { envelope: cat(hdr, ctx.enc, ct), enc: ctx.enc, secret, keyId: config.keyId };
}

/** The Binary HTTP response inside an encapsulated response (RFC 9458 §4.4); throws if it does not open. */
export async function openResponse(sealed: SealedRequest, encResponse: Uint8Array): Promise<Uint8Array> {
  if (encResponse.length < NONCE_R + TAG) throw new Error("an encapsulated response shorter than its nonce and tag");
  const prk = hmacSha256(cat(sealed.enc, encResponse.subarray(0, NONCE_R)), sealed.secret);
  const key = hmacSha256(prk, cat(te.encode("key"), new Uint8Array([1]))).slice(0, 16);
  const nonce = hmacSha256(prk, cat(te.encode("nonce"), new Uint8Array([1]))).slice(0, 12);
  return aesGcm(key, nonce, encResponse.subarray(NONCE_R), true);
}
