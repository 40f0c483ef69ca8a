package dev.ldptelemetry.sdk.sealed

import dev.ldptelemetry.sdk.BatchSender
import dev.ldptelemetry.sdk.Http
import dev.ldptelemetry.sdk.HttpUrlTransport
import dev.ldptelemetry.sdk.Json
import dev.ldptelemetry.sdk.Response
import dev.ldptelemetry.sdk.StoredBatch
import dev.ldptelemetry.sdk.Transport
import dev.ldptelemetry.sdk.TransportException
import dev.ldptelemetry.sdk.WallClock
import java.security.SecureRandom

/**
 * Sealed batches (docs/wire-format.md, "Sealed batches"; client_sdk/sealing.py's Sealer): give
 * one to [dev.ldptelemetry.sdk.ClientOptions.seal]. Each batch is sealed once, to the
 * collector's key configuration (fetched from `GET /.well-known/ohttp-gateway` and kept a day,
 * or pinned with `keyConfig`: the bytes of an `application/ohttp-keys` document, e.g. the
 * base64 `ldpt keys config` prints, decoded), its envelope stored with the batch before the
 * first send, so every retry sends the same bytes.
 *
 * - [gateway]: POST to the collector's own gateway (`{endpoint}/.well-known/ohttp-gateway`);
 * - [relay]: POST to an Oblivious HTTP relay's URL, which forwards to the gateway (the collector
 *   never sees the device's address);
 * - [shuffler]: POST to `ldpt shuffle`; its acknowledgement (202 `{"stored": true}`) settles the batch.
 *
 * The collector's answer inside the encapsulated response settles a batch as a plain answer
 * would (ack, retry, final refusal). A clear 400 with RFC 9458's key problem type means the key
 * rotated: the batch is sealed again to a freshly fetched key, once (not with a pinned key).
 */
