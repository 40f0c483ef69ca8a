package dev.ldptelemetry.sdk

/**
 * The privacy ledger: the device's budget book (docs/privacy.md), the same book as the Python
 * SDK's client_sdk/ledger.py and the TypeScript SDK's ledger.ts, charge for charge (pinned by
 * conformance/vectors/ledger.json).
 *
 * What a report costs (docs/math.md §10):
 * - without memoisation: ε per report, in the window (a UTC day) and over the lifetime;
 * - memoised (`epsilon_inf`): ε₁ per report in the window, and ε∞ over the lifetime the first
 *   time a *distinct* value is reported (recognised by a keyed digest, never the value).
 * A report beyond `reports_per_window`, the metric's `lifetime_epsilon`, or the registry's
 * `[device]` caps (sums over all metrics) is refused, counted, and never sent.
 *
 * Which window a charge counts in is the device clock rule ([place], its state in [Book]): one window for the
 * device, opened no faster than its elapsed clock allows, whatever the wall clock says.
 *
 * Everything here is pure: the store (State.kt) runs [commitCharges] inside one locked
 * read-modify-write, so two processes on one state directory never overspend together. The
 * book's JSON is the Python SDK's ledger.json format, so `ldpt ledger --state-dir` reads it.
 */
object Ledger {
    /** Relative slack when comparing spends with a budget (realised epsilons are quantised floats). */
    const val BUDGET_SLACK = 1e-9
    const val FORMAT = "ldpt-ledger"
    /** 2: the device clock state (`clock`, in [Book]); version-1 books are read. */
    const val VERSION = 2L

    /** How far before the window (UTC days) a charge still counts in it (the device clock rule). */
    const val MAX_WINDOW_AHEAD_DAYS = 2L
    /** Seconds an opening needs: a day and 2 s (readings are floored; two processes may floor one clock 1 s apart). */
    const val OPEN_AFTER = 86_402L
    /** Epochs a book remembers (most recently used kept). */
    const val EPOCH_SLOTS = 16

    /** This process's epoch id: a random one, as the other SDKs where no boot clock is shared. */
    private val processEpoch: String = "run:" + Hashing.hex(ByteArray(8).also { Csprng.random.nextBytes(it) })

    /** The elapsed reading of [ticker] (the client's monotonic clock) in this process's epoch. */
    @JvmStatic
    fun reading(ticker: Ticker): Reading = Reading(processEpoch, Math.floorDiv(ticker.nanoTime(), 1_000_000_000L))

    /** Record an update by the reading's epoch (fill its empty slots, move it last: most recently
     *  used); a new epoch gets one opening's credit (`since0` a day before its first reading). */
    private fun touch(c: Book, id: String, seconds: Long) {
        val i = c.ids.lastIndexOf(id)
        val s0: Long?
        val s1: Long?
        if (i >= 0) {
            c.ids.removeAt(i)
            s0 = c.since0.removeAt(i) ?: seconds
            s1 = c.since1.removeAt(i) ?: seconds
        } else {
            s0 = seconds - OPEN_AFTER
            s1 = seconds
        }
        c.ids.add(id)
        c.since0.add(s0)
        c.since1.add(s1)
        while (c.ids.size > EPOCH_SLOTS) {
            c.ids.removeAt(0)
            c.since0.removeAt(0)
            c.since1.removeAt(0)
        }
    }

    /**
     * The device clock rule (docs/conformance.md, "The device clock"; client_sdk.device_clock.place):
     * updates [c] and the accounts for a charge dated [day] read at [reading]; the charge then
     * counts in `c.window`. One window for the device; dated up to [MAX_WINDOW_AHEAD_DAYS] before
     * it: counts in it (late); further back: re-dated (every later account moves there with its
     * spend); the day a re-date left: resumed; a later day opens a fresh window only when the
     * epoch's clock shows [OPEN_AFTER] seconds since the opening before the last ([mayOpen] false:
     * recording a refusal, never opens), else the charge is held in the window.
     */
    @JvmStatic
    fun place(c: Book, day: Long, reading: Reading, mayOpen: Boolean) {
        val accounts = c.accounts
        touch(c, reading.first, reading.second)   // the reading's epoch is last now
        val last = c.ids.size - 1
        val w = c.window
        if (w == null || day == w) {
            c.window = day                                  // create, or the same window
        } else if (day < w) {
            if (w - day > MAX_WINDOW_AHEAD_DAYS) {          // re-date (else: late)
                c.window = day
                c.left = w
                c.redated += 1
                redate(accounts, day)
            }
        } else if (day == c.left) {                         // resume
            c.window = day
            c.left = null
            resume(accounts, w, day)
        } else {
            val start = c.since0[last]
            if (mayOpen && start != null && reading.second - start >= OPEN_AFTER) {   // open
                for (k in 0..last) {
                    c.since0[k] = c.since1[k]
                    c.since1[k] = null
                }
                c.since1[last] = reading.second
                c.window = day
                c.left = null
                c.opened += 1
            } else if (mayOpen) c.held += 1                 // held
        }
    }

