package dev.ldptelemetry.sdk

/**
 * SHAKE-256 (FIPS 202), an extendable-output function: neither the JDK nor Android offers it,
 * so it is written here from the standard (Keccak-f[1600], rate 136 bytes, domain byte 0x1F).
 * Pinned by the derivation vectors (PRR words, memo streams, Bloom bits).
 */
internal class Shake256(message: ByteArray) {
    private val state = LongArray(25)
    private val block = ByteArray(RATE)
    private var at = RATE

    init {
        var off = 0
        while (message.size - off >= RATE) {
            absorb(message, off)
            off += RATE
        }
        val last = ByteArray(RATE)
        System.arraycopy(message, off, last, 0, message.size - off)
        last[message.size - off] = (last[message.size - off].toInt() xor 0x1f).toByte()
        last[RATE - 1] = (last[RATE - 1].toInt() xor 0x80).toByte()
        absorb(last, 0)
    }

    private fun absorb(data: ByteArray, off: Int) {
        for (i in 0 until RATE / 8) {
            var w = 0L
            for (j in 7 downTo 0) w = (w shl 8) or (data[off + 8 * i + j].toLong() and 0xff)
            state[i] = state[i] xor w
        }
        keccakF(state)
    }

    /** The next [n] bytes of output. */
    fun read(n: Int): ByteArray {
        val out = ByteArray(n)
        var done = 0
        while (done < n) {
            if (at == RATE) {
                for (i in 0 until RATE / 8) {
                    var w = state[i]
                    for (j in 0 until 8) {
                        block[8 * i + j] = w.toByte()
                        w = w ushr 8
                    }
                }
                keccakF(state)
                at = 0
            }
            val k = minOf(RATE - at, n - done)
            System.arraycopy(block, at, out, done, k)
            at += k
            done += k
        }
        return out
    }

    companion object {
        private const val RATE = 136
        private val RC = longArrayOf(
            0x0000000000000001L, 0x0000000000008082L, -0x7fffffffffff7f76L, -0x7fffffff7fff8000L,
            0x000000000000808bL, 0x0000000080000001L, -0x7fffffff7fff7f7fL, -0x7fffffffffff7ff7L,
            0x000000000000008aL, 0x0000000000000088L, 0x0000000080008009L, 0x000000008000000aL,
            0x000000008000808bL, -0x7fffffffffffff75L, -0x7fffffffffff7f77L, -0x7fffffffffff7ffdL,
            -0x7fffffffffff7ffeL, -0x7fffffffffffff80L, 0x000000000000800aL, -0x7fffffff7ffffff6L,
            -0x7fffffff7fff7f7fL, -0x7fffffffffff7f80L, 0x0000000080000001L, -0x7fffffff7fff7ff8L,
        )
        private val ROT = intArrayOf(0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14)

        fun keccakF(a: LongArray) {
            val c = LongArray(5)
            val b = LongArray(25)
            for (round in 0 until 24) {
                for (x in 0 until 5) c[x] = a[x] xor a[x + 5] xor a[x + 10] xor a[x + 15] xor a[x + 20]
                for (x in 0 until 5) {
                    val d = c[(x + 4) % 5] xor java.lang.Long.rotateLeft(c[(x + 1) % 5], 1)
                    var y = 0
                    while (y < 25) {
                        a[y + x] = a[y + x] xor d
                        y += 5
                    }
                }
                for (x in 0 until 5) for (y in 0 until 5) {
                    val i = x + 5 * y
                    b[y + 5 * ((2 * x + 3 * y) % 5)] = java.lang.Long.rotateLeft(a[i], ROT[i])
                }
                var y = 0
                while (y < 25) {
                    for (x in 0 until 5) a[y + x] = b[y + x] xor (b[y + (x + 1) % 5].inv() and b[y + (x + 2) % 5])
                    y += 5
                }
                a[0] = a[0] xor RC[round]
            }
        }

        /** The first [n] bytes of SHAKE-256([message]). */
        fun digest(message: ByteArray, n: Int): ByteArray = Shake256(message).read(n)
    }
}

/**
 * BLAKE2b (RFC 7693), unkeyed, 8-byte digest: discover's public key fingerprints. Written here
 * because the JDK has no BLAKE2 and Android neither.
 */
internal object Blake2b64 {
    private val IV = longArrayOf(
        0x6a09e667f3bcc908L, -0x4498517a7b3558c5L, 0x3c6ef372fe94f82bL, -0x5ab00ac5a0e2c90fL,
        0x510e527fade682d1L, -0x64fa9773d4c193e1L, 0x1f83d9abfb41bd6bL, 0x5be0cd19137e2179L,
    )
    private val SIGMA = ("0123456789abcdefea489fd61c02b753b8c052fdae3671947931dcbe265a40f8905724afe1bc683d" +
        "2c6a0b834d75fe19c51fed4a0763928bdb7ec13950f4862a6fe9b308c2d714a5a2847615fb9e3cd0").let { s -> IntArray(s.length) { Character.digit(s[it], 16) } }

    private fun compress(h: LongArray, block: ByteArray, off: Int, t: Long, last: Boolean) {
        val m = LongArray(16) { i ->
            var w = 0L
            for (j in 7 downTo 0) w = (w shl 8) or (block[off + 8 * i + j].toLong() and 0xff)
            w
        }
        val v = LongArray(16)
        System.arraycopy(h, 0, v, 0, 8)
        System.arraycopy(IV, 0, v, 8, 8)
        v[12] = v[12] xor t
        if (last) v[14] = v[14].inv()
        fun g(a: Int, b: Int, c: Int, d: Int, x: Long, y: Long) {
            v[a] = v[a] + v[b] + x; v[d] = java.lang.Long.rotateRight(v[d] xor v[a], 32)
            v[c] = v[c] + v[d]; v[b] = java.lang.Long.rotateRight(v[b] xor v[c], 24)
            v[a] = v[a] + v[b] + y; v[d] = java.lang.Long.rotateRight(v[d] xor v[a], 16)
            v[c] = v[c] + v[d]; v[b] = java.lang.Long.rotateRight(v[b] xor v[c], 63)
        }
        for (r in 0 until 12) {
            val s = 16 * (r % 10)
            fun w(i: Int) = m[SIGMA[s + i]]
            g(0, 4, 8, 12, w(0), w(1)); g(1, 5, 9, 13, w(2), w(3)); g(2, 6, 10, 14, w(4), w(5)); g(3, 7, 11, 15, w(6), w(7))
            g(0, 5, 10, 15, w(8), w(9)); g(1, 6, 11, 12, w(10), w(11)); g(2, 7, 8, 13, w(12), w(13)); g(3, 4, 9, 14, w(14), w(15))
        }
        for (i in 0 until 8) h[i] = h[i] xor v[i] xor v[i + 8]
    }

    /** BLAKE2b-64 of [msg] as the little-endian integer of its 8-byte digest. */
    fun digest(msg: ByteArray): ULong {
        val h = IV.copyOf()
        h[0] = h[0] xor 0x01010008L   // digest length 8, no key, fanout 1, depth 1
        var at = 0
        while (msg.size - at > 128) {
            compress(h, msg, at, (at + 128).toLong(), false)
            at += 128
        }
        val last = ByteArray(128)
        System.arraycopy(msg, at, last, 0, msg.size - at)
        compress(h, last, 0, msg.size.toLong(), true)
        return h[0].toULong()
    }
}
