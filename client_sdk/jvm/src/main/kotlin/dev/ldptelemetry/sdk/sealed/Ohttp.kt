package dev.ldptelemetry.sdk.sealed

import dev.ldptelemetry.sdk.LdptException
import javax.crypto.Cipher
import javax.crypto.spec.GCMParameterSpec
import javax.crypto.spec.SecretKeySpec

/**
 * Sealed batches (docs/wire-format.md, "Sealed batches"), the device's half: Oblivious HTTP
 * (Thomson and Wood, RFC 9458) over HPKE base mode (Barnes et al., RFC 9180) and Binary HTTP
 * (RFC 9292), byte for byte client_sdk/ohttp.py and bhttp.py (conformance/vectors/sealed.json).
 *
 * One suite: DHKEM(X25519, HKDF-SHA256) 0x0020, HKDF-SHA256 0x0001, AES-128-GCM 0x0001. Only
 * what Android (API 24) has: X25519 is [X25519] (written from RFC 7748), HKDF is HMAC-SHA256
 * from javax.crypto, AES-GCM is javax.crypto's "AES/GCM/NoPadding".
 */
class OhttpException(message: String) : LdptException(message)

/** One key configuration of an `application/ohttp-keys` document (RFC 9458 §3). */
class KeyConfig(val keyId: Int, val kemId: Int, val publicKey: ByteArray, val suites: List<IntArray>) {
    /** Whether this SDK can seal to it (the one suite above). */
    val supported: Boolean
        get() {
            if (kemId != Ohttp.KEM || publicKey.size != 32) return false
            for (s in suites) if (s[0] == Ohttp.KDF && s[1] == Ohttp.AEAD) return true
            return false
        }

    fun encode(): ByteArray {
        val out = java.io.ByteArrayOutputStream()
        out.write(keyId); u16(out, kemId); out.write(publicKey); u16(out, 4 * suites.size)
        for (s in suites) { u16(out, s[0]); u16(out, s[1]) }
        return out.toByteArray()
    }
}

/** An encapsulated request and what reading its answer needs: enc and the response secret. */
class SealedRequest(val envelope: ByteArray, val enc: ByteArray, val secret: ByteArray, val keyId: Int)

/** A decapsulated Binary HTTP final response. */
class InnerResponse(val status: Int, val headers: List<Pair<String, ByteArray>>, val content: ByteArray)

private fun u16(out: java.io.ByteArrayOutputStream, v: Int) {
    out.write(v ushr 8); out.write(v and 0xff)
}

private fun ascii(s: String): ByteArray = ByteArray(s.length) { s[it].code.toByte() }

private fun cat(vararg parts: ByteArray): ByteArray {
    val out = java.io.ByteArrayOutputStream()
    for (p in parts) out.write(p)
    return out.toByteArray()
}

private fun hmac(key: ByteArray, msg: ByteArray): ByteArray {
    val mac = javax.crypto.Mac.getInstance("HmacSHA256")
    mac.init(SecretKeySpec(key, "HmacSHA256"))
    return mac.doFinal(msg)
}

/** HKDF-SHA256 (Krawczyk and Eronen, RFC 5869); an empty salt is HashLen zero bytes (§2.2). */
internal object Hkdf {
    fun extract(salt: ByteArray, ikm: ByteArray): ByteArray = hmac(if (salt.isEmpty()) ByteArray(32) else salt, ikm)

    fun expand(prk: ByteArray, info: ByteArray, length: Int): ByteArray {
        require(length in 0..255 * 32) { "HKDF-Expand length $length" }
        val out = ByteArray(length)
        var t = ByteArray(0)
        var at = 0
        var i = 1
        while (at < length) {
            t = hmac(prk, cat(t, info, byteArrayOf(i.toByte())))
            val n = minOf(t.size, length - at)
            System.arraycopy(t, 0, out, at, n)
            at += n
            i++
        }
        return out
    }
}

/** AES-128-GCM with a 16-byte tag (javax.crypto). */
internal object AesGcm {
    fun seal(key: ByteArray, nonce: ByteArray, aad: ByteArray, plain: ByteArray): ByteArray =
        cipher(Cipher.ENCRYPT_MODE, key, nonce, aad).doFinal(plain)

    /** The plaintext, or null when the tag does not verify. */
    fun open(key: ByteArray, nonce: ByteArray, aad: ByteArray, sealed: ByteArray): ByteArray? = try {
        cipher(Cipher.DECRYPT_MODE, key, nonce, aad).doFinal(sealed)
    } catch (e: java.security.GeneralSecurityException) {
        null
    }

    private fun cipher(mode: Int, key: ByteArray, nonce: ByteArray, aad: ByteArray): Cipher {
        val c = Cipher.getInstance("AES/GCM/NoPadding")
        c.init(mode, SecretKeySpec(key, "AES"), GCMParameterSpec(128, nonce))
        if (aad.isNotEmpty()) c.updateAAD(aad)
        return c
    }
}

