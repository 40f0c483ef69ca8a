package dev.ldptelemetry.sdk.testing

import dev.ldptelemetry.sdk.DeviceStore
import dev.ldptelemetry.sdk.Json
import dev.ldptelemetry.sdk.Outbox
import dev.ldptelemetry.sdk.RandomSource
import dev.ldptelemetry.sdk.OutboxLimits
import dev.ldptelemetry.sdk.Response
import dev.ldptelemetry.sdk.StoredBatch
import dev.ldptelemetry.sdk.Transport
import dev.ldptelemetry.sdk.TransportException
import java.security.SecureRandom

/**
 * Test doubles for apps embedding the SDK (as client_sdk/testing.py), outside the production
 * surface: [MemoryStore] (a device's state in memory), [RecordingCollector] (a collector in
 * memory: acknowledges, dedupes batch ids, keeps the decoded reports, fails on request) and
 * [MemoryTransport] (connects a client to it without a socket). R8/ProGuard drops the package
 * from an app that does not use it.
 */
class MemoryStore @JvmOverloads constructor(secret: ByteArray? = null, override val where: String = "memory",
                                            limits: OutboxLimits = OutboxLimits()) : DeviceStore {
    private var secret: ByteArray? = secret?.also { require(it.size == 32) { "a client secret is 32 bytes" } }
    private var ledger: String? = null
    private var registry: String? = null
    private var optedOut = false
    override val outbox: MemoryOutbox = MemoryOutbox(limits)

    @Synchronized override fun loadSecret(): ByteArray = secret ?: ByteArray(32).also { SecureRandom().nextBytes(it); secret = it }
    @Synchronized override fun readLedger(): String? = ledger
    @Synchronized override fun <T> updateLedger(fn: (String?) -> Pair<String?, T>): T {
        val (text, result) = fn(ledger)
        if (text != null) ledger = text
        return result
    }
    @Synchronized override fun isOptedOut(): Boolean = optedOut
    @Synchronized override fun optOut() {
        optedOut = true
        secret = null
        outbox.clear()
    }
    @Synchronized override fun optIn() {
        optedOut = false
    }
    @Synchronized override fun readRegistry(): String? = registry
    @Synchronized override fun writeRegistry(text: String) {
        registry = text
    }
}

/** The outbox in memory (a claim older than two minutes is handed out again, as on disk). */
class MemoryOutbox(private val limits: OutboxLimits = OutboxLimits()) : Outbox {
    private class Entry(val batch: StoredBatch, var claimedAt: Long?)
    private val entries = ArrayList<Entry>()
    override var droppedReports: Long = 0
        private set
    override var expiredReports: Long = 0
        private set

    @Synchronized override fun add(batchId: ByteArray, body: ByteArray, reports: Int, created: Long) {
        val name = (created * 1000).toString().padStart(17, '0') + "-" + reports + "-" +
            batchId.joinToString("") { Integer.toHexString((it.toInt() and 0xff) or 0x100).substring(1) }
        entries.add(Entry(StoredBatch(name, body, reports, created), null))
        entries.sortBy { it.batch.name }
        val waiting = entries.filter { it.claimedAt == null }
        val gone = HashSet<Entry>()
        var total = 0L
        val keep = ArrayList<Entry>()
        for (e in waiting) {
            if (created - e.batch.created > limits.maxAge) { expiredReports += e.batch.reports; gone.add(e) } else { keep.add(e); total += e.batch.body.size }
        }
        while (keep.isNotEmpty() && (keep.size > limits.maxBatches || total > limits.maxBytes)) {
            val e = keep.removeAt(0)
            droppedReports += e.batch.reports
            total -= e.batch.body.size
            gone.add(e)
        }
        entries.removeAll(gone)
    }

    @Synchronized override fun claim(now: Long): StoredBatch? {
        var pick: Entry? = null
        for (e in entries.toList()) {   // every waiting batch: re-dated or expired (as FileOutbox)
            val at = e.claimedAt
            if (at != null && now - at <= 120_000) continue
            val b = e.batch
            val r = dev.ldptelemetry.sdk.redate(b.name, b.created, now, limits.maxAge)
            if (r == null) { expiredReports += b.reports; entries.remove(e); continue }
            if (r.first != b.name) entries[entries.indexOf(e)] = Entry(StoredBatch(r.first, b.body, b.reports, r.second).also { it.sealed = b.sealed }, at)
            if (pick == null) pick = entries.first { it.batch.name == r.first }
        }
        return pick?.also { it.claimedAt = now }?.batch
    }

    @Synchronized override fun release(batch: StoredBatch) {
        for (e in entries) if (e.batch.name == batch.name) e.claimedAt = null
    }

    @Synchronized override fun done(batch: StoredBatch) {
        entries.removeAll { it.batch.name == batch.name }
    }

    @Synchronized override fun seal(batch: StoredBatch, container: ByteArray) {
        for (e in entries) if (e.batch.name == batch.name) e.batch.sealed = container
        batch.sealed = container
    }

    @Synchronized override fun pending(): Int = entries.size
    @Synchronized override fun clear() = entries.clear()
}

