package dev.ldptelemetry.sdk

import java.math.BigInteger

/**
 * Every protocol's one-report encoder, from the published `encoder` object alone
 * (docs/conformance.md, "The encoder object" and "Consumption order"): the same integer
 * threshold tests on the same words, in the same order, as the Python reference and the
 * TypeScript SDK, so P(y|x) is the reference's exact table. Nothing here re-derives a
 * threshold from ε: another libm could move one by an ulp.
 *
 * Payloads are the wire objects: Long, ByteArray, or a List of them (docs/wire-format.md).
 */
internal interface Encoder {
    /** Two-round protocols: the memo key of a domain index (the ledger charges ε∞ once per key); else null. */
    fun memoKey(index: Int, c: Context): String? = null

    /** The randomised wire payload of domain index [index] (string metrics: of [key]). */
    fun encode(index: Int, key: String, c: Context): Any
}

/** What a report may depend on besides the value: the device (its secret and caches), the metric, the UTC day. */
internal class Context(val device: Device, val metric: String, val day: Long, val random: RandomSource) {
    val secret: ByteArray get() = device.secret
}

/**
 * One device's secret and the values derived from it, cached in memory (cohorts, memoised
 * responses, RAPPOR's PRRs): deterministic, so a cache miss only costs time. Bounded.
 */
internal class Device(val secret: ByteArray) {
    private val cache = HashMap<String, Any>()
    @Volatile private var derivedKey: ByteArray? = null

    /** The key of the ledger's digests of memoised values (derived on first use; no Lazy: start-up). */
    val ledgerKey: ByteArray get() = derivedKey ?: Hashing.ledgerKey(secret).also { derivedKey = it }

    @Suppress("UNCHECKED_CAST")
    fun <T : Any> cached(key: String, make: () -> T): T {
        cache[key]?.let { return it as T }
        if (cache.size >= 4096) cache.clear()
        val v = make()
        cache[key] = v
        return v
    }
}

/** The members of one encoder object, with errors that name the member. */
internal class Block(val map: Map<String, Any?>) {
    val protocol: String get() = map["protocol"] as? String ?: throw RegistryException("encoder.protocol is missing")
    fun long(name: String): Long = map[name].asLongOr(name)
    fun int(name: String): Int = map[name].asIntOr(name)
    fun ulong(name: String): ULong = try { map[name].asULong("encoder.$name") } catch (e: IllegalArgumentException) { throw RegistryException(e.message!!) }
    fun block(name: String): Block = Block(map[name] as? Map<String, Any?> ?: throw RegistryException("encoder.$name must be an object"))
    fun has(name: String): Boolean = map[name] != null

    private fun Any?.asLongOr(name: String): Long = try { asLong("encoder.$name") } catch (e: IllegalArgumentException) { throw RegistryException(e.message!!) }
    private fun Any?.asIntOr(name: String): Int = try { asInt("encoder.$name") } catch (e: IllegalArgumentException) { throw RegistryException(e.message!!) }
}

/** Bits packed little-endian: bit i is bit i mod 8 of byte ⌊i/8⌋. */
internal fun packBits(bits: BooleanArray): ByteArray {
    val out = ByteArray((bits.size + 7) shr 3)
    for (i in bits.indices) if (bits[i]) out[i shr 3] = (out[i shr 3].toInt() or (1 shl (i and 7))).toByte()
    return out
}

// --- frequency oracles over a fixed domain ------------------------------------------------------

/** GRR on [d] in the single-report form: u = W32; keep, else BELOW(d−1) shifted past x. */
internal fun grrOne(rnd: RandomSource, x: Long, d: Long, keep: Long): Long {
    if (word32(rnd) < keep) return x
    val o = below(rnd, d - 1)
    return o + if (o >= x) 1 else 0
}

internal class RrEncoder(b: Block) : Encoder {
    private val keep = b.long("keep_threshold")
    override fun encode(index: Int, key: String, c: Context): Any = if (word32(c.random) < keep) index.toLong() else 1L - index
}

internal class GrrEncoder(b: Block) : Encoder {
    private val d = b.long("d")
    private val keep = b.long("keep_threshold")
    override fun encode(index: Int, key: String, c: Context): Any = grrOne(c.random, index.toLong(), d, keep)
}

