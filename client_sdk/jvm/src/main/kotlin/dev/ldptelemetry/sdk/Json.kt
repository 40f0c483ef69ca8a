package dev.ldptelemetry.sdk

import java.math.BigDecimal
import java.math.MathContext

/**
 * A small JSON reader and writer for what the SDK reads and writes: the registry document
 * (`GET /v1/registry`), the privacy ledger, the collector's answers. No dependency (Android's
 * bundled org.json and a JVM's copy would clash). Objects keep their order (LinkedHashMap);
 * integers are Long (BigInteger beyond), other numbers Double (correctly rounded by the JDK).
 */
object Json {
    /** Parse one JSON document; [JsonException] when it is not one. */
    @JvmStatic
    fun parse(text: String): Any? {
        val p = Parser(text)
        p.space()
        val v = p.value(0)
        p.space()
        if (p.at != text.length) throw JsonException("trailing characters at offset ${p.at}")
        return v
    }

    /** JSON text of [value] (maps, lists, strings, numbers, booleans, null); [indent] > 0 pretty-prints. */
    @JvmStatic
    @JvmOverloads
    fun write(value: Any?, indent: Int = 0): String {
        val sb = StringBuilder()
        write(sb, value, indent, 0)
        return sb.toString()
    }

    private fun write(sb: StringBuilder, v: Any?, indent: Int, depth: Int) {
        when (v) {
            null -> sb.append("null")
            is Boolean -> sb.append(v)
            is String -> quote(sb, v)
            is Double -> {
                require(v.isFinite()) { "JSON has no $v" }
                sb.append(v.toString())   // the JDK's round-trip digits ("1.0E-5" is JSON too): parses back to v exactly
            }
            is Float -> write(sb, v.toDouble(), indent, depth)
            is Number -> sb.append(v.toString())
            is Map<*, *> -> container(sb, '{', '}', ArrayList(v.entries), indent, depth) { e ->
                quote(sb, e.key as String); sb.append(if (indent > 0) ": " else ":"); write(sb, e.value, indent, depth + 1)
            }
            is Iterable<*> -> container(sb, '[', ']', v.mapped { it }, indent, depth) { write(sb, it, indent, depth + 1) }
            is LongArray -> write(sb, LongArray(v.size) { v[it] }.let { a -> ArrayList<Long>().also { l -> for (x in a) l.add(x) } }, indent, depth)
            is IntArray -> write(sb, ArrayList<Int>().also { l -> for (x in v) l.add(x) }, indent, depth)
            else -> throw IllegalArgumentException("not JSON: ${v.javaClass.name}")
        }
    }

    /** [s] left-padded with zeros to [width] (no String.format: it loads Formatter and locale data at start-up). */
    internal fun pad(s: String, width: Int): String {
        val sb = StringBuilder(width)
        for (i in s.length until width) sb.append('0')
        return sb.append(s).toString()
    }

    private inline fun <T> container(sb: StringBuilder, open: Char, close: Char, items: List<T>, indent: Int, depth: Int, each: (T) -> Unit) {
        sb.append(open)
        if (items.isEmpty()) {
            sb.append(close)
            return
        }
        items.forEachIndexed { i, item ->
            if (i > 0) sb.append(',')
            if (indent > 0) sb.append('\n').append(spaces(indent * (depth + 1)))
            each(item)
        }
        if (indent > 0) sb.append('\n').append(spaces(indent * depth))
        sb.append(close)
    }

    private fun quote(sb: StringBuilder, s: String) {
        sb.append('"')
        for (c in s) {
            when {
                c == '"' -> sb.append("\\\"")
                c == '\\' -> sb.append("\\\\")
                c == '\n' -> sb.append("\\n")
                c == '\r' -> sb.append("\\r")
                c == '\t' -> sb.append("\\t")
                c < ' ' || c.code > 0x7e -> sb.append("\\u").append(pad(Integer.toHexString(c.code), 4))
                else -> sb.append(c)
            }
        }
        sb.append('"')
    }

    /**
     * Python's repr of a float: the shortest decimal that reads back as [x], written
     * positionally for 1e-4 <= |x| < 1e16 and in exponent form otherwise (histogram labels
     * are built from it, so they match the reference's byte for byte).
     */
    @JvmStatic
    fun pyRepr(x: Double): String {
        if (x == 0.0) return if (1.0 / x < 0) "-0.0" else "0.0"
        if (x.isNaN()) return "nan"
        if (x.isInfinite()) return if (x > 0) "inf" else "-inf"
        val exact = BigDecimal(x)
        var shortest: BigDecimal = exact
        for (p in 1..17) {
            val r = exact.round(MathContext(p))
            if (r.toDouble() == x) {
                shortest = r
                break
            }
        }
        val digits = shortest.unscaledValue().abs().toString().trimEnd('0').ifEmpty { "0" }
        val e = shortest.precision() - shortest.scale() - 1   // decimal exponent of the first digit
        val sign = if (x < 0) "-" else ""
        if (e < -4 || e >= 16) {
            val mant = if (digits.length > 1) digits[0] + "." + digits.substring(1) else digits
            return "$sign${mant}e${if (e < 0) "-" else "+"}${pad(Math.abs(e).toString(), 2)}"
        }
        if (e < 0) return "${sign}0.${"0".repeat(-e - 1)}$digits"
        val whole = digits.padEnd(e + 1, '0')
        return "$sign${whole.substring(0, e + 1)}.${whole.substring(e + 1).ifEmpty { "0" }}"
    }

    private class Parser(val s: String) {
        var at = 0

