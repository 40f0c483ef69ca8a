package dev.ldptelemetry.sdk

/**
 * The registry as the collector publishes it (`GET /v1/registry`; docs/conformance.md): per
 * metric its published constants (fingerprint, ε per report, ε∞, limits) and an `encoder`
 * object holding every resolved integer of its protocol, the `[device]` caps and the public
 * `[dimensions]`. Nothing is re-derived here from ε: the Python reference derives the
 * thresholds once and every SDK encodes from the same integers.
 */
class Registry private constructor(
    private val metrics: Map<String, Metric>,
    /** The `[device]` caps (sums over all metrics), or null. */
    val device: DeviceCaps?,
    /** The public dimensions an app may attach in clear (docs/privacy.md, "Public dimensions"). */
    val dimensions: Map<String, DimensionSpec>,
    /** The document's text as published (cached in the state directory). */
    val text: String,
) {
    /** Metric names in the published order. */
    val names: List<String> get() = ArrayList(metrics.keys)

    /** The metric named [name], or null. */
    operator fun get(name: String): Metric? = metrics[name]

    companion object {
        /**
         * A registry from the published JSON document. [pins] maps metric names to the fingerprints
         * the app was built against: a published metric whose fingerprint differs, or a pinned metric
         * that is missing, is a [RegistryException].
         */
        @JvmStatic
        @JvmOverloads
        fun parse(json: String, pins: Map<String, String> = noMap(), domains: Map<String, List<String>> = noMap()): Registry {
            val doc = try {
                Json.parse(json) as? Map<*, *>
            } catch (e: JsonException) {
                throw RegistryException("the registry is not JSON (${e.message})", e)
            }
            val entries = doc?.get("metrics") as? List<*>
            if (entries == null || entries.isEmpty()) throw RegistryException("expected {\"metrics\": [...]} with at least one metric")
            val metrics = LinkedHashMap<String, Metric>()
            for (entry in entries) {
                @Suppress("UNCHECKED_CAST")
                val m = Metric(entry as? Map<String, Any?> ?: throw RegistryException("a metric entry is not an object"), domains)
                if (m.name in metrics) throw RegistryException("metric ${m.name}: field name: listed twice")
                val pin = pins[m.name]
                if (pin != null && pin != m.fingerprint) {
                    throw RegistryException("metric ${m.name} changed: fingerprint ${m.fingerprint}, the app is pinned to $pin")
                }
                metrics[m.name] = m
            }
            val missing = pins.keys.filter { it !in metrics }
            if (missing.isNotEmpty()) throw RegistryException("pinned metric(s) ${missing.joinToString(", ")} are not published")
            val dev = doc["device"] as? Map<*, *>
            val device = dev?.let {
                DeviceCaps(optionalNumber(it["epsilon_per_window"], "device.epsilon_per_window"),
                    optionalNumber(it["lifetime_epsilon"], "device.lifetime_epsilon"))
            }
            val dims = LinkedHashMap<String, DimensionSpec>()
            (doc["dimensions"] as? Map<*, *>)?.forEach { (name, sub) ->
                if (sub is Map<*, *>) {
                    val values = (sub["values"] as? List<*>)?.mapped { it.toString() }
                        ?: throw RegistryException("dimensions.$name.values must be a list")
                    dims[name as String] = DimensionSpec(name, values, sub["rule"] as? String ?: "exact")
                }
            }
            return Registry(metrics, device, dims, json)
        }

        /**
         * The file domains of a published document (`categories: {file, size, sha256}`), as
         * (metric, size, sha256): their values come from `GET /v1/registry/domains/{metric}`.
         */
        @JvmStatic
        fun fileDomains(json: String): List<Triple<String, Int, String>> {
            val out = ArrayList<Triple<String, Int, String>>()
            val metrics = (Json.parse(json) as? Map<*, *>)?.get("metrics") as? List<*> ?: return out
            for (e in metrics) {
                val c = (e as? Map<*, *>)?.get("categories") as? Map<*, *> ?: continue
                val sha = c["sha256"] as? String ?: continue
                out.add(Triple(e["name"] as String, (c["size"] as? Long ?: -1L).toInt(), sha))
            }
            return out
        }

        /** The values of a domain text (each followed by "\n") when it is the published one: its size and SHA-256. */
        @JvmStatic
        fun domainValues(text: String, metric: String, size: Int, sha256: String): List<String> {
            val values = ArrayList<String>()
            var start = 0
            while (start < text.length) {
                val end = text.indexOf('\n', start)
                if (end < 0) break
                values.add(text.substring(start, end))
                start = end + 1
            }
            val digest = Hashing.hex(java.security.MessageDigest.getInstance("SHA-256").digest(text.toByteArray(Charsets.UTF_8)))
            if (start != text.length || values.size != size || digest != sha256) {
                throw RegistryException("metric $metric: not the published domain list (size or SHA-256 differ)")
            }
            return values
        }

        private fun optionalNumber(v: Any?, what: String): Double? = try {
            v?.asDouble(what)
        } catch (e: IllegalArgumentException) {
            throw RegistryException(e.message!!)
        }
    }
}

