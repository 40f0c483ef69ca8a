package dev.ldptelemetry.sdk.sealed

/**
 * X25519 (Langley, Hamburg and Turner, RFC 7748 §5): the Montgomery ladder over GF(2^255 − 19),
 * written here because Android before API level 33 has no XDH key agreement (and the library
 * compiles against the JDK 8 API). Constant time in the scalar: the ladder runs all 255 steps
 * with a masked swap, and the field operations have no data-dependent branches.
 *
 * A field element is 16 signed 64-bit limbs of 16 bits each (value = Σ limb[i]·2^(16i)); a
 * product's limbs above 2^256 fold back times 38, since 2^256 ≡ 38 (mod p).
 */
internal object X25519 {
    private const val A24 = 121665L   // (486662 − 2) / 4

    /** The shared point u(k·P) of the 32-byte scalar [k] (clamped here) and the 32-byte u-coordinate [u]. */
    fun scalarMult(k: ByteArray, u: ByteArray): ByteArray {
        require(k.size == 32 && u.size == 32) { "X25519 takes 32-byte scalars and u-coordinates" }
        val e = k.copyOf()
        e[0] = (e[0].toInt() and 248).toByte()
        e[31] = ((e[31].toInt() and 127) or 64).toByte()
        val x1 = unpack(u)
        val x2 = LongArray(16).also { it[0] = 1 }
        val z2 = LongArray(16)
        val x3 = x1.copyOf()
        val z3 = LongArray(16).also { it[0] = 1 }
        val a = LongArray(16); val aa = LongArray(16); val b = LongArray(16); val bb = LongArray(16)
        val c = LongArray(16); val d = LongArray(16); val ee = LongArray(16); val t = LongArray(16)
        var swap = 0L
        for (pos in 254 downTo 0) {
            val bit = ((e[pos ushr 3].toInt() ushr (pos and 7)) and 1).toLong()
            swap = swap xor bit
            cswap(x2, x3, swap)
            cswap(z2, z3, swap)
            swap = bit
            add(a, x2, z2); sqr(aa, a)
            sub(b, x2, z2); sqr(bb, b)
            sub(ee, aa, bb)
            add(c, x3, z3); sub(d, x3, z3)
            mul(d, d, a)            // DA
            mul(c, c, b)            // CB
            add(t, d, c); sqr(x3, t)
            sub(t, d, c); sqr(t, t); mul(z3, x1, t)
            mul(x2, aa, bb)
            mulSmall(t, ee, A24); add(t, aa, t); mul(z2, ee, t)
        }
        cswap(x2, x3, swap)
        cswap(z2, z3, swap)
        invert(z2, z2)
        mul(x2, x2, z2)
        return pack(x2)
    }

    private val BASE = ByteArray(32).also { it[0] = 9 }

    /** The public key (u-coordinate) of a 32-byte private key. */
    fun publicKey(privateKey: ByteArray): ByteArray = scalarMult(privateKey, BASE)

    private fun unpack(b: ByteArray): LongArray {
        val o = LongArray(16)
        for (i in 0 until 16) o[i] = (b[2 * i].toLong() and 0xff) or ((b[2 * i + 1].toLong() and 0xff) shl 8)
        o[15] = o[15] and 0x7fff   // RFC 7748: the top bit of the u-coordinate is ignored
        return o
    }

    /** Carries every limb into 16 bits (limb 15's carry wraps to limb 0 times 38). */
    private fun carry(o: LongArray) {
        for (i in 0 until 16) {
            val c = o[i] shr 16
            o[i] -= c shl 16
            if (i < 15) o[i + 1] += c else o[0] += 38 * c
        }
    }

    /** The canonical 32 little-endian bytes (fully reduced below p). */
    private fun pack(n: LongArray): ByteArray {
        val t = n.copyOf()
        carry(t); carry(t); carry(t)
        val m = LongArray(16)
        for (round in 0 until 2) {   // t < 2^256 now, so t − p at most twice
            m[0] = t[0] - 0xffed
            for (i in 1 until 15) {
                m[i] = t[i] - 0xffff - ((m[i - 1] shr 16) and 1)
                m[i - 1] = m[i - 1] and 0xffff
            }
            m[15] = t[15] - 0x7fff - ((m[14] shr 16) and 1)
            val borrow = (m[15] shr 16) and 1
            m[14] = m[14] and 0xffff
            cswap(t, m, 1 - borrow)   // keep t − p when it did not go negative
        }
        val out = ByteArray(32)
        for (i in 0 until 16) {
            out[2 * i] = t[i].toByte()
            out[2 * i + 1] = (t[i] shr 8).toByte()
        }
        return out
    }

    /** Swaps [p] and [q] when [bit] is 1, in constant time. */
    private fun cswap(p: LongArray, q: LongArray, bit: Long) {
        val mask = -bit
        for (i in 0 until 16) {
            val x = mask and (p[i] xor q[i])
            p[i] = p[i] xor x
            q[i] = q[i] xor x
        }
    }

    private fun add(o: LongArray, a: LongArray, b: LongArray) {
        for (i in 0 until 16) o[i] = a[i] + b[i]
    }

    private fun sub(o: LongArray, a: LongArray, b: LongArray) {
        for (i in 0 until 16) o[i] = a[i] - b[i]
    }

    private fun mulSmall(o: LongArray, a: LongArray, k: Long) {
        for (i in 0 until 16) o[i] = a[i] * k
        carry(o); carry(o)
    }

    private fun mul(o: LongArray, a: LongArray, b: LongArray) {
        val t = LongArray(31)
        for (i in 0 until 16) {
            val ai = a[i]
            for (j in 0 until 16) t[i + j] += ai * b[j]
        }
        for (i in 0 until 15) t[i] += 38 * t[i + 16]
        for (i in 0 until 16) o[i] = t[i]
        carry(o); carry(o)
    }

    private fun sqr(o: LongArray, a: LongArray) = mul(o, a, a)

    /** [o] = [z]^(p − 2) = 1/z (Fermat); p − 2 = 2^255 − 21 has every bit set below 255 but bits 2 and 4. */
    private fun invert(o: LongArray, z: LongArray) {
        val c = z.copyOf()
        for (bit in 253 downTo 0) {
            sqr(c, c)
            if (bit != 2 && bit != 4) mul(c, c, z)
        }
        for (i in 0 until 16) o[i] = c[i]
    }
}
