package dev.ldptelemetry.sdk

import javax.crypto.Mac
import javax.crypto.spec.SecretKeySpec

/**
 * Stable hashes and HMAC derivations, byte for byte those of the Python reference
 * (client_sdk/hashing.py, memo.py, state.py; docs/conformance.md, "Derivations"): the client
 * secret never leaves the device, and every value derived from it is pinned by
 * conformance/vectors/derivations.json.
 *
 *   lp(x) = 4-byte big-endian length ‖ x;   text = UTF-8, lone surrogates as 3 bytes (WTF-8)
 */
internal object Hashing {
    private val TAG_COHORT = ascii("ldpt/rappor/cohort/v1")
    private val TAG_PRR = ascii("ldpt/rappor/prr/v1")
    private val TAG_BLOOM = ascii("ldpt/rappor/bloom/v1")
    private val TAG_MEMO = ascii("ldpt/memo/v1")
    private val TAG_KEY = ascii("ldpt/discover/key/v1")
    private val TAG_LEDGER = ascii("ldpt/ledger-key")

    fun ascii(s: String): ByteArray = ByteArray(s.length) { s[it].code.toByte() }

    /** UTF-8 of a string, lone surrogates passed through as 3-byte sequences (WTF-8). */
    fun utf8(text: String): ByteArray {
        val out = java.io.ByteArrayOutputStream(text.length + 8)
        var i = 0
        while (i < text.length) {
            var c = text[i].code
            if (c in 0xd800..0xdbff && i + 1 < text.length) {
                val n = text[i + 1].code
                if (n in 0xdc00..0xdfff) {
                    c = 0x10000 + ((c - 0xd800) shl 10) + (n - 0xdc00)
                    i++
                }
            }
            when {
                c < 0x80 -> out.write(c)
                c < 0x800 -> { out.write(0xc0 or (c shr 6)); out.write(0x80 or (c and 63)) }
                c < 0x10000 -> { out.write(0xe0 or (c shr 12)); out.write(0x80 or ((c shr 6) and 63)); out.write(0x80 or (c and 63)) }
                else -> {
                    out.write(0xf0 or (c shr 18)); out.write(0x80 or ((c shr 12) and 63))
                    out.write(0x80 or ((c shr 6) and 63)); out.write(0x80 or (c and 63))
                }
            }
            i++
        }
        return out.toByteArray()
    }

    fun concat(vararg parts: ByteArray): ByteArray {
        var size = 0
        for (p in parts) size += p.size
        val out = ByteArray(size)
        var at = 0
        for (p in parts) {
            System.arraycopy(p, 0, out, at, p.size)
            at += p.size
        }
        return out
    }

    fun be32(n: Int): ByteArray = byteArrayOf((n ushr 24).toByte(), (n ushr 16).toByte(), (n ushr 8).toByte(), n.toByte())

    /** Length-prefixed concatenation: 4-byte big-endian length, then the bytes, per part. */
    fun lp(vararg parts: ByteArray): ByteArray {
        val out = java.io.ByteArrayOutputStream()
        for (p in parts) {
            out.write(be32(p.size))
            out.write(p)
        }
        return out.toByteArray()
    }

    /** HMAC-SHA256 (RFC 2104) from javax.crypto (every JVM and Android has it). */
    fun hmac(key: ByteArray, msg: ByteArray): ByteArray {
        val mac = Mac.getInstance("HmacSHA256")
        mac.init(SecretKeySpec(key, "HmacSHA256"))
        return mac.doFinal(msg)
    }

    /** Little-endian uint32 words of a byte string. */
    fun le32s(bytes: ByteArray): LongArray = LongArray(bytes.size / 4) { le32(bytes, 4 * it) }

    /** The first [n] little-endian words of SHAKE-256([msg]). */
    fun shakeWords(msg: ByteArray, n: Int): LongArray = le32s(Shake256.digest(msg, 4 * n))

    /** ⌊2^32/k⌋·k: words below it reduce mod k without bias. */
    fun acceptLimit(k: Long): Long = (TWO32 / k) * k

    /** This client's cohort in [0, m) for a scope: HMAC(secret, lp(tag) ‖ lp(scope) ‖ lp(counter)) words. */
    fun deriveCohort(secret: ByteArray, scope: String, m: Int): Int = deriveCohort(secret, scope, m.toLong()).toInt()

    /** As above for any m in [1, 2^32). */
    fun deriveCohort(secret: ByteArray, scope: String, m: Long): Long {
        val limit = acceptLimit(m)
        val scopeBytes = utf8(scope)
        var counter = 0
        while (true) {
            for (u in le32s(hmac(secret, lp(TAG_COHORT, scopeBytes, be32(counter))))) {
                if (u < limit) return u % m
            }
            counter++
        }
    }

    /** K of a value's permanent randomised response (RAPPOR). */
    fun prrKey(secret: ByteArray, metric: String, value: String): ByteArray = hmac(secret, lp(TAG_PRR, utf8(metric), utf8(value)))

