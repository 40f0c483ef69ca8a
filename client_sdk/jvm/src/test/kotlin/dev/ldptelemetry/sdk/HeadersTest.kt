package dev.ldptelemetry.sdk

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test
import java.io.ByteArrayOutputStream
import java.net.InetAddress
import java.net.ServerSocket
import java.util.Collections
import kotlin.concurrent.thread

/**
 * One fixed header set for every SDK (issue 26 §5): the exact bytes HttpURLConnection writes for
 * every request of this SDK — a plain batch, a sealed one, the registry, the key configurations,
 * a file domain — recorded by a raw socket server on 127.0.0.1 and compared with
 * conformance/vectors/headers.json (the Python and TypeScript capture tests read it too). The
 * JVM writes Host, Connection and Content-Length itself, after the SDK's lines: the vector's
 * order is the JVM's, so the bytes are the same as the other SDKs'.
 */
class HeadersTest {
    private val doc = Vectors.doc("headers.json")

    private fun expected(name: String, authority: String, length: Int? = null, path: String? = null): String {
        val r = doc["requests"].l().map { it.m() }.first { it["name"] == name }
        val lines = mutableListOf("${r["method"]} ${path ?: r["path"]} HTTP/1.1")
        for (h in r["headers"].l()) {
            val (k, v) = h.l().map { it as String }
            lines.add("$k: " + v.replace("{authority}", authority).replace("{length}", length.toString()))
        }
        return lines.joinToString("\r\n") + "\r\n\r\n"
    }

    /** Reads one request per connection (head and body), records the head, answers 200 by path. */
    private fun capture(n: Int, block: (String, List<String>) -> Unit) {
        val server = ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"))
        val heads = Collections.synchronizedList(ArrayList<String>())
        val t = thread(isDaemon = true) {
            repeat(n) {
                server.accept().use { s ->
                    val input = s.getInputStream()
                    val head = ByteArrayOutputStream()
                    var text = ""
                    while (!text.endsWith("\r\n\r\n")) {
                        head.write(input.read())
                        text = String(head.toByteArray(), Charsets.ISO_8859_1)
                    }
                    heads.add(text)
                    val length = Regex("\r\nContent-Length: (\\d+)", RegexOption.IGNORE_CASE).find(text)?.groupValues?.get(1)?.toInt() ?: 0
                    repeat(length) { input.read() }
                    val path = text.split(" ")[1]
                    val (type, body) = when {
                        path.startsWith("/v1/registry/domains/") -> "text/plain" to "a\n"
                        path == "/.well-known/ohttp-gateway" -> "application/ohttp-keys" to "\u0000"
                        else -> "application/json" to "{\"accepted\": 1, \"duplicate\": false}"
                    }
                    s.getOutputStream().write(("HTTP/1.1 200 OK\r\nContent-Type: $type\r\nContent-Length: ${body.length}\r\n" +
                        "Connection: close\r\n\r\n$body").toByteArray(Charsets.ISO_8859_1))
                }
            }
        }
        try {
            block("http://127.0.0.1:${server.localPort}", heads)
            t.join(10_000)
        } finally {
            server.close()
        }
    }

    @Test
    fun `every request of HttpURLConnection is the vector byte for byte`() {
        capture(5) { url, heads ->
            val t = HttpUrlTransport(url)
            val authority = url.removePrefix("http://")
            assertEquals(200, Http.postBatch(t, ByteArray(37) { 0x80.toByte() }).status)
            assertEquals(200, t.request("POST", "/.well-known/ohttp-gateway", ByteArray(1079), Http.SEALED_HEADERS).status)
            assertEquals(200, Http.getRegistry(t).status)
            assertEquals(200, t.request("GET", "/.well-known/ohttp-gateway", null, Http.KEYS_HEADERS).status)
            assertEquals(200, Http.getDomain(t, "app").status)
            assertEquals(listOf(expected("report", authority, 37), expected("sealed report", authority, 1079),
                expected("registry", authority), expected("key configurations", authority),
                expected("domain", authority, path = "/v1/registry/domains/app")), heads.toList())
        }
    }
}