/** Unary encoding (OUE, SUE): d words, bit i = u_i < (i = x ? p : q). */
internal class UnaryEncoder(b: Block) : Encoder {
    private val d = b.int("d")
    private val p = b.long("p_threshold")
    private val q = b.long("q_threshold")
    override fun encode(index: Int, key: String, c: Context): Any {
        val u = words32(c.random, d)
        return packBits(BooleanArray(d) { u[it] < if (it == index) p else q })
    }
}

/** Subset selection: s+1 W64 words at once, rejected ones redrawn in order, then Floyd's sampling. */
internal class SsEncoder(b: Block) : Encoder {
    private val d = b.int("d")
    private val s = b.int("s")
    private val include = b.long("include_threshold")

    override fun encode(index: Int, key: String, c: Context): Any {
        val bytes = ByteArray(8 * (s + 1))
        c.random.fill(bytes)
        // draw 0 is u mod 2^32 (never rejected); draw i >= 1 is uniform on [0, d − s + i − 1)
        val draws = LongArray(s + 1) { i ->
            val u = (le32(bytes, 8 * i) or (le32(bytes, 8 * i + 4) shl 32)).toULong()
            if (i == 0) le32(bytes, 0) else reduce64(u, (d - s + i - 1).toLong())
        }
        for (i in 1..s) if (draws[i] < 0) draws[i] = below(c.random, (d - s + i - 1).toLong())
        val included = draws[0] < include
        val first = if (included) 1 else 0
        val chosen = java.util.TreeSet<Long>()
        val x = index.toLong()
        if (included) chosen.add(x)
        var i = 1 + first
        for (j in (d - 1 - s + first).toLong() until (d - 1).toLong()) {
            var t = draws[i++]
            if (t >= x) t += 1
            chosen.add(if (chosen.contains(t)) (if (j >= x) j + 1 else j) else t)
        }
        val wide = d > 65536
        val out = ByteArray(chosen.size * if (wide) 4 else 2)
        var at = 0
        for (v in chosen) {
            val n = if (wide) 4 else 2
            for (k in 0 until n) out[at + k] = (v ushr (8 * k)).toByte()
            at += n
        }
        return out
    }
}

/** Projective geometry over F_g (HR, OLH's linear family; client_sdk/protocols/_projective.py). */
internal object Projective {
    private fun pow(g: Long, k: Int): Long {
        var r = 1L
        repeat(k) { r *= g }
        return r
    }

    /** Code of the s-th projective direction of F_g^t: g^j + (s − start_j), start_j = (g^j − 1)/(g − 1). */
    fun directionCode(s: Long, g: Long, t: Int): Long {
        var j = t - 1
        fun start(k: Int) = (pow(g, k) - 1) / (g - 1)
        while (start(j) > s) j--
        return pow(g, j) + s - start(j)
    }

    /** ⟨u, x⟩ mod g of base-g digit vectors. */
    fun inner(u0: Long, x0: Long, g: Long): Long {
        var u = u0
        var x = x0
        var acc = 0L
        while (u != 0L && x != 0L) {
            acc += (u % g) * (x % g)
            u /= g
            x /= g
        }
        return acc % g
    }
}

/** OLH: the cohort of the metric and UTC day from the secret; GRR on [g] of H_s(x). */
internal class OlhEncoder(b: Block) : Encoder {
    private val m = b.int("m")
    private val g = b.int("g")
    private val keep = b.long("keep_threshold")
    private val linear = b.map["family"] == "linear"
    private val t = if (linear) b.int("t") else 0

    fun hash(s: Int, x: Int): Long =
        if (linear) Projective.inner(Projective.directionCode(s.toLong(), g.toLong(), t), x.toLong(), g.toLong())
        else Hashing.olhHash(s, x, g).toLong()

    override fun encode(index: Int, key: String, c: Context): Any {
        val scope = "olh\u0000${c.metric}\u0000${c.day}"
        val s = c.device.cached("$scope\u0000$m") { Hashing.deriveCohort(c.secret, scope, m) }
        return listOfAll<Any>(s.toLong(), grrOne(c.random, hash(s, index), g.toLong(), keep))
    }
}

