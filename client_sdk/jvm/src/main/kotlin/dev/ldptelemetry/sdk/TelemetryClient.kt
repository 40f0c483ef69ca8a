package dev.ldptelemetry.sdk

import java.io.Closeable
import java.security.SecureRandom
import java.util.concurrent.TimeUnit
import java.util.concurrent.locks.ReentrantLock
import java.util.logging.Level
import java.util.logging.Logger

/**
 * What an Android app or a JVM service embeds — the Python SDK's `TelemetryClient`
 * (client_sdk/client.py, uploader.py) and the TypeScript SDK's, point by point.
 *
 * [report] does only in-memory work on the caller's thread and never blocks on I/O or throws
 * (unless `strict`): look the value up in the metric's domain, check the privacy budget against
 * an in-memory mirror of the ledger, randomise the value (CSPRNG — the true value ends here) and
 * queue the randomised report. Bad input, refusals, a full queue, an opted-out user are counted
 * in [stats] and report() returns false.
 *
 * One background thread per client then does everything that touches the disk or the network:
 * it opens the state directory, loads (or fetches) the registry, and per batch charges the
 * ledger in one locked transaction (a report the ledger refuses — another process spent the
 * budget — is dropped, never sent), packs the rest into one wire batch with a random id, stores
 * it in the outbox *before* the first send, and POSTs it. Only the collector's JSON ack deletes a
 * batch; only its problem document drops one; anything else (network error, 408/429/5xx, a
 * proxy's page, a redirect) keeps the same bytes for a retry after the back-off or Retry-After.
 *
 * When the state cannot be opened (an unwritable directory, an unreadable ledger), the client
 * reports nothing — privacy first — and `stats()["disabled_reason"]` says why.
 */
class TelemetryClient(options: ClientOptions) : AppLifecycle, Closeable {
    private val opts = options
    private val lock = ReentrantLock()
    private val changed = lock.newCondition()
    private val counters = LinkedHashMap<String, Long>().apply { for (c in COUNTERS) put(c, 0L) }
    private val csprng = Csprng.random
    private val random: RandomSource = options.random ?: SecureRandomSource(csprng)
    private val transport: Transport = options.transport ?: HttpUrlTransport(options.endpoint!!, options.timeoutMs)
    @Volatile private var logger: Logger? = null   // java.util.logging loads on the first message
    private val logged = HashSet<String>()

    private var store: DeviceStore? = null
    private var ledger: DeviceLedger? = null
    @Volatile private var registry: Registry? = null
    private var device: Device? = null
    @Volatile private var disabledReason: String? = null
    @Volatile private var optedOut = false
    @Volatile private var closed = false
    @Volatile private var started = false
    private var waiting = ArrayList<Pair<String, Any?>>()
    private val queue = java.util.ArrayDeque<Queued>()
    private var book = Book(Accounts(), null)     // as committed: accounts and the device clock (Ledger.place)
    private var mirror = Book(Accounts(), null)
    private val uncommitted = LinkedHashMap<Long, Charge>()
    private var nextId = 0L
    private val refusals = LinkedHashMap<String, RefusalCount>()
    private val stale = HashSet<String>()
    private var dimensions: Map<String, String> = options.dimensions
    private var backoffUntil = 0L
    private var serverBackoff = false
    private var attempts = 0
    private var flushing = 0
    private var hurry = false
    private var building = 0
    private var stored = 0L
    private var unsentHint = true
    private var lastRescan = Long.MIN_VALUE / 2
    private val worker = Thread({ run() }, "ldpt-uploader").apply { isDaemon = true }

    private class Queued(val id: Long, val charge: Charge, val report: WireReport, val at: Long)

    init {
        worker.start()
    }

    // --- the hot path ---------------------------------------------------------------------------------

    /** Randomise [value] and queue it for [metric]; true if queued. Never throws (unless strict). */
    fun report(metric: String, value: Any?): Boolean {
        lock.lock()
        try {
            return reportOne(metric, value)
        } catch (e: ReportException) {
            throw e
        } catch (e: RuntimeException) {
            if (opts.strict) throw e
            counters["internal_error"] = counters["internal_error"]!! + 1
            log("ldpt: report(\"$metric\") failed internally: $e")
            return false
        } finally {
            lock.unlock()
        }
    }

