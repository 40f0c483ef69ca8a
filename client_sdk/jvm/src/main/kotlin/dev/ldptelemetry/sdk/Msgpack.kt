package dev.ldptelemetry.sdk

import java.io.ByteArrayOutputStream

/**
 * A small msgpack encoder and decoder of our own for the subset wire format v1 uses (maps with
 * string keys, arrays, strings, binary, integers, booleans, nil; docs/wire-format.md): it
 * writes the bytes Python's `msgpack.packb(..., use_bin_type=True)` writes for the same objects
 * — the smallest form of every integer, string and container — so a batch is byte for byte
 * the reference's (pinned by conformance/vectors/batches.json). A library would add more than
 * the whole SDK weighs for a few dozen lines. The decoder lets the SDK split a stored batch
 * when the collector rejects one report of it.
 */
internal object Msgpack {
    fun pack(value: Any?): ByteArray {
        val out = ByteArrayOutputStream(256)
        write(out, value)
        return out.toByteArray()
    }

    private fun be(out: ByteArrayOutputStream, v: Long, bytes: Int) {
        for (i in bytes - 1 downTo 0) out.write((v ushr (8 * i)).toInt() and 0xff)
    }

    private fun length(out: ByteArrayOutputStream, n: Int, fix: Int, fixMax: Int, c8: Int, c16: Int, c32: Int) {
        when {
            n < fixMax -> out.write(fix or n)
            c8 >= 0 && n < 0x100 -> { out.write(c8); be(out, n.toLong(), 1) }
            n < 0x10000 -> { out.write(c16); be(out, n.toLong(), 2) }
            else -> { out.write(c32); be(out, n.toLong(), 4) }
        }
    }

    private fun writeInt(out: ByteArrayOutputStream, v: Long) {
        when {
            v >= 0 -> when {
                v < 0x80 -> out.write(v.toInt())
                v < 0x100 -> { out.write(0xcc); be(out, v, 1) }
                v < 0x10000 -> { out.write(0xcd); be(out, v, 2) }
                v < 0x100000000L -> { out.write(0xce); be(out, v, 4) }
                else -> { out.write(0xcf); be(out, v, 8) }
            }
            v >= -32 -> out.write((v and 0xff).toInt())
            v >= -0x80 -> { out.write(0xd0); be(out, v, 1) }
            v >= -0x8000 -> { out.write(0xd1); be(out, v, 2) }
            v >= -0x80000000L -> { out.write(0xd2); be(out, v, 4) }
            else -> { out.write(0xd3); be(out, v, 8) }
        }
    }

    private fun write(out: ByteArrayOutputStream, v: Any?) {
        when (v) {
            null -> out.write(0xc0)
            false -> out.write(0xc2)
            true -> out.write(0xc3)
            is Int -> writeInt(out, v.toLong())
            is Long -> writeInt(out, v)
            is ULong -> if (v.toLong() >= 0) writeInt(out, v.toLong()) else { out.write(0xcf); be(out, v.toLong(), 8) }
            is String -> {
                val data = v.toByteArray(Charsets.UTF_8)
                length(out, data.size, 0xa0, 32, 0xd9, 0xda, 0xdb)
                out.write(data)
            }
            is ByteArray -> {
                when {
                    v.size < 0x100 -> { out.write(0xc4); be(out, v.size.toLong(), 1) }
                    v.size < 0x10000 -> { out.write(0xc5); be(out, v.size.toLong(), 2) }
                    else -> { out.write(0xc6); be(out, v.size.toLong(), 4) }
                }
                out.write(v)
            }
            is List<*> -> {
                length(out, v.size, 0x90, 16, -1, 0xdc, 0xdd)
                for (item in v) write(out, item)
            }
            is Map<*, *> -> {
                length(out, v.size, 0x80, 16, -1, 0xde, 0xdf)
                for ((k, value) in v) {
                    write(out, k as String)
                    write(out, value)
                }
            }
            else -> throw IllegalArgumentException("msgpack: ${v.javaClass.name} is not used by wire format v1")
        }
    }

    /** Decode one msgpack document of the subset [pack] writes (integers as Long, bytes as ByteArray). */
    fun unpack(data: ByteArray): Any? {
        val r = Reader(data)
        val out = r.read(0)
        if (r.pos != data.size) throw IllegalArgumentException("msgpack: trailing bytes")
        return out
    }

    private class Reader(val d: ByteArray) {
        var pos = 0

        fun uint(n: Int): Long {
            if (pos + n > d.size) throw IllegalArgumentException("msgpack: truncated")
            var v = 0L
            for (i in 0 until n) v = (v shl 8) or (d[pos + i].toLong() and 0xff)
            pos += n
            return v
        }

        fun bytes(n: Long): ByteArray {
            if (n < 0 || pos + n > d.size) throw IllegalArgumentException("msgpack: truncated")
            val out = java.util.Arrays.copyOfRange(d, pos, pos + n.toInt())
            pos += n.toInt()
            return out
        }

        fun signed(n: Int): Long {
            val u = uint(n)
            val shift = 64 - 8 * n
            return (u shl shift) shr shift
        }

        fun read(depth: Int): Any? {
            if (depth > 64) throw IllegalArgumentException("msgpack: nesting too deep")
            val b = uint(1).toInt()
            return when {
                b < 0x80 -> b.toLong()
                b >= 0xe0 -> (b - 0x100).toLong()
                b and 0xf0 == 0x80 -> map(b and 0x0f, depth)
                b and 0xf0 == 0x90 -> arr(b and 0x0f, depth)
                b and 0xe0 == 0xa0 -> String(bytes((b and 0x1f).toLong()), Charsets.UTF_8)
                else -> when (b) {
                    0xc0 -> null
                    0xc2 -> false
                    0xc3 -> true
                    0xc4 -> bytes(uint(1)); 0xc5 -> bytes(uint(2)); 0xc6 -> bytes(uint(4))
                    0xcc -> uint(1); 0xcd -> uint(2); 0xce -> uint(4); 0xcf -> uint(8)
                    0xd0 -> signed(1); 0xd1 -> signed(2); 0xd2 -> signed(4); 0xd3 -> signed(8)
                    0xd9 -> String(bytes(uint(1)), Charsets.UTF_8)
                    0xda -> String(bytes(uint(2)), Charsets.UTF_8)
                    0xdb -> String(bytes(uint(4)), Charsets.UTF_8)
                    0xdc -> arr(uint(2).toInt(), depth); 0xdd -> arr(uint(4).toInt(), depth)
                    0xde -> map(uint(2).toInt(), depth); 0xdf -> map(uint(4).toInt(), depth)
                    else -> throw IllegalArgumentException("msgpack: type byte 0x${Integer.toHexString(b)} is not used by wire format v1")
                }
            }
        }

        fun arr(n: Int, depth: Int): List<Any?> {
            if (n < 0 || n > d.size - pos) throw IllegalArgumentException("msgpack: truncated")
            return List(n) { read(depth + 1) }
        }

        fun map(n: Int, depth: Int): Map<String, Any?> {
            if (n < 0 || n > d.size - pos) throw IllegalArgumentException("msgpack: truncated")
            val out = LinkedHashMap<String, Any?>()
            repeat(n) {
                val k = read(depth + 1) as? String ?: throw IllegalArgumentException("msgpack: a map key is not a string")
                out[k] = read(depth + 1)
            }
            return out
        }
    }
}
