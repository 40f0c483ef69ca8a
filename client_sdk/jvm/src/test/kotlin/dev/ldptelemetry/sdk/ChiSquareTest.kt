package dev.ldptelemetry.sdk

import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.TestInstance
import java.math.BigInteger

/**
 * Statistical check of every protocol's encoder against its exact P(y|x) table
 * (conformance/vectors/tables.json): for each input of a small configuration, N = 100,000
 * reports through the SDK's own encoder, then Pearson's chi-square goodness of fit against the
 * exact rationals (cells with expected count < 5 pooled). Memoised protocols: the memoised
 * round on uniform coins against the `memo*` table, then one device's reports (its memoised
 * response fixed) against the row of `report_given_memo` — as the TypeScript SDK's check.
 *
 * Randomness: a seeded SHAKE-256 stream in place of SecureRandom, so the run is reproducible
 * (production randomness is SecureRandom; the threshold below holds for any seed). Threshold:
 * family-wise α = 1e-3 over every chi-square test run here (Bonferroni: each p must exceed
 * 1e-3 / number of tests).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ChiSquareTest {
    private val n = 100_000
    private val familyAlpha = 1e-3
    private val results = ArrayList<Pair<String, Double>>()

    /** A deterministic byte stream: SHAKE-256 of a seed, read in order. */
    private class Seeded(seed: String) : RandomSource {
        private val xof = Shake256(seed.toByteArray())
        override fun fill(out: ByteArray) {
            val b = xof.read(out.size)
            System.arraycopy(b, 0, out, 0, out.size)
        }
    }

    private class SeededCoins(val rnd: RandomSource) : Coins {
        override fun word(): Long = word32(rnd)
        override fun below(h: Long): Long {
            val limit = Hashing.acceptLimit(h)
            while (true) {
                val u = word()
                if (u < limit) return u % h
            }
        }
    }

    private fun check(label: String, observed: LongArray, row: List<Any?>, den: String) {
        results.add(label to pValue(observed, row.map { BigInteger(it.toString()) }, BigInteger(den)))
    }

    private fun bits(b: ByteArray): Int {
        var v = 0
        for (i in b.indices.reversed()) v = (v shl 8) or (b[i].toInt() and 0xff)
        return v
    }

    /** Output index of a payload (docs/conformance.md, "Output index of a payload"). */
    private fun outputIndex(protocol: String, y: Any, g: Int = 0): Int = when (y) {
        is Long -> y.toInt()
        is ByteArray -> bits(y)
        is List<*> -> when (protocol) {
            "rappor" -> bits(y[1] as ByteArray)
            "discover" -> ((y[1] as Long) * g + (y[2] as Long)).toInt()
            else -> (y[1] as Long).toInt()
        }
        else -> error("payload $y")
    }

    private fun subsetRanks(d: Int, s: Int): Map<List<Int>, Int> {
        val ranks = HashMap<List<Int>, Int>()
        fun rec(start: Int, chosen: List<Int>) {
            if (chosen.size == s) {
                ranks[chosen] = ranks.size
                return
            }
            for (v in start until d) rec(v + 1, chosen + v)
        }
        rec(0, emptyList())
        return ranks
    }

    private fun packed(b: BooleanArray): Int = b.foldIndexed(0) { i, acc, on -> if (on) acc or (1 shl i) else acc }

    @TestFactory
    fun `every protocol against its exact table`(): List<DynamicTest> = Vectors.doc("tables.json")["configs"].l().map { it.m() }.map { cfg ->
        DynamicTest.dynamicTest("${cfg["label"]}: $n reports per input") { run(cfg) }
    }

    private fun run(cfg: Map<String, Any?>) {
        val label = cfg["label"] as String
        val protocol = cfg["protocol"] as String
        val b = cfg["encoder"].m()
        val enc = encoderFor(b)
        val rnd = Seeded("ldpt chi-square $label")
        val secret = ByteArray(32).also { rnd.fill(it) }
        val day = 20_000L
        val ctx = Context(Device(secret), "chi", day, rnd)
        val t = cfg["tables"].m()
        fun int(k: String) = b[k].n().toInt()
        when {
            t["report"] != null -> {
                val r = t["report"].m()
                val ranks = if (protocol == "ss") subsetRanks(int("d"), int("s")) else null
                r["inputs"].l().forEachIndexed { i, x ->
                    val counts = LongArray(r["outputs"].n().toInt())
                    repeat(n) {
                        val y = enc.encode(x.n().toInt(), "", ctx)
                        val o = if (ranks != null) {
                            val p = y as ByteArray
                            ranks[List(p.size / 2) { k -> (p[2 * k].toInt() and 0xff) or ((p[2 * k + 1].toInt() and 0xff) shl 8) }]!!
                        } else outputIndex(protocol, y)
                        counts[o]++
                    }
                    check("$label x=$x", counts, r["rows"].l()[i].l(), r["denominator"].toString())
                }
            }
            t["report_given_hash"] != null -> {   // OLH: the cohort of (secret, metric, day)
                val s = Hashing.deriveCohort(secret, "olh\u0000chi\u0000$day", int("m"))
                val tab = t["report_given_hash"].m()["by_cohort"].l()[s].m()
                for (x in 0 until int("d")) {
                    val counts = LongArray(int("g"))
                    repeat(n) {
                        val y = enc.encode(x, "", ctx) as List<*>
                        assertEquals(s.toLong(), y[0])
                        counts[(y[1] as Long).toInt()]++
                    }
                    check("$label x=$x cohort $s", counts, tab["rows"].l()[tab["hashed"].l()[x].n().toInt()].l(), tab["denominator"].toString())
                }
            }
            t["report_given_prr"] != null -> {   // RAPPOR: the IRR given this secret's PRR of each value
                val k = int("k")
                val half = b["half_f_threshold"].n()
                val cohort = Hashing.deriveCohort(secret, "rappor", int("m"))
                for (value in listOf("a", "b", "example.com")) {
                    val bloom = BooleanArray(k).also { arr -> Hashing.bloomBits(value, cohort, k, int("h")).forEach { arr[it] = true } }
                    val pattern = packed(prrBits(Hashing.prrWords(secret, "chi", value, k), bloom, half))
                    val counts = LongArray(1 shl k)
                    repeat(n) { counts[outputIndex("rappor", enc.encode(-1, value, ctx))]++ }
                    val tab = t["report_given_prr"].m()
                    check("$label $value prr=$pattern", counts, tab["rows"].l()[pattern].l(), tab["denominator"].toString())
                }
                for (bloom in listOf(0b0101, 0b0011)) {   // the PRR's mechanism on uniform words
                    val set = BooleanArray(k) { (bloom shr it) and 1 == 1 }
                    val counts = LongArray(1 shl k)
                    repeat(n) { counts[packed(prrBits(words32(rnd, k), set, half))]++ }
                    val tab = t["prr_given_bloom"].m()
                    check("$label PRR bloom=$bloom", counts, tab["rows"].l()[bloom].l(), tab["denominator"].toString())
                }
            }
            t["report_by_group"] != null -> {   // discover: the group of (secret, metric)
                val group = Hashing.deriveCohort(secret, "discover\u0000chi", int("groups"))
                val tab = t["report_by_group"].m()["by_group"].l()[group].m()
                tab["inputs"].l().forEachIndexed { i, value ->
                    val counts = LongArray(tab["outputs"].n().toInt())
                    repeat(n) { counts[outputIndex("discover", enc.encode(-1, value as String, ctx), int("g"))]++ }
                    check("$label \"$value\" group $group", counts, tab["rows"].l()[i].l(), tab["denominator"].toString())
                }
            }
            else -> memoised(label, protocol, b, enc, t, rnd, secret, ctx)
        }
    }

    private fun memoised(label: String, protocol: String, b: Map<String, Any?>, enc: Encoder, t: Map<String, Any?>,
                         rnd: RandomSource, secret: ByteArray, ctx: Context) {
        val memoTab = (t["memo"] ?: t["memo_given_hash"] ?: t["memo_given_position"]).m()
        val coins = SeededCoins(rnd)
        fun z(m: Coins, x: Long): Int = when (val r = ConformanceChecks.memoRound(enc, m, x)) {
            is Long -> r.toInt()
            is BooleanArray -> packed(r)
            else -> error("memo round $r")
        }
        memoTab["inputs"].l().forEachIndexed { i, x ->
            val counts = LongArray(memoTab["outputs"].n().toInt())
            repeat(n) { counts[z(coins, x.n())]++ }
            check("$label memo x=$x", counts, memoTab["rows"].l()[i].l(), memoTab["denominator"].toString())
        }
        val second = t["report_given_memo"].m()
        val inputs = if (protocol == "memobitmean") listOf(0, 2, b["grid"].n().toInt()) else listOf(0, 1, 2)
        for (x in inputs) {
            var key = "$protocol:$x"
            var zx = x.toLong()
            var cohort: Long? = null
            if (protocol == "loloha") {
                cohort = Hashing.deriveCohort(secret, "loloha\u0000chi", b["m"].n().toInt()).toLong()
                zx = t["hashed"].l()[cohort.toInt()].l()[x].n()
                key = "loloha:$zx"
            } else if (protocol == "dbitflip") {
                val d = b["d"].n().toInt()
                cohort = Hashing.deriveCohort(secret, "dbitflip\u0000chi", d).toLong()
                val pos = Math.floorMod(x - cohort.toInt(), d)
                zx = if (pos < b["sampled"].n()) pos.toLong() else b["sampled"].n()
                key = "dbitflip:$zx"
            }
            val memo = z(MemoStream(secret, "chi", key), zx)
            val counts = LongArray(second["outputs"].n().toInt())
            repeat(n) {
                val y = enc.encode(x, "", ctx)
                if (cohort != null) assertEquals(cohort, (y as List<*>)[0])
                counts[outputIndex(protocol, y)]++
            }
            check("$label report x=$x memo=$memo", counts, second["rows"].l()[memo].l(), second["denominator"].toString())
        }
    }

    @org.junit.jupiter.api.Test
    fun `the check can fail - reports of one input are refused against another input's row`() {
        val cfg = Vectors.doc("tables.json")["configs"].l().map { it.m() }.first { it["protocol"] == "grr" }
        val enc = encoderFor(cfg["encoder"].m())
        val r = cfg["tables"].m()["report"].m()
        val ctx = Context(Device(ByteArray(32)), "chi", 20_000, Seeded("ldpt chi-square can fail"))
        val counts = LongArray(r["outputs"].n().toInt())
        repeat(n) { counts[(enc.encode(r["inputs"].l()[0].n().toInt(), "", ctx) as Long).toInt()]++ }
        val rows = r["rows"].l()
        assertTrue(pValue(counts, rows[0].l().map { BigInteger(it.toString()) }, BigInteger(r["denominator"].toString())) > 1e-6)
        assertTrue(pValue(counts, rows[1].l().map { BigInteger(it.toString()) }, BigInteger(r["denominator"].toString())) < 1e-12)
    }

    @AfterAll
    fun `every chi-square p-value clears the Bonferroni threshold`() {
        assertTrue(results.size > 50, "too few tests ran: ${results.size}")
        val threshold = familyAlpha / results.size
        val worst = results.minByOrNull { it.second }!!
        println("chi-square: ${results.size} tests, N = $n per input, family α = $familyAlpha, threshold p > " +
            "${String.format("%.2e", threshold)}; smallest p = ${String.format("%.3e", worst.second)} (${worst.first})")
        val failed = results.filter { it.second <= threshold }
        assertEquals(emptyList<Pair<String, Double>>(), failed)
    }

    companion object {
        /** p-value of Pearson's statistic for observed counts against exact probabilities row/den. */
        fun pValue(observed: LongArray, row: List<BigInteger>, den: BigInteger): Double {
            val total = BigInteger.valueOf(observed.sum())
            var stat = 0.0
            var df = -1
            var poolO = 0.0
            var poolE = 0.0
            for (i in row.indices) {
                val e = row[i].multiply(total).multiply(BigInteger.valueOf(1_000_000)).divide(den).toDouble() / 1e6
                when {
                    e == 0.0 -> assertEquals(0L, observed[i], "output $i has probability 0 but was drawn")
                    e < 5 -> { poolO += observed[i]; poolE += e }
                    else -> { stat += (observed[i] - e) * (observed[i] - e) / e; df++ }
                }
            }
            if (poolE > 0) { stat += (poolO - poolE) * (poolO - poolE) / poolE; df++ }
            return if (df <= 0) 1.0 else gammaQ(df / 2.0, stat / 2)
        }

        private fun lnGamma(x0: Double): Double {
            val c = doubleArrayOf(0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
                -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)
            if (x0 < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x0)) - lnGamma(1 - x0)
            val x = x0 - 1
            var a = c[0]
            val t = x + 7.5
            for (i in 1 until 9) a += c[i] / (x + i)
            return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a)
        }

        /** Q(a, x): the regularised upper incomplete gamma function (series or continued fraction). */
        fun gammaQ(a: Double, x: Double): Double {
            if (x <= 0) return 1.0
            if (x < a + 1) {
                var sum = 1 / a
                var term = sum
                for (k in 1 until 10_000) {
                    term *= x / (a + k)
                    sum += term
                    if (term < sum * 1e-15) break
                }
                return 1 - sum * Math.exp(-x + a * Math.log(x) - lnGamma(a))
            }
            var b = x + 1 - a
            var c = 1 / 1e-300
            var d = 1 / b
            var h = d
            for (i in 1 until 10_000) {
                val an = -i * (i - a)
                b += 2
                d = an * d + b
                if (Math.abs(d) < 1e-300) d = 1e-300
                c = b + an / c
                if (Math.abs(c) < 1e-300) c = 1e-300
                d = 1 / d
                val del = d * c
                h *= del
                if (Math.abs(del - 1) < 1e-15) break
            }
            return Math.exp(-x + a * Math.log(x) - lnGamma(a)) * h
        }
    }
}