    /** The `clock` object of ledger.json. */
    @JvmStatic
    fun clockJson(c: Book): Map<String, Any?> {
        val epochs = ArrayList<Any?>()
        for (k in 0 until c.ids.size) epochs.add(mapOfPairs<String, Any?>("id" to c.ids[k], "since" to listOfAll(c.since0[k], c.since1[k])))
        return mapOfPairs("epochs" to epochs, "held" to c.held, "left" to c.left, "opened" to c.opened,
            "redated" to c.redated, "window" to c.window)
    }

    /** Read the `clock` object into [c] (a field of the wrong type: a ClassCastException, which [parse] reports). */
    private fun clockFromJson(data: Any?, c: Book) {
        val d = data as Map<*, *>
        c.window = d["window"] as Long?
        c.left = d["left"] as Long?
        c.opened = d["opened"] as Long? ?: 0L
        c.held = d["held"] as Long? ?: 0L
        c.redated = d["redated"] as Long? ?: 0L
        for (e in d["epochs"] as List<*>? ?: noList<Any?>()) {
            val since = (e as Map<*, *>)["since"] as List<*>
            require(since.size == 2) { "an epoch's since is not two readings" }
            c.ids.add(e["id"] as String)
            c.since0.add(since[0] as Long?)
            c.since1.add(since[1] as Long?)
        }
        while (c.ids.size > EPOCH_SLOTS) {
            c.ids.removeAt(0)
            c.since0.removeAt(0)
            c.since1.removeAt(0)
        }
    }


    /** UTC day number of a POSIX time in milliseconds: the ledger's window. */
    @JvmStatic
    fun dayOf(millis: Long): Long = Math.floorDiv(millis, 86_400_000L)

    private val names = java.util.concurrent.ConcurrentHashMap<Long, String>()

    /** The window as shown to users and in the file: YYYY-MM-DD (UTC), proleptic Gregorian (no java.time: Android 24). */
    @JvmStatic
    fun windowName(day: Long): String = names[day] ?: civil(day).also { if (names.size < 64) names[day] = it }

    private fun civil(day: Long): String {
        // Howard Hinnant's civil_from_days
        val z = day + 719468
        val era = Math.floorDiv(z, 146097L)
        val doe = z - era * 146097
        val yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        val doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        val mp = (5 * doy + 2) / 153
        val d = doy - (153 * mp + 2) / 5 + 1
        val m = if (mp < 10) mp + 3 else mp - 9
        val y = yoe + era * 400 + if (m <= 2) 1 else 0
        if (y < 1 || y > 9999) throw IllegalArgumentException("day $day is outside the calendar (years 1-9999)")
        return Json.pad(y.toString(), 4) + "-" + Json.pad(m.toString(), 2) + "-" + Json.pad(d.toString(), 2)
    }

    private fun deviceCapped(c: Charge) = c.deviceWindowBudget != null || c.deviceLifetimeBudget != null

    /**
     * The window was re-dated back to [day] (the clock was set back): every account of a later
     * window moves there with its spend, plus the spend it had made on that very day.
     */
    private fun redate(accounts: Accounts, day: Long) {
        val window = windowName(day)
        for (a in accounts.values) {
            if (a.window > window) {
                if (a.previousWindow == window) {
                    a.windowReports += a.previousReports
                    a.windowEpsilon += a.previousEpsilon
                }
                a.window = window
                a.previousWindow = ""
                a.previousReports = 0
                a.previousEpsilon = 0.0
            }
        }
    }

    /** Forward onto the day a re-date left: the accounts of the window continue there. */
    private fun resume(accounts: Accounts, left: Long, day: Long) {
        val window = windowName(left)
        val target = windowName(day)
        for (a in accounts.values) if (a.window == window) a.window = target
    }