/** The registry's `[device]` table: caps on the ledger's sums over all metrics (null: no cap). */
class DeviceCaps(val epsilonPerWindow: Double?, val lifetimeEpsilon: Double?)

/** One public dimension: its closed set of values and how a raw value is bucketed into it. */
class DimensionSpec(val name: String, val values: List<String>, val rule: String) {
    /** The value the device sends for [raw]: the rule applied, `other` outside the set. */
    fun bucket(raw: String): String {
        var text = raw.trim()
        if (rule != "exact") text = text.split('.').take(if (rule == "major") 1 else 2).joinToString(".")
        return if (text in values) text else "other"
    }
}

/** A value looked up in a metric's domain (the true value goes no further than [Metric.encode]). */
internal class Found(
    /** Canonical key (memoised protocols: the memo key the ledger counts once). */
    val key: String,
    /** Domain index, grid point or bucket. */
    val index: Int,
    /** A number outside the range (clipped) or a discover string truncated on the device. */
    val clipped: Boolean,
    /** HMAC(ledger key, fingerprint ‖ key), 32 hex: memoised metrics only, else null. */
    val digest: String?,
)

/** What the client needs of one metric: the budget constants the ledger charges, the lookup and the encoder. */
class Metric internal constructor(entry: Map<String, Any?>, domains: Map<String, List<String>>) {
    val name: String = entry["name"] as? String ?: throw RegistryException("a metric has no name")
    val kind: String = entry["kind"] as? String ?: throw RegistryException("metric $name: no kind")
    val fingerprint: String = entry["fingerprint"] as? String ?: throw RegistryException("metric $name: no fingerprint")
    /** ε per report (ε₁ for memoised protocols), as published (`epsilon_per_report`). */
    val epsilon: Double = number(entry["epsilon_per_report"], "epsilon_per_report")
    /** ε∞ of memoised protocols, else null. */
    val epsilonLongitudinal: Double? = entry["epsilon_longitudinal"]?.let { number(it, "epsilon_longitudinal") }
    val reportsPerWindow: Int = entry["reports_per_window"]?.let { number(it, "reports_per_window").toInt() } ?: 1
    val lifetimeEpsilon: Double? = entry["lifetime_epsilon"]?.let { number(it, "lifetime_epsilon") }
    /** The public dimensions this metric is broken down by. */
    val dimensions: List<String> = (entry["dimensions"] as? List<*>)?.mapped { it.toString() } ?: noList()

    @Suppress("UNCHECKED_CAST")
    private val block: Map<String, Any?> = entry["encoder"] as? Map<String, Any?>
        ?: throw RegistryException("metric $name: no encoder object (the collector is older than this SDK)")
    internal val encoder: Encoder = try {
        encoderFor(block)
    } catch (e: RegistryException) {
        throw RegistryException("metric $name: ${e.message}", e)
    } catch (e: RuntimeException) {
        throw RegistryException("metric $name: the encoder object is malformed (${e.message})", e)
    }
    /** What k reports cost in one window where that exceeds k·ε₁ (the encoder block's `window_charges`). */
    val windowCharges: WindowCharges? = (block["window_charges"] as? Map<*, *>)?.let { w ->
        val c = w["cumulative"] as? List<*> ?: throw RegistryException("metric $name: window_charges has no cumulative list")
        WindowCharges(DoubleArray(c.size) { number(c[it], "window_charges") }, number(w["slope"], "window_charges"))
    }
    /** The published protocol of the encoder (rr, grr, …, memobitmean). */
    val protocol: String = block["protocol"] as String
    private val index = HashMap<String, Int>()
    /** A numbered domain's size (values are the ids 0 … d−1), else 0. */
    private val ids: Long
    private val edges: DoubleArray?
    private val labels: List<String>
    private val lo: Double
    private val hi: Double
    private val grid: Int
    private val maxLength: Int?

