package dev.ldptelemetry.sdk.sealed

import dev.ldptelemetry.sdk.ClientOptions
import dev.ldptelemetry.sdk.Json
import dev.ldptelemetry.sdk.Response
import dev.ldptelemetry.sdk.RetryPolicy
import dev.ldptelemetry.sdk.TelemetryClient
import dev.ldptelemetry.sdk.Transport
import dev.ldptelemetry.sdk.TransportException
import dev.ldptelemetry.sdk.Vectors
import dev.ldptelemetry.sdk.WallClock
import dev.ldptelemetry.sdk.l
import dev.ldptelemetry.sdk.m
import dev.ldptelemetry.sdk.testing.MemoryStore
import dev.ldptelemetry.sdk.testing.RecordingCollector
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.io.TempDir
import java.io.ByteArrayOutputStream
import java.io.File
import java.security.SecureRandom

/**
 * An Oblivious HTTP gateway in memory in front of a [RecordingCollector] (the recipient's half
 * of HPKE, RFC 9458 §4.3-4.4): publishes its key, opens envelopes, answers sealed. [rotate]
 * replaces the key; [outer] scripts clear answers (or a dropped connection, null) first.
 */
class TestGateway(private val collector: RecordingCollector) : Transport {
    private val random = SecureRandom()
    var keyId = 1
        private set
    private var sk = ByteArray(32).also { random.nextBytes(it) }
    val envelopes = ArrayList<ByteArray>()
    val plainPosts = ArrayList<ByteArray>()
    var keyFetches = 0
    val outer = ArrayDeque<Response?>()
    var garbleAnswers = false
    /** Every POST to the gateway fails without an answer (after the [outer] script). */
    var down = false
    /** Answers the opened inner batch instead of the collector (DeliveryTest's scripted collector; a TransportException: no outer answer). */
    var inner: ((ByteArray) -> Response)? = null

    fun rotate() {
        keyId += 1
        sk = ByteArray(32).also { random.nextBytes(it) }
    }

    fun keys(): ByteArray {
        val config = KeyConfig(keyId, Ohttp.KEM, X25519.publicKey(sk), listOf(intArrayOf(1, 1))).encode()
        return byteArrayOf((config.size ushr 8).toByte(), config.size.toByte()) + config
    }

    override fun request(method: String, path: String, body: ByteArray?, headers: Map<String, String>): Response {
        if (path == Ohttp.GATEWAY_PATH && method == "GET") {
            keyFetches++
            return Response(200, mapOf("content-type" to Ohttp.KEYS_TYPE), keys())
        }
        if (path != Ohttp.GATEWAY_PATH || method != "POST") {
            if (method == "POST") plainPosts.add(body!!)
            return collector.handle(method, path, body)
        }
        envelopes.add(body!!)
        assertEquals(Ohttp.REQUEST_TYPE, headers["Content-Type"])
        if (outer.isNotEmpty()) return outer.removeFirst() ?: throw TransportException("connection reset (scripted)")
        if (down) throw TransportException("connection refused (scripted)")
        val keyProblem = Response(400, mapOf("content-type" to "application/problem+json"),
            Json.write(linkedMapOf("type" to Ohttp.KEY_PROBLEM_TYPE, "title" to "key")).toByteArray())
        if ((body[0].toInt() and 0xff) != keyId) return keyProblem
        val enc = body.copyOfRange(7, 39)
        val ctx = HpkeContext.setupBaseR(enc, sk, Ohttp.requestInfo(body.copyOfRange(0, 7)))
        val message = ctx.open(ByteArray(0), body.copyOfRange(39, body.size)) ?: return keyProblem
        val content = innerContent(message)
        val answer = inner?.invoke(content) ?: collector.handle("POST", "/v1/reports", content)
        val nonceR = ByteArray(16).also { random.nextBytes(it) }
        val (key, nonce) = Ohttp.responseKeys(enc, ctx.export(Ohttp.responseLabel, 16), nonceR)
        var sealed = AesGcm.seal(key, nonce, ByteArray(0), innerResponse(answer))
        if (garbleAnswers) sealed = sealed.copyOf().also { it[0] = (it[0].toInt() xor 1).toByte() }
        return Response(200, mapOf("content-type" to Ohttp.RESPONSE_TYPE), nonceR + sealed)
    }