/**
 * HPKE base mode for DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-128-GCM (RFC 9180 §4.1,
 * §5.1, §5.2, §5.3), one message per context as OHTTP uses it: the sender's half, and the
 * recipient's (the tests' gateway).
 */
internal class HpkeContext private constructor(val enc: ByteArray, private val key: ByteArray,
                                               private val baseNonce: ByteArray, private val exporterSecret: ByteArray) {
    /** Seal the context's first (and only) message: sequence number 0, so the nonce is base_nonce. */
    fun seal(aad: ByteArray, plain: ByteArray): ByteArray = AesGcm.seal(key, baseNonce, aad, plain)

    /** Open the first message (null when it does not). */
    fun open(aad: ByteArray, sealed: ByteArray): ByteArray? = AesGcm.open(key, baseNonce, aad, sealed)

    /** Export(exporter_context, L) (§5.3). */
    fun export(context: ByteArray, length: Int): ByteArray = labeledExpand(SUITE, exporterSecret, "sec", context, length)

    companion object {
        private val VERSION = ascii("HPKE-v1")
        private val KEM_SUITE = cat(ascii("KEM"), byteArrayOf(0, 0x20))
        private val SUITE = cat(ascii("HPKE"), byteArrayOf(0, 0x20, 0, 1, 0, 1))

        private fun labeledExtract(suite: ByteArray, salt: ByteArray, label: String, ikm: ByteArray) =
            Hkdf.extract(salt, cat(VERSION, suite, ascii(label), ikm))

        private fun labeledExpand(suite: ByteArray, prk: ByteArray, label: String, info: ByteArray, length: Int) =
            Hkdf.expand(prk, cat(byteArrayOf((length ushr 8).toByte(), length.toByte()), VERSION, suite, ascii(label), info), length)

        /** SetupBaseS(pkR, info) with the ephemeral private key [skE] (fresh from a CSPRNG in production). */
        fun setupBaseS(pkR: ByteArray, info: ByteArray, skE: ByteArray): HpkeContext {
            val enc = X25519.publicKey(skE)
            return schedule(dh(skE, pkR), enc, pkR, info)
        }

        /** SetupBaseR(enc, skR, info). */
        fun setupBaseR(enc: ByteArray, skR: ByteArray, info: ByteArray): HpkeContext =
            schedule(dh(skR, enc), enc, X25519.publicKey(skR), info)

        private fun dh(sk: ByteArray, pk: ByteArray): ByteArray {
            val dh = X25519.scalarMult(sk, pk)
            var nonzero = 0
            for (b in dh) nonzero = nonzero or b.toInt()
            if (nonzero == 0) throw OhttpException("a low-order X25519 public key (the shared secret is zero)")
            return dh
        }

        private fun schedule(dh: ByteArray, enc: ByteArray, pkR: ByteArray, info: ByteArray): HpkeContext {
            val eaePrk = labeledExtract(KEM_SUITE, ByteArray(0), "eae_prk", dh)
            val shared = labeledExpand(KEM_SUITE, eaePrk, "shared_secret", cat(enc, pkR), 32)
            val empty = ByteArray(0)
            val context = cat(byteArrayOf(0), labeledExtract(SUITE, empty, "psk_id_hash", empty),
                labeledExtract(SUITE, empty, "info_hash", info))
            val secret = labeledExtract(SUITE, shared, "secret", empty)
            return HpkeContext(enc, labeledExpand(SUITE, secret, "key", context, 16),
                labeledExpand(SUITE, secret, "base_nonce", context, 12), labeledExpand(SUITE, secret, "exp", context, 32))
        }
    }
}

/** Oblivious HTTP requests and responses, key configurations, Binary HTTP and padding. */
object Ohttp {
    const val KEM = 0x0020
    const val KDF = 0x0001
    const val AEAD = 0x0001
    const val REQUEST_TYPE = "message/ohttp-req"
    const val RESPONSE_TYPE = "message/ohttp-res"
    const val KEYS_TYPE = "application/ohttp-keys"
    /** RFC 9540 §3: the gateway and its key configurations. */
    const val GATEWAY_PATH = "/.well-known/ohttp-gateway"
    /** RFC 9458 §5.3: the problem type of a request sealed to an unknown or outdated key. */
    const val KEY_PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#ohttp-key"
    private const val HEADER_BYTES = 7
    private const val RESPONSE_NONCE_BYTES = 16   // max(Nn, Nk)
    private val REQUEST_LABEL = ascii("message/bhttp request")
    private val RESPONSE_LABEL = ascii("message/bhttp response")

    /** The sizes a sealed request's Binary HTTP message is zero-padded to (docs/wire-format.md). */
    @JvmField
    val PAD_CLASSES: IntArray = intArrayOf(1024, 4096, 16384, 65536, 262144, 1048576)