    init {
        val categories = entry["categories"]
        ids = if (kind == "categorical" && categories is Map<*, *>) (categories["ids"] as? Long ?: 0L) else 0L
        val domain = when {
            kind == "boolean" -> listOfAll("false", "true")
            kind != "categorical" || ids > 0 -> noList()
            categories is List<*> -> categories.mapped { it.toString() }
            else -> domains[name] ?: throw RegistryException("metric $name: no domain list (a file domain not fetched)")
        }
        domain.forEachIndexed { i, v -> index[v] = i }
        val size = if (ids > 0) ids else domain.size.toLong()
        if ((kind == "categorical" || kind == "boolean") && block["d"] != size) {   // GRR at a larger d: a larger ε
            throw RegistryException("metric $name: field d: the encoder block is over d = ${block["d"]} values, the domain has $size")
        }
        edges = (block["edges"] as? List<*>)?.let { list -> DoubleArray(list.size) { number(list[it], "encoder.edges") } }
        labels = edges?.let { e ->
            val text = Array(e.size) { edgeText(e[it]) }
            List(text.size - 1) { i -> "[${text[i]}, ${text[i + 1]}${if (i == text.size - 2) "]" else ")"}" }
        } ?: noList()
        val range = (block["range"] as? List<*>)?.mapped { number(it, "encoder.range") }
        lo = range?.get(0) ?: edges?.get(0) ?: 0.0
        hi = range?.get(1) ?: edges?.let { it[it.size - 1] } ?: 0.0
        grid = (block["grid"] as? Long)?.toInt() ?: 0
        maxLength = (block["max_length"] as? Long)?.toInt()
        if (kind == "numeric" && edges == null && range == null) throw RegistryException("metric $name: a numeric encoder needs range or edges")
    }

    private fun number(v: Any?, what: String): Double = try {
        v.asDouble(what)
    } catch (e: IllegalArgumentException) {
        throw RegistryException("metric $name: ${e.message}")
    }

    private fun found(key0: String, index: Int, clipped: Boolean, c: Context): Found {
        val key = encoder.memoKey(index, c) ?: key0
        val digest = if (epsilonLongitudinal == null) null else Hashing.valueDigest(c.device.ledgerKey, fingerprint, key)
        return Found(key, index, clipped, digest)
    }

    /** The value in this metric's domain, or null when it cannot be reported. */
    internal fun lookup(value: Any?, c: Context): Found? {
        when (kind) {
            "string" -> {
                if (value !is String) return null
                val clipped = maxLength != null && Hashing.utf8(value).size > maxLength
                return found(value, -1, clipped, c)
            }
            "numeric" -> {
                if (value !is Number || value is Boolean) return null
                val v = value.toDouble()
                if (!v.isFinite()) return null
                val clipped = v < lo || v > hi
                val x = if (v < lo) lo else if (v > hi) hi else v
                val e = edges
                if (e != null) {
                    var i = 0   // bisect right over the inner edges
                    while (i + 2 < e.size && e[i + 1] <= x) i++
                    return found(labels[i], i, clipped, c)
                }
                val t = (x - lo) * (2.0 / (hi - lo)) - 1.0
                val j = if (encoder is MemoBitMeanEncoder) alphaRound(t, grid, alphaWord(c)) else discretise(t, grid, c.random)
                return found("", j, clipped, c)
            }
        }
        val key: String? = when {
            value is String -> if (kind == "boolean") value.trimmed().lowercase() else value
            kind == "boolean" && value is Boolean -> if (value) "true" else "false"
            kind == "boolean" && isIntegral(value) && ((value as Number).toLong() == 0L || value.toLong() == 1L) ->
                if (value.toLong() == 1L) "true" else "false"
            isIntegral(value) -> (value as Number).toLong().toString()
            else -> null
        }
        val i = (if (ids > 0) key?.let(::idOf) else key?.let { index[it] }) ?: return null
        return found(key!!, i, false, c)
    }

    /** A numbered domain's index of [key]: its canonical decimal text ("17"; not "017", "-1", " 5", "1e3") below d. */
    private fun idOf(key: String): Int? {
        if (key.isEmpty() || key.length > 19 || (key[0] == '0' && key.length > 1)) return null
        for (ch in key) if (ch !in '0'..'9') return null
        val v = parseLongOrNull(key) ?: return null
        return if (v < ids) v.toInt() else null
    }

    private fun isIntegral(v: Any?): Boolean = v is Long || v is Int || v is Short || v is Byte

    /** The randomised wire payload of a found value (CSPRNG; memoised parts from the secret). */
    internal fun encode(found: Found, c: Context): Any = encoder.encode(found.index, found.key, c)

}

/** An edge as a bucket label writes it (Python's int, or float repr). */
private fun edgeText(x: Double): String = if (x == Math.floor(x) && Math.abs(x) < 1e15) x.toLong().toString() else Json.pyRepr(x)