/** Hadamard response over F_g: a fresh direction s = BELOW(m), GRR on [g] of ⟨a_s, x⟩. */
internal class HrEncoder(b: Block) : Encoder {
    private val m = b.long("m")
    private val g = b.long("g")
    private val t = b.int("t")
    private val keep = b.long("keep_threshold")
    override fun encode(index: Int, key: String, c: Context): Any {
        val s = below(c.random, m)
        val code = Projective.inner(Projective.directionCode(s, g, t), index.toLong(), g)
        return s * g + grrOne(c.random, code, g, keep)
    }
}

// --- strings --------------------------------------------------------------------------------

/** The PRR: B'ᵢ = 1 if uᵢ < T, 0 if T <= uᵢ < 2T, else Bᵢ (T/2^32 = f/2). */
internal fun prrBits(words: LongArray, bloom: BooleanArray, half: Long): BooleanArray =
    BooleanArray(words.size) { if (words[it] < 2 * half) words[it] < half else bloom[it] }

/** RAPPOR: [cohort, IRR bits]; the PRR from the secret (memoised, nothing stored), Sᵢ = uᵢ < (B'ᵢ ? q : p). */
internal class RapporEncoder(b: Block) : Encoder {
    private val k = b.int("k")
    private val h = b.int("h")
    private val m = b.int("m")
    private val half = b.long("half_f_threshold")
    private val p = b.long("p_threshold")
    private val q = b.long("q_threshold")

    override fun encode(index: Int, key: String, c: Context): Any {
        val cohort = c.device.cached("rappor\u0000$m") { Hashing.deriveCohort(c.secret, "rappor", m) }
        val prr = c.device.cached("prr\u0000$k\u0000$h\u0000$half\u0000${c.metric}\u0000$key") {
            val bloom = BooleanArray(k)
            for (bit in Hashing.bloomBits(key, cohort, k, h)) bloom[bit] = true
            prrBits(Hashing.prrWords(c.secret, c.metric, key, k), bloom, half)
        }
        val u = words32(c.random, k)
        return listOfAll<Any>(cohort.toLong(), packBits(BooleanArray(k) { u[it] < if (prr[it]) q else p }))
    }
}

/** discover: [group, seed, y], the group from the secret, key = 0x01 ‖ b[:ℓ] or 0x02 ‖ b. */
internal class DiscoverEncoder(b: Block) : Encoder {
    val maxLength = b.int("max_length")
    private val groups = b.int("groups")
    private val seeds = b.long("seeds")
    private val g = b.int("g")
    private val keep = b.long("keep_threshold")

    override fun encode(index: Int, key: String, c: Context): Any {
        val group = c.device.cached("discover\u0000${c.metric}\u0000$groups") {
            Hashing.deriveCohort(c.secret, "discover\u0000${c.metric}", groups)
        }
        val k = discoverKey(Hashing.utf8(key), maxLength, group)
        val seed = below(c.random, seeds)
        val fp = c.device.cached("fp\u0000" + Hashing.hex(k)) { Hashing.discoverFingerprint(k) }
        val h = Hashing.discoverBucket(seed.toInt(), fp, g).toLong()
        if (word32(c.random) < keep) return listOfAll<Any>(group.toLong(), seed, h)
        val o = below(c.random, (g - 1).toLong())
        return listOfAll<Any>(group.toLong(), seed, o + if (o >= h) 1 else 0)
    }

    companion object {
        /** The device's key of a value in group t: b = UTF-8 cut to max_length, ℓ = min(t + 1, max_length). */
        fun discoverKey(utf8: ByteArray, maxLength: Int, group: Int): ByteArray {
            val bytes = if (utf8.size > maxLength) utf8.copyOf(maxLength) else utf8
            val level = minOf(group + 1, maxLength)
            return if (bytes.size >= level) Hashing.concat(byteArrayOf(1), bytes.copyOf(level)) else Hashing.concat(byteArrayOf(2), bytes)
        }
    }
}

// --- two-round memoised protocols ---------------------------------------------------------------

/** A GRR round as the vectorised reference draws it: keep word, then the other value (always). */
private fun grrRound(word: Long, other: Long, x: Long, keep: Long): Long =
    if (keep >= TWO32 || word < keep) x else other + if (other >= x) 1 else 0

/** Round 1 of L-GRR and LOLOHA: GRR at ε∞ on [k] of x from memo coins (MBELOW drawn even when kept). */
internal fun memoGrr(m: Coins, x: Long, k: Long, keep: Long): Long {
    val w = if (keep >= TWO32) 0 else m.word()
    return grrRound(w, m.below(k - 1), x, keep)
}

