package dev.ldptelemetry.sdk

/**
 * The device clock rule — which window a charge counts in, whatever the wall clock says — as the
 * Python SDK's client_sdk/device_clock.py and the TypeScript SDK's deviceClock.ts, step for step
 * (conformance/vectors/ledger.json; docs/conformance.md, "The device clock"; docs/privacy.md,
 * "Clock errors").
 *
 * One current window for the device. A charge dated before it counts in it (up to
 * [MAX_WINDOW_AHEAD_DAYS]) or re-dates it, spend kept; the day a re-date left resumes it; a later
 * day opens a fresh window only when the charging epoch's elapsed clock shows a day and
 * [CLOCK_MARGIN] seconds since the opening before the last, else the charge is held in the window.
 * A new epoch (a reboot; a process whose clock is its own) gets one opening.
 *
 * A [Reading] is (epoch id, whole seconds of that epoch's clock), read inside the ledger's lock.
 * On Android the natural epoch is the boot (Settings.Global.BOOT_COUNT) with
 * SystemClock.elapsedRealtime(), which counts deep sleep; on a JVM without a boot clock, a random
 * id per process with System.nanoTime().
 */
class DeviceClock(
    /** The current window, a UTC day number (null: an empty book). */
    var window: Long? = null,
    /** The window the last re-date left (null: none since the last opening or resume). */
    var left: Long? = null,
    /** Epochs seen, least recently used first, at most [EPOCH_SLOTS]. */
    val epochs: MutableList<Epoch> = ArrayList(),
    var opened: Long = 0,
    var held: Long = 0,
    var redated: Long = 0,
) {
    /** One elapsed clock: [since] = its readings at its first update at/after the second-to-last
     *  and at/after the last opening (null: none yet). */
    class Epoch(val id: String, var since0: Long?, var since1: Long?)

    /** What [place] did with a charge's day. */
    enum class Move { CREATE, SAME, LATE, REDATE, RESUME, OPEN, HELD }

    fun copy(): DeviceClock =
        DeviceClock(window, left, epochs.mapTo(ArrayList()) { Epoch(it.id, it.since0, it.since1) }, opened, held, redated)

    fun toJson(): Map<String, Any?> = linkedMapOf(
        "epochs" to epochs.map { linkedMapOf("id" to it.id, "since" to listOf(it.since0, it.since1)) },
        "held" to held, "left" to left, "opened" to opened, "redated" to redated, "window" to window,
    )

    /** Record an update by the reading's epoch; a new epoch gets one opening's credit. */
    internal fun touch(epoch: String, seconds: Long): Epoch {
        val i = epochs.indexOfFirst { it.id == epoch }
        if (i >= 0) {
            val e = epochs.removeAt(i)
            epochs.add(e)
            if (e.since0 == null) e.since0 = seconds
            if (e.since1 == null) e.since1 = seconds
            return e
        }
        val e = Epoch(epoch, seconds - OPEN_AFTER, seconds)
        epochs.add(e)
        while (epochs.size > EPOCH_SLOTS) epochs.removeAt(0)
        return e
    }

    /** The window a charge dated [day] counts in, updating this state ([mayOpen] false: recording a refusal). */
    fun place(day: Long, reading: Reading, mayOpen: Boolean = true): Pair<Long, Move> {
        val epoch = touch(reading.epoch, reading.seconds)
        val w = window
        if (w == null) {
            window = day
            return day to Move.CREATE
        }
        if (day == w) return w to Move.SAME
        if (day < w) {
            if (w - day <= MAX_WINDOW_AHEAD_DAYS) return w to Move.LATE
            window = day
            left = w
            redated += 1
            return day to Move.REDATE
        }
        if (day == left) {
            window = day
            left = null
            return day to Move.RESUME
        }
        val start = epoch.since0
        if (mayOpen && start != null && reading.seconds - start >= OPEN_AFTER) {
            for (e in epochs) {
                e.since0 = e.since1
                e.since1 = null
            }
            epoch.since1 = reading.seconds
            window = day
            left = null
            opened += 1
            return day to Move.OPEN
        }
        if (mayOpen) held += 1
        return w to Move.HELD
    }

    companion object {
        const val DAY_SECONDS = 86_400L
        const val MAX_WINDOW_AHEAD_DAYS = 2L
        const val CLOCK_MARGIN = 2L
        const val EPOCH_SLOTS = 16
        const val OPEN_AFTER = DAY_SECONDS + CLOCK_MARGIN

        /** Parse the ledger file's `clock` object; IllegalArgumentException when it is malformed. */
        @JvmStatic
        fun fromJson(data: Any?): DeviceClock {
            val d = data as? Map<*, *> ?: throw IllegalArgumentException("the clock is not an object")
            fun opt(v: Any?): Long? = when (v) {
                null -> null
                is Long -> v
                else -> throw IllegalArgumentException("the clock object is malformed")
            }
            fun count(k: String): Long = opt(d[k]) ?: 0L
            val epochs = ArrayList<Epoch>()
            for (e in (d["epochs"] ?: emptyList<Any?>()) as? List<*> ?: throw IllegalArgumentException("the clock object is malformed")) {
                val m = e as? Map<*, *>
                val since = m?.get("since") as? List<*>
                val id = m?.get("id") as? String
                if (id == null || since == null || since.size != 2) throw IllegalArgumentException("the clock object is malformed")
                epochs.add(Epoch(id, opt(since[0]), opt(since[1])))
            }
            while (epochs.size > EPOCH_SLOTS) epochs.removeAt(0)
            return DeviceClock(opt(d["window"]), opt(d["left"]), epochs, count("opened"), count("held"), count("redated"))
        }
    }
}

/** An elapsed-clock reading: [epoch] names the clock, [seconds] its whole seconds (floored). */
data class Reading(val epoch: String, val seconds: Long)