        fun space() {
            while (at < s.length && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t')) at++
        }

        fun fail(what: String): Nothing = throw JsonException("$what at offset $at")

        fun value(depth: Int): Any? {
            if (depth > 200) fail("nesting too deep")
            if (at >= s.length) fail("unexpected end")
            return when (val c = s[at]) {
                '{' -> obj(depth)
                '[' -> arr(depth)
                '"' -> str()
                't' -> word("true", true)
                'f' -> word("false", false)
                'n' -> word("null", null)
                else -> if (c == '-' || c in '0'..'9') num() else fail("unexpected '$c'")
            }
        }

        fun word(w: String, v: Any?): Any? {
            if (!s.starts(w, at)) fail("bad literal")
            at += w.length
            return v
        }

        fun obj(depth: Int): Map<String, Any?> {
            val out = LinkedHashMap<String, Any?>()
            at++
            space()
            if (at < s.length && s[at] == '}') { at++; return out }
            while (true) {
                space()
                if (at >= s.length || s[at] != '"') fail("expected a key")
                val k = str()
                space()
                if (at >= s.length || s[at] != ':') fail("expected ':'")
                at++
                space()
                out[k] = value(depth + 1)
                space()
                if (at >= s.length) fail("unexpected end")
                if (s[at] == ',') { at++; continue }
                if (s[at] == '}') { at++; return out }
                fail("expected ',' or '}'")
            }
        }

        fun arr(depth: Int): List<Any?> {
            val out = ArrayList<Any?>()
            at++
            space()
            if (at < s.length && s[at] == ']') { at++; return out }
            while (true) {
                space()
                out.add(value(depth + 1))
                space()
                if (at >= s.length) fail("unexpected end")
                if (s[at] == ',') { at++; continue }
                if (s[at] == ']') { at++; return out }
                fail("expected ',' or ']'")
            }
        }

        fun str(): String {
            val sb = StringBuilder()
            at++
            while (true) {
                if (at >= s.length) fail("unterminated string")
                val c = s[at++]
                when {
                    c == '"' -> return sb.toString()
                    c == '\\' -> {
                        if (at >= s.length) fail("bad escape")
                        when (val e = s[at++]) {
                            '"' -> sb.append('"'); '\\' -> sb.append('\\'); '/' -> sb.append('/')
                            'b' -> sb.append('\b'); 'f' -> sb.append('\u000c'); 'n' -> sb.append('\n')
                            'r' -> sb.append('\r'); 't' -> sb.append('\t')
                            'u' -> {
                                if (at + 4 > s.length) fail("bad \\u escape")
                                val code = parseLongOrNull(s.substring(at, at + 4), 16)?.toInt() ?: fail("bad \\u escape")
                                sb.append(code.toChar())
                                at += 4
                            }
                            else -> fail("bad escape '\\$e'")
                        }
                    }
                    c < ' ' -> fail("control character in a string")
                    else -> sb.append(c)
                }
            }
        }

        fun num(): Any {
            val start = at
            if (s[at] == '-') at++
            while (at < s.length && s[at] in '0'..'9') at++
            var integral = true
            if (at < s.length && s[at] == '.') {
                integral = false
                at++
                while (at < s.length && s[at] in '0'..'9') at++
            }
            if (at < s.length && (s[at] == 'e' || s[at] == 'E')) {
                integral = false
                at++
                if (at < s.length && (s[at] == '+' || s[at] == '-')) at++
                while (at < s.length && s[at] in '0'..'9') at++
            }
            val text = s.substring(start, at)
            val last = text[text.length - 1]
            if (text == "-" || last == '.' || last == 'e' || last == 'E' || last == '+' || last == '-') fail("bad number")
            if (integral) return parseLongOrNull(text) ?: java.math.BigInteger(text)
            return text.toDouble()
        }
    }
}

/** Text that is not JSON. */
class JsonException(message: String) : RuntimeException(message)

/** Typed views of parsed JSON (the registry and the ledger read through these). */
internal fun Any?.asMap(what: String): Map<String, Any?> {
    @Suppress("UNCHECKED_CAST")
    return this as? Map<String, Any?> ?: throw IllegalArgumentException("$what must be an object")
}

internal fun Any?.asList(what: String): List<Any?> = this as? List<Any?> ?: throw IllegalArgumentException("$what must be an array")

internal fun Any?.asLong(what: String): Long = when (this) {
    is Long -> this
    is Int -> this.toLong()
    is Double -> if (this == Math.floor(this) && Math.abs(this) < 9.0e15) this.toLong() else throw IllegalArgumentException("$what must be an integer")
    else -> throw IllegalArgumentException("$what must be an integer")
}

internal fun Any?.asInt(what: String): Int {
    val v = asLong(what)
    if (v < Int.MIN_VALUE || v > Int.MAX_VALUE) throw IllegalArgumentException("$what is out of range")
    return v.toInt()
}

internal fun Any?.asDouble(what: String): Double {
    val v = when (this) {
        is Double -> this
        is Long -> this.toDouble()
        is Int -> this.toDouble()
        is java.math.BigInteger -> this.toDouble()
        else -> throw IllegalArgumentException("$what must be a number")
    }
    if (!v.isFinite()) throw IllegalArgumentException("$what must be finite")
    return v
}

/** An unsigned 64-bit integer given as a decimal string (or a small number). */
internal fun Any?.asULong(what: String): ULong = when (this) {
    is String -> this.toULongOrNull() ?: throw IllegalArgumentException("$what must be a decimal string below 2^64")
    is Long -> if (this >= 0) this.toULong() else throw IllegalArgumentException("$what must be >= 0")
    else -> throw IllegalArgumentException("$what must be a decimal string")
}
