@file:Suppress("PLATFORM_CLASS_MAPPED_TO_KOTLIN")

package dev.ldptelemetry.sdk

/*
 * Collection and text helpers over java.util and java.lang alone. The Kotlin standard library's
 * facade classes (CollectionsKt, StringsKt, ArraysKt, MapsKt: well over a megabyte of bytecode,
 * parsed whole when first touched) stay unloaded on the SDK's start-up path and its hot path;
 * the bar is a client from a registry file plus 100 reports within 150 ms of CPU over an empty
 * JVM program (bench/jvm_sdk.py).
 */

internal inline fun <T, R> Iterable<T>.mapped(f: (T) -> R): ArrayList<R> {
    val out = ArrayList<R>()
    for (x in this) out.add(f(x))
    return out
}

internal fun <T> listOfAll(vararg xs: T): List<T> {
    val out = ArrayList<T>(xs.size)
    for (x in xs) out.add(x)
    return out
}

internal fun <T> noList(): List<T> = java.util.Collections.emptyList()

internal fun <K, V> noMap(): Map<K, V> = java.util.Collections.emptyMap()

internal fun <K, V> mapOfPairs(vararg pairs: Pair<K, V>): LinkedHashMap<K, V> {
    val out = LinkedHashMap<K, V>()
    for (p in pairs) out[p.first] = p.second
    return out
}

internal fun <T : Comparable<T>> Collection<T>.sortedList(): ArrayList<T> {
    val out = ArrayList(this)
    java.util.Collections.sort(out)
    return out
}

internal fun String.ends(suffix: String): Boolean = (this as java.lang.String).endsWith(suffix)

internal fun String.starts(prefix: String, at: Int = 0): Boolean = (this as java.lang.String).startsWith(prefix, at)

/** The text before the first [sep] (all of it when absent). */
internal fun String.before(sep: String): String {
    val i = (this as java.lang.String).indexOf(sep)
    return if (i < 0) this else substring(0, i)
}

internal fun String.dropSuffix(suffix: String): String = if (ends(suffix)) substring(0, length - suffix.length) else this

internal fun String.trimmed(): String = (this as java.lang.String).trim()

internal fun parseLongOrNull(s: String, radix: Int = 10): Long? = try {
    java.lang.Long.parseLong(s, radix)
} catch (e: NumberFormatException) {
    null
}

internal fun spaces(n: Int): String {
    val sb = StringBuilder(n)
    for (i in 0 until n) sb.append(' ')
    return sb.toString()
}