class Seal private constructor(
    val mode: String,
    val url: String?,
    keyConfig: ByteArray?,
    post: Transport?,
    private val clock: WallClock,
) : BatchSender {
    private val given: KeyConfig? = keyConfig?.let { Ohttp.choose(Ohttp.decodeKeyConfigs(it)) }   // malformed: fails here, at start
    private val post: Transport? = post ?: url?.let { HttpUrlTransport(it) }
    private val random = SecureRandom()
    private var fetched: KeyConfig? = null
    private var fetchedAt = 0L
    private val counts = LongArray(4)

    /** sealed, resealed (after a key problem), key_fetches, undecryptable_answers. */
    @Synchronized
    fun stats(): Map<String, Long> = linkedMapOf("sealed" to counts[0], "resealed" to counts[1],
        "key_fetches" to counts[2], "undecryptable_answers" to counts[3])

    /** The key configuration to seal to: pinned, or fetched (TransportException when it cannot be: the batch waits). */
    @Synchronized
    private fun config(collector: Transport, refresh: Boolean): KeyConfig {
        given?.let { return it }
        val now = clock.currentTimeMillis()
        fetched?.let { if (!refresh && now - fetchedAt in 0 until KEY_CONFIG_TTL_MS) return it }
        counts[2]++
        val resp = collector.request("GET", Ohttp.GATEWAY_PATH, null, Http.KEYS_HEADERS)
        val type = resp.headers["content-type"]?.substringBefore(';')?.trim()?.lowercase()
        if (resp.status != 200 || type != Ohttp.KEYS_TYPE) {
            throw TransportException("the collector answered ${resp.status} (${type ?: "no type"}) to GET ${Ohttp.GATEWAY_PATH}: no key configuration to seal to")
        }
        val config = try {
            Ohttp.choose(Ohttp.decodeKeyConfigs(resp.body))
        } catch (e: OhttpException) {
            throw TransportException("the collector's key configuration is unusable: ${e.message}")
        }
        fetched = config
        fetchedAt = now
        return config
    }

    private fun sealBody(body: ByteArray, config: KeyConfig, keep: (ByteArray) -> Unit): SealedRequest {
        val sealed = Ohttp.sealRequest(config, Ohttp.innerRequest(body), random)
        synchronized(this) { counts[0]++ }
        keep(container(body, sealed))
        return sealed
    }

    override fun send(batch: StoredBatch, collector: Transport, keep: (ByteArray) -> Unit): Response {
        var sealed = batch.sealed?.let(::parseContainer) ?: sealBody(batch.body, config(collector, false), keep)
        val target = post ?: collector
        val path = if (post == null) Ohttp.GATEWAY_PATH else ""
        var resealed = false
        while (true) {
            val resp = target.request("POST", path, sealed.envelope, Http.SEALED_HEADERS)
            if (!resealed && given == null && isKeyProblem(resp)) {   // the key rotated beyond its overlap: once, anew
                sealed = sealBody(batch.body, config(collector, true), keep)
                synchronized(this) { counts[1]++ }
                resealed = true
                continue
            }
            return if (mode == SHUFFLER) Http.fromShuffler(resp, batch.reports) else inner(sealed, resp)
        }
    }

    /** The collector's answer inside an encapsulated response (or [resp] itself when it is not one). */
    private fun inner(sealed: SealedRequest, resp: Response): Response {
        val type = resp.headers["content-type"]?.substringBefore(';')?.trim()?.lowercase()
        if (resp.status != 200 || type != Ohttp.RESPONSE_TYPE) return resp
        val inner = try {
            Ohttp.decodeResponse(Ohttp.openResponse(sealed, resp.body))
        } catch (e: OhttpException) {
            synchronized(this) { counts[3]++ }
            return Response(200, mapOf("content-type" to "text/plain"), "an answer that does not open".toByteArray())   // not the collector's: retried
        }
        val headers = LinkedHashMap<String, String>()
        for ((k, v) in inner.headers) if (k !in headers) headers[k] = String(v, Charsets.ISO_8859_1)
        return Response(inner.status, headers, inner.content)
    }

    companion object {
        private const val GATEWAY = "gateway"
        private const val RELAY = "relay"
        private const val SHUFFLER = "shuffler"
        /** A fetched key configuration is used this long before it is fetched again (client_sdk/sealing.py's KEY_CONFIG_TTL). */
        const val KEY_CONFIG_TTL_MS = 86_400_000L
        private val MAGIC = "\u0000ldpt-sealed-1\n".toByteArray(Charsets.ISO_8859_1)
        private val SYSTEM = WallClock { System.currentTimeMillis() }

        /** To the collector's own gateway. */
        @JvmStatic @JvmOverloads
        fun gateway(keyConfig: ByteArray? = null, clock: WallClock = SYSTEM) = Seal(GATEWAY, null, keyConfig, null, clock)

        /** Through an Oblivious HTTP relay at [url] (or [transport], e.g. a test double, instead of HTTP to it). */
        @JvmStatic @JvmOverloads
        fun relay(url: String, keyConfig: ByteArray? = null, transport: Transport? = null, clock: WallClock = SYSTEM) =
            Seal(RELAY, url, keyConfig, transport, clock)

        /** To a shuffler (`ldpt shuffle`) at [url]. */
        @JvmStatic @JvmOverloads
        fun shuffler(url: String, keyConfig: ByteArray? = null, transport: Transport? = null, clock: WallClock = SYSTEM) =
            Seal(SHUFFLER, url, keyConfig, transport, clock)

        /** A gateway's (or shuffler's) clear 400 saying the envelope's key is unknown (RFC 9458 §5.3). */
        @JvmStatic
        fun isKeyProblem(resp: Response): Boolean =
            resp.status == 400 && (resp.json() as? Map<*, *>)?.get("type") == Ohttp.KEY_PROBLEM_TYPE

        /** The stored form of a sealed batch (client_sdk/queue.py's): MAGIC, 4-byte lengths and parts, the key id. */
        fun container(body: ByteArray, s: SealedRequest): ByteArray {
            val out = java.io.ByteArrayOutputStream(body.size + s.envelope.size + 100)
            out.write(MAGIC)
            for (p in arrayOf(body, s.envelope, s.enc, s.secret)) {
                out.write(p.size ushr 24); out.write(p.size ushr 16); out.write(p.size ushr 8); out.write(p.size)
                out.write(p)
            }
            out.write(s.keyId)
            return out.toByteArray()
        }

        /** The sealed request of a stored container (null when it is not one). */
        fun parseContainer(raw: ByteArray): SealedRequest? {
            if (raw.size < MAGIC.size || !raw.copyOfRange(0, MAGIC.size).contentEquals(MAGIC)) return null
            var at = MAGIC.size
            val parts = ArrayList<ByteArray>()
            for (i in 0 until 4) {
                if (at + 4 > raw.size) return null
                val n = ((raw[at].toInt() and 0xff) shl 24) or ((raw[at + 1].toInt() and 0xff) shl 16) or
                    ((raw[at + 2].toInt() and 0xff) shl 8) or (raw[at + 3].toInt() and 0xff)
                at += 4
                if (n < 0 || n > raw.size - at) return null
                parts.add(raw.copyOfRange(at, at + n))
                at += n
            }
            if (at + 1 != raw.size) return null
            return SealedRequest(parts[1], parts[2], parts[3], raw[at].toInt() and 0xff)
        }
    }
}