    /** The size class of a [size]-byte Binary HTTP message: the smallest that fits, then multiples of the last. */
    @JvmStatic
    fun paddedLength(size: Long): Long {
        for (c in PAD_CLASSES) if (size <= c) return c.toLong()
        val top = PAD_CLASSES[PAD_CLASSES.size - 1].toLong()
        return (size + top - 1) / top * top
    }

    /** An `application/ohttp-keys` document: 2-byte length ‖ key config, repeated; any error rejects it all. */
    @JvmStatic
    fun decodeKeyConfigs(data: ByteArray): List<KeyConfig> {
        if (data.isEmpty()) throw OhttpException("an empty key configuration document")
        val out = ArrayList<KeyConfig>()
        var pos = 0
        while (pos < data.size) {
            if (pos + 2 > data.size) throw OhttpException("a key configuration length runs past the end")
            val length = be16(data, pos)
            if (pos + 2 + length > data.size) throw OhttpException("a key configuration runs past the end")
            out.add(decodeOne(data.copyOfRange(pos + 2, pos + 2 + length)))
            pos += 2 + length
        }
        return out
    }

    private fun decodeOne(c: ByteArray): KeyConfig {
        if (c.size < 3) throw OhttpException("a key configuration shorter than its header")
        val keyId = c[0].toInt() and 0xff
        val kem = be16(c, 1)
        val npk = when (kem) {
            0x0010 -> 65; 0x0011 -> 97; 0x0012 -> 133; 0x0020 -> 32; 0x0021 -> 56
            else -> throw OhttpException("unknown KEM 0x${Integer.toHexString(kem)} in a key configuration")
        }
        if (c.size < 3 + npk + 2) throw OhttpException("a key configuration shorter than its public key")
        val alen = be16(c, 3 + npk)
        val algs = c.size - 5 - npk
        if (alen != algs || alen == 0 || alen % 4 != 0) throw OhttpException("the symmetric algorithms of a key configuration are malformed")
        val suites = ArrayList<IntArray>()
        var i = 5 + npk
        while (i < c.size) {
            suites.add(intArrayOf(be16(c, i), be16(c, i + 2)))
            i += 4
        }
        return KeyConfig(keyId, kem, c.copyOfRange(3, 3 + npk), suites)
    }

    /** The first configuration this SDK can seal to (the gateway lists its preferred first). */
    @JvmStatic
    fun choose(configs: List<KeyConfig>): KeyConfig {
        for (c in configs) if (c.supported) return c
        throw OhttpException("none of the gateway's key configurations uses DHKEM(X25519, HKDF-SHA256) with HKDF-SHA256 and AES-128-GCM")
    }

    /** The padded Binary HTTP request `POST https:///v1/reports` that carries a wire-format [batch]. */
    @JvmStatic
    fun innerRequest(batch: ByteArray): ByteArray {
        val out = java.io.ByteArrayOutputStream(batch.size + 64)
        varint(out, 0)   // known-length request
        for (part in arrayOf("POST", "https", "", "/v1/reports")) string(out, ascii(part))
        val fields = java.io.ByteArrayOutputStream()
        string(fields, ascii("content-type"))
        string(fields, ascii("application/msgpack"))
        string(out, fields.toByteArray())
        string(out, batch)
        varint(out, 0)   // no trailers
        val raw = out.toByteArray()
        return raw.copyOf(paddedLength(raw.size.toLong()).toInt())
    }

    /**
     * HPKE-seal a Binary HTTP request to [config] (RFC 9458 §4.3). [ephemeralKey] (skE) is a
     * fresh 32 bytes from [random]; giving it is for test vectors only.
     */
    @JvmStatic
    @JvmOverloads
    fun sealRequest(config: KeyConfig, message: ByteArray, random: java.security.SecureRandom? = null,
                    ephemeralKey: ByteArray? = null): SealedRequest {
        if (!config.supported) throw OhttpException("key configuration ${config.keyId} is not DHKEM(X25519)/HKDF-SHA256/AES-128-GCM")
        val skE = ephemeralKey ?: ByteArray(32).also { (random ?: java.security.SecureRandom()).nextBytes(it) }
        val header = byteArrayOf(config.keyId.toByte(), 0, KEM.toByte(), 0, KDF.toByte(), 0, AEAD.toByte())
        val ctx = HpkeContext.setupBaseS(config.publicKey, requestInfo(header), skE)
        val ct = ctx.seal(ByteArray(0), message)
        return SealedRequest(cat(header, ctx.enc, ct), ctx.enc, ctx.export(RESPONSE_LABEL, RESPONSE_NONCE_BYTES), config.keyId)
    }

    internal fun requestInfo(header: ByteArray): ByteArray = cat(REQUEST_LABEL, byteArrayOf(0), header)