/** Round 1 of bit chains: bit i = M32 < one(i) (L-OSUE: OUE at ε∞; dBitFlipPM: SUE at ε∞). */
internal fun memoBits(m: Coins, n: Int, one: (Int) -> Long): BooleanArray = BooleanArray(n) { m.word() < one(it) }

private fun freshGrr(rnd: RandomSource, z: Long, k: Long, keep: Long): Long {
    val w = if (keep >= TWO32) 0 else word32(rnd)
    return grrRound(w, below(rnd, k - 1), z, keep)
}

/** Bits through a symmetric round: 1 w.p. p when set, 1 − p when clear. */
private fun flipRound(u: LongArray, bits: BooleanArray, p: Long): BooleanArray =
    BooleanArray(bits.size) { u[it] < if (bits[it]) p else TWO32 - p }

private fun permanent(c: Context, scope: String, size: Int): Int =
    c.device.cached("$scope\u0000$size\u0000${c.metric}") { Hashing.deriveCohort(c.secret, scope + c.metric, size) }

internal class LgrrEncoder(b: Block) : Encoder {
    val d = b.long("d")
    val p1 = b.long("p1_threshold")
    private val p2 = b.long("p2_threshold")
    override fun memoKey(index: Int, c: Context) = "lgrr:$index"
    override fun encode(index: Int, key: String, c: Context): Any {
        val z = c.device.cached("${c.metric}\u0000lgrr:$index") { memoGrr(MemoStream(c.secret, c.metric, "lgrr:$index"), index.toLong(), d, p1) }
        return freshGrr(c.random, z, d, p2)
    }
}

internal class LosueEncoder(b: Block) : Encoder {
    val d = b.int("d")
    val p1 = b.long("p1_threshold")
    val q1 = b.long("q1_threshold")
    private val p2 = b.long("p2_threshold")
    override fun memoKey(index: Int, c: Context) = "losue:$index"
    override fun encode(index: Int, key: String, c: Context): Any {
        val z = c.device.cached("${c.metric}\u0000losue:$index") {
            memoBits(MemoStream(c.secret, c.metric, "losue:$index"), d) { if (it == index) p1 else q1 }
        }
        return packBits(flipRound(words32(c.random, d), z, p2))
    }
}

internal class LolohaEncoder(b: Block) : Encoder {
    private val m = b.int("m")
    val g = b.long("g")
    val p1 = b.long("p1_threshold")
    private val p2 = b.long("p2_threshold")
    private fun hashed(x: Int, c: Context): Int = Hashing.olhHash(permanent(c, "loloha\u0000", m), x, g.toInt())
    override fun memoKey(index: Int, c: Context) = "loloha:${hashed(index, c)}"
    override fun encode(index: Int, key: String, c: Context): Any {
        val h = hashed(index, c)
        val z = c.device.cached("${c.metric}\u0000loloha:$h") { memoGrr(MemoStream(c.secret, c.metric, "loloha:$h"), h.toLong(), g, p1) }
        return listOfAll<Any>(permanent(c, "loloha\u0000", m).toLong(), freshGrr(c.random, z, g, p2))
    }
}

internal class DbitflipEncoder(b: Block) : Encoder {
    private val d = b.int("d")
    val sampled = b.int("sampled")
    val p1 = b.long("p1_threshold")
    private val p2 = b.long("p2_threshold")

    init {
        if (sampled > 62) throw RegistryException("dbitflip: sampled = $sampled is more than this SDK packs (62)")
    }

    private fun position(x: Int, c: Context): Int {
        val pos = Math.floorMod(x - permanent(c, "dbitflip\u0000", d), d)
        return if (pos < sampled) pos else sampled
    }

    override fun memoKey(index: Int, c: Context) = "dbitflip:${position(index, c)}"
    override fun encode(index: Int, key: String, c: Context): Any {
        val pos = position(index, c)
        val z = c.device.cached("${c.metric}\u0000dbitflip:$pos") {
            memoBits(MemoStream(c.secret, c.metric, "dbitflip:$pos"), sampled) { if (it == pos) p1 else TWO32 - p1 }
        }
        val y = flipRound(words32(c.random, sampled), z, p2)
        var packed = 0L
        for (i in y.indices) if (y[i]) packed = packed or (1L shl i)
        return listOfAll<Any>(permanent(c, "dbitflip\u0000", d).toLong(), packed)
    }
}

