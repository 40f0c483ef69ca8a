package dev.ldptelemetry.sdk

import dev.ldptelemetry.sdk.testing.Fault
import dev.ldptelemetry.sdk.testing.MemoryStore
import dev.ldptelemetry.sdk.testing.MemoryTransport
import dev.ldptelemetry.sdk.testing.RecordingCollector
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.io.TempDir
import java.io.File

/** The client around the protocols: delivery, retries, budgets, state, opt-out, dimensions. */
class ClientTest {
    @TempDir
    lateinit var tmp: File

    /** The conformance registry's entries for [names], with [perWindow] reports a window and [device] caps. */
    private fun registry(vararg names: String, perWindow: Int = 100, device: Map<String, Double>? = null,
                         dimensions: Map<String, Any?>? = null): String {
        val doc = Vectors.doc("registry.json")["registry"].m()
        val metrics = doc["metrics"].l().map { it.m() }.filter { it["name"] in names }.map {
            it.toMutableMap().apply { put("reports_per_window", perWindow.toLong()) }
        }
        val out = linkedMapOf<String, Any?>("metrics" to metrics)
        if (device != null) out["device"] = device
        if (dimensions != null) out["dimensions"] = dimensions
        return Json.write(out)
    }

    private val day20000 = WallClock { 20_000L * 86_400_000 + 3_600_000 }

    private fun client(collector: RecordingCollector, reg: String?, store: DeviceStore = MemoryStore(), configure: ClientOptions.Builder.() -> Unit = {}) =
        TelemetryClient(ClientOptions {
            transport = MemoryTransport(collector)
            this.store = store
            if (reg != null) registryJson = reg
            clock = day20000
            retry = RetryPolicy(initial = 0.001, maximum = 0.01, flushInterval = 0.01)
            configure()
        })

    @Test
    fun `reports are randomised, batched, sent and acknowledged, the counters say so`() {
        val collector = RecordingCollector()
        val c = client(collector, registry("theme", "load", "url"))
        assertTrue(c.awaitReady(10_000))
        repeat(20) { assertTrue(c.report("theme", "dark")) }
        assertTrue(c.report("load", 42.5))
        assertTrue(c.report("url", "/docs"))
        assertTrue(c.flush(10_000))
        val s = c.stats()
        assertEquals(22L, s["reported"]); assertEquals(22L, s["charged"]); assertEquals(22L, s["reports_acked"])
        assertEquals(0L, s["outbox_pending"]); assertEquals(TelemetryClient.COUNTERS.toSet(), s.keys.intersect(TelemetryClient.COUNTERS.toSet()))
        assertEquals(20, collector.reports("theme").size)
        val fp = Registry.parse(registry("theme"))["theme"]!!.fingerprint
        val themes = Vectors.doc("registry.json")["registry"].m()["metrics"].l().first { it.m()["name"] == "theme" }.m()["categories"].l().size
        assertTrue(collector.reports("theme").all { it["f"] == fp && (it["p"] as Long) in 0L until themes }, collector.reports("theme").toString())
        val closed = c.close(5_000); assertTrue(closed, c.stats().toString())
        assertFalse(c.report("theme", "dark"))
        assertEquals(1L, c.stats()["closed"])
    }

    @Test
    fun `a failed send keeps the same bytes, a lost ack is counted once by batch id`() {
        val collector = RecordingCollector()
        collector.fail(Fault.status(503, mapOf("type" to "https://ldp-telemetry.dev/problems/unavailable"), mapOf("Retry-After" to "0")),
            Fault.drop(), Fault.status(200, "<html>portal</html>"), Fault.ackLost())
        val c = client(collector, registry("theme"))
        c.awaitReady(10_000)
        c.report("theme", "light")
        assertTrue(c.flush(20_000))
        assertEquals(5, collector.bodies.size)
        assertTrue(collector.bodies.all { it.contentEquals(collector.bodies[0]) }, "every retry resends the same bytes")
        assertEquals(1, collector.reports().size)
        val s = c.stats()
        assertEquals(4L, s["retries"]); assertEquals(2L, s["network_errors"]); assertEquals(1L, s["duplicates"]); assertEquals(1L, s["reports_acked"])
        c.close(1_000)
    }