    private class Reader(val b: ByteArray) {
        var pos = 0
        fun varint(): Int {
            val size = 1 shl ((b[pos].toInt() and 0xff) ushr 6)
            var v = b[pos].toInt() and 0x3f
            for (i in 1 until size) v = (v shl 8) or (b[pos + i].toInt() and 0xff)
            pos += size
            return v
        }
        fun string(): ByteArray {
            val n = varint()
            val out = b.copyOfRange(pos, pos + n)
            pos += n
            return out
        }
    }

    /** The content of a known-length Binary HTTP request (RFC 9292 §3), checked to be the documented inner request. */
    private fun innerContent(message: ByteArray): ByteArray {
        val r = Reader(message)
        assertEquals(0, r.varint())
        val control = (0 until 4).map { String(r.string(), Charsets.US_ASCII) }
        assertEquals(listOf("POST", "https", "", "/v1/reports"), control)
        val fields = r.string()
        assertEquals("0c636f6e74656e742d74797065136170706c69636174696f6e2f6d73677061636b",
            fields.joinToString("") { String.format("%02x", it.toInt() and 0xff) })
        return r.string()
    }

    private fun varint(out: ByteArrayOutputStream, n: Int) {
        if (n < 64) out.write(n) else { out.write(0x40 or (n ushr 8)); out.write(n and 0xff) }
    }

    private fun innerResponse(r: Response): ByteArray {
        val out = ByteArrayOutputStream()
        varint(out, 1); varint(out, r.status)
        val fields = ByteArrayOutputStream()
        for ((k, v) in r.headers) {
            varint(fields, k.length); fields.write(k.toByteArray()); varint(fields, v.length); fields.write(v.toByteArray())
        }
        varint(out, fields.size()); out.write(fields.toByteArray())
        varint(out, r.body.size); out.write(r.body)
        varint(out, 0)
        val raw = out.toByteArray()
        return raw.copyOf((raw.size + 1023) / 1024 * 1024)
    }
}

/** The client sending sealed batches: to the gateway, after a key rotation, through a shuffler, across restarts. */
class SealTest {
    @TempDir
    lateinit var tmp: File

    private val themeRegistry: String by lazy {
        val doc = Vectors.doc("registry.json")["registry"].m()
        Json.write(linkedMapOf("metrics" to doc["metrics"].l().map { it.m() }.filter { it["name"] == "theme" }
            .map { it.toMutableMap().apply { put("reports_per_window", 100L) } }))
    }
    private val day = WallClock { 20_000L * 86_400_000 + 3_600_000 }

    private fun client(transport: Transport, seal: Seal, stateDir: File? = null) = TelemetryClient(ClientOptions {
        this.transport = transport
        if (stateDir != null) this.stateDir = stateDir else store = MemoryStore()
        registryJson = themeRegistry
        clock = day
        retry = RetryPolicy(initial = 0.001, maximum = 0.01, flushInterval = 0.01)
        this.seal = seal
    })

    @Test
    fun `batches go sealed to the gateway, never in clear, and the collector's inner ack settles them`() {
        val collector = RecordingCollector()
        val gateway = TestGateway(collector)
        val seal = Seal.gateway(clock = day)
        val c = client(gateway, seal)
        repeat(3) { assertTrue(c.report("theme", "dark")) }
        assertTrue(c.flush(10_000))
        assertEquals(3L, c.stats()["reports_acked"])
        assertEquals(3, collector.reports("theme").size)
        assertEquals(0, gateway.plainPosts.size)
        assertEquals(1, gateway.keyFetches)
        assertTrue(gateway.envelopes.all { it.size == 1024 + 55 })
        assertEquals(1L, seal.stats()["key_fetches"])
        c.close()
    }

