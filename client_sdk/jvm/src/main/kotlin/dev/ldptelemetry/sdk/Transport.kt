package dev.ldptelemetry.sdk

import java.io.ByteArrayOutputStream
import java.io.IOException
import java.io.InputStream
import java.net.HttpURLConnection
import java.net.URL
import java.security.SecureRandom

/**
 * How batches reach the collector: a [Transport] sends one request and returns the response,
 * or throws [TransportException] when no HTTP response came back. [HttpUrlTransport] is the
 * default (HttpURLConnection: every JVM and Android); an app hands in its own (OkHttp, a test
 * double: dev.ldptelemetry.sdk.testing.MemoryTransport) through [ClientOptions.transport].
 *
 * Only fixed headers go on the wire, the same lines in the same order as every other SDK's
 * (docs/wire-format.md, "Request headers"; conformance/vectors/headers.json): a constant
 * User-Agent, the request's Accept (and Content-Type); HttpURLConnection adds Cache-Control and
 * Pragma (no caches), Host, Connection and Content-Length. No cookie, no client identifier, no
 * SDK, OS or device version.
 */
fun interface Transport {
    /** One request; [headers] are the SDK's fixed ones. Throws [TransportException] without a response. */
    fun request(method: String, path: String, body: ByteArray?, headers: Map<String, String>): Response
}

/**
 * Sends a stored batch otherwise than as a plain POST: dev.ldptelemetry.sdk.sealed.Seal (the
 * `sealed` artifact) seals it to the collector's key and sends it to the gateway, a relay or a
 * shuffler ([ClientOptions.seal]).
 */
interface BatchSender {
    /**
     * One attempt to send [batch] ([StoredBatch.body] plain, [StoredBatch.sealed] once sealed);
     * [collector] reaches the collector, [keep] stores a new sealed container with the batch
     * before it is sent. Returns the answer to settle it on, as if the collector answered a
     * plain POST; throws [TransportException] when none came back.
     */
    fun send(batch: StoredBatch, collector: Transport, keep: (ByteArray) -> Unit): Response
}

/** An HTTP response: status, headers (lower-case names) and body. */
class Response(val status: Int, headers: Map<String, String>, val body: ByteArray) {
    val headers: Map<String, String> = HashMap<String, String>().also { m -> for ((k, v) in headers) m[k.lowercase()] = v }

    /** The body parsed as JSON (null when it is not JSON). */
    fun json(): Any? = try {
        Json.parse(body.toString(Charsets.UTF_8))
    } catch (e: JsonException) {
        null
    }

    /** The slug of an RFC 9457 problem document's `type` (e.g. "fingerprint-mismatch"). */
    val problemType: String?
        get() = ((json() as? Map<*, *>)?.get("type") as? String)?.substringAfterLast('/')

    /** Seconds to wait from `Retry-After` (delta-seconds or HTTP-date) or the `retry_after` member. */
    fun retryAfter(nowMillis: Long): Double? {
        val raw = headers["retry-after"]?.trim()
        if (raw != null) {
            raw.toDoubleOrNull()?.let { if (it.isFinite()) return maxOf(0.0, it) }
            try {
                val format = java.text.SimpleDateFormat("EEE, dd MMM yyyy HH:mm:ss zzz", java.util.Locale.US)
                format.timeZone = java.util.TimeZone.getTimeZone("GMT")
                return maxOf(0.0, (format.parse(raw).time - nowMillis) / 1000.0)
            } catch (e: java.text.ParseException) {
                // not an HTTP-date either: ignored
            }
        }
        val member = (json() as? Map<*, *>)?.get("retry_after")
        return if (member is Number && member !is Boolean && member.toDouble().isFinite()) maxOf(0.0, member.toDouble()) else null
    }
}

internal object Http {
    const val REPORTS_PATH = "/v1/reports"
    const val REGISTRY_PATH = "/v1/registry"
    const val MSGPACK = "application/msgpack"
    /** The same for every client: no version, no platform (as client_sdk/transport.py). */
    const val USER_AGENT = "ldpt-sdk"

    /** Each request's own header lines, in order (the transport writes User-Agent before them). */
    val REPORT_HEADERS: Map<String, String> = mapOfPairs("Accept" to "application/json", "Content-Type" to MSGPACK)
    val REGISTRY_HEADERS: Map<String, String> = mapOfPairs("Accept" to "application/json")
    val DOMAIN_HEADERS: Map<String, String> = mapOfPairs("Accept" to "text/plain", "Accept-Encoding" to "gzip")
    val KEYS_HEADERS: Map<String, String> = mapOfPairs("Accept" to "application/ohttp-keys")
    val SEALED_HEADERS: Map<String, String> = mapOfPairs("Accept" to "message/ohttp-res", "Content-Type" to "message/ohttp-req")

    fun postBatch(t: Transport, body: ByteArray): Response = t.request("POST", REPORTS_PATH, body, REPORT_HEADERS)

    const val DOMAINS_PATH = "/v1/registry/domains/"

    /** A file domain's values, one per line (docs/wire-format.md, "Large domains"). */
    fun getDomain(t: Transport, metric: String): Response =
        t.request("GET", DOMAINS_PATH + java.net.URLEncoder.encode(metric, "UTF-8"), null, DOMAIN_HEADERS)

