package dev.ldptelemetry.sdk

/**
 * The device clock state of a book (the ledger file's `clock` object): the device's current
 * window, the window the last re-date left, the epochs seen (least recently used first) and the
 * rule's counters. The rule itself — which window a charge counts in, whatever the wall clock
 * says — is [Ledger.place], step for step the Python SDK's client_sdk/device_clock.py
 * (conformance/vectors/ledger.json; docs/conformance.md, "The device clock"; docs/privacy.md,
 * "Clock errors"). Plain fields, no methods: the jar has a size budget.
 */
class DeviceClock {
    /** The current window, a UTC day number (null: an empty book). */
    @JvmField var window: Long? = null
    /** The window the last re-date left (null: none since the last opening or resume). */
    @JvmField var left: Long? = null
    @JvmField val epochs: ArrayList<Epoch> = ArrayList()
    @JvmField var opened = 0L
    @JvmField var held = 0L
    @JvmField var redated = 0L
}

/** One elapsed clock the book has seen: its readings at its first update at/after the
 *  second-to-last opening ([since0]) and at/after the last one ([since1]); null: none yet. */
class Epoch(@JvmField val id: String, @JvmField var since0: Long?, @JvmField var since1: Long?)