    private fun count(name: String, n: Long = 1) {
        counters[name] = counters[name]!! + n
    }

    private fun reportOne(metric: String, value: Any?): Boolean {
        if (closed || optedOut || disabledReason != null) {
            count(if (closed) "closed" else if (optedOut) "opted_out" else "disabled")
            if (opts.strict && disabledReason != null) throw ReportException("reporting is disabled: $disabledReason")
            return false
        }
        val reg = registry
        if (reg == null) {
            if (waiting.size >= opts.queueSize) {
                count("dropped_queue_full")
                return false
            }
            waiting.add(metric to value)   // the true value: memory only, never stored
            return true
        }
        val rt = reg[metric] ?: return fail("unknown_metric", "unknown metric \"$metric\"")
        if (metric in stale) return fail("stale_metric", "metric $metric was rejected by the collector")
        val dev = device!!
        val day = Ledger.dayOf(opts.clock.currentTimeMillis())
        val ctx = Context(dev, rt.name, day, random)
        val found = rt.lookup(value, ctx) ?: return fail("invalid_value", "a value reported for \"$metric\" is not in its domain")
        if (found.clipped) count("clipped")
        val charge = chargeOf(rt, reg, day, found.digest)
        val refusal = Ledger.apply(mirror, charge, Ledger.reading(opts.ticker))   // reserve in the mirror of the ledger
        if (refusal != null) {
            count("refused_${refusal.wire}")
            val key = "$metric\u0000${refusal.wire}"
            val entry = refusals[key]
            if (entry != null) entry.count += 1 else refusals[key] = RefusalCount(charge, refusal, 1)
            if (opts.strict) throw ReportException("metric \"$metric\": report refused by the privacy ledger (${refusal.wire} budget)")
            return false
        }
        if (queue.size >= opts.queueSize) {
            rebuildMirror()
            return fail("dropped_queue_full", "the report queue is full; new reports are dropped")
        }
        val payload = rt.encode(found, ctx)
        val id = nextId++
        uncommitted[id] = charge
        queue.addLast(Queued(id, charge, WireReport(rt.name, rt.fingerprint, payload), opts.ticker.nanoTime()))
        count("reported")
        if (queue.size >= opts.batchSize || queue.size == 1) changed.signalAll()
        return true
    }

    private fun fail(counter: String, message: String): Boolean {
        count(counter)
        if (opts.strict) throw ReportException(message)
        log("ldpt: $message; such reports are counted and dropped")
        return false
    }

    /** mirror = committed book + reports queued but not yet charged (under the lock). */
    private fun rebuildMirror() {
        val m = Ledger.copy(book)
        if (uncommitted.isNotEmpty()) {
            val reading = Ledger.reading(opts.ticker)
            for (c in uncommitted.values) Ledger.apply(m, c, reading)
        }
        mirror = m
    }

    private fun log(message: String) {
        synchronized(logged) {
            if (logged.size > 100 || !logged.add(message)) return
        }
        (logger ?: Logger.getLogger("dev.ldptelemetry.sdk").also { logger = it }).log(Level.WARNING, message)
    }

    // --- the worker --------------------------------------------------------------------------------------

    private fun run() {
        try {
            start()
            while (true) {
                lock.lock()
                try {
                    while (!closed && !dueNow()) changed.awaitNanos(waitNanos())
                    if (closed && flushing == 0) return
                } finally {
                    lock.unlock()
                }
                cycle()
            }
        } catch (e: InterruptedException) {
            // closed
        } catch (e: Throwable) {
            log("ldpt: uploader stopped: $e")
        } finally {
            lock.lock()
            try {
                started = true
                changed.signalAll()
            } finally {
                lock.unlock()
            }
        }
    }