// --- numeric mean mechanisms --------------------------------------------------------------------

/** pos = (clip(t) + 1)·(K/2): the grid index below it and the threshold of rounding up (IEEE-754 only). */
private fun position(t: Double, grid: Int): LongArray {
    val pos = (Math.min(1.0, Math.max(-1.0, t)) + 1.0) * (grid / 2.0)
    val low = Math.floor(pos)
    return longArrayOf(low.toLong(), Math.floor((pos - low) * TWO32.toDouble()).toLong())
}

/** Randomised rounding to the grid: up iff R < ⌊frac·2^32⌋ (one W32 word). */
internal fun discretise(t: Double, grid: Int, rnd: RandomSource): Int {
    val (low, up) = position(t, grid)
    return minOf(low + if (word32(rnd) < up) 1 else 0, grid.toLong()).toInt()
}

/** α-point rounding: the device's α is the first word of the memo stream "alpha". */
internal fun alphaRound(t: Double, grid: Int, alpha: Long): Int {
    val (low, up) = position(t, grid)
    return minOf(low + if (alpha < up) 1 else 0, grid.toLong()).toInt()
}

/** The device's α for a memoised mean metric (first word of the memo stream "alpha"). */
internal fun alphaWord(c: Context): Long = c.device.cached("alpha\u0000${c.metric}") { MemoStream(c.secret, c.metric, "alpha").word() }

/** Thresholds A + j·D out of 2^64 for j = 0..K (null: 2^64 or more, always true). */
internal class BitThresholds(b: Block) {
    private val values: Array<ULong?>

    init {
        val grid = b.int("grid")
        val a = b.ulong("low")
        val d = b.ulong("step")
        var t: ULong? = a
        values = Array(grid + 1) { j ->
            val here = t
            // next: t + D, or null (2^64 or more) once it wraps around
            if (here != null) t = (here + d).let { if (it < here) null else it }
            here
        }
    }

    /** [u < A + j·D]. */
    fun bit(j: Int, u: ULong): Long {
        val t = values[j]
        return if (t == null || u < t) 1 else 0
    }
}

internal class DuchiEncoder(b: Block) : Encoder {
    private val thresholds = BitThresholds(b)
    override fun encode(index: Int, key: String, c: Context): Any = thresholds.bit(index, word64(c.random))
}

internal class LaplaceEncoder(b: Block) : Encoder {
    private val grid = b.long("grid")
    private val cells = grid + 2 * b.long("window") + 1
    private val bounds: Array<ULong> = (b.map["bounds"] as? List<*> ?: throw RegistryException("encoder.bounds must be an array"))
        .let { list -> Array(list.size) { list[it].asULong("encoder.bounds") } }

    override fun encode(index: Int, key: String, c: Context): Any {
        val u = word64(c.random)
        var lo = 0
        var hi = bounds.size          // i = number of bounds <= u (bisect right)
        while (lo < hi) {
            val mid = (lo + hi) ushr 1
            if (bounds[mid] <= u) lo = mid + 1 else hi = mid
        }
        return minOf(maxOf(index + lo - grid, 0L), cells - 1)
    }
}

/** The Piecewise cell of grid index j: r uniform on [0, T) by rejection on W32 words. */
internal class PiecewiseCells(b: Block) {
    val grid = b.long("grid")
    val window = b.long("window")
    private val a = b.long("a")
    private val bw = b.long("b")
    private val total = window * a + grid * bw

    init {
        if (total < 1 || total > TWO32) throw RegistryException("piecewise: w·a + K·b = $total is outside [1, 2^32]")
    }

    private val accept = (TWO32 / total) * total

    fun cell(j: Long, rnd: RandomSource): Long {
        var u = word32(rnd)
        while (u >= accept) u = word32(rnd)
        val r = u % total
        val inside = window * a
        if (r < inside) return j + r / a
        val rest = (r - inside) / bw
        return if (rest >= j) rest + window else rest
    }
}

internal class PiecewiseEncoder(b: Block) : Encoder {
    private val cells = PiecewiseCells(b)
    override fun encode(index: Int, key: String, c: Context): Any = cells.cell(index.toLong(), c.random)
}

