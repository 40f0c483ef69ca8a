package dev.ldptelemetry.sdk.e2e

import dev.ldptelemetry.sdk.ClientOptions
import dev.ldptelemetry.sdk.HttpUrlTransport
import dev.ldptelemetry.sdk.Json
import dev.ldptelemetry.sdk.Registry
import dev.ldptelemetry.sdk.RetryPolicy
import dev.ldptelemetry.sdk.TelemetryClient
import dev.ldptelemetry.sdk.sealed.Seal
import java.io.File
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicLong
import kotlin.system.exitProcess

/**
 * The JVM end-to-end driver (tests/test_jvm_e2e.py), against a real `ldpt serve` and the
 * registry of client_sdk/js/e2e/metrics.toml (the same population as the TypeScript SDK's fleet):
 *
 *   fleet  ENDPOINT STATES_ROOT N        N devices in this JVM, one state directory (secret, ledger, outbox) each
 *   sealed ENDPOINT STATES_ROOT N        the same, every batch sealed to the collector's gateway (Seal.gateway())
 *   shared ENDPOINT STATE_DIR TRIES GATE one device's budget (run twice at once): once its state is loaded,
 *                                        writes GATE.<token> and waits for the file GATE before reporting
 *   outage ENDPOINT STATE_DIR REGISTRY_JSON GATE  the collector is down: report, flush (fails),
 *                                        write GATE.down, wait for GATE, flush again
 *
 * prints one JSON document of counts on stdout.
 */
object Fleet {
    private val THEMES = listOf("light", "dark", "system")
    private val URLS = listOf("/", "/docs", "/pricing", "/blog")

    /** Device j's true values: theme 50/30/20 %, url 40/30/20/10 %, load in [0, 100] (tests/js_runtime_support.py truth). */
    fun truth(j: Int): Map<String, Any> {
        val t = j % 10
        return linkedMapOf(
            "theme" to THEMES[if (t < 5) 0 else if (t < 8) 1 else 2],
            "url" to URLS[if (t < 4) 0 else if (t < 7) 1 else if (t < 9) 2 else 3],
            "load" to ((j.toLong() * 37) % 101).toDouble(),
        )
    }

    private fun registry(endpoint: String): Registry {
        val resp = HttpUrlTransport(endpoint).request("GET", "/v1/registry", null, mapOf("Accept" to "application/json"))
        check(resp.status == 200) { "GET /v1/registry: ${resp.status}" }
        return Registry.parse(resp.body.toString(Charsets.UTF_8))
    }

    private fun waitFor(file: File) {
        while (!file.exists()) Thread.sleep(10)
    }

    fun fleet(url: String, root: File, n: Int, sealed: Boolean = false): Map<String, Any?> {
        val reg = registry(url)
        val sealer = if (sealed) Seal.gateway() else null   // one per app process: the key fetched once
        val reported = AtomicLong()
        val acked = AtomicLong()
        val flushed = AtomicLong()
        val devices = AtomicLong()
        val refused = AtomicLong()
        val disabled = java.util.Collections.synchronizedList(ArrayList<String>())
        val pool = Executors.newFixedThreadPool(32)
        for (j in 0 until n) pool.execute {
            val client = TelemetryClient(ClientOptions {
                endpoint = url
                registry = reg
                stateDir = File(root, "device-$j")
                seal = sealer
            })
            client.awaitReady(60_000)
            for ((metric, value) in truth(j)) if (client.report(metric, value)) reported.incrementAndGet()
            if (client.flush(60_000)) flushed.incrementAndGet()
            val s = client.stats()
            acked.addAndGet(s["reports_acked"] as Long)
            refused.addAndGet(listOf("refused_window", "refused_lifetime", "refused_device_window", "refused_device_lifetime").sumOf { s[it] as Long })
            (s["disabled_reason"] as String?)?.let { disabled.add(it) }
            client.close(0)
            devices.incrementAndGet()
        }
        pool.shutdown()
        pool.awaitTermination(30, TimeUnit.MINUTES)
        return linkedMapOf("devices" to devices.get(), "flushed" to flushed.get(), "reported" to reported.get(),
            "acked" to acked.get(), "refused" to refused.get(), "disabled" to disabled.toList(), "seal" to sealer?.stats())
    }

    fun shared(endpoint: String, dir: File, tries: Int, gate: File): Map<String, Any?> {
        val client = TelemetryClient(ClientOptions {
            this.endpoint = endpoint
            registry = registry(endpoint)
            stateDir = dir
        })
        client.awaitReady(60_000)
        val token = java.util.UUID.randomUUID().toString()
        File(gate.path + "." + token).writeText("")
        waitFor(gate)
        var accepted = 0
        for (i in 0 until tries) if (client.report("load", i.toDouble())) accepted++
        client.flush(60_000)
        val s = client.stats()
        client.close(0)
        return linkedMapOf("accepted" to accepted, "charged" to s["charged"], "acked" to s["reports_acked"],
            "refusedAtCommit" to s["reports_refused_at_commit"])
    }

    fun outage(endpoint: String, dir: File, registryJson: File, gate: File): Map<String, Any?> {
        val client = TelemetryClient(ClientOptions {
            this.endpoint = endpoint
            this.registryJson = registryJson.readText()
            stateDir = dir
            retry = RetryPolicy(initial = 0.05, maximum = 0.2)
        })
        client.awaitReady(60_000)
        client.report("theme", "dark")
        val during = client.flush(500)
        File(gate.path + ".down").writeText("")
        waitFor(gate)
        val after = client.flush(30_000)
        val out = linkedMapOf<String, Any?>("during" to during, "after" to after)
        out.putAll(client.stats())
        client.close(0)
        return out
    }

    @JvmStatic
    fun main(args: Array<String>) {
        val result = when (args[0]) {
            "fleet" -> fleet(args[1], File(args[2]), args[3].toInt())
            "sealed" -> fleet(args[1], File(args[2]), args[3].toInt(), sealed = true)
            "shared" -> shared(args[1], File(args[2]), args[3].toInt(), File(args[4]))
            "outage" -> outage(args[1], File(args[2]), File(args[3]), File(args[4]))
            else -> error("unknown mode ${args[0]}")
        }
        println(Json.write(result))
        System.out.flush()
        exitProcess(0)
    }
}