    private fun start() {
        try {
            val st = opts.store ?: FileStore(opts.stateDir!!, opts.outboxLimits)
            val led = DeviceLedger(st, csprng)
            val out = st.isOptedOut()
            val secret = if (out) ByteArray(SECRET_BYTES) else st.loadSecret()
            val snapshot = led.snapshot()
            lock.lock()
            try {
                store = st
                ledger = led
                optedOut = out
                device = Device(secret)
                book = snapshot
                rebuildMirror()
            } finally {
                lock.unlock()
            }
            var attempt = 1
            while (registry == null && !closed) {
                try {
                    val reg = resolveRegistry(st)
                    lock.lock()
                    try {
                        registry = reg
                    } finally {
                        lock.unlock()
                    }
                } catch (e: TransportException) {
                    if (opts.strict) throw e
                    log("ldpt: cannot fetch the registry (${e.message}); retrying, reports wait in memory")
                    val delay = (opts.retry.delay(attempt++, null, csprng) * 1e9).toLong()
                    lock.lock()
                    try {
                        var left = delay
                        while (left > 0 && !hurry && !closed) left = changed.awaitNanos(left)
                        hurry = false
                    } finally {
                        lock.unlock()
                    }
                }
            }
        } catch (e: InterruptedException) {
            throw e
        } catch (e: Exception) {
            disable(e)
            return
        } finally {
            lock.lock()
            try {
                val w = waiting
                waiting = ArrayList()
                if (registry != null) for ((m, v) in w) reportOne(m, v)
                else count(if (disabledReason != null) "disabled" else "dropped_no_registry", w.size.toLong())
                started = true
                changed.signalAll()
            } finally {
                lock.unlock()
            }
        }
    }

    private fun disable(e: Exception) {
        lock.lock()
        try {
            disabledReason = "${e.javaClass.simpleName}: ${e.message}"
        } finally {
            lock.unlock()
        }
        log("ldpt: reporting is disabled: $disabledReason")
    }

    private fun resolveRegistry(st: DeviceStore): Registry {
        opts.registry?.let { return it }
        opts.registryJson?.let { return Registry.parse(it, opts.pins, domainLists(st, it)) }
        try {
            val resp = Http.getRegistry(transport)
            if (resp.status != 200) throw TransportException("the collector answered ${resp.status} to GET /v1/registry")
            val text = resp.body.toString(Charsets.UTF_8)
            val reg = Registry.parse(text, opts.pins, domainLists(st, text))
            st.writeRegistry(text)
            return reg
        } catch (e: TransportException) {
            val cached = st.readRegistry() ?: throw e
            log("ldpt: cannot fetch the registry (${e.message}); using the cached copy")
            return Registry.parse(cached, opts.pins, domainLists(st, cached))
        }
    }

    /** The values of the registry's file domains: cached by digest, else fetched (checked, then cached). */
    private fun domainLists(st: DeviceStore, registryText: String): Map<String, List<String>> {
        val out = HashMap<String, List<String>>()
        for ((name, size, sha) in Registry.fileDomains(registryText)) {
            val cached = st.readDomain(sha)
            val text = cached ?: Http.getDomain(transport, name).let {
                if (it.status != 200) throw TransportException("the collector answered ${it.status} to GET ${Http.DOMAINS_PATH}$name")
                it.body.toString(Charsets.UTF_8)
            }
            out[name] = Registry.domainValues(text, name, size, sha)
            if (cached == null) st.writeDomain(sha, text)
        }
        return out
    }

    /** Under the lock: something to do now. */
    private fun dueNow(): Boolean {
        if (!started || registry == null && disabledReason == null) return false
        val now = opts.ticker.nanoTime()
        return refusals.isNotEmpty() || batchDue(now) || (unsentHint && now >= backoffUntil) ||
            now - lastRescan >= RESCAN_NANOS
    }

    private fun waitNanos(): Long {
        val now = opts.ticker.nanoTime()
        var until = lastRescan + RESCAN_NANOS
        queue.peekFirst()?.let { until = minOf(until, it.at + TimeUnit.MILLISECONDS.toNanos(opts.maxBatchAgeMs)) }
        if (unsentHint) until = minOf(until, backoffUntil)
        return maxOf(1_000_000L, until - now)
    }

    private fun batchDue(now: Long): Boolean {
        val first = queue.peekFirst() ?: return false
        return queue.size >= opts.batchSize || flushing > 0 || now - first.at >= TimeUnit.MILLISECONDS.toNanos(opts.maxBatchAgeMs)
    }