    @Test
    fun `only the collector's problem drops a batch, an invalid report is dropped alone, a 413 splits the batch`() {
        val collector = RecordingCollector()
        collector.fail(Fault.problem(422, "invalid-report", mapOf("metric" to "theme", "report_index" to 1L)), Fault.problem(413, "too-large"))
        val c = client(collector, registry("theme"))
        c.awaitReady(10_000)
        repeat(4) { c.report("theme", "system") }
        assertFalse(c.flush(20_000), "a rejected report is a failure of the flush")
        assertEquals(3, collector.reports().size)
        assertEquals(2, collector.batches(), "the 413 split the three survivors into two batches")
        val s = c.stats()
        assertEquals(1L, s["reports_rejected"]); assertEquals(3L, s["reports_acked"])
        c.close(1_000)
    }

    @Test
    fun `a 403 shuffle-required retires its metric and resends the rest, as the other SDKs do`() {
        val collector = RecordingCollector()
        collector.fail(Fault.problem(403, "shuffle-required", mapOf("metric" to "crash")))
        val c = client(collector, registry("theme", "crash", perWindow = 3))
        c.awaitReady(10_000)
        assertTrue(c.report("theme", "dark")); assertTrue(c.report("crash", true))
        assertFalse(c.flush(20_000), "a rejected report is a failure of the flush")
        assertEquals(1, collector.reports().size, "theme's report went again, crash's did not")
        val s = c.stats()
        assertEquals(1L, s["reports_rejected"]); assertEquals(1L, s["reports_acked"])
        assertFalse(c.report("crash", true), "crash is refused from now on")
        c.close(1_000)
    }

    @Test
    fun `the ledger refuses beyond reports_per_window and the device cap, refused reports are never sent`() {
        val collector = RecordingCollector()
        val dir = File(tmp, "state")
        val c = client(collector, registry("theme", "crash", perWindow = 2, device = mapOf("epsilon_per_window" to 4.5)), FileStore(dir))
        c.awaitReady(10_000)
        assertTrue(c.report("theme", "dark")); assertFalse(c.report("crash", "maybe"))
        assertTrue(c.report("crash", true))      // 2 + 1 of 4.5
        assertFalse(c.report("theme", "dark"))   // device cap: 3 + 2 > 4.5
        assertTrue(c.report("crash", 0))
        assertFalse(c.report("crash", "false"))  // its window holds 2
        assertTrue(c.flush(10_000), c.stats().toString())
        assertEquals(3, collector.reports().size)
        val s = c.stats()
        assertEquals(1L, s["refused_device_window"]); assertEquals(1L, s["refused_window"]); assertEquals(1L, s["invalid_value"])
        c.close(1_000)
        val book = Ledger.parse(File(dir, "ledger.json").readText(), "test").accounts
        assertEquals(2L, book["crash"]!!.windowReports); assertEquals(1L, book["crash"]!!.refusedWindow)
        assertEquals(1L, book["theme"]!!.refusedDeviceWindow)
        assertEquals(32, File(dir, "secret").length().toInt())
    }

    @Test
    fun `two clients of one state directory never spend more than the device cap together`() {
        val collector = RecordingCollector()
        val dir = File(tmp, "shared")
        val reg = registry("load", perWindow = 20, device = mapOf("epsilon_per_window" to 6.0))
        val clients = List(2) { client(collector, reg, FileStore(dir)) }
        clients.forEach { it.awaitReady(10_000) }
        val accepted = clients.map { c -> (0 until 5).count { c.report("load", it.toDouble()) } }
        assertEquals(listOf(5, 5), accepted, "each mirror allows the whole budget (ε = 1 per report)")
        clients.forEach { it.flush(10_000) }
        val charged = clients.sumOf { it.stats()["charged"] as Long }
        assertEquals(6L, charged)
        assertEquals(6, collector.reports().size)
        assertEquals(4L, clients.sumOf { it.stats()["reports_refused_at_commit"] as Long })
        clients.forEach { it.close(1_000) }
    }

    @Test
    fun `bad input never throws and is counted, strict mode throws`() {
        val collector = RecordingCollector()
        val c = client(collector, registry("theme", "load"))
        c.awaitReady(10_000)
        for (bad in listOf(null, Double.NaN, "purple", listOf(1), true)) assertFalse(c.report("theme", bad))
        assertFalse(c.report("load", Double.POSITIVE_INFINITY)); assertFalse(c.report("load", "12"))
        assertFalse(c.report("nope", 1))
        val s = c.stats()
        assertEquals(7L, s["invalid_value"]); assertEquals(1L, s["unknown_metric"])
        assertTrue(c.report("load", 1e9)); assertEquals(1L, c.stats()["clipped"])
        c.close(1_000)
        val strict = client(collector, registry("theme")) { strict = true }
        strict.awaitReady(10_000)
        assertThrows(ReportException::class.java) { strict.report("theme", "purple") }
        assertThrows(ReportException::class.java) { strict.validate("nope", 1) }
        strict.close(1_000)
    }

