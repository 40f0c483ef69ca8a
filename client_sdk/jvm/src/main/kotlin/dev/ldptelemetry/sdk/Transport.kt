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

    /**
     * Seconds to wait from `Retry-After` or the problem's `retry_after` member (null: neither). The
     * header is delay-seconds (ASCII digits, a decimal fraction allowed) or an HTTP-date (RFC 9110
     * §10.2.3: IMF-fixdate, RFC 850 or asctime; it starts with a day name, and a date in the past
     * means now); any other value is ignored, as is a member that is not a finite number: garbage
     * from a proxy must not turn into "retry at once" (conformance/vectors/delivery.json).
     */
    fun retryAfter(nowMillis: Long): Double? {
        val raw = headers["retry-after"]
        if (raw != null) {
            val text = raw.trim()
            delaySeconds(text)?.let { return it }
            if (text.length >= 3 && asciiLetter(text[0]) && asciiLetter(text[1]) && asciiLetter(text[2])) {
                httpDate(text)?.let { return maxOf(0.0, (it - nowMillis) / 1000.0) }
            }
        }
        val member = (json() as? Map<*, *>)?.get("retry_after")
        return if (member is Number && member.toDouble().isFinite()) maxOf(0.0, member.toDouble()) else null
    }

    private fun asciiLetter(c: Char): Boolean = c in 'a'..'z' || c in 'A'..'Z'

    private fun digits(s: String, from: Int, to: Int): Boolean {
        if (from >= to) return false
        for (i in from until to) if (s[i] !in '0'..'9') return false
        return true
    }

    /** "120" or "1.5": digits, then optionally a dot and digits (no sign, exponent, or bare dot). */
    private fun delaySeconds(text: String): Double? {
        val dot = text.indexOf('.')
        val ok = if (dot < 0) digits(text, 0, text.length) else digits(text, 0, dot) && digits(text, dot + 1, text.length)
        return if (ok) text.toDouble() else null
    }

    /** Milliseconds since the epoch of an HTTP-date in any of its three forms (always GMT), or null. */
    private fun httpDate(text: String): Long? {
        // RFC 9110 §5.6.7: IMF-fixdate, the obsolete RFC 850 form, and ANSI C's asctime()
        for (pattern in arrayOf("EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy")) {
            val format = java.text.SimpleDateFormat(pattern, java.util.Locale.US)
            format.timeZone = java.util.TimeZone.getTimeZone("GMT")
            format.isLenient = false
            val at = java.text.ParsePosition(0)
            val date = format.parse(text, at)
            if (date != null && at.index == text.length) return date.time
        }
        return null
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

    /**
     * A shuffler's answer to a batch as the client settles it (Seal.shuffler): its acknowledgement,
     * 202 `{"stored": true}`, as the collector's ack of the batch's [reports] (a duplicate counted as
     * one); any other 2xx — a collector's 200 ack included, which says nothing of the shuffler — as
     * an answer that is not the collector's (kept, retried with the same bytes); problems and
     * errors as they are (docs/wire-format.md, "Forwarding: shuffled batches").
     */
    fun fromShuffler(resp: Response, reports: Int): Response {
        val doc = resp.json() as? Map<*, *>
        if (resp.status == 202 && doc?.get("stored") == true) {
            val ack = "{\"accepted\": $reports, \"duplicate\": ${doc["duplicate"] == true}, \"shuffled\": true}"
            return Response(200, mapOfPairs("content-type" to "application/json"), ack.toByteArray(Charsets.UTF_8))
        }
        if (resp.status in 200..299) return Response(200, mapOfPairs("content-type" to "text/plain"), "not the shuffler's acknowledgement".toByteArray(Charsets.UTF_8))
        return resp
    }

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
    fun delay(attempt: Int, retryAfter: Double?, random: SecureRandom): Double = delay(attempt, retryAfter, random.nextDouble())

    /** The delay for the jitter draw [u] in [0, 1) (conformance/vectors/delivery.json's retry_delays). */
    internal fun delay(attempt: Int, retryAfter: Double?, u: Double): Double {
        if (retryAfter != null) return minOf(maxOf(retryAfter, 0.0), maxRetryAfter)
        // after ~1,000 failures (days offline at the defaults) the power overflows: the nominal delay is then
        // the maximum, and no cap on the exponent (with a multiplier near 1 it would stop the growth early)
        val power = Math.pow(multiplier, maxOf(0, attempt - 1).toDouble())
        val nominal = if (power.isInfinite()) maximum else minOf(maximum, initial * power)
        return nominal / 2 + u * nominal / 2
    }
}