    private fun cycle() {
        val st = store ?: return
        val led = ledger ?: return
        val refs: List<RefusalCount>
        lock.lock()
        try {
            refs = ArrayList(refusals.values)
            refusals.clear()
        } finally {
            lock.unlock()
        }
        if (refs.isNotEmpty()) {
            try {
                val r = led.commit(noList(), refs, opts.ticker)
                lock.lock()
                try {
                    book = r.book
                    rebuildMirror()
                } finally {
                    lock.unlock()
                }
            } catch (e: LdptException) {
                log("ldpt: cannot write the privacy ledger: ${e.message}")
            }
        }
        buildDue(st, led)
        lastRescan = opts.ticker.nanoTime()
        while (opts.ticker.nanoTime() >= backoffUntil) {
            val batch = try {
                st.outbox.claim(opts.clock.currentTimeMillis())
            } catch (e: RuntimeException) {
                log("ldpt: cannot read the offline queue: $e")
                null
            }
            if (batch == null) {
                unsentHint = false
                break
            }
            unsentHint = true
            var response: Response? = null
            var error: Exception? = null
            try {
                response = opts.seal?.send(batch, transport) { st.outbox.seal(batch, it) } ?: Http.postBatch(transport, batch.body)
            } catch (e: TransportException) {
                error = e
            } catch (e: RuntimeException) {   // an app's transport: a failure is a failure to send
                error = e
            }
            handle(st, batch, response, error)
            buildDue(st, led)
            signal()
        }
        signal()
    }

    private fun signal() {
        lock.lock()
        try {
            changed.signalAll()
        } finally {
            lock.unlock()
        }
    }

    /** Take due batches off the queue, charge them, store what was charged in the outbox. */
    private fun buildDue(st: DeviceStore, led: DeviceLedger) {
        while (true) {
            val items = ArrayList<Queued>()
            val refs: List<RefusalCount>
            lock.lock()
            try {
                if (!batchDue(opts.ticker.nanoTime())) return
                while (items.size < opts.batchSize && queue.isNotEmpty()) items.add(queue.pollFirst())
                refs = ArrayList(refusals.values)
                refusals.clear()
                building++
            } finally {
                lock.unlock()
            }
            try {
                val accepted = charge(st, led, items, refs)
                if (accepted.isNotEmpty()) store(st, accepted.mapped { it.report }, opts.clock.currentTimeMillis(), wireDimensions())
            } finally {
                lock.lock()
                try {
                    building--
                } finally {
                    lock.unlock()
                }
            }
        }
    }

    /**
     * Charge [items] in one ledger transaction; returns the charged ones. A report the ledger
     * refuses (another process spent the budget first), or that cannot be charged, is dropped.
     */
    private fun charge(st: DeviceStore, led: DeviceLedger, items: List<Queued>, refs: List<RefusalCount>): List<Queued> {
        fun drop(counter: String) {
            lock.lock()
            try {
                for (it in items) uncommitted.remove(it.id)
                count(counter, items.size.toLong())
                rebuildMirror()
            } finally {
                lock.unlock()
            }
        }
        val out = try {
            st.isOptedOut()
        } catch (e: RuntimeException) {
            false
        }
        if (out) {   // another process opted out
            optedOut = true
            drop("dropped")
            return noList()
        }
        val result = try {
            led.commit(items.mapped { it.charge }, refs, opts.ticker)
        } catch (e: RuntimeException) {   // never send what could not be charged
            log("ldpt: cannot update the privacy ledger, reports dropped: ${e.message}")
            drop("ledger_errors")
            return noList()
        }
        val accepted = ArrayList<Queued>()
        lock.lock()
        try {
            book = result.book
            for (it in items) uncommitted.remove(it.id)
            items.forEachIndexed { i, it ->
                val o = result.outcomes[i]
                if (o == null) {
                    accepted.add(it)
                    count("charged")
                } else {
                    count("refused_${o.wire}")
                    count("reports_refused_at_commit")
                }
            }
            // when every report was charged as reserved and nobody else wrote the book, the mirror is right
            if (result.foreign || accepted.size < items.size) rebuildMirror()
        } finally {
            lock.unlock()
        }
        return accepted
    }

    /** The dimensions this device sends: the registry's declared ones, bucketed, by name. */
    private fun wireDimensions(): Map<String, String> {
        val declared = registry?.dimensions ?: return noMap()
        val out = java.util.TreeMap<String, String>()
        lock.lock()
        try {
            for ((name, raw) in dimensions) declared[name]?.let { out[name] = it.bucket(raw) }
        } finally {
            lock.unlock()
        }
        return out
    }