    @Test
    fun `opting out deletes the secret and the outbox and stops reporting, opting in starts afresh`() {
        val collector = RecordingCollector()
        collector.fail(Fault.drop())
        val dir = File(tmp, "state")
        val c = client(collector, registry("theme"), FileStore(dir)) { retry = RetryPolicy(initial = 60.0, maximum = 60.0) }
        c.awaitReady(10_000)
        c.report("theme", "dark")
        assertFalse(c.flush(500))
        val secret = File(dir, "secret").readBytes()
        c.optOut()
        assertTrue(c.isOptedOut); assertFalse(File(dir, "secret").exists()); assertTrue(File(dir, "opted-out").exists())
        assertEquals(0, File(dir, "outbox").list()?.size ?: 0)
        assertFalse(c.report("theme", "dark")); assertEquals(1L, c.stats()["opted_out"])
        c.optIn()
        assertFalse(File(dir, "secret").readBytes().contentEquals(secret))
        assertTrue(c.report("theme", "dark"))
        c.close(1_000)
    }

    @Test
    fun `the registry comes from the collector and is cached, public dimensions go once per batch, bucketed`() {
        val reg = registry("theme", dimensions = mapOf("os" to mapOf("values" to listOf("android", "ios")),
            "app_version" to mapOf("values" to listOf("3", "4"), "rule" to "major")))
        val collector = RecordingCollector(reg)
        val dir = File(tmp, "state")
        val c = client(collector, null, FileStore(dir)) { dimensions = mapOf("os" to "android", "app_version" to "4.2.1", "undeclared" to "x") }
        assertTrue(c.awaitReady(10_000))
        c.report("theme", "dark")
        assertTrue(c.flush(10_000))
        assertEquals(listOf(mapOf("app_version" to "4", "os" to "android")), collector.dimensions())
        c.setDimensions(mapOf("os" to "windows"))
        c.report("theme", "light")
        assertTrue(c.flush(10_000))
        assertEquals(mapOf("os" to "other"), collector.dimensions()[1])
        c.close(1_000)
        assertEquals(reg, File(dir, "registry.json").readText())
        val offline = client(RecordingCollector(), null, FileStore(dir)) { transport = Transport { _, _, _, _ -> throw TransportException("offline") } }
        assertTrue(offline.awaitReady(10_000))
        assertNull(offline.stats()["disabled_reason"])
        assertTrue(offline.report("theme", "dark"))
        offline.close(100)
    }

    @Test
    fun `a file domain is fetched, checked and cached by its digest, a changed one disables reporting`() {
        val doc = Vectors.doc("domains.json")
        val reg = Json.write(doc["registry"])
        val text = doc["domain_texts"].m()["app"] as String
        val dir = File(tmp, "state")
        val collector = RecordingCollector(reg, mapOf("app" to text))
        val c = client(collector, null, FileStore(dir))
        assertTrue(c.awaitReady(10_000))
        assertNull(c.stats()["disabled_reason"])
        assertTrue(c.report("app", "beta")); assertTrue(c.report("app_id", 17)); assertFalse(c.report("app", "BETA"))
        assertTrue(c.flush(10_000))
        assertEquals(2, collector.reports().size)
        c.close(1_000)
        val sha = Registry.fileDomains(reg).first().third
        assertEquals(text, File(dir, "domain-$sha.txt").readText())
        val tampered = client(RecordingCollector(reg, mapOf("app" to text.replace("beta", "bêta"))), null, FileStore(File(tmp, "other")))
        assertTrue(tampered.awaitReady(10_000))
        assertTrue((tampered.stats()["disabled_reason"] as String).contains("not the published domain list"))
        tampered.close(100)
    }

    @Test
    fun `an unreadable ledger disables reporting, saying why`() {
        val dir = File(tmp, "state").apply { mkdirs() }
        File(dir, "ledger.json").writeText("{not json")
        val c = client(RecordingCollector(), registry("theme"), FileStore(dir))
        c.awaitReady(10_000)
        assertFalse(c.report("theme", "dark"))
        val reason = c.stats()["disabled_reason"] as String?
        assertNotNull(reason)
        assertTrue(reason!!.contains("ledger"), reason)
        c.close(100)
    }
}