/** One scripted answer of [RecordingCollector]: a status (with headers and a JSON body), or a dropped connection. */
class Fault private constructor(val status: Int, val body: Any?, val headers: Map<String, String>, val drop: Boolean, val ackLost: Boolean) {
    companion object {
        /** Answer [status] with [body] (a JSON value) and [headers]. */
        @JvmStatic @JvmOverloads
        fun status(status: Int, body: Any? = null, headers: Map<String, String> = emptyMap()) = Fault(status, body, headers, false, false)

        /** An RFC 9457 problem document of type [slug] (extra members as given). */
        @JvmStatic @JvmOverloads
        fun problem(status: Int, slug: String, members: Map<String, Any?> = emptyMap()) = Fault(status,
            linkedMapOf<String, Any?>("type" to "https://ldp-telemetry.dev/problems/$slug", "status" to status.toLong(),
                "title" to slug, "detail" to slug) + members, emptyMap(), false, false)

        /** No response: the connection was dropped. */
        @JvmStatic fun drop() = Fault(0, null, emptyMap(), true, false)

        /** The batch is accepted, then the connection drops before the ack arrives. */
        @JvmStatic fun ackLost() = Fault(0, null, emptyMap(), true, true)
    }
}

/**
 * A collector in memory for an app's tests: serves a registry (when given), answers
 * `POST /v1/reports` with the collector's JSON ack, dedupes batch ids (the same id and bytes:
 * `duplicate`; other bytes: 422), keeps every accepted batch's reports decoded, and answers
 * from a script of [Fault]s first. It does not validate payloads: the conformance suite pins them.
 */
class RecordingCollector @JvmOverloads constructor(
    private val registryJson: String? = null,
    /** File domains' texts by metric, served at `GET /v1/registry/domains/{metric}`. */
    private val domainTexts: Map<String, String> = emptyMap(),
) {
    private val script = ArrayDeque<Fault>()
    private val accepted = LinkedHashMap<String, ByteArray>()
    private val reports = ArrayList<Map<String, Any?>>()
    private val dims = ArrayList<Map<String, Any?>>()
    /** Every request body received, in order (retries included). */
    val bodies: MutableList<ByteArray> = ArrayList()

    /** Answer the next requests with [faults], in order (then normally). */
    @Synchronized fun fail(vararg faults: Fault) {
        script.addAll(faults)
    }

    /** The decoded reports ({m, f, p}) of accepted batches, each batch counted once; [metric] filters. */
    @Synchronized @JvmOverloads
    fun reports(metric: String? = null): List<Map<String, Any?>> = reports.filter { metric == null || it["m"] == metric }

    /** The public dimensions (`d`) of each accepted batch. */
    @Synchronized fun dimensions(): List<Map<String, Any?>> = ArrayList(dims)

    /** Distinct batches acknowledged. */
    @Synchronized fun batches(): Int = accepted.size

    @Synchronized fun handle(method: String, path: String, body: ByteArray?): Response {
        if (method == "GET" && path == "/v1/registry") {
            return if (registryJson != null) Response(200, mapOf("content-type" to "application/json"), registryJson.toByteArray())
            else problem(404, "not-found")
        }
        if (method == "GET" && path.startsWith("/v1/registry/domains/")) {
            val text = domainTexts[java.net.URLDecoder.decode(path.substring(21), "UTF-8")] ?: return problem(404, "not-found")
            return Response(200, mapOf("content-type" to "text/plain; charset=utf-8"), text.toByteArray())
        }
        if (method != "POST" || path != "/v1/reports" || body == null) return problem(404, "not-found")
        bodies.add(body)
        val fault = script.removeFirstOrNull()
        if (fault != null && !fault.ackLost) {
            if (fault.drop) throw TransportException("connection reset (scripted)")
            return Response(fault.status, fault.headers + ("content-type" to "application/problem+json"), Json.write(fault.body ?: emptyMap<String, Any?>()).toByteArray())
        }
        val doc = try {
            dev.ldptelemetry.sdk.testing.Decode.batch(body)
        } catch (e: RuntimeException) {
            return problem(400, "malformed-body")
        }
        val id = doc.first
        val previous = accepted[id]
        val duplicate = previous != null
        if (previous != null && !previous.contentEquals(body)) return problem(422, "batch-id-conflict")
        if (!duplicate) {
            accepted[id] = body
            reports.addAll(doc.second)
            dims.add(doc.third)
        }
        if (fault != null) throw TransportException("connection reset after the commit (scripted)")
        return Response(200, mapOf("content-type" to "application/json"),
            Json.write(linkedMapOf("accepted" to doc.second.size.toLong(), "duplicate" to duplicate)).toByteArray())
    }

    private fun problem(status: Int, slug: String): Response = Response(status, mapOf("content-type" to "application/problem+json"),
        Json.write(linkedMapOf("type" to "https://ldp-telemetry.dev/problems/$slug", "status" to status.toLong(), "title" to slug, "detail" to slug)).toByteArray())
}

/** Connects a client to a [RecordingCollector] without a socket. */
class MemoryTransport(val collector: RecordingCollector) : Transport {
    override fun request(method: String, path: String, body: ByteArray?, headers: Map<String, String>): Response =
        collector.handle(method, path, body)
}

internal object Decode {
    fun batch(body: ByteArray) = dev.ldptelemetry.sdk.BatchDecoding.decode(body)
}

/** Fixed bytes served in order (tests: a conformance vector's random bytes); throws when exhausted. */
class ByteSource(private val data: ByteArray) : RandomSource {
    /** How many bytes were served. */
    var consumed: Int = 0
        private set

    override fun fill(out: ByteArray) {
        check(consumed + out.size <= data.size) { "random byte stream exhausted" }
        System.arraycopy(data, consumed, out, 0, out.size)
        consumed += out.size
    }
}