    private fun store(st: DeviceStore, reports: List<WireReport>, created: Long, dims: Map<String, String>) {
        val batchId = ByteArray(Wire.BATCH_ID_BYTES).also { csprng.nextBytes(it) }   // the same on every retry
        try {
            st.outbox.add(batchId, Wire.packBatch(reports, batchId, dims), reports.size, created)
            lock.lock()
            try {
                stored++
            } finally {
                lock.unlock()
            }
            unsentHint = true
            count2("batches_built")
        } catch (e: RuntimeException) {
            count2("outbox_write_errors")
            count2("dropped", reports.size.toLong())
            log("ldpt: cannot write the offline queue (${e.message}); reports dropped")
        }
    }

    private fun count2(name: String, n: Long = 1) {
        lock.lock()
        try {
            count(name, n)
        } finally {
            lock.unlock()
        }
    }

    /** Account for one send attempt: ack, schedule a retry, or drop for good. */
    private fun handle(st: DeviceStore, batch: StoredBatch, response: Response?, error: Exception?) {
        count2("batches_sent")
        val foreign = response != null && !Http.fromCollector(response)
        if (response != null && response.status == 200 && !foreign) {
            val duplicate = (response.json() as? Map<*, *>)?.get("duplicate") == true
            lock.lock()
            try {
                attempts = 0
                backoffUntil = 0
                serverBackoff = false
                count("batches_acked")
                count("reports_acked", batch.reports.toLong())
                if (duplicate) count("duplicates")
            } finally {
                lock.unlock()
            }
            st.outbox.done(batch)   // after the counts: a flush that sees the outbox empty sees them
            return
        }
        if (response == null || foreign || Http.isRetryable(response.status)) {
            st.outbox.release(batch)
            val retryAfter = response?.retryAfter(opts.clock.currentTimeMillis())
            lock.lock()
            try {
                attempts += 1
                count("retries")
                var delay = opts.retry.delay(attempts, retryAfter, csprng)
                if (flushing > 0 && retryAfter == null) delay = minOf(delay, opts.retry.flushInterval)
                backoffUntil = opts.ticker.nanoTime() + (delay * 1e9).toLong()
                serverBackoff = retryAfter != null
                if (response == null) count("network_errors")
            } finally {
                lock.unlock()
            }
            val what = if (response == null) error.toString()
            else "HTTP ${response.status}${if (foreign) " that is not the collector's answer: check endpoint and any proxy" else ""}"
            log("ldpt: collector unavailable ($what); batches are kept and retried")
            return
        }
        lock.lock()
        try {
            attempts = 0
            backoffUntil = 0
            serverBackoff = false
        } finally {
            lock.unlock()
        }
        reject(st, batch, response)   // a final answer (4xx other than 408/429): never retried
    }

    private fun reject(st: DeviceStore, batch: StoredBatch, response: Response) {
        val slug = response.problemType ?: "error"
        val doc = response.json() as? Map<*, *> ?: emptyMap<String, Any?>()
        val metric = doc["metric"] as? String
        val index = (doc["report_index"] as? Long)?.toInt()
        var reports: List<WireReport> = noList()
        var dims: Map<String, String> = noMap()
        try {
            val (r, d) = Wire.unpackBatch(batch.body)
            reports = r
            dims = d
        } catch (e: RuntimeException) {
            // our own bytes: cannot really fail
        }
        if (response.status == 413 && reports.size > 1) {
            val half = reports.size / 2
            store(st, reports.subList(0, half), batch.created, dims)
            store(st, reports.subList(half, reports.size), batch.created, dims)
            st.outbox.done(batch)   // after the halves are stored: nothing is lost if this process dies
            return
        }
        var keep: List<WireReport>? = null
        // a stale metric, or one the collector takes only through an authenticated shuffler
        // (403 shuffle-required): refused from now on, the rest of the batch goes again
        if (metric != null && (if (response.status == 422) slug == "unknown-metric" || slug == "fingerprint-mismatch"
                               else response.status == 403 && slug == "shuffle-required")) {
            lock.lock()
            try {
                stale.add(metric)
            } finally {
                lock.unlock()
            }
            keep = reports.filter { it.m != metric }
            log("ldpt: the collector rejects metric \"$metric\" ($slug); its reports are refused from now on")
        } else if (response.status == 422 && slug == "invalid-report" && index != null && index >= 0 && index < reports.size) {
            keep = reports.filterIndexed { i, _ -> i != index }
            log("ldpt: the collector rejects a report of \"$metric\" as invalid (${doc["detail"]})")
        } else {
            log("ldpt: the collector rejected a batch with HTTP ${response.status} ($slug: ${doc["detail"] ?: ""}); it is not retried")
        }
        // counted before the batch leaves the outbox: a flush never sees it gone and not yet counted
        count2("batches_rejected")
        count2("reports_rejected", if (reports.isNotEmpty()) (reports.size - (keep?.size ?: 0)).toLong() else batch.reports.toLong())
        if (!keep.isNullOrEmpty()) store(st, keep, batch.created, dims)   // new id: never committed
        st.outbox.done(batch)
    }

