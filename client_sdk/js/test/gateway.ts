/**
 * An Oblivious HTTP gateway for the tests, on @hpke/core (an independent HPKE implementation): key
 * configurations, opening an envelope to the batch inside, and sealing the collector's answer back
 * (RFC 9458 §4.4). Used by sealed.test.ts and delivery.test.ts.
 */

import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";

import type { KeyConfig } from "../src/ohttp.js";
import { Response } from "../src/transport.js";

export const te = new TextEncoder();
export const cat = (...p: Uint8Array[]) => Uint8Array.from(p.flatMap((x) => [...x]));

export const suite = new CipherSuite({ kem: new DhkemX25519HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes128Gcm() });

export async function gatewayKey(keyId: number): Promise<{ config: KeyConfig; priv: CryptoKey }> {
  const kp = await suite.kem.generateKeyPair();
  const pub = new Uint8Array(await suite.kem.serializePublicKey(kp.publicKey));
  return { config: { keyId, kemId: 32, publicKey: pub, suites: [[1, 1]] }, priv: kp.privateKey };
}

export function keysDoc(configs: KeyConfig[]): Uint8Array {
  return cat(...configs.map((c) => {
    const raw = cat(new Uint8Array([c.keyId, 0, 32]), c.publicKey, new Uint8Array([0, 4, 0, 1, 0, 1]));
    return cat(new Uint8Array([raw.length >> 8, raw.length & 255]), raw);
  }));
}

export async function sealAnswer(secret: Uint8Array, enc: Uint8Array, message: Uint8Array): Promise<Uint8Array> {
  const nonce = crypto.getRandomValues(new Uint8Array(16));
  const { hmacSha256 } = await import("../src/hashing.js");
  const prk = hmacSha256(cat(enc, nonce), secret);
  const key = await crypto.subtle.importKey("raw", hmacSha256(prk, cat(te.encode("key"), new Uint8Array([1]))).slice(0, 16),
    "AES-GCM", false, ["encrypt"]);
  const iv = hmacSha256(prk, cat(te.encode("nonce"), new Uint8Array([1]))).slice(0, 12);
  return cat(nonce, new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv }, key, message as unknown as BufferSource)));
}

/** Known-length Binary HTTP response (status, header fields, body). */
export function bhttpAnswer(status: number, headers: Record<string, string>, body: Uint8Array): Uint8Array {
  const lv = (b: Uint8Array) => cat(b.length < 64 ? new Uint8Array([b.length]) : new Uint8Array([0x40 | (b.length >> 8), b.length & 255]), b);
  const fields = cat(...Object.entries(headers).map(([k, v]) => cat(lv(te.encode(k)), lv(te.encode(v)))));
  return cat(new Uint8Array([1, 0x40 | (status >> 8), status & 255]), lv(fields), lv(body), new Uint8Array([0]));
}

/** Known-length Binary HTTP response with one content-type. */
export const bhttpResponse = (status: number, ctype: string, body: Uint8Array): Uint8Array =>
  bhttpAnswer(status, { "content-type": ctype }, body);

/** The content of a known-length Binary HTTP request (control data and one field, as innerRequest writes). */
export function extractContent(m: Uint8Array): Uint8Array {
  let pos = 0;
  const int = () => { const size = 1 << (m[pos] >> 6); let v = m[pos] & 0x3f; for (let i = 1; i < size; i++) v = v * 256 + m[pos + i]; pos += size; return v; };
  const skip = () => { const len = int(); pos += len; };
  int();                                // framing
  for (let i = 0; i < 4; i++) skip();   // method, scheme, authority, path
  skip();                               // header section
  const n = int();
  return m.slice(pos, pos + n);
}

/** Opens an envelope sealed to `key`: the batch inside, and how to seal an answer to it. */
export async function openEnvelope(key: { priv: CryptoKey }, env: Uint8Array):
  Promise<{ batch: Uint8Array; answer(status: number, headers: Record<string, string>, body: Uint8Array): Promise<Response> }> {
  const info = cat(te.encode("message/bhttp request"), new Uint8Array([0]), env.subarray(0, 7));
  const enc = env.slice(7, 39);
  const rctx = await suite.createRecipientContext({ recipientKey: key.priv, enc: enc.buffer, info: info.buffer });
  const batch = extractContent(new Uint8Array(await rctx.open(env.slice(39).buffer)));
  const secret = new Uint8Array(await rctx.export(te.encode("message/bhttp response").buffer, 16));
  return {
    batch,
    answer: async (status, headers, body) => new Response(200, { "content-type": "message/ohttp-res" },
      await sealAnswer(secret, enc, bhttpAnswer(status, headers, body))),
  };
}
