package dev.ldptelemetry.sdk

import dev.ldptelemetry.sdk.testing.MemoryTransport
import dev.ldptelemetry.sdk.testing.RecordingCollector
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.io.RandomAccessFile
import java.util.concurrent.TimeUnit

/**
 * The cross-process lock has no takeover: a holder that is alive but stuck (paused, frozen,
 * in a debugger) keeps ledger.jvmlock, and a client of another process waits its lock timeout,
 * then drops the reports it was charging — counted, never sent uncharged — instead of taking the
 * lock over and spending the same budget twice. When the holder dies, the kernel releases the
 * lock and the next commit goes through.
 */
class LockTest {
    @TempDir
    lateinit var tmp: File

    @Test
    fun `a stuck holder in another process is waited for, never taken over`() {
        val dir = File(tmp, "state").apply { mkdirs() }
        File(dir, "secret").writeBytes(ByteArray(32) { it.toByte() })   // the device exists: its next commit needs the lock
        val ready = File(tmp, "locked")
        val holder = ProcessBuilder("java", "-cp", System.getProperty("java.class.path"), LockHolder::class.java.name,
            File(dir, "ledger.jvmlock").path, ready.path).redirectErrorStream(true).start()
        try {
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
            while (!ready.exists()) {
                check(System.nanoTime() < deadline && holder.isAlive) { "the holder did not take the lock" }
                Thread.sleep(10)
            }
            val collector = RecordingCollector()
            val reg = Json.write(mapOf("metrics" to listOf(Vectors.doc("registry.json")["registry"].m()["metrics"].l().first { it.m()["name"] == "theme" })))
            val store = FileStore(dir, OutboxLimits(), lockTimeoutMs = 300)
            val c = TelemetryClient(ClientOptions {
                registryJson = reg
                this.store = store
                transport = MemoryTransport(collector)
            })
            assertTrue(c.awaitReady(10_000))
            assertEquals(null, c.stats()["disabled_reason"])
            assertTrue(c.report("theme", "dark"))
            assertEquals(false, c.flush(3_000), "a report that could not be charged is a failure of the flush")
            assertEquals(1L, c.stats()["ledger_errors"], c.stats().toString())
            assertEquals(0L, c.stats()["charged"])
            assertEquals(0, collector.reports().size, "nothing uncharged was sent")
            c.close(100)
        } finally {
            holder.destroyForcibly().waitFor(30, TimeUnit.SECONDS)
        }
        // the holder is gone: the kernel released its lock
        val collector = RecordingCollector()
        val c = TelemetryClient(ClientOptions {
            registryJson = Json.write(mapOf("metrics" to listOf(Vectors.doc("registry.json")["registry"].m()["metrics"].l().first { it.m()["name"] == "theme" })))
            store = FileStore(dir, OutboxLimits(), lockTimeoutMs = 5_000)
            transport = MemoryTransport(collector)
        })
        assertTrue(c.awaitReady(10_000))
        assertTrue(c.report("theme", "dark"))
        assertTrue(c.flush(10_000), c.stats().toString())
        assertEquals(1, collector.reports().size)
        c.close(100)
    }
}

/** A process that takes a state directory's lock and never lets go (until it is killed). */
object LockHolder {
    @JvmStatic
    fun main(args: Array<String>) {
        val raf = RandomAccessFile(args[0], "rw")
        raf.channel.lock()
        File(args[1]).writeText("")
        Thread.sleep(Long.MAX_VALUE)
    }
}
