package dev.ldptelemetry.sdk

import java.math.BigInteger

/**
 * The SDK-side checks of a published encoder block (docs/conformance.md, "Checks an SDK applies
 * to a block", numbered as there): a [RegistryException] naming the member when the block's
 * members disagree, so that no report is ever encoded from an inconsistent block. The Python and
 * TypeScript SDKs apply the same list; conformance/vectors/invalid_blocks.json pins it.
 */
internal object BlockChecks {
    private const val U32 = 1L shl 32
    private val U64: BigInteger = BigInteger.ONE.shiftLeft(64)
    private val INTEGERS = listOf("d", "m", "g", "t", "k", "h", "s", "sampled", "seeds", "max_length", "groups", "grid",
        "window", "a", "b")
    private val THRESHOLDS = listOf("keep_threshold", "include_threshold", "half_f_threshold", "p_threshold",
        "q_threshold", "p1_threshold", "q1_threshold", "p2_threshold", "gamma_threshold")
    private val WORD = Regex("^(0|[1-9][0-9]{0,19})$")

    private fun fail(field: String, why: String): Nothing = throw RegistryException("field $field: encoder block: $why")

    private fun int(b: Map<*, *>, key: String): Long = b[key] as? Long ?: fail(key, "$key must be a JSON integer, got ${b[key]}")

    private fun word(v: Any?, field: String): BigInteger {
        val s = v as? String
        if (s == null || !WORD.matches(s) || BigInteger(s) > U64) fail(field, "$field must be an integer in [0, 2^64] as a decimal string, got $v")
        return BigInteger(s)
    }

    private fun isPrime(g: Long): Boolean {
        if (g < 2) return false
        var p = 2L
        while (p * p <= g) { if (g % p == 0L) return false; p++ }
        return true
    }

    /** t = ⌈log_g d⌉ (at least 1): the fewest base-g digits that index d values. */
    private fun dimension(d: Long, g: Long): Long {
        var t = 1L
        var size = BigInteger.valueOf(g)
        while (size < BigInteger.valueOf(d)) { t++; size = size.multiply(BigInteger.valueOf(g)) }
        return t
    }

    private fun increasing(e: Any?, n: Long): Boolean {
        val list = e as? List<*> ?: return false
        if (list.size.toLong() != n) return false
        val xs = list.map { (it as? Number)?.toDouble() ?: return false }
        return xs.all { it.isFinite() } && xs.zipWithNext().all { (x, y) -> x < y }
    }

    fun check(b: Map<String, Any?>) {
        val p = b["protocol"] as? String ?: fail("protocol", "no protocol")
        val hy = p == "hybrid"
        for (key in INTEGERS) if (key in b && !(hy && key == "h")) int(b, key)                                   // (1)
        for (key in if (hy) THRESHOLDS + "h" else THRESHOLDS) {
            if (key in b && int(b, key) !in 0L..U32) fail(key, "$key must be in [0, 2^32]")
        }
        if (p == "olh") {                                                                                         // (2)
            if (b["family"] == "linear" && "t" !in b) fail("t", "the linear family needs t (base-g digits of a value)")
            if (b["family"] != "linear" && "t" in b) fail("t", "t belongs to the linear family only")
        }
        val r = when (p) { "rr" -> 2L; "grr" -> int(b, "d"); "olh", "hr", "discover" -> int(b, "g"); else -> 0L }
        if (r > 0 && BigInteger.valueOf(int(b, "keep_threshold")).multiply(BigInteger.valueOf(r)) <= BigInteger.valueOf(U32)) {
            fail("keep_threshold", "keep_threshold × $r must exceed 2^32 (a kept value more likely than any other)")   // (3)
        }
        if (p == "hr" || (p == "olh" && b["family"] == "linear")) {                                               // (4)
            val d = int(b, "d"); val g = int(b, "g"); val t = int(b, "t"); val m = int(b, "m")
            if (!isPrime(g)) fail("g", "g = $g must be a prime (the field size)")
            if (t != dimension(d, g)) fail("t", "t = $t must be ⌈log_g d⌉ = ${dimension(d, g)} (g^(t−1) < d ≤ g^t)")
            val dirs = BigInteger.valueOf(g).pow(t.toInt()).subtract(BigInteger.ONE).divide(BigInteger.valueOf(g - 1))
            if (BigInteger.valueOf(m) != dirs) fail("m", "m = $m must be (g^t − 1)/(g − 1) = $dirs")
        }
        if (p == "rappor" && int(b, "h") > int(b, "k")) fail("h", "h (hashes per value) must be at most k (Bloom filter bits)")   // (5)
        if (p == "ss" && int(b, "s") >= int(b, "d")) fail("s", "s (subset size) must be below d")                                 // (6)
        if (p == "dbitflip" && int(b, "sampled") > int(b, "d")) fail("sampled", "sampled (buckets a device reports) must be at most d")  // (7)
        if (p == "discover" && int(b, "groups") != int(b, "max_length") + 1) fail("groups", "groups must be max_length + 1")     // (8)
        if (p == "losue" && b["p1_threshold"] != 1L shl 31) fail("p1_threshold", "p1_threshold must be 2^31 (L-OSUE's first round)")  // (9)
        val grid = b["grid"] as? Long ?: 0L
        fun nested(x: Any?, prefix: String): Map<*, *> {
            if (!hy) return b
            val n = x as? Map<*, *>
            if (n == null || n["grid"] != grid) fail("${prefix}grid", "a nested block's grid must be the block's")
            return n
        }
        if (p == "piecewise" || hy) {                                                                             // (10)
            val prefix = if (hy) "piecewise." else ""
            val pw = nested(b["piecewise"], prefix)
            val w = int(pw, "window"); val a = int(pw, "a"); val c = int(pw, "b")
            if (w !in 1L..grid || a < 1 || c < 0) fail("${prefix}window", "window must be in [1, grid = $grid], a ≥ 1 and b ≥ 0")
            if (w * a + grid * c > U32) fail("${prefix}a", "window × a + grid × b must be at most 2^32")
        }
        if (p == "duchi" || p == "bitmean" || p == "memobitmean" || hy) {                                        // (11)
            val prefix = if (hy) "duchi." else ""
            val du = nested(b["duchi"], prefix)
            val low = word(du["low"], "${prefix}low")
            val step = word(du["step"], "${prefix}step")
            if (low.add(BigInteger.valueOf(grid).multiply(step)) > U64) fail("${prefix}step", "low + grid × step must be at most 2^64")
        }
        if (p == "laplace") {                                                                                     // (12)
            val window = int(b, "window")
            val bounds = b["bounds"] as? List<*>
            if (bounds == null || bounds.size.toLong() != 2 * (grid + window)) fail("bounds", "bounds must hold 2 × (grid + window) = ${2 * (grid + window)} words")
            val words = bounds.map { word(it, "bounds") }
            if (words.zipWithNext().any { (x, y) -> x > y }) fail("bounds", "bounds must be non-decreasing")
        }
        if ("edges" in b) {                                                                                       // (13)
            val d = b["d"] as? Long ?: 2L
            if (!increasing(b["edges"], d + 1)) fail("edges", "a histogram over d = $d buckets has d + 1 = ${d + 1} edges, finite, increasing")
        }
        if ("range" in b && !increasing(b["range"], 2)) fail("range", "range must be [lo, hi], finite, lo < hi")  // (14)
    }
}