    /** The charge re-dated to the window it counts in (the device clock rule: [place]). */
    private fun placeCharge(book: Book, c: Charge, reading: Reading, mayOpen: Boolean): Charge {
        place(book, c.day, reading, mayOpen)
        val day = book.window!!
        return if (day == c.day) c else c.on(day)
    }

    /** Start a new window when the charge is later; a late charge counts in the current one. */
    private fun roll(a: MetricAccount, window: String) {
        if (window > a.window) {
            a.previousWindow = a.window
            a.previousReports = a.windowReports
            a.previousEpsilon = a.windowEpsilon
            a.window = window
            a.windowReports = 0
            a.windowEpsilon = 0.0
        }
    }

    /** Lifetime epsilon this report adds: ε, or ε∞ for a value not seen before (memoised). */
    internal fun lifetimeCost(a: MetricAccount?, c: Charge): Double {
        val eInf = c.epsilonLongitudinal ?: return c.epsilon
        val digest = c.digest
        val seen = a != null && digest != null && a.memo[c.fingerprint]?.contains(digest) == true
        return if (seen) 0.0 else eInf
    }

    /** Window epsilon this report adds: ε, or max(C(n+1) − C(n), C(n+1) − spent) for the n reports
     *  already spending `spent` in the charge's window (window_charge.next_charge). */
    internal fun windowCost(a: MetricAccount?, c: Charge): Double {
        val w = c.windowCharges ?: return c.epsilon
        val n = if (a != null && windowName(c.day) <= a.window) a.windowReports else 0L
        val after = w.total(n + 1)
        return if (n == 0L) after else maxOf(after - w.total(n), after - a!!.windowEpsilon)
    }

    private fun decideDevice(accounts: Accounts, c: Charge): Refusal? {
        if (!deviceCapped(c)) return null
        val window = windowName(c.day)
        var inWindow = 0.0
        var lifetime = 0.0
        for (a in accounts.values) if (a.window == window) inWindow += a.windowEpsilon
        for (a in accounts.values) lifetime += a.lifetimeEpsilon
        val w = c.deviceWindowBudget
        if (w != null && inWindow + windowCost(accounts[c.metric], c) > w * (1 + BUDGET_SLACK)) return Refusal.DEVICE_WINDOW
        val l = c.deviceLifetimeBudget
        if (l != null && lifetime + lifetimeCost(accounts[c.metric], c) > l * (1 + BUDGET_SLACK)) return Refusal.DEVICE_LIFETIME
        return null
    }

    private fun decide(a: MetricAccount?, c: Charge): Refusal? {
        val window = windowName(c.day)
        val inWindow = if (a == null || window > a.window) 0 else a.windowReports
        if (inWindow + 1 > c.reportsPerWindow) return Refusal.WINDOW
        val budget = c.lifetimeBudget
        if (budget != null) {
            val spent = a?.lifetimeEpsilon ?: 0.0
            if (spent + lifetimeCost(a, c) > budget * (1 + BUDGET_SLACK)) return Refusal.LIFETIME
        }
        return null
    }

    private fun account(accounts: Accounts, c: Charge, window: String): MetricAccount =
        accounts.getOrPut(c.metric) {
            MetricAccount(window = window, fingerprint = c.fingerprint, epsilonPerReport = c.epsilon,
                epsilonLongitudinal = c.epsilonLongitudinal, reportsPerWindow = c.reportsPerWindow.toLong(),
                lifetimeBudget = c.lifetimeBudget)
        }

    /**
     * Charge [accounts] in place if the report fits; otherwise count the refusal and return why.
     * [reading] is the elapsed clock read under the book's lock (the rule: [place]).
     */
    @JvmStatic
    fun apply(book: Book, charge: Charge, reading: Reading): Refusal? {
        val accounts = book.accounts
        val c = placeCharge(book, charge, reading, true)
        val window = windowName(c.day)
        val refusal = decide(accounts[c.metric], c) ?: decideDevice(accounts, c)
        val a = account(accounts, c, window)
        roll(a, window)
        if (refusal != null) {
            a.count(refusal, 1)
            return refusal
        }
        val cost = lifetimeCost(a, c)
        a.windowEpsilon += windowCost(a, c)
        a.windowReports += 1
        a.lifetimeReports += 1
        a.lifetimeEpsilon += cost
        if (c.epsilonLongitudinal != null && cost > 0) a.memo.getOrPut(c.fingerprint) { LinkedHashSet() }.add(c.digest!!)
        a.fingerprint = c.fingerprint
        a.epsilonPerReport = c.epsilon
        a.epsilonLongitudinal = c.epsilonLongitudinal
        a.reportsPerWindow = c.reportsPerWindow.toLong()
        a.lifetimeBudget = c.lifetimeBudget
        return null
    }