    @Test
    fun `a retry sends the same envelope, after a clear 503 and after a restart on the same state directory`() {
        val collector = RecordingCollector()
        val gateway = TestGateway(collector)
        gateway.outer.addLast(Response(503, mapOf("content-type" to "application/problem+json"),
            """{"type": "https://ldp-telemetry.dev/problems/overloaded", "status": 503}""".toByteArray()))
        gateway.outer.addLast(null)
        gateway.down = true
        val dir = File(tmp, "device")
        val first = client(gateway, Seal.gateway(clock = day), dir)
        assertTrue(first.report("theme", "light"))
        assertFalse(first.flush(300))
        first.close(300)
        assertTrue(gateway.envelopes.size >= 2)
        val second = client(gateway, Seal.gateway(clock = day), dir)   // a new process: the envelope comes from the outbox
        gateway.down = false
        assertTrue(second.flush(10_000))
        assertEquals(1, collector.reports("theme").size)
        assertEquals(1, gateway.envelopes.map { it.toList() }.toSet().size, "every attempt sent the same bytes")
        assertEquals(0L, second.stats()["outbox_pending"])
        second.close()
    }

    @Test
    fun `a key rotated away is fetched again and the batch sealed anew, once`() {
        val collector = RecordingCollector()
        val gateway = TestGateway(collector)
        val seal = Seal.gateway(clock = day)
        val c = client(gateway, seal)
        assertTrue(c.report("theme", "dark"))
        assertTrue(c.flush(10_000))
        gateway.rotate()
        assertTrue(c.report("theme", "system"))
        assertTrue(c.flush(10_000))
        assertEquals(2, collector.reports("theme").size)
        assertEquals(mapOf("sealed" to 3L, "resealed" to 1L, "key_fetches" to 2L, "undecryptable_answers" to 0L), seal.stats())
        c.close()
    }

    @Test
    fun `a pinned key that the gateway no longer holds drops the batch, with a problem counted`() {
        val collector = RecordingCollector()
        val gateway = TestGateway(collector)
        val pinned = gateway.keys()
        gateway.rotate()
        val c = client(gateway, Seal.gateway(pinned, day))
        assertTrue(c.report("theme", "dark"))
        c.flush(2_000)
        assertEquals(1L, c.stats()["batches_rejected"])
        assertEquals(0, gateway.keyFetches)
        assertEquals(0, collector.reports().size)
        c.close()
        assertThrows(OhttpException::class.java) { Seal.gateway(byteArrayOf(0, 1, 2)) }
    }

    @Test
    fun `an answer that does not open is not the collector's - the batch is kept and retried`() {
        val collector = RecordingCollector()
        val gateway = TestGateway(collector)
        gateway.garbleAnswers = true
        val seal = Seal.gateway(clock = day)
        val c = client(gateway, seal)
        assertTrue(c.report("theme", "dark"))
        assertFalse(c.flush(300))
        assertEquals(0L, c.stats()["reports_acked"])
        assertTrue(seal.stats()["undecryptable_answers"]!! >= 1)
        gateway.garbleAnswers = false
        assertTrue(c.flush(10_000))
        assertEquals(1L, c.stats()["reports_acked"])
        assertEquals(1L, c.stats()["duplicates"])   // the collector had committed it: the same batch id
        c.close()
    }

    @Test
    fun `through a shuffler - its 202 stored settles the batch, a 503 keeps it`() {
        val collector = RecordingCollector()
        val gateway = TestGateway(collector)
        val got = ArrayList<ByteArray>()
        var answer = 503
        val shuffler = Transport { method, path, body, headers ->
            assertEquals("POST" to "", method to path)
            assertEquals(Ohttp.REQUEST_TYPE, headers["Content-Type"])
            got.add(body!!)
            if (answer == 202) Response(202, mapOf("content-type" to "application/json"), """{"stored": true}""".toByteArray())
            else Response(503, mapOf("content-type" to "application/problem+json"), """{"type": "x/overloaded", "status": 503}""".toByteArray())
        }
        val c = client(gateway, Seal.shuffler("http://shuffler.invalid", transport = shuffler, clock = day))
        repeat(2) { assertTrue(c.report("theme", "light")) }
        assertFalse(c.flush(300))
        answer = 202
        assertTrue(c.flush(10_000))
        assertEquals(2L, c.stats()["reports_acked"])
        assertEquals(1, got.map { it.toList() }.toSet().size)
        assertEquals(0, gateway.envelopes.size + gateway.plainPosts.size)   // the shuffler forwards, later and mixed
        c.close()
    }
}