    fun getRegistry(t: Transport): Response = t.request("GET", REGISTRY_PATH, null, REGISTRY_HEADERS)

    /** Network errors aside: 408, 429 and 5xx are retried; every other status is final. */
    fun isRetryable(status: Int): Boolean = status == 408 || status == 429 || status in 500..599

    /**
     * Whether an answer is the collector's: its JSON ack (200), or a problem document (4xx). A
     * proxy, a captive portal or a wrong endpoint answers otherwise (an HTML 200, a redirect);
     * such an answer neither settles a batch as acknowledged nor drops it as rejected. 413 counts
     * as the collector's whoever sent it: a smaller batch is the remedy.
     */
    fun fromCollector(r: Response): Boolean = when (r.status) {
        200 -> (r.json() as? Map<*, *>)?.containsKey("accepted") == true
        in 400..499 -> r.status == 413 || r.problemType != null
        else -> r.status >= 500
    }
}

/** HTTP through java.net.HttpURLConnection (the JVM's and Android's), no redirects, no caches. */
class HttpUrlTransport @JvmOverloads constructor(endpoint: String, private val timeoutMs: Int = 10_000) : Transport {
    private val prefix: String = endpoint.let { var e = it; while (e.ends("/")) e = e.substring(0, e.length - 1); e }

    init {
        val url = try {
            URL(prefix)
        } catch (e: java.net.MalformedURLException) {
            throw IllegalArgumentException("endpoint \"$endpoint\" is not a URL", e)
        }
        require(url.protocol == "http" || url.protocol == "https") { "endpoint \"$endpoint\" must be an http:// or https:// URL" }
    }

    override fun request(method: String, path: String, body: ByteArray?, headers: Map<String, String>): Response {
        val conn = try {
            URL(prefix + path).openConnection() as HttpURLConnection
        } catch (e: IOException) {
            throw TransportException("$prefix: ${e.javaClass.simpleName}: ${e.message}", e)
        }
        try {
            conn.requestMethod = method
            conn.instanceFollowRedirects = false   // a redirect is not the collector's answer: kept and retried
            conn.useCaches = false
            conn.connectTimeout = timeoutMs
            conn.readTimeout = timeoutMs
            // User-Agent first, then the request's own lines; useCaches = false adds Cache-Control and
            // Pragma, and the JVM appends Host, Connection and Content-Length: the vector's order
            conn.setRequestProperty("User-Agent", Http.USER_AGENT)
            for ((k, v) in headers) if (!k.equals("User-Agent", ignoreCase = true)) conn.setRequestProperty(k, v)
            if (body != null) {
                conn.doOutput = true
                conn.setFixedLengthStreamingMode(body.size)
                conn.outputStream.use { it.write(body) }
            }
            val status = conn.responseCode
            val stream: InputStream? = if (status >= 400) conn.errorStream else conn.inputStream
            val gzip = conn.contentEncoding.equals("gzip", ignoreCase = true)   // a file domain, as asked
            val data = stream?.use { readAll(if (gzip) java.util.zip.GZIPInputStream(it) else it) } ?: ByteArray(0)
            val hdrs = HashMap<String, String>()
            for ((k, v) in conn.headerFields) if (k != null && v != null && v.isNotEmpty()) hdrs[k.lowercase()] = v[0]
            return Response(status, hdrs, data)
        } catch (e: IOException) {
            throw TransportException("$prefix: ${e.javaClass.simpleName}: ${e.message}", e)
        } finally {
            conn.disconnect()
        }
    }

    private fun readAll(input: InputStream): ByteArray {
        val out = ByteArrayOutputStream()
        val buf = ByteArray(8192)
        var total = 0
        while (true) {
            val n = input.read(buf)
            if (n < 0) return out.toByteArray()
            total += n
            if (total > MAX_RESPONSE) throw IOException("response larger than $MAX_RESPONSE bytes")
            out.write(buf, 0, n)
        }
    }
}

/** The largest answer the SDK reads (the registry, a domain list, an ack). */
private const val MAX_RESPONSE = 4 * 1024 * 1024

/**
 * Exponential back-off with jitter; the server's Retry-After wins when present. Attempt k waits
 * d/2 + U(0, d/2) seconds, d = min(maximum, initial·multiplier^(k−1)); while the app flushes,
 * waits are capped at [flushInterval]. Seconds, as client_sdk/uploader.py's RetryPolicy.
 */
class RetryPolicy @JvmOverloads constructor(
    val initial: Double = 1.0,
    val maximum: Double = 300.0,
    val multiplier: Double = 2.0,
    val maxRetryAfter: Double = 3600.0,
    val flushInterval: Double = 1.0,
) {
    /** Seconds before attempt [attempt] + 1 (jitter from the CSPRNG, like every SDK draw). */
    fun delay(attempt: Int, retryAfter: Double?, random: SecureRandom): Double {
        if (retryAfter != null) return minOf(maxOf(retryAfter, 0.0), maxRetryAfter)
        val nominal = minOf(maximum, initial * Math.pow(multiplier, maxOf(0, attempt - 1).toDouble()))
        return nominal / 2 + random.nextDouble() * nominal / 2
    }
}
