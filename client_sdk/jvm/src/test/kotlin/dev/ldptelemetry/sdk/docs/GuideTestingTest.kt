package dev.ldptelemetry.sdk.docs

import dev.ldptelemetry.sdk.ClientOptions
import dev.ldptelemetry.sdk.TelemetryClient
import dev.ldptelemetry.sdk.Vectors
import dev.ldptelemetry.sdk.testing.MemoryStore
import dev.ldptelemetry.sdk.testing.MemoryTransport
import dev.ldptelemetry.sdk.testing.RecordingCollector
import org.junit.jupiter.api.Test

/** The guide's testing snippet (docs/guide-app-teams.md, "Android and the JVM"), verbatim below the marker. */
class GuideTestingTest {
    private val publishedRegistryJson = Vectors.registryText

    @Test
    fun `the guide's testing snippet runs`() {
        // guide: begin
        val collector = RecordingCollector()
        val telemetry = TelemetryClient(ClientOptions {
            registryJson = publishedRegistryJson   // the registry as GET /v1/registry publishes it
            store = MemoryStore()                  // a device in memory: a fresh secret and ledger
            transport = MemoryTransport(collector) // no socket: the collector double acknowledges
            strict = true                          // bad input throws instead of being counted
        })
        telemetry.report("theme", "dark")
        check(telemetry.flush(5_000))
        check(collector.reports("theme").size == 1)   // randomised reports only: {m, f, p}
        telemetry.close()
        // guide: end
    }
}