internal class HybridEncoder(b: Block) : Encoder {
    private val h = b.long("h")
    private val piecewise = PiecewiseCells(b.block("piecewise"))
    private val duchi = BitThresholds(b.block("duchi"))
    private val cells = piecewise.grid + piecewise.window
    override fun encode(index: Int, key: String, c: Context): Any =
        if (word32(c.random) < h) piecewise.cell(index.toLong(), c.random) else cells + duchi.bit(index, word64(c.random))
}

/** memobitmean: the memoised 1BitMean bit of grid index j (two memo words, low first), flipped w.p. γ. */
internal class MemoBitMeanEncoder(b: Block) : Encoder {
    val thresholds = BitThresholds(b)
    private val gamma = b.long("gamma_threshold")
    override fun memoKey(index: Int, c: Context) = "memobitmean:$index"

    fun memoBit(j: Int, m: Coins): Long {
        val lo = m.word()
        return thresholds.bit(j, (lo or (m.word() shl 32)).toULong())
    }

    override fun encode(index: Int, key: String, c: Context): Any {
        val bit = c.device.cached("${c.metric}\u0000memobitmean:$index") { memoBit(index, MemoStream(c.secret, c.metric, "memobitmean:$index")) }
        return bit xor if (word32(c.random) < gamma) 1L else 0L
    }
}

/** The encoder layout this SDK understands. */
internal const val ENCODER_VERSION = 1L

/** (1) members that are integers: JSON integers (Long), not 4.0 nor true */
private val INTEGERS = "d m g t k h s sampled seeds max_length groups grid window a b".split(' ')
private val U64: BigInteger = BigInteger.ONE.shiftLeft(64)
private const val U32 = 1L shl 32

/**
 * The checks an SDK applies to a published block (docs/conformance.md, "Checks an SDK applies to a
 * block", numbered and applied in that order; the schema's own conditions too, as this SDK does
 * not validate against it): a [RegistryException] naming the first member that disagrees, so that
 * no report is encoded from an inconsistent block (conformance/vectors/invalid_blocks.json pins
 * the member). One function with one failure path, for the jar's budget.
 */