    /** The k words behind the PRR of [value]: SHAKE-256(K). */
    fun prrWords(secret: ByteArray, metric: String, value: String, k: Int): LongArray = shakeWords(prrKey(secret, metric, value), k)

    /** The h Bloom bits of [value] in [cohort] (a public hash: the server hashes candidates alike). */
    fun bloomBits(value: String, cohort: Int, k: Int, h: Int): IntArray {
        val need = (cohort + 1) * h
        val limit = acceptLimit(k.toLong())
        val seed = concat(TAG_BLOOM, lp(utf8(value)))
        var count = need + 8
        while (true) {
            val ok = ArrayList<Int>()
            for (u in shakeWords(seed, count)) if (u < limit) ok.add((u % k).toInt())
            if (ok.size >= need) return IntArray(h) { ok[cohort * h + it] }
            count *= 2
        }
    }

    /** K of one memoised response: HMAC(secret, lp(tag) ‖ lp(metric) ‖ lp(key)). */
    fun memoKey(secret: ByteArray, metric: String, key: String): ByteArray = hmac(secret, lp(TAG_MEMO, utf8(metric), utf8(key)))

    /** Key of the ledger's memoisation digests: HMAC(secret, "ldpt/ledger-key"). */
    fun ledgerKey(secret: ByteArray): ByteArray = hmac(secret, TAG_LEDGER)

    /** HMAC(ledger key, fingerprint ‖ 0 ‖ key) as hex, first 32 characters. */
    fun valueDigest(ledgerKey: ByteArray, fingerprint: String, value: String): String =
        hex(hmac(ledgerKey, concat(utf8(fingerprint), byteArrayOf(0), utf8(value))).copyOf(16))

    fun hex(b: ByteArray): String {
        val digits = "0123456789abcdef"
        val out = CharArray(2 * b.size)
        for (i in b.indices) {
            out[2 * i] = digits[(b[i].toInt() shr 4) and 15]
            out[2 * i + 1] = digits[b[i].toInt() and 15]
        }
        return String(out)
    }

    fun unhex(h: String): ByteArray {
        require(h.length % 2 == 0) { "odd-length hex" }
        return ByteArray(h.length / 2) { ((Character.digit(h[2 * it], 16) shl 4) or Character.digit(h[2 * it + 1], 16)).toByte() }
    }

    // --- 64-bit mixing (OLH/LOLOHA hash family, discover buckets) --------------------------------
    private const val GAMMA = -0x61c8864680b583ebL              // 0x9E3779B97F4A7C15
    private const val OLH_SALT = 0x6c6470742d6f6c68L
    private const val DISCOVER_SALT = 0x6c6470742d646973L

    /** SplitMix64's finaliser (a bijection of uint64). */
    fun mix(z0: Long): Long {
        var z = (z0 xor (z0 ushr 30)) * -0x40a7b892e31b1a47L    // 0xbf58476d1ce4e5b9
        z = (z xor (z ushr 27)) * -0x6b2fb644ecceee15L          // 0x94d049bb133111eb
        return z xor (z ushr 31)
    }

    /** ⌊z·g/2^64⌋ for an unsigned z and 1 <= g < 2^31 (exact: 32-bit halves). */
    private fun scale(z: Long, g: Int): Int {
        val hi = z ushr 32
        val lo = z and 0xffffffffL
        return ((hi * g + ((lo * g) ushr 32)) ushr 32).toInt()
    }

    /** ⌊mix(base + (i+1)·γ)·g/2^64⌋. */
    private fun reduce(base: Long, i: Long, g: Int): Int = scale(mix(base + (i + 1) * GAMMA), g)

    /** OLH's H_s(v) (random family): seed_s = mix(SALT + (s+1)·γ). */
    fun olhHash(s: Int, v: Int, g: Int): Int = reduce(mix(OLH_SALT + (s + 1).toLong() * GAMMA), v.toLong(), g)

    /** discover's fp(key): BLAKE2b-64 of the tagged key bytes, little-endian. */
    fun discoverFingerprint(key: ByteArray): ULong = Blake2b64.digest(concat(TAG_KEY, key))

    /** discover's H_seed(key) = ⌊mix(mix(fp ^ SALT) + (seed+1)·γ)·g/2^64⌋. */
    fun discoverBucket(seed: Int, fp: ULong, g: Int): Int = reduce(mix(fp.toLong() xor DISCOVER_SALT), seed.toLong(), g)
}

/** The memo stream of (secret, metric, key): SHAKE-256(K) as M32 words, and MBELOW(h) by 32-bit rejection. */
internal class MemoStream(secret: ByteArray, metric: String, key: String) : Coins {
    private val xof = Shake256(Hashing.memoKey(secret, metric, key))

    override fun word(): Long = le32(xof.read(4), 0)

    override fun below(h: Long): Long {
        val limit = Hashing.acceptLimit(h)
        while (true) {
            val u = word()
            if (u < limit) return u % h
        }
    }
}

/** Where a memoised round reads its coins: the memo stream (or uniform coins in the chi-square test). */
internal interface Coins {
    fun word(): Long
    fun below(h: Long): Long
}
