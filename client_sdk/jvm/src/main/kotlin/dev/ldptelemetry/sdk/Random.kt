package dev.ldptelemetry.sdk

import java.security.SecureRandom

/**
 * Randomness for the one-report encoders: the platform CSPRNG ([SecureRandom], never
 * java.util.Random), read as one byte stream (docs/conformance.md, "Randomness"):
 *
 * - W32: the next 4 bytes, little-endian; W64: the next 8 bytes, little-endian (a ULong);
 * - BELOW(h): W64 until u < ⌊2^64/h⌋·h, then u mod h — exactly uniform, no modulo bias.
 *
 * Every probabilistic choice is an integer threshold test "u < T" on such words, so P(y|x) is
 * the same rational table as in the Python reference. A [RandomSource] is injectable: the
 * conformance tests feed the vectors' bytes and check that every byte is consumed.
 */
interface RandomSource {
    /** Fill [out] with uniform random bytes. */
    fun fill(out: ByteArray)
}

/**
 * The process's one platform CSPRNG (SecureRandom is thread-safe): secrets, batch ids, file and
 * generation tags, jitter, and the blocks [SecureRandomSource] serves to the encoders. One
 * instance, so the provider machinery is set up once per process, not once per object.
 */
internal object Csprng {
    @JvmField
    val random: SecureRandom = SecureRandom()
}

/** 2^32, the denominator of every 32-bit threshold. */
internal const val TWO32: Long = 1L shl 32

/**
 * The platform CSPRNG, read in blocks of [BLOCK] bytes (one SecureRandom call per block,
 * not per word: report() needs a few words). Not shared between threads without the client's lock.
 */
class SecureRandomSource @JvmOverloads constructor(private val random: SecureRandom = Csprng.random) : RandomSource {
    private val buffer = ByteArray(BLOCK)
    private var at = BLOCK

    override fun fill(out: ByteArray) {
        var done = 0
        while (done < out.size) {
            if (at == BLOCK) {
                random.nextBytes(buffer)
                at = 0
            }
            val n = minOf(BLOCK - at, out.size - done)
            System.arraycopy(buffer, at, out, done, n)
            java.util.Arrays.fill(buffer, at, at + n, 0)   // served bytes are not kept
            at += n
            done += n
        }
    }
}

/** Bytes [SecureRandomSource] draws per SecureRandom call. */
private const val BLOCK = 512

/** Little-endian unsigned 32-bit word at [at] of [b], as a Long in [0, 2^32). */
internal fun le32(b: ByteArray, at: Int): Long =
    (b[at].toLong() and 0xff) or ((b[at + 1].toLong() and 0xff) shl 8) or
        ((b[at + 2].toLong() and 0xff) shl 16) or ((b[at + 3].toLong() and 0xff) shl 24)

/** [n] W32 words. */
internal fun words32(src: RandomSource, n: Int): LongArray {
    val bytes = ByteArray(4 * n)
    src.fill(bytes)
    return LongArray(n) { le32(bytes, 4 * it) }
}

/** One W32 word in [0, 2^32). */
internal fun word32(src: RandomSource): Long {
    val bytes = ByteArray(4)
    src.fill(bytes)
    return le32(bytes, 0)
}

/** One W64 word. */
internal fun word64(src: RandomSource): ULong {
    val bytes = ByteArray(8)
    src.fill(bytes)
    return (le32(bytes, 0) or (le32(bytes, 4) shl 32)).toULong()
}

/** A W64 word reduced mod h, or −1 when it is at or above ⌊2^64/h⌋·h (rejected). */
internal fun reduce64(u: ULong, h: Long): Long {
    require(h >= 1) { "BELOW needs h >= 1" }
    val hu = h.toULong()
    val limit = (ULong.MAX_VALUE / hu) * hu + ((ULong.MAX_VALUE % hu) + 1uL) / hu * hu
    // limit = ⌊2^64/h⌋·h, computed without 2^64 (0 when it is 2^64, i.e. h a power of two)
    return if (limit != 0uL && u >= limit) -1 else (u % hu).toLong()
}

/** BELOW(h): a uniform integer in [0, h) by rejection on W64 words. */
internal fun below(src: RandomSource, h: Long): Long {
    while (true) {
        val v = reduce64(word64(src), h)
        if (v >= 0) return v
    }
}
