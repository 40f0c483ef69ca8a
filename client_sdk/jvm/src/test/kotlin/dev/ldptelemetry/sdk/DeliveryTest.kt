package dev.ldptelemetry.sdk

import dev.ldptelemetry.sdk.sealed.Seal
import dev.ldptelemetry.sdk.sealed.TestGateway
import dev.ldptelemetry.sdk.testing.RecordingCollector
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/**
 * The delivery vectors (conformance/vectors/delivery.json; docs/conformance.md, "Delivery") on the
 * JVM, as tests/test_delivery_vectors.py runs them for Python and client_sdk/js/test/delivery.test.ts
 * for TypeScript: the back-off schedule for given jitter draws, Retry-After, and whole
 * conversations — a real TelemetryClient on a state directory reports, flushes, and a scripted
 * collector (or shuffler) answers its POSTs: which answers settle a batch, what is sent again (the
 * same bytes, or the survivors under a new id, never randomised again), what flush() returns and
 * what stats() counts.
 */
class DeliveryTest {
    private val doc = Vectors.doc("delivery.json")

    private fun assertNone(failures: List<String>) = assertEquals("", failures.take(20).joinToString("\n"), "${failures.size} failures")

    private fun policy(p: Map<String, Any?>): RetryPolicy {
        val d = RetryPolicy()
        fun num(name: String, default: Double) = (p[name] as? Number)?.toDouble() ?: default
        return RetryPolicy(num("initial", d.initial), num("maximum", d.maximum), num("multiplier", d.multiplier),
            num("max_retry_after", d.maxRetryAfter), num("flush_interval", d.flushInterval))
    }

    @Test
    fun `retry delays - the back-off of attempt k for a given jitter draw, Retry-After capped`() {
        val failures = ArrayList<String>()
        for (c in doc["retry_delays"].l().map { it.m() }) {
            val got = policy(c["policy"].m()).delay(c["attempt"].n().toInt(), (c["retry_after"] as? Number)?.toDouble(), (c["u"] as Number).toDouble())
            if (got != (c["delay"] as Number).toDouble()) failures.add("$c: got $got")
        }
        assertNone(failures)
    }

    @Test
    fun `Retry-After - delay-seconds, the three HTTP-date forms, the problem's retry_after, garbage ignored`() {
        val failures = ArrayList<String>()
        for (c in doc["retry_after"].l().map { it.m() }) {
            val headers = if (c["header"] == null) noMap<String, String>() else mapOf("retry-after" to c["header"] as String)
            val response = Response(503, headers, (c["body"] as String).toByteArray(Charsets.UTF_8))
            val got = response.retryAfter(((c["now"] as Number).toDouble() * 1000).toLong())
            val want = (c["seconds"] as? Number)?.toDouble()
            if (got != want) failures.add("header ${c["header"]}, body ${c["body"]}: got $got, want $want")
        }
        assertNone(failures)
    }

    @Test
    fun `the multiplier is never capped below the maximum, and an overflowing power is the maximum`() {
        assertEquals(150.0, RetryPolicy(1.0, 300.0, 1.01).delay(600, null, 0.0))
        assertEquals(150.0, RetryPolicy().delay(1_000_000, null, 0.0))
    }

    /** A collector (or shuffler) answering POSTs from a script ("drop": no response), then acknowledging. */
    private class Scripted(answers: List<Any?>, val shuffler: Boolean) : Transport {
        private val script = ArrayList(answers)
        val posts = ArrayList<Pair<Long, ByteArray>>()

        override fun request(method: String, path: String, body: ByteArray?, headers: Map<String, String>): Response {
            check(method == "POST" && path == Http.REPORTS_PATH && body != null) { "$method $path" }
            val answer = synchronized(this) {
                posts.add(System.nanoTime() to body)
                if (script.isEmpty()) null else script.removeAt(0)
            }
            if (answer == "drop") throw TransportException("connection dropped (scripted)")
            if (answer != null) {
                val a = answer.m()
                @Suppress("UNCHECKED_CAST")
                return Response(a["status"].n().toInt(), a["headers"] as Map<String, String>, (a["body"] as String).toByteArray(Charsets.UTF_8))
            }
            if (shuffler) return Response(202, mapOf("content-type" to "application/json"), "{\"stored\": true}".toByteArray())
            val n = BatchDecoding.decode(body).second.size
            return Response(200, mapOf("content-type" to "application/json"), "{\"accepted\": $n, \"duplicate\": false}".toByteArray())
        }
    }

    /** Seal.shuffler's sending minus the sealing (sealed.json pins the sealed bytes): the batch as it is, the shuffler's answer read by [Http.fromShuffler]. */
    private val toShuffler = object : BatchSender {
        override fun send(batch: StoredBatch, collector: Transport, keep: (ByteArray) -> Unit): Response =
            Http.fromShuffler(Http.postBatch(collector, batch.body), batch.reports)
    }