    /** Apply refusal counts decided on the app's side, then charges in order (one transaction); the outcome per charge. */
    internal fun commitCharges(book: Book, charges: List<Charge>, refusals: List<RefusalCount>, reading: Reading): List<Refusal?> {
        for (r in refusals) recordRefusal(book, r.charge, r.reason, r.count, reading)
        return charges.mapped { apply(book, it, reading) }
    }

    /** Count [n] refusals decided earlier (on the app's side) in the book; never opens a window. */
    @JvmStatic
    fun recordRefusal(book: Book, charge: Charge, reason: Refusal, n: Long, reading: Reading) {
        val c = placeCharge(book, charge, reading, false)
        val window = windowName(c.day)
        val a = account(book.accounts, c, window)
        roll(a, window)
        a.count(reason, n)
    }

    /** Drop the memoisation digests (opt-out: the secret they are keyed by is gone); true if any. */
    internal fun forgetValues(accounts: Accounts): Boolean {
        var changed = false
        for (a in accounts.values) {
            if (a.memo.isNotEmpty()) changed = true
            a.memo.clear()
        }
        return changed
    }

    /** A deep copy of [book]'s accounts and clock (its generation is not copied). */
    internal fun copy(book: Book): Book {
        val out = Book(Accounts(), null)
        for ((k, v) in book.accounts) out.accounts[k] = v.copy()
        clockFromJson(clockJson(book), out)
        return out
    }

    // --- the file -------------------------------------------------------------------------------

    /** The book as the Python SDK writes ledger.json (metrics and keys sorted; digests sorted). */
    @JvmStatic
    fun dump(book: Book, generation: String): String {
        val accounts = book.accounts
        val metrics = java.util.TreeMap<String, Any?>()
        for ((name, a) in accounts) metrics[name] = java.util.TreeMap(a.toJson())
        val doc = mapOfPairs<String, Any?>("clock" to clockJson(book), "format" to FORMAT, "generation" to generation,
            "metrics" to metrics, "version" to VERSION)
        return Json.write(doc, 1) + "\n"
    }

    /** Parse a book written by [dump] or the Python SDK; [LedgerException] when it is not one. */
    @JvmStatic
    fun parse(text: String?, where: String): Book {
        val accounts = Accounts()
        if (text == null) return Book(accounts, null)
        try {
            val doc = Json.parse(text) as? Map<*, *> ?: throw IllegalArgumentException("not an ldp-telemetry ledger")
            if (doc["format"] != FORMAT) throw IllegalArgumentException("not an ldp-telemetry ledger")
            val version = (doc["version"] as? Long) ?: 0L
            if (version > VERSION) throw IllegalArgumentException("written by a newer SDK (version $version)")
            val metrics = doc["metrics"] as? Map<*, *> ?: throw IllegalArgumentException("no metrics")
            for ((name, data) in metrics) accounts[name as String] = MetricAccount.fromJson(data)
            val book = Book(accounts, doc["generation"] as? String)
            if (doc.containsKey("clock")) clockFromJson(doc["clock"], book)   // (a version-1 book: a new clock)
            return book
        } catch (e: RuntimeException) {
            throw LedgerException("$where: the privacy ledger is unreadable (${e.message}); the SDK refuses to report " +
                "until it is repaired or removed (removing it forgets past spend)", e)
        }
    }
}

/**
 * An elapsed-clock reading: (epoch id, whole seconds of that epoch's clock, floored), of a clock
 * that never runs faster than real time; readings of different epochs are never compared.
 */
typealias Reading = Pair<String, Long>

/**
 * A book: its accounts, the generation tag of its last writer, and the device clock state (the
 * ledger file's `clock` object; the rule is [Ledger.place], step for step client_sdk/device_clock.py;
 * docs/conformance.md, "The device clock"). Plain fields, no methods: the jar has a size budget.
 */
