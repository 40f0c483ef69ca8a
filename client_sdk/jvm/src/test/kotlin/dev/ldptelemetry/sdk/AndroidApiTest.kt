package dev.ldptelemetry.sdk

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/**
 * Android-ready by construction: the build compiles against the JDK 8 API (-Xjdk-release=1.8),
 * and this test reads every compiled class of the library for references to what Android (API
 * level 24) lacks or what must not be used — java.nio.file, java.time, java.net.http, Base64,
 * java.util.Random for randomness, the JDK's XDH (X25519) classes. A reference is a class name in a class file's
 * constant pool, so a use anywhere in the library fails here.
 */
class AndroidApiTest {
    private val forbidden = listOf(
        "java/nio/file/", "java/time/", "java/net/http/", "java/util/Base64", "java/util/HexFormat",
        "java/util/concurrent/ThreadLocalRandom", "java/util/SplittableRandom", "java/lang/ProcessHandle",
        "java/lang/invoke/StringConcatFactory", "java/util/Random\u0001",
        // X25519 key agreement is Android API 33+: sealed reports use their own (sealed/X25519.kt)
        "java/security/spec/XEC", "java/security/interfaces/XEC", "java/security/spec/NamedParameterSpec",
    )

    @Test
    fun `the library references no API that Android 24 lacks and no non-cryptographic randomness`() {
        val classes = File("target/classes").walkTopDown().filter { it.name.endsWith(".class") }.toList()
        assertTrue(classes.size > 20, "compiled classes not found")
        val hits = ArrayList<String>()
        for (f in classes) {
            val text = String(f.readBytes(), Charsets.ISO_8859_1)
            for (bad in forbidden) {
                val needle = bad.substringBefore('\u0001')
                if (bad.contains('\u0001')) {
                    // "java/util/Random" as a whole class name (its length prefix), not SecureRandom's
                    if (needle == "java/util/Random" && Regex("\\x01\\x00\\x10java/util/Random").containsMatchIn(text)) hits.add("${f.name}: java.util.Random")
                } else if (text.contains(needle)) hits.add("${f.name}: $needle")
            }
        }
        assertEquals(emptyList<String>(), hits)
    }
}