    /**
     * One conversation; [sealed]: a plain one replayed with the batch sealed to an in-memory gateway
     * (Seal.gateway()), the scripted answers being the collector's inside the encapsulated response
     * ("drop": no outer response), and a resend the same envelope, a new batch a new one.
     */
    private fun conversation(case: Map<String, Any?>, dir: File, sealed: Boolean = false): List<String> {
        val failures = ArrayList<String>()
        val name = (if (sealed) "sealed: " else "") + case["name"]
        fun eq(got: Any?, want: Any?, what: String) {
            if (got != want) failures.add("$name: $what: got $got, want $want")
        }
        val shuffler = case["sending"] == "shuffler"
        val scripted = Scripted(case["answers"].l(), shuffler)
        val gateway = if (sealed) TestGateway(RecordingCollector()).also { g -> g.inner = { body -> scripted.request("POST", Http.REPORTS_PATH, body, noMap()) } } else null
        val reports = doc["reports"].l().map { it.l() }
        val client = TelemetryClient(ClientOptions {
            registryJson = Json.write(doc["registry"])
            store = FileStore(dir)
            transport = gateway ?: scripted
            retry = policy(doc["policy"].m())
            batchSize = 100
            maxBatchAgeMs = 3_600_000
            if (shuffler) seal = toShuffler
            if (sealed) seal = Seal.gateway()
        })
        val stale = case["stale_metrics"].l()
        try {
            for (r in reports) eq(client.report(r[0] as String, r[1]), true, "report(${r[0]})")
            eq(client.flush(30_000), case["flush"], "flush()")
            val stats = client.stats()
            for (counter in listOf("reports_acked", "reports_rejected", "duplicates")) eq(stats[counter], case[counter].n(), counter)
            for (r in reports) eq(client.report(r[0] as String, r[1]), r[0] !in stale, "report(${r[0]}) after")
        } finally {
            client.close(500)
        }
        val posts = synchronized(scripted) { ArrayList(scripted.posts) }
        val want = case["posts"].l().map { it.m() }
        if (posts.size < want.size) return failures + "$name: ${posts.size} POSTs, want ${want.size}"
        val bodies = posts.subList(0, want.size).map { it.second }
        val decoded = bodies.map { BatchDecoding.decode(it) }
        val metrics = decoded.map { d -> d.second.map { it["m"] } }
        var expected = want
        if (case["any_order"] == true) {   // the POSTs after the first, in the order they came
            val order = metrics.drop(1)
            expected = listOf(want[0]) + want.drop(1).sortedBy { p -> order.indexOf(p["metrics"]).let { if (it < 0) order.size else it } }
        }
        val envelopes = gateway?.let { synchronized(it) { ArrayList(it.envelopes) } }
        if (envelopes != null && envelopes.size != posts.size) failures.add("$name: ${envelopes.size} envelopes for ${posts.size} batches")
        val first = decoded[0].second.associateBy { it["m"] }
        for ((i, post) in expected.withIndex()) {
            eq(metrics[i], post["metrics"], "POST $i's metrics")
            val same = post["same_bytes_as"]
            if (same != null) {
                if (!bodies[i].contentEquals(bodies[same.n().toInt()])) failures.add("$name: POST $i must repeat POST $same byte for byte")
                if (envelopes != null && envelopes.size == posts.size && !envelopes[i].contentEquals(envelopes[same.n().toInt()])) {
                    failures.add("$name: POST $i must resend the envelope of POST $same")
                }
            } else if ((0 until i).any { decoded[it].first == decoded[i].first }) {
                failures.add("$name: POST $i needs a new batch id")
            } else if (envelopes != null && envelopes.size == posts.size && (0 until i).any { envelopes[it].contentEquals(envelopes[i]) }) {
                failures.add("$name: POST $i needs a new envelope")
            }
            for (r in decoded[i].second) if (show(r) != show(first[r["m"]])) failures.add("$name: POST $i randomised ${r["m"]} again")
        }
        for ((index, gap) in case["min_gap"].m()) {
            val i = index.toInt()
            val seconds = (posts[i].first - posts[i - 1].first) / 1e9
            if (seconds < (gap as Number).toDouble() - 0.01) failures.add("$name: POST $i came $seconds s after the previous one, want >= $gap")
        }
        return failures
    }

    @Test
    fun `conversations - what settles a batch, what is sent again and what is counted`() {
        val root = File.createTempFile("ldpt-delivery", "").also { it.delete(); it.mkdirs() }
        try {
            val failures = ArrayList<String>()
            for ((i, case) in doc["conversations"].l().withIndex()) failures.addAll(conversation(case.m(), File(root, "c$i")))
            assertNone(failures)
        } finally {
            root.deleteRecursively()
        }
    }

    @Test
    fun `sealed conversations - every plain one with the batch sealed to a gateway, the same envelope on every resend`() {
        val root = File.createTempFile("ldpt-delivery", "").also { it.delete(); it.mkdirs() }
        try {
            val failures = ArrayList<String>()
            val plain = doc["conversations"].l().map { it.m() }.filter { it["sending"] == "plain" }
            assertTrue(plain.size >= 20, "${plain.size} plain conversations")
            for ((i, case) in plain.withIndex()) failures.addAll(conversation(case, File(root, "s$i"), sealed = true))
            assertNone(failures)
        } finally {
            root.deleteRecursively()
        }
    }

    @Test
    fun `the conversation check can fail - a wrong expectation is reported`() {
        val case = doc["conversations"].l().first { it.m()["answers"].l().isEmpty() && it.m()["sending"] == "plain" }.m().toMutableMap()
        case["reports_acked"] = 3L
        case["posts"] = case["posts"].l() + listOf(mapOf("same_bytes_as" to 0L, "metrics" to listOf("a")))
        val root = File.createTempFile("ldpt-delivery", "").also { it.delete(); it.mkdirs() }
        try {
            val failures = conversation(case, File(root, "c"))
            assertTrue(failures.any { "reports_acked" in it } && failures.any { "POST 1's metrics" in it }, failures.toString())
        } finally {
            root.deleteRecursively()
        }
    }
}
