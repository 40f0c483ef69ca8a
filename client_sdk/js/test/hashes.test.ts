/**
 * The SDK's own SHA-256 (src/sha256.ts) against Node's crypto, and its SHAKE-256 sponge
 * (src/hashing.ts, over noble's Keccak-f[1600]) against noble's SHAKE-256, at every length around
 * the block and rate boundaries; conformance/vectors/derivations.json pins both through the
 * derivations that use them.
 */

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { test } from "node:test";

import { shake256 } from "@noble/hashes/sha3";

import { le32, sha256Hex, shakeWords } from "../src/hashing.js";
import { sha256 } from "../src/sha256.js";

test("SHA-256 equals Node's at every length across the padding boundaries", () => {
  for (let n = 0; n < 300; n++) {
    const msg = randomBytes(n);
    assert.deepEqual(Buffer.from(sha256(msg)), createHash("sha256").update(msg).digest(), `length ${n}`);
  }
});

test("SHAKE-256 words equal noble's sponge across the rate's boundaries", () => {
  for (const n of [0, 1, 135, 136, 137, 271, 272, 500]) {
    const msg = randomBytes(n);
    for (const words of [1, 34, 35, 100]) {
      assert.deepEqual(shakeWords(msg, words), le32(shake256(msg, { dkLen: 4 * words })), `length ${n}, ${words} words`);
    }
  }
});

test("the SHA-256 of a domain list's text is its UTF-8's", () => {
  const text = "a\nb\u00e9\n\u{1f600}\n";
  assert.equal(sha256Hex(text), createHash("sha256").update(text, "utf8").digest("hex"));
});