internal fun checkBlock(b: Map<String, Any?>) {
    // the one failure: the member and the check's number (0: the layout's version)
    fun fail(field: String, check: Int): Nothing = throw RegistryException("field $field: " + if (check == 0) {
        "encoder version ${b["version"]} is not known to this SDK; upgrade it"
    } else "the encoder block fails check $check of docs/conformance.md, \"Checks an SDK applies to a block\"")
    fun need(ok: Boolean, field: String, check: Int) { if (!ok) fail(field, check) }
    fun int(o: Map<*, *>, k: String): Long = o[k] as? Long ?: fail(k, 1)   // (1): present, a JSON integer
    fun word(x: Any?, field: String, check: Int): BigInteger {   // out of 2^64, as decimal text without a leading 0
        val s = x as? String
        if (s == null || s.isEmpty() || s.any { it !in '0'..'9' } || (s.length > 1 && s[0] == '0')) fail(field, check)
        return BigInteger(s).also { need(it <= U64, field, check) }
    }
    fun rising(x: Any?, n: Long): Boolean {   // n finite numbers, strictly increasing
        val list = x as? List<*> ?: return false
        var last = Double.NEGATIVE_INFINITY
        for (e in list) {
            val v = (e as? Number)?.toDouble() ?: return false
            if (v.isInfinite() || v.isNaN() || v <= last) return false
            last = v
        }
        return list.size.toLong() == n
    }
    val p = b["protocol"]
    val hybrid = p == "hybrid"
    fun nested(k: String, check: Int): Map<*, *> {   // hybrid's nested draw, on the block's grid
        val o = if (hybrid) b[k] as? Map<*, *> else b
        if (o == null || o["grid"] != b["grid"]) fail("$k.grid", check)
        return o
    }

    need(b["version"] == ENCODER_VERSION, "version", 0)
    for (k in INTEGERS) if (k in b && !(hybrid && k == "h")) int(b, k)                                        // (1)
    for (k in b.keys) if (k.endsWith("_threshold") || (hybrid && k == "h")) need(int(b, k) in 0..U32, k, 1)
    val linear = b["family"] == "linear"
    need(p != "olh" || linear == ("t" in b), "t", 2)                                                          // (2)
    val r = when (p) { "rr" -> 2L; "grr" -> int(b, "d"); "olh", "hr", "discover" -> int(b, "g"); else -> 0L }   // (3)
    if (r != 0L || p == "grr") need(int(b, "keep_threshold").toDouble() * r > U32, "keep_threshold", 3)
    if (p == "hr" || (p == "olh" && linear)) {                                                                // (4)
        val d = int(b, "d"); val g = int(b, "g"); val t = int(b, "t"); val m = int(b, "m")
        var q = 2L
        while (g % q != 0L && q * q < g) q++
        need(g > 1 && (g == q || g % q != 0L), "g", 4)   // no divisor q with q² ≤ g
        var digits = 1L; var points = 1L; var size = g
        while (size < d) { digits++; points = points * g + 1; size = if (size > d / g) d else size * g }
        need(t == digits, "t", 4)
        need(m == points, "m", 4)
    }
    if (p == "rappor") need(int(b, "h") <= int(b, "k"), "h", 5)
    if (p == "ss") need(int(b, "s") < int(b, "d"), "s", 6)
    if (p == "dbitflip") need(int(b, "sampled") <= int(b, "d"), "sampled", 7)
    if (p == "discover") need(int(b, "groups") == int(b, "max_length") + 1, "groups", 8)
    if (p == "losue") need(b["p1_threshold"] == 1L shl 31, "p1_threshold", 9)
    if (p == "piecewise" || hybrid) {                                                                         // (10)
        val o = nested("piecewise", 10); val f = if (hybrid) "piecewise." else ""
        val grid = int(b, "grid"); val w = int(o, "window"); val a = int(o, "a"); val c = int(o, "b")
        need(w in 1..grid && a >= 1 && c >= 0, f + "window", 10)
        need(w.toDouble() * a + grid.toDouble() * c <= U32, f + "a", 10)
    }
    if (p == "duchi" || p == "bitmean" || p == "memobitmean" || hybrid) {                                    // (11)
        val o = nested("duchi", 11); val f = if (hybrid) "duchi." else ""
        val low = word(o["low"], f + "low", 11)
        need(low + BigInteger.valueOf(int(b, "grid")) * word(o["step"], f + "step", 11) <= U64, f + "step", 11)
    }
    if (p == "laplace") {                                                                                     // (12)
        val bounds = b["bounds"] as? List<*>
        need(bounds != null && bounds.size.toLong() == 2 * (int(b, "grid") + int(b, "window")), "bounds", 12)
        var last = BigInteger.ZERO
        for (x in bounds!!) last = word(x, "bounds", 12).also { need(it >= last, "bounds", 12) }
    }
    if ("edges" in b) need(rising(b["edges"], ((b["d"] as? Long) ?: 2L) + 1), "edges", 13)
    if ("range" in b) need(rising(b["range"], 2), "range", 14)
}

/** The one-report encoder of a published encoder object: a [RegistryException] naming the member
 * if the block fails a check of [checkBlock] (never a silent encode), or if it is unknown. */
internal fun encoderFor(block: Map<String, Any?>): Encoder {
    checkBlock(block)
    val b = Block(block)
    return when (b.protocol) {
        "rr" -> RrEncoder(b)
        "grr" -> GrrEncoder(b)
        "oue", "sue" -> UnaryEncoder(b)
        "ss" -> SsEncoder(b)
        "olh" -> OlhEncoder(b)
        "hr" -> HrEncoder(b)
        "rappor" -> RapporEncoder(b)
        "discover" -> DiscoverEncoder(b)
        "lgrr" -> LgrrEncoder(b)
        "losue" -> LosueEncoder(b)
        "loloha" -> LolohaEncoder(b)
        "dbitflip" -> DbitflipEncoder(b)
        "duchi", "bitmean" -> DuchiEncoder(b)
        "laplace" -> LaplaceEncoder(b)
        "piecewise" -> PiecewiseEncoder(b)
        "hybrid" -> HybridEncoder(b)
        "memobitmean" -> MemoBitMeanEncoder(b)
        else -> throw RegistryException("protocol ${b.protocol} is not known to this SDK; upgrade it")
    }
}