    // --- public surface ----------------------------------------------------------------------------------

    /** Block until the state and registry are loaded (or reporting was disabled); false on timeout. */
    fun awaitReady(timeoutMs: Long): Boolean {
        val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs)
        lock.lock()
        try {
            while (!started || (registry == null && disabledReason == null && !closed && worker.isAlive)) {
                val left = deadline - System.nanoTime()
                if (left <= 0) return false
                changed.awaitNanos(left)
            }
            return true
        } finally {
            lock.unlock()
        }
    }

    /**
     * Send everything now; true when all of it was acknowledged within [timeoutMs]. Blocks the
     * calling thread (never call it on Android's main thread: [onAppBackground] does not block).
     */
    @JvmOverloads
    fun flush(timeoutMs: Long = 10_000): Boolean {
        val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(maxOf(0, timeoutMs))
        val before = failures()
        lock.lock()
        try {
            flushing++
            if (!serverBackoff) backoffUntil = minOf(backoffUntil, opts.ticker.nanoTime())
            hurry = true
            unsentHint = true
            changed.signalAll()
        } finally {
            lock.unlock()
        }
        try {
            if (!awaitReady(timeoutMs)) return false
            if (registry == null) return false
            val st = store ?: return false
            while (true) {
                lock.lock()
                val stored0 = try { stored } finally { lock.unlock() }
                val pending = st.outbox.pending()   // a directory listing: outside the lock report() takes
                lock.lock()
                try {
                    // nothing queued or being built, and no batch stored since the listing began
                    if (queue.isEmpty() && building == 0 && stored == stored0 && pending == 0) return failures() == before
                    if (!worker.isAlive) return false
                    unsentHint = true
                    changed.signalAll()
                    val left = deadline - System.nanoTime()
                    if (left <= 0) return false
                    changed.awaitNanos(minOf(left, 20_000_000L))
                } finally {
                    lock.unlock()
                }
            }
        } finally {
            lock.lock()
            try {
                flushing--
            } finally {
                lock.unlock()
            }
        }
    }

    private fun failures(): Long {
        lock.lock()
        try {
            val ob = store?.outbox
            return counters["reports_rejected"]!! + counters["ledger_errors"]!! + counters["outbox_write_errors"]!! +
                (ob?.droppedReports ?: 0) + (ob?.expiredReports ?: 0)
        } finally {
            lock.unlock()
        }
    }

    /**
     * The app went to the background (Android: ProcessLifecycleOwner's ON_STOP): batch what is
     * queued and send it now, on the worker; returns at once. What cannot be sent before the
     * process is frozen or killed waits in the outbox for the next start.
     */
    override fun onAppBackground() {
        Thread({ flush(30_000) }, "ldpt-background-flush").apply { isDaemon = true }.start()
    }

    /** Stop reporting and flush within [timeoutMs]; what is unsent stays in the outbox. */
    fun close(timeoutMs: Long): Boolean {
        val ok = flush(timeoutMs)
        lock.lock()
        try {
            closed = true
            count("dropped_no_registry", waiting.size.toLong())
            waiting.clear()
            changed.signalAll()
        } finally {
            lock.unlock()
        }
        worker.join(maxOf(1, timeoutMs))
        return ok
    }

    /** [close] with a 10 s flush. */
    override fun close() {
        close(10_000)
    }

    /** Stop reporting for good: delete queued reports, the outbox and the secret (blocking I/O). */
    fun optOut() {
        lock.lock()
        try {
            optedOut = true
            queue.clear()
            uncommitted.clear()
            refusals.clear()
            waiting.clear()
            device = null
        } finally {
            lock.unlock()
        }
        awaitReady(30_000)
        val st = store ?: return
        st.optOut()
        ledger?.forgetValues()
    }

    /** Undo [optOut]: report again with a fresh secret (a new privacy spend, charged by the ledger). */
    fun optIn() {
        awaitReady(30_000)
        val st = store ?: return
        st.optIn()
        val secret = st.loadSecret()
        val snapshot = ledger!!.snapshot()
        lock.lock()
        try {
            device = Device(secret)
            optedOut = false
            book = snapshot
            rebuildMirror()
        } finally {
            lock.unlock()
        }
    }

    val isOptedOut: Boolean get() = optedOut

    /** Set the device's public dimensions (e.g. os, app_version), sent in clear with every batch. */
    fun setDimensions(values: Map<String, String>) {
        lock.lock()
        try {
            dimensions = LinkedHashMap(values)
        } finally {
            lock.unlock()
        }
    }

    /** Throw [ReportException] if `report(metric, value)` would be dropped as bad input (after [awaitReady]). */
    fun validate(metric: String, value: Any?) {
        val reg = registry ?: throw ReportException("the metric registry is not known yet: awaitReady() first")
        val rt = reg[metric] ?: throw ReportException("unknown metric \"$metric\"")
        lock.lock()
        try {
            val ctx = Context(device ?: Device(ByteArray(SECRET_BYTES)), rt.name, Ledger.dayOf(opts.clock.currentTimeMillis()), random)
            rt.lookup(value, ctx) ?: throw ReportException("a value of metric \"$metric\" is not in its domain")
        } finally {
            lock.unlock()
        }
    }

    /** Counters (the Python SDK's names), queue sizes, and why reporting is disabled, if it is. */
    fun stats(): Map<String, Any?> {
        val out = LinkedHashMap<String, Any?>()
        lock.lock()
        try {
            out.putAll(counters)
            out["queued"] = queue.size.toLong()
            out["awaiting_registry"] = waiting.size.toLong()
        } finally {
            lock.unlock()
        }
        val st = store
        out["outbox_pending"] = (st?.outbox?.pending() ?: 0).toLong()
        out["outbox_dropped_reports"] = st?.outbox?.droppedReports ?: 0L
        out["outbox_expired_reports"] = st?.outbox?.expiredReports ?: 0L
        out["disabled_reason"] = disabledReason
        out["state"] = st?.where
        return out
    }

    /** The privacy ledger as committed, per metric (what `ldpt ledger --state-dir` prints). */
    fun ledgerSnapshot(): Accounts {
        awaitReady(30_000)
        return ledger?.snapshot()?.accounts ?: Accounts()
    }

    companion object {
        /** What [stats] counts (the Python and TypeScript SDKs' names). */
        @JvmField
        val COUNTERS: List<String> = listOfAll(
            "reported", "charged", "refused_window", "refused_lifetime", "refused_device_window",
            "refused_device_lifetime", "invalid_value", "clipped", "unknown_metric", "stale_metric",
            "dropped_queue_full", "dropped", "opted_out", "closed", "dropped_no_registry", "disabled",
            "internal_error", "batches_built", "batches_sent", "batches_acked", "reports_acked", "duplicates",
            "retries", "network_errors", "batches_rejected", "reports_rejected", "reports_refused_at_commit",
            "ledger_errors", "outbox_write_errors",
        )
        private const val RESCAN_NANOS = 60_000_000_000L

        private fun chargeOf(rt: Metric, reg: Registry, day: Long, digest: String?) = Charge(
            metric = rt.name, fingerprint = rt.fingerprint, day = day, epsilon = rt.epsilon,
            epsilonLongitudinal = rt.epsilonLongitudinal, digest = if (rt.epsilonLongitudinal == null) null else digest,
            reportsPerWindow = rt.reportsPerWindow, lifetimeBudget = rt.lifetimeEpsilon,
            deviceWindowBudget = reg.device?.epsilonPerWindow, deviceLifetimeBudget = reg.device?.lifetimeEpsilon,
            windowCharges = rt.windowCharges,
        )
    }
}
