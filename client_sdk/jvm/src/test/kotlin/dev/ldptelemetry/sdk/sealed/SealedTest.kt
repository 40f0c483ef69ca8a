package dev.ldptelemetry.sdk.sealed

import dev.ldptelemetry.sdk.Vectors
import dev.ldptelemetry.sdk.l
import dev.ldptelemetry.sdk.m
import dev.ldptelemetry.sdk.n
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Test

/** conformance/vectors/sealed.json on the JVM, and X25519 against RFC 7748's own vectors. */
class SealedTest {
    private val doc = Vectors.doc("sealed.json")

    private fun hex(s: Any?): ByteArray {
        val t = s as String
        return ByteArray(t.length / 2) { Integer.parseInt(t.substring(2 * it, 2 * it + 2), 16).toByte() }
    }

    private fun hexOf(b: ByteArray): String {
        val sb = StringBuilder()
        for (x in b) sb.append(String.format("%02x", x.toInt() and 0xff))
        return sb.toString()
    }

    private val config: KeyConfig get() = Ohttp.choose(Ohttp.decodeKeyConfigs(hex(doc["ohttp_keys"])))

    @Test
    fun `X25519 - RFC 7748 section 5_2 and the Diffie-Hellman example of section 6_1`() {
        assertEquals("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552", hexOf(X25519.scalarMult(
            hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4"),
            hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"))))
        val alice = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
        val bob = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
        assertEquals("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a", hexOf(X25519.publicKey(alice)))
        assertEquals("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f", hexOf(X25519.publicKey(bob)))
        val shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
        assertEquals(shared, hexOf(X25519.scalarMult(alice, X25519.publicKey(bob))))
        assertEquals(shared, hexOf(X25519.scalarMult(bob, X25519.publicKey(alice))))
    }

    @Test
    fun `X25519 - RFC 7748 section 5_2's iterated vector, 1,000 rounds`() {
        var k = ByteArray(32).also { it[0] = 9 }
        var u = k.copyOf()
        for (i in 0 until 1000) {
            val next = X25519.scalarMult(k, u)
            u = k
            k = next
        }
        assertEquals("684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51", hexOf(k))
    }

    @Test
    fun `the gateway's key configuration - decoded, re-encoded, its public key that of the private key`() {
        val configs = Ohttp.decodeKeyConfigs(hex(doc["ohttp_keys"]))
        assertEquals(1, configs.size)
        assertEquals(hexOf(hex(doc["key_config"])), hexOf(configs[0].encode()))
        assertEquals(hexOf(X25519.publicKey(hex(doc["gateway_private_key"]))), hexOf(configs[0].publicKey))
        val suite = doc["suite"].m()
        assertEquals(listOf(Ohttp.KEM.toLong(), Ohttp.KDF.toLong(), Ohttp.AEAD.toLong()),
            listOf(suite["kem"].n(), suite["kdf"].n(), suite["aead"].n()))
        for (bad in listOf("", "0029", "00290700205e", "000607002000040001", "0007070099000000040001")) {
            assertThrows(OhttpException::class.java, { Ohttp.decodeKeyConfigs(hex(bad)) }, bad)
        }
        val otherSuite = KeyConfig(1, Ohttp.KEM, ByteArray(32), listOf(intArrayOf(1, 3)))
        assertThrows(OhttpException::class.java) { Ohttp.choose(listOf(otherSuite)) }
    }

    @Test
    fun `padding classes`() {
        for (pair in doc["padded_lengths"].l()) {
            val (size, padded) = pair.l()
            assertEquals(padded.n(), Ohttp.paddedLength(size.n()), "size $size")
        }
    }

    @Test
    fun `every request - the padded inner request, the envelope for the given ephemeral key, the response secret`() {
        val requests = doc["requests"].l()
        assertEquals(4, requests.size)
        for ((i, r) in requests.withIndex()) {
            val v = r.m()
            val inner = Ohttp.innerRequest(hex(v["batch"]))
            assertEquals(v["inner_request"], hexOf(inner), "request $i: inner request")
            val sealed = Ohttp.sealRequest(config, inner, ephemeralKey = hex(v["ephemeral_private_key"]))
            assertEquals(v["envelope"], hexOf(sealed.envelope), "request $i: envelope")
            assertEquals(v["response_secret"], hexOf(sealed.secret), "request $i: response secret")
        }
    }

    @Test
    fun `fresh ephemeral keys - two seals of one request differ, each the class plus 55 bytes`() {
        val inner = Ohttp.innerRequest(ByteArray(100) { it.toByte() })
        val a = Ohttp.sealRequest(config, inner, java.security.SecureRandom())
        val b = Ohttp.sealRequest(config, inner, java.security.SecureRandom())
        assertEquals(1024 + 55, a.envelope.size)
        assertEquals(false, a.envelope.contentEquals(b.envelope))
        assertEquals(false, a.secret.contentEquals(b.secret))
    }

    @Test
    fun `every response opens to its status, headers and body, and a changed byte does not open`() {
        val requests = doc["requests"].l()
        for ((i, r) in doc["responses"].l().withIndex()) {
            val v = r.m()
            val req = requests[v["request"].n().toInt()].m()
            val sealed = Ohttp.sealRequest(config, hex(req["inner_request"]), ephemeralKey = hex(req["ephemeral_private_key"]))
            val enc = hex(v["encapsulated_response"])
            val inner = Ohttp.decodeResponse(Ohttp.openResponse(sealed, enc))
            assertEquals(v["status"].n().toInt(), inner.status, "response $i")
            assertEquals(v["headers"].l().map { it.l() }, inner.headers.map { listOf(it.first, String(it.second, Charsets.ISO_8859_1)) })
            assertEquals(v["body"], String(inner.content, Charsets.UTF_8))
            for (at in intArrayOf(0, 16, enc.size - 1)) {
                val bad = enc.copyOf().also { it[at] = (it[at].toInt() xor 1).toByte() }
                assertThrows(OhttpException::class.java, { Ohttp.openResponse(sealed, bad) }, "response $i, byte $at")
            }
            val other = Ohttp.sealRequest(config, hex(req["inner_request"]), java.security.SecureRandom())
            assertThrows(OhttpException::class.java) { Ohttp.openResponse(other, enc) }
        }
    }

    @Test
    fun `Binary HTTP responses - 1xx skipped, truncated sections empty, non-zero padding refused`() {
        val ok = Ohttp.decodeResponse(hex("0140640040c8000000"))   // 100 (no fields), then 200 with nothing
        assertEquals(200, ok.status)
        assertEquals(0, ok.content.size)
        assertEquals(204, Ohttp.decodeResponse(hex("0140cc")).status)   // truncated after the status
        assertThrows(OhttpException::class.java) { Ohttp.decodeResponse(hex("0140c800000001")) }
        assertThrows(OhttpException::class.java) { Ohttp.decodeResponse(hex("0040c8")) }
        assertThrows(OhttpException::class.java) { Ohttp.decodeResponse(hex("0142580000")) }   // 600
        assertThrows(OhttpException::class.java) { Ohttp.decodeResponse(hex("0140c804014101420000")) }   // upper-case name
    }
}