class Book(val accounts: Accounts, val generation: String?) {
    /** The device's current window, a UTC day number (null: an empty book). */
    @JvmField var window: Long? = null
    /** The window the last re-date left (null: none since the last opening or resume). */
    @JvmField var left: Long? = null
    /** The epochs seen, least recently used first: their ids, and each one's readings at its first
     *  update at/after the second-to-last opening ([since0]) and the last ([since1]); null: none yet. */
    @JvmField val ids = ArrayList<String>()
    @JvmField val since0 = ArrayList<Long?>()
    @JvmField val since1 = ArrayList<Long?>()
    @JvmField var opened = 0L
    @JvmField var held = 0L
    @JvmField var redated = 0L
}

/** The whole book, in insertion order (device sums add in this order, as the reference's dict). */
typealias Accounts = LinkedHashMap<String, MetricAccount>

/** Why a report was refused (never sent); [wire] is the name in stats() and the vectors. */
enum class Refusal(val wire: String) {
    WINDOW("window"), LIFETIME("lifetime"), DEVICE_WINDOW("device_window"), DEVICE_LIFETIME("device_lifetime")
}

/** One report asking to be charged: what it costs and the limits that apply. */
class Charge(
    val metric: String,
    val fingerprint: String,
    /** UTC day of the report (days since 1970-01-01): the window. */
    val day: Long,
    /** ε per report (ε₁ for memoised protocols). */
    val epsilon: Double,
    /** ε∞ when the protocol is memoised, else null. */
    val epsilonLongitudinal: Double?,
    /** Keyed digest of the value (memoised protocols), else null. */
    val digest: String?,
    val reportsPerWindow: Int = 1,
    val lifetimeBudget: Double? = null,
    val deviceWindowBudget: Double? = null,
    val deviceLifetimeBudget: Double? = null,
    /** Memoised, r reports > r·ε₁: the charge C(k) of k reports in one window (else null). */
    val windowCharges: WindowCharges? = null,
) {
    /** The same charge dated [day]. */
    fun on(day: Long) = Charge(metric, fingerprint, day, epsilon, epsilonLongitudinal, digest, reportsPerWindow,
        lifetimeBudget, deviceWindowBudget, deviceLifetimeBudget, windowCharges)
}

/**
 * What k reports of a memoised metric cost in one window where they reveal more than k·ε₁ (a GRR
 * or OUE memo: client_sdk/window_charge.py, published in the encoder block): C(k) =
 * [cumulative][k − 1] up to its size, else k·[slope].
 */
class WindowCharges(val cumulative: DoubleArray, val slope: Double) {
    fun total(k: Long): Double = if (k > cumulative.size) k * slope else cumulative[(k - 1).toInt()]
}

/** Refusals decided on the app's side (against the in-memory mirror), recorded in the book. */
internal class RefusalCount(val charge: Charge, val reason: Refusal, var count: Long)

