package dev.ldptelemetry.sdk.docs

import dev.ldptelemetry.sdk.ClientOptions
import dev.ldptelemetry.sdk.TelemetryClient
import java.io.File

fun main() {
    val telemetry = TelemetryClient(ClientOptions {
        endpoint = System.getenv("LDPT_ENDPOINT") ?: "http://127.0.0.1:8080"
        stateDir = File(System.getProperty("user.home"), ".local/share/myapp/ldpt")
    })
    telemetry.report("theme", "dark")
    telemetry.report("session_minutes", 12.5)
    telemetry.report("crashed_today", false)
    println(telemetry.flush(10_000))   // true when the collector acknowledged everything
    telemetry.close()
}
