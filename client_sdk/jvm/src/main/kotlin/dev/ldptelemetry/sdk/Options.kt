package dev.ldptelemetry.sdk

import java.io.File

/** Wall clock in milliseconds since the epoch (the ledger's windows are its UTC days). */
fun interface WallClock {
    fun currentTimeMillis(): Long
}

/**
 * Monotonic nanoseconds: batch ages, back-offs, and the ledger's elapsed clock (the window rule,
 * [Ledger.place]: this process's epoch). It must never run faster than real time; on Android,
 * `SystemClock.elapsedRealtimeNanos()` also counts deep sleep.
 */
fun interface Ticker {
    fun nanoTime(): Long
}

/** The system's clocks, the default [ClientOptions.clock] and [ClientOptions.ticker]: one class, not two lambdas, each of which costs HotSpot a generated class at start-up. */
internal object SystemClocks : WallClock, Ticker {
    override fun currentTimeMillis(): Long = System.currentTimeMillis()
    override fun nanoTime(): Long = System.nanoTime()
}

/**
 * Every tuning knob of [TelemetryClient], declared once (as client_sdk/options.py). Kotlin:
 * `ClientOptions { endpoint = "https://…"; stateDir = context.filesDir.resolve("ldpt") }`;
 * Java: `ClientOptions.builder().endpoint("https://…").stateDir(dir).build()`.
 */
class ClientOptions private constructor(b: Builder) {
    /** The collector's URL (`ldpt serve`), or null with a [transport]. */
    val endpoint: String? = b.endpoint
    /** The registry as the collector publishes it (JSON text); null: fetched from the collector and cached. */
    val registryJson: String? = b.registryJson
    /** A registry already parsed (shared by many clients: simulated fleets). */
    val registry: Registry? = b.registry
    /** The state directory (Android: a directory under `context.filesDir`). */
    val stateDir: File? = b.stateDir
    /** A ready store instead of a [FileStore] of [stateDir] (tests: testing.MemoryStore). */
    val store: DeviceStore? = b.store
    val transport: Transport? = b.transport
    /** A batch goes when this many reports are queued … */
    val batchSize: Int = b.batchSize
    /** … or when the oldest has waited this long (ms). */
    val maxBatchAgeMs: Long = b.maxBatchAgeMs
    /** The bounded in-memory queue. */
    val queueSize: Int = b.queueSize
    val retry: RetryPolicy = b.retry
    val outboxLimits: OutboxLimits = b.outboxLimits
    /** HTTP timeout of the default transport (ms). */
    val timeoutMs: Int = b.timeoutMs
    val clock: WallClock = b.clock
    val ticker: Ticker = b.ticker
    /** Throw instead of counting (tests). */
    val strict: Boolean = b.strict
    /** metric -> the fingerprint the app was built against. */
    val pins: Map<String, String> = b.pins
    /** Public dimensions sent in clear with every batch (docs/privacy.md, "Public dimensions"). */
    val dimensions: Map<String, String> = b.dimensions
    /** Replaces the CSPRNG of the encoders (tests and simulations only). */
    val random: RandomSource? = b.random
    /** Send batches sealed (Oblivious HTTP): `Seal.gateway()`, `Seal.relay(url)`, `Seal.shuffler(url)` of the `sealed` artifact. */
    val seal: BatchSender? = b.seal

    init {
        require(batchSize >= 1) { "batchSize must be >= 1" }
        require(maxBatchAgeMs >= 0) { "maxBatchAgeMs must be >= 0" }
        require(queueSize >= 1) { "queueSize must be >= 1" }
        require(endpoint != null || transport != null) { "give endpoint (the collector URL) or transport" }
        require(stateDir != null || store != null) { "give stateDir (where the client secret and privacy ledger live) or store" }
    }

    /** Fluent setters (Java) and properties (Kotlin's `ClientOptions { … }`). */
    class Builder {
        var endpoint: String? = null
        var registryJson: String? = null
        var registry: Registry? = null
        var stateDir: File? = null
        var store: DeviceStore? = null
        var transport: Transport? = null
        var batchSize: Int = 100
        var maxBatchAgeMs: Long = 30_000
        var queueSize: Int = 10_000
        var retry: RetryPolicy = RetryPolicy()
        var outboxLimits: OutboxLimits = OutboxLimits()
        var timeoutMs: Int = 10_000
        var clock: WallClock = SystemClocks
        var ticker: Ticker = SystemClocks
        var strict: Boolean = false
        var pins: Map<String, String> = noMap()
        var dimensions: Map<String, String> = noMap()
        var random: RandomSource? = null
        var seal: BatchSender? = null

        fun endpoint(v: String) = apply { endpoint = v }
        fun registryJson(v: String) = apply { registryJson = v }
        fun registry(v: Registry) = apply { registry = v }
        fun stateDir(v: File) = apply { stateDir = v }
        fun store(v: DeviceStore) = apply { store = v }
        fun transport(v: Transport) = apply { transport = v }
        fun batchSize(v: Int) = apply { batchSize = v }
        fun maxBatchAgeMs(v: Long) = apply { maxBatchAgeMs = v }
        fun queueSize(v: Int) = apply { queueSize = v }
        fun retry(v: RetryPolicy) = apply { retry = v }
        fun outboxLimits(v: OutboxLimits) = apply { outboxLimits = v }
        fun timeoutMs(v: Int) = apply { timeoutMs = v }
        fun clock(v: WallClock) = apply { clock = v }
        fun ticker(v: Ticker) = apply { ticker = v }
        fun strict(v: Boolean) = apply { strict = v }
        fun pins(v: Map<String, String>) = apply { pins = v }
        fun dimensions(v: Map<String, String>) = apply { dimensions = v }
        fun random(v: RandomSource) = apply { random = v }
        fun seal(v: BatchSender) = apply { seal = v }
        fun build(): ClientOptions = ClientOptions(this)
    }

    companion object {
        @JvmStatic
        fun builder(): Builder = Builder()

        /** Kotlin: `ClientOptions { endpoint = …; stateDir = … }`. */
        operator fun invoke(configure: Builder.() -> Unit): ClientOptions = Builder().apply(configure).build()
    }
}

/**
 * The app's lifecycle, as the SDK needs it: an Android app forwards ProcessLifecycleOwner's
 * ON_STOP (docs/guide-app-teams.md, "Android"), a JVM service its shutdown. [TelemetryClient]
 * implements it.
 */
interface AppLifecycle {
    /** The app went to the background: batch everything queued and send it now (never blocks). */
    fun onAppBackground()

    /** The app is in the foreground again (nothing to do by default). */
    fun onAppForeground() {}
}