/** What one metric has spent on this device (field names as in ledger.json). */
class MetricAccount(
    var window: String,
    var windowReports: Long = 0,
    var windowEpsilon: Double = 0.0,
    var lifetimeReports: Long = 0,
    var lifetimeEpsilon: Double = 0.0,
    var refusedWindow: Long = 0,
    var refusedLifetime: Long = 0,
    var refusedDeviceWindow: Long = 0,
    var refusedDeviceLifetime: Long = 0,
    var fingerprint: String = "",
    var epsilonPerReport: Double = 0.0,
    var epsilonLongitudinal: Double? = null,
    var reportsPerWindow: Long = 1,
    var lifetimeBudget: Double? = null,
    /** fingerprint -> digests of the distinct values charged at ε∞. */
    val memo: LinkedHashMap<String, LinkedHashSet<String>> = LinkedHashMap(),
    /** The window before [window] and its spend: a re-date back onto that day adds them. */
    var previousWindow: String = "",
    var previousReports: Long = 0,
    var previousEpsilon: Double = 0.0,
) {
    /** Distinct values charged at ε∞ over all fingerprints. */
    val distinctValues: Int get() {
        var n = 0
        for (s in memo.values) n += s.size
        return n
    }

    internal fun count(reason: Refusal, n: Long) {
        // by identity, not `when` over the enum (no mapping class)
        if (reason === Refusal.WINDOW) refusedWindow += n
        else if (reason === Refusal.LIFETIME) refusedLifetime += n
        else if (reason === Refusal.DEVICE_WINDOW) refusedDeviceWindow += n
        else refusedDeviceLifetime += n
    }

    fun copy(): MetricAccount {
        val m = LinkedHashMap<String, LinkedHashSet<String>>()
        for ((k, v) in memo) m[k] = LinkedHashSet(v)
        return MetricAccount(window, windowReports, windowEpsilon, lifetimeReports, lifetimeEpsilon, refusedWindow,
            refusedLifetime, refusedDeviceWindow, refusedDeviceLifetime, fingerprint, epsilonPerReport, epsilonLongitudinal,
            reportsPerWindow, lifetimeBudget, m, previousWindow, previousReports, previousEpsilon)
    }

    /** The account as ledger.json holds it (the reference's field names; digests sorted). */
    fun toJson(): Map<String, Any?> = mapOfPairs(
        "window" to window, "window_reports" to windowReports, "window_epsilon" to windowEpsilon,
        "lifetime_reports" to lifetimeReports, "lifetime_epsilon" to lifetimeEpsilon,
        "refused_window" to refusedWindow, "refused_lifetime" to refusedLifetime,
        "refused_device_window" to refusedDeviceWindow, "refused_device_lifetime" to refusedDeviceLifetime,
        "fingerprint" to fingerprint, "epsilon_per_report" to epsilonPerReport,
        "epsilon_longitudinal" to epsilonLongitudinal, "reports_per_window" to reportsPerWindow,
        "lifetime_budget" to lifetimeBudget,
        "memo" to java.util.TreeMap<String, Any?>().also { m -> for ((fp, d) in memo) m[fp] = d.sortedList() },
        "previous_window" to previousWindow, "previous_reports" to previousReports, "previous_epsilon" to previousEpsilon,
    )

    companion object {
        /** Parse one account; IllegalArgumentException naming the fields of the wrong type. */
        @JvmStatic
        fun fromJson(data: Any?): MetricAccount {
            val d = data as? Map<*, *> ?: throw IllegalArgumentException("an account is not an object")
            val bad = ArrayList<String>()
            fun count(k: String, default: Long): Long = when (val v = d[k]) {
                null -> default
                is Long -> v
                else -> { bad.add(k); default }
            }
            fun eps(k: String): Double = when (val v = d[k]) {
                null -> 0.0
                is Long -> v.toDouble()
                is Double -> v
                else -> { bad.add(k); 0.0 }
            }
            fun optEps(k: String): Double? = when (val v = d[k]) {
                null -> null
                is Long -> v.toDouble()
                is Double -> v
                else -> { bad.add(k); null }
            }
            fun text(k: String, default: String?): String = when (val v = d[k]) {
                is String -> v
                null -> default ?: run { bad.add(k); "" }
                else -> { bad.add(k); "" }
            }
            val memo = LinkedHashMap<String, LinkedHashSet<String>>()
            when (val m = d["memo"]) {
                null -> {}
                is Map<*, *> -> for ((fp, digests) in m) {
                    if (digests is List<*> && digests.all { it is String }) memo[fp as String] = LinkedHashSet(digests.mapped { it as String })
                    else bad.add("memo")
                }
                else -> bad.add("memo")
            }
            val a = MetricAccount(
                window = text("window", null), windowReports = count("window_reports", 0), windowEpsilon = eps("window_epsilon"),
                lifetimeReports = count("lifetime_reports", 0), lifetimeEpsilon = eps("lifetime_epsilon"),
                refusedWindow = count("refused_window", 0), refusedLifetime = count("refused_lifetime", 0),
                refusedDeviceWindow = count("refused_device_window", 0), refusedDeviceLifetime = count("refused_device_lifetime", 0),
                fingerprint = text("fingerprint", ""), epsilonPerReport = eps("epsilon_per_report"),
                epsilonLongitudinal = optEps("epsilon_longitudinal"), reportsPerWindow = count("reports_per_window", 1),
                lifetimeBudget = optEps("lifetime_budget"), memo = memo, previousWindow = text("previous_window", ""),
                previousReports = count("previous_reports", 0), previousEpsilon = eps("previous_epsilon"),
            )
            if (!(a.windowEpsilon + a.lifetimeEpsilon + a.epsilonPerReport + a.previousEpsilon).isFinite()) bad.add("epsilon")
            if (bad.isNotEmpty()) throw IllegalArgumentException("field(s) ${bad.distinct().joinToString(", ")} have the wrong type")
            return a
        }
    }
}