    internal val responseLabel: ByteArray get() = RESPONSE_LABEL

    /** The key and nonce of an encapsulated response (RFC 9458 §4.4): Extract(enc ‖ response_nonce, secret), then Expand. */
    internal fun responseKeys(enc: ByteArray, secret: ByteArray, nonceR: ByteArray): Pair<ByteArray, ByteArray> {
        val prk = Hkdf.extract(cat(enc, nonceR), secret)
        return Hkdf.expand(prk, ascii("key"), 16) to Hkdf.expand(prk, ascii("nonce"), 12)
    }

    /** The Binary HTTP response inside an encapsulated response (RFC 9458 §4.4); throws when it does not open. */
    @JvmStatic
    fun openResponse(sealed: SealedRequest, encResponse: ByteArray): ByteArray {
        if (encResponse.size < RESPONSE_NONCE_BYTES + 16) throw OhttpException("an encapsulated response shorter than its nonce and tag")
        val (key, nonce) = responseKeys(sealed.enc, sealed.secret, encResponse.copyOfRange(0, RESPONSE_NONCE_BYTES))
        return AesGcm.open(key, nonce, ByteArray(0), encResponse.copyOfRange(RESPONSE_NONCE_BYTES, encResponse.size))
            ?: throw OhttpException("the encapsulated response does not open with this request's key")
    }

    /** A known-length Binary HTTP response (RFC 9292 §3): 1xx skipped, truncation after a section allowed, zero padding only. */
    @JvmStatic
    fun decodeResponse(data: ByteArray): InnerResponse {
        val r = Reader(data)
        if (r.varint() != 1L) throw OhttpException("not a known-length Binary HTTP response (framing indicator 1)")
        var status: Long
        while (true) {
            status = r.varint()
            if (status in 100..199) {
                fields(r.string())
                continue
            }
            if (status !in 200..599) throw OhttpException("status $status is not a final HTTP status")
            break
        }
        val headers = fields(r.section())
        val content = r.section()
        fields(r.section())
        for (i in r.pos until data.size) if (data[i].toInt() != 0) throw OhttpException("non-zero bytes after the message (padding must be zeros)")
        return InnerResponse(status.toInt(), headers, content)
    }

    private fun fields(section: ByteArray): List<Pair<String, ByteArray>> {
        val r = Reader(section)
        val out = ArrayList<Pair<String, ByteArray>>()
        while (r.pos < section.size) {
            val name = r.string()
            val value = r.string()
            val sb = StringBuilder(name.size)
            for (b in name) {
                val c = b.toInt() and 0xff
                if (c >= 0x80 || c in 'A'.code..'Z'.code) throw OhttpException("a field name is not lower-case ASCII")
                sb.append(c.toChar())
            }
            if (sb.isEmpty()) throw OhttpException("an empty field name")
            out.add(sb.toString() to value)
        }
        return out
    }

    private class Reader(val data: ByteArray) {
        var pos = 0

        fun varint(): Long {
            if (pos >= data.size) throw OhttpException("the message ends inside a varint")
            val size = 1 shl ((data[pos].toInt() and 0xff) ushr 6)
            if (pos + size > data.size) throw OhttpException("the message ends inside a varint")
            var v = (data[pos].toLong() and 0x3f)
            for (i in 1 until size) v = (v shl 8) or (data[pos + i].toLong() and 0xff)
            pos += size
            return v
        }

        fun string(): ByteArray {
            val n = varint()
            if (n > data.size - pos) throw OhttpException("a length of $n runs past the end of the message")
            val out = data.copyOfRange(pos, pos + n.toInt())
            pos += n.toInt()
            return out
        }

        /** A length-prefixed section; at the end of a truncated message, an empty one. */
        fun section(): ByteArray = if (pos >= data.size) ByteArray(0) else string()
    }

    private fun varint(out: java.io.ByteArrayOutputStream, n: Long) {
        when {
            n < 0x40 -> out.write(n.toInt())
            n < 0x4000 -> { out.write(0x40 or (n ushr 8).toInt()); out.write(n.toInt() and 0xff) }
            n < 0x4000_0000 -> { val v = 0x8000_0000L or n; for (s in intArrayOf(24, 16, 8, 0)) out.write((v ushr s).toInt() and 0xff) }
            else -> { val v = (0xC0L shl 56) or n; for (s in intArrayOf(56, 48, 40, 32, 24, 16, 8, 0)) out.write((v ushr s).toInt() and 0xff) }
        }
    }

    private fun string(out: java.io.ByteArrayOutputStream, b: ByteArray) {
        varint(out, b.size.toLong())
        out.write(b)
    }

    private fun be16(b: ByteArray, at: Int): Int = ((b[at].toInt() and 0xff) shl 8) or (b[at + 1].toInt() and 0xff)
}
