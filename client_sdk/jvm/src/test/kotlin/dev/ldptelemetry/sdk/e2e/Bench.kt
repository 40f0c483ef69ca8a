package dev.ldptelemetry.sdk.e2e

import dev.ldptelemetry.sdk.ClientOptions
import dev.ldptelemetry.sdk.FileStore
import dev.ldptelemetry.sdk.Json
import dev.ldptelemetry.sdk.Registry
import dev.ldptelemetry.sdk.Response
import dev.ldptelemetry.sdk.TelemetryClient
import dev.ldptelemetry.sdk.Transport
import java.io.File
import java.lang.management.ManagementFactory

/**
 * The JVM side of bench/jvm_sdk.py (started with `java -cp`):
 *
 *   empty                                 an empty program (the baseline of the start-up bar)
 *   startup REGISTRY_JSON                 a client from a registry file (state on disk, a transport
 *                                         that acknowledges), 100 mixed reports, close
 *   latency REGISTRY_JSON VALUES_JSON N   report() per metric: N warm-up calls, then N timed calls
 *                                         (thread CPU time and wall time, ns), worker idle
 */
object Bench {
    /** A transport that acknowledges, made when a mode needs it: the empty program creates no lambda (the JVM's first one costs
     *  it the invokedynamic bootstrap, ~10 ms of CPU, which is the client's start-up cost, not the baseline's). */
    private fun ok(): Transport = Transport { _, _, _, _ -> Response(200, java.util.Collections.singletonMap("content-type", "application/json"), "{\"accepted\": 1, \"duplicate\": false}".toByteArray()) }

    private fun tempDir(): File = File.createTempFile("ldpt-bench", "").also { it.delete(); it.mkdirs() }

    /** Written as an app would, without the Kotlin standard library's collection and file helpers (so the
     *  measure is the SDK's start-up, not the driver's): java.io reads the file, plain arrays hold the values. */
    private fun startup(registryFile: File) {
        val names = arrayOf("theme", "crashed_today", "country", "session_minutes", "startup_ms")
        val values = arrayOf<Any>("dark", true, "FR", 37.5, 812.0)
        val dir = tempDir()
        val text = java.io.InputStreamReader(java.io.FileInputStream(registryFile), Charsets.UTF_8).use { r ->
            val sb = StringBuilder()
            val buf = CharArray(8192)
            while (true) {
                val n = r.read(buf)
                if (n < 0) break
                sb.append(buf, 0, n)
            }
            sb.toString()
        }
        val client = TelemetryClient(ClientOptions.builder().registryJson(text).stateDir(dir).transport(ok()).build())
        for (i in 0 until 100) check(client.report(names[i % 5], values[i % 5])) { "refused" }
        check(client.close(30_000)) { "not acknowledged" }
    }

    private fun latency(registryFile: File, valuesFile: File, count: Int): Map<String, Any?> {
        @Suppress("UNCHECKED_CAST")
        val values = Json.parse(valuesFile.readText()) as Map<String, Any?>
        val reg = Registry.parse(registryFile.readText())
        val threads = ManagementFactory.getThreadMXBean()
        val out = LinkedHashMap<String, Any?>()
        for ((name, value) in values) {
            val dir = tempDir()
            val client = TelemetryClient(ClientOptions {
                registry = reg
                store = FileStore(dir)
                transport = ok()
                batchSize = 1_000_000
                maxBatchAgeMs = 1_000_000_000
                queueSize = 2 * count + 1000
            })
            client.awaitReady(30_000)
            val cpu = LongArray(count)
            val wall = LongArray(count)
            for (round in 0 until 2) {   // round 0 warms the JIT up, round 1 is timed
                for (i in 0 until count) {
                    if (i % 500 == 499) client.flush(30_000)   // the worker sends between timed calls, not during them
                    val c0 = threads.currentThreadCpuTime
                    val t0 = System.nanoTime()
                    val accepted = client.report(name, value)
                    val t1 = System.nanoTime()
                    val c1 = threads.currentThreadCpuTime
                    check(accepted) { "$name refused: ${client.stats()}" }
                    cpu[i] = c1 - c0
                    wall[i] = t1 - t0
                }
            }
            client.close(30_000)
            dir.deleteRecursively()
            cpu.sort()
            wall.sort()
            val p99 = (0.99 * (count - 1)).toInt()
            out[name] = listOf(cpu[count / 2] / 1e3, cpu[p99] / 1e3, wall[count / 2] / 1e3, wall[p99] / 1e3, reg[name]!!.protocol)
        }
        return out
    }

    @JvmStatic
    fun main(args: Array<String>) {
        when (args[0]) {
            "empty" -> {}
            "startup" -> startup(File(args[1]))
            "latency" -> println(Json.write(latency(File(args[1]), File(args[2]), args[3].toInt())))
            else -> error("unknown mode ${args[0]}")
        }
        System.exit(0)
    }
}
