package dev.ldptelemetry.sdk

import dev.ldptelemetry.sdk.testing.ByteSource

/**
 * The checks of the conformance vectors (docs/conformance.md), each returning its failures
 * (empty when the SDK conforms). Every expected value comes from the vectors; nothing is restated.
 */
object ConformanceChecks {
    private fun secrets(doc: Map<String, Any?>): List<ByteArray> = doc["secrets"].l().map { Hashing.unhex(it as String) }

    private fun ctx(secret: ByteArray, metric: String, day: Long = 0, random: RandomSource = SecureRandomSource()) =
        Context(Device(secret), metric, day, random)

    fun derivations(der: Map<String, Any?>): List<String> {
        val f = Failures()
        val s = secrets(der)
        for (c in der["text"].l().map { it.m() }) f.eq(Hashing.hex(Hashing.utf8(c["text"] as String)), c["utf8"], "utf8 ${c["text"]}")
        for (c in der["below64"].l().map { it.m() }) {
            val u = (c["word"] as? String)?.toULong() ?: c["word"].n().toULong()
            f.eq(reduce64(u, c["h"].n()), c["value"] ?: -1L, "BELOW h=${c["h"]} u=${c["word"]}")
        }
        for (c in der["ledger_key"].l().map { it.m() }) f.eq(Hashing.hex(Hashing.ledgerKey(s[c["secret"].n().toInt()])), c["key"], "ledger key")
        for (c in der["value_digest"].l().map { it.m() }) {
            f.eq(Hashing.valueDigest(Hashing.ledgerKey(s[c["secret"].n().toInt()]), c["fingerprint"] as String, c["key"] as String),
                c["digest"], "digest ${c["key"]}")
        }
        for (c in der["cohort"].l().map { it.m() }) {
            f.eq(Hashing.deriveCohort(s[c["secret"].n().toInt()], c["scope"] as String, c["m"].n()), c["cohort"], "cohort ${c["scope"]} m=${c["m"]}")
        }
        for (c in der["prr"].l().map { it.m() }) {
            val secret = s[c["secret"].n().toInt()]
            f.eq(Hashing.hex(Hashing.prrKey(secret, c["metric"] as String, c["value"] as String)), c["key"], "PRR key ${c["value"]}")
            f.eq(Hashing.prrWords(secret, c["metric"] as String, c["value"] as String, c["k"].n().toInt()), c["words"], "PRR words ${c["value"]}")
        }
        for (c in der["bloom"].l().map { it.m() }) {
            f.eq(Hashing.bloomBits(c["value"] as String, c["cohort"].n().toInt(), c["k"].n().toInt(), c["h"].n().toInt()), c["bits"], "Bloom $c")
        }
        for (c in der["memo"].l().map { it.m() }) {
            val secret = s[c["secret"].n().toInt()]
            val metric = c["metric"] as String
            val key = c["key"] as String
            f.eq(Hashing.hex(Hashing.memoKey(secret, metric, key)), c["memo_key"], "memo key $key")
            val words = MemoStream(secret, metric, key)
            f.eq(List(c["words"].l().size) { words.word() }, c["words"], "memo words $key")
            val draws = MemoStream(secret, metric, key)
            for (d in c["draws"].l().map { it.m() }) f.eq(draws.below(d["below"].n()), d["value"], "memo below(${d["below"]}) $key")
        }
        for (c in der["olh_hash"].l().map { it.m() }) {
            f.eq(Hashing.olhHash(c["cohort"].n().toInt(), c["value"].n().toInt(), c["g"].n().toInt()), c["bucket"], "OLH hash $c")
        }
        for (c in der["projective"].l().map { it.m() }) {
            val g = c["g"].n()
            val t = c["t"].n().toInt()
            f.eq(Projective.directionCode(c["s"].n(), g, t), c["code"], "direction ${c["s"]} g=$g t=$t")
            var gt = 1L
            repeat(t) { gt *= g }
            val step = maxOf(1L, gt / 16)
            c["inner"].l().forEachIndexed { i, want -> f.eq(Projective.inner(c["code"].n(), i * step, g), want, "inner ${c["code"]}·${i * step}") }
        }
        for (c in der["discover"].l().map { it.m() }) {
            val b = Hashing.utf8(c["value"] as String)
            val ml = c["max_length"].n().toInt()
            val level = c["level"].n().toInt()
            val cut = if (b.size > ml) b.copyOf(ml) else b
            val key = if (cut.size >= level) byteArrayOf(1) + cut.copyOf(level) else byteArrayOf(2) + cut
            f.eq(Hashing.hex(key), c["key_bytes"], "discover key ${c["value"]} level $level")
            // the encoder's own key function (group t has level min(t + 1, max_length))
            if (level < ml) f.eq(Hashing.hex(DiscoverEncoder.discoverKey(b, ml, level - 1)), c["key_bytes"], "discoverKey ${c["value"]}")
            val fp = Hashing.discoverFingerprint(key)
            f.eq(fp.toString(), c["fingerprint"], "discover fingerprint ${c["key_bytes"]}")
            for (bk in c["buckets"].l().map { it.m() }) {
                f.eq(Hashing.discoverBucket(bk["seed"].n().toInt(), fp, bk["g"].n().toInt()), bk["bucket"], "discover bucket $bk")
            }
        }
        for (c in der["discover_fingerprint"].l().map { it.m() }) {
            f.eq(Hashing.discoverFingerprint(Hashing.unhex(c["key_bytes"] as String)).toString(), c["fingerprint"], "BLAKE2b-64 of ${c["key_bytes"]}")
        }
        return f.list
    }

    private fun block(registry: Map<String, Any?>, name: String): Map<String, Any?> =
        registry["metrics"].l().map { it.m() }.first { it["name"] == name }["encoder"].m()

    fun roundings(registry: Map<String, Any?>, rounding: Map<String, Any?>, secretsHex: List<Any?>): List<String> {
        val f = Failures()
        for (c in rounding["randomised"].l().map { it.m() }) {
            val b = block(registry, c["metric"] as String)
            val range = b["range"].l().map { it.asDouble("range") }
            val lo = range[0]
            val hi = range[1]
            val value = c["value"].asDouble("value")
            val x = Math.min(hi, Math.max(lo, value))
            f.eq((x - lo) * (2.0 / (hi - lo)) - 1.0, c["t"], "t of ${c["metric"]} $value")
            val w = c["word"].n()
            val src = ByteSource(byteArrayOf(w.toByte(), (w shr 8).toByte(), (w shr 16).toByte(), (w shr 24).toByte()))
            f.eq(discretise(c["t"].asDouble("t"), b["grid"].n().toInt(), src), c["index"], "rounding ${c["metric"]} t=${c["t"]} word=$w")
            f.eq(src.consumed, 4, "rounding consumes one word")
        }
        for (c in rounding["alpha_point"].l().map { it.m() }) {
            val hex = secretsHex.getOrNull(c["secret"].n().toInt()) as String?
            if (hex != null) f.eq(MemoStream(Hashing.unhex(hex), c["metric"] as String, "alpha").word(), c["alpha_word"], "alpha word ${c["secret"]}")
            f.eq(alphaRound(c["t"].asDouble("t"), block(registry, c["metric"] as String)["grid"].n().toInt(), c["alpha_word"].n()),
                c["index"], "alpha rounding ${c["metric"]} t=${c["t"]}")
        }
        return f.list
    }

    /** Every report vector: the given bytes are the only randomness, and all of them are consumed. */
    fun reports(registryText: String, reports: Map<String, Any?>): List<String> {
        val f = Failures()
        val registry = Registry.parse(registryText)
        val s = secrets(reports)
        val devices = s.map { Device(it) }
        val seen = java.util.TreeSet<String>()
        for (c in reports["cases"].l().map { it.m() }) {
            val what = "${c["metric"]} ${show(c["value"])} secret ${c["secret"]} day ${c["day"]} random ${(c["random"] as String).take(16)}"
            val metric = registry[c["metric"] as String]
            if (metric == null) {
                f.list.add("$what: metric not loaded")
                continue
            }
            val bytes = Hashing.unhex(c["random"] as String)
            val src = ByteSource(bytes)
            // a fresh Device per case for its caches' sake is not needed: derived values are deterministic
            val context = Context(devices[c["secret"].n().toInt()], metric.name, c["day"].n(), src)
            try {
                val found = metric.lookup(c["value"], context)
                if (found == null) {
                    f.list.add("$what: not found")
                    continue
                }
                f.eq(listOf(found.key, found.index, found.clipped, found.digest), listOf(c["key"], c["index"], c["clipped"], c["digest"]), what)
                f.eq(metric.encode(found, context), payloadFromJson(c["payload"]), "$what: payload")
                f.eq(src.consumed, bytes.size, "$what: bytes consumed")
            } catch (e: RuntimeException) {
                f.list.add("$what: $e")
            }
            seen.add(metric.name)
        }
        f.eq(seen.toList(), registry.names.sorted(), "metrics covered")
        return f.list
    }

    /** Memoised first-round responses and RAPPOR's PRR bits of given (secret, metric, value). */
    fun memo(registry: Map<String, Any?>, memo: Map<String, Any?>): List<String> {
        val f = Failures()
        val s = secrets(memo)
        for (c in memo["responses"].l().map { it.m() }) {
            val b = block(registry, c["metric"] as String)
            val secret = s[c["secret"].n().toInt()]
            val metric = c["metric"] as String
            val enc = encoderFor(b)
            f.eq(enc.memoKey(c["index"].n().toInt(), ctx(secret, metric)), c["key"], "memo key $metric ${c["index"]}")
            val m = MemoStream(secret, metric, c["key"] as String)
            val x = c["memo_input"].n()
            val got: Any = memoRound(enc, m, x)
            f.eq(got, c["response"], "memoised response $metric secret ${c["secret"]} index ${c["index"]}")
        }
        for (c in memo["prr"].l().map { it.m() }) {
            val b = block(registry, c["metric"] as String)
            val secret = s[c["secret"].n().toInt()]
            val k = b["k"].n().toInt()
            val cohort = Hashing.deriveCohort(secret, "rappor", b["m"].n().toInt())
            f.eq(cohort, c["cohort"], "RAPPOR cohort ${c["secret"]}")
            val bloom = Hashing.bloomBits(c["value"] as String, cohort, k, b["h"].n().toInt())
            f.eq(bloom, c["bloom"], "Bloom bits ${c["value"]}")
            val set = BooleanArray(k) { it in bloom }
            f.eq(prrBits(Hashing.prrWords(secret, c["metric"] as String, c["value"] as String, k), set, b["half_f_threshold"].n()),
                c["prr"], "PRR ${c["value"]} secret ${c["secret"]}")
        }
        return f.list
    }

    /** The memoised round of a two-round encoder on coins [m] for memo input [x] (an int or the bits). */
    internal fun memoRound(enc: Encoder, m: Coins, x: Long): Any = when (enc) {
        is LgrrEncoder -> memoGrr(m, x, enc.d, enc.p1)
        is LolohaEncoder -> memoGrr(m, x, enc.g, enc.p1)
        is LosueEncoder -> memoBits(m, enc.d) { if (it.toLong() == x) enc.p1 else enc.q1 }
        is DbitflipEncoder -> memoBits(m, enc.sampled) { if (it.toLong() == x) enc.p1 else TWO32 - enc.p1 }
        is MemoBitMeanEncoder -> enc.memoBit(x.toInt(), m)
        else -> error("not a memoised encoder")
    }

    /** A ledger charge from its vector form (the Python Charge's field names). */
    fun chargeFromJson(c: Map<String, Any?>) = Charge(
        metric = c["metric"] as String, fingerprint = c["fingerprint"] as String, day = c["day"].n(),
        epsilon = c["epsilon"].asDouble("epsilon"), epsilonLongitudinal = c["epsilon_longitudinal"]?.asDouble("e"),
        digest = c["digest"] as String?, reportsPerWindow = c["reports_per_window"].n().toInt(),
        lifetimeBudget = c["lifetime_budget"]?.asDouble("lb"), deviceWindowBudget = c["device_window_budget"]?.asDouble("dw"),
        deviceLifetimeBudget = c["device_lifetime_budget"]?.asDouble("dl"),
        windowCharges = c["window_charges"]?.m()?.let { w ->
            val cum = w["cumulative"].l()
            WindowCharges(DoubleArray(cum.size) { cum[it].asDouble("cumulative") }, w["slope"].asDouble("slope"))
        },
    )

    /** JSON with every object's keys sorted (the clock objects of the vectors and of the SDK). */
    private fun sorted(v: Any?): String {
        fun sort(x: Any?): Any? = when (x) {
            is Map<*, *> -> java.util.TreeMap(x.entries.associate { it.key as String to sort(it.value) })
            is List<*> -> x.map(::sort)
            else -> x
        }
        return show(sort(v))
    }

    /** An account in a canonical form (keys sorted, digests sorted). */
    private fun canonicalAccount(a: Any?): String {
        val sorted = java.util.TreeMap<String, Any?>()
        for ((k, v) in a.m()) {
            sorted[k] = if (k == "memo") java.util.TreeMap(v.m().mapValues { it.value.l().map { d -> d as String }.sorted() }) else v
        }
        return show(sorted)
    }

    /** ledger.json: every sequence of charges (or recorded refusals) with the elapsed reading of each
     *  step, each step's outcome, every account and the device clock after it; the version-1 books. */
    fun ledger(doc: Map<String, Any?>): List<String> {
        val failures = ArrayList<String>()
        for (seq in doc["sequences"].l().map { it.m() }) {
            val book = Book(Accounts(), null)
            val accounts = book.accounts
            seq["steps"].l().forEachIndexed { i, s ->
                val step = s.m()
                val elapsed = step["elapsed"].l()
                val reading = Reading(elapsed[0] as String, elapsed[1].n())
                val charge = chargeFromJson(step["charge"].m())
                if (step["record_refusal"] != null) {
                    Ledger.recordRefusal(book, charge, Refusal.values().first { it.wire == step["record_refusal"] }, step["count"].n(), reading)
                } else {
                    val outcome = Ledger.apply(book, charge, reading)
                    if (outcome?.wire != step["outcome"]) failures.add("ledger ${seq["label"]}, step $i: outcome ${outcome?.wire}, expected ${step["outcome"]}")
                }
                if (sorted(Ledger.clockJson(book)) != sorted(step["clock"])) {
                    failures.add("ledger ${seq["label"]}, step $i: clock differs: ${sorted(Ledger.clockJson(book))} vs ${sorted(step["clock"])}")
                }
                val want = step["accounts"].m()
                for (name in accounts.keys + want.keys) {
                    val got = accounts[name]?.toJson()
                    if (got == null || want[name] == null || canonicalAccount(got) != canonicalAccount(want[name])) {
                        failures.add("ledger ${seq["label"]}, step $i: account $name differs: ${got?.let(::canonicalAccount)} vs ${want[name]?.let(::canonicalAccount)}")
                    }
                }
            }
        }
        for ((i, m) in (doc["migrations"]?.l() ?: emptyList()).withIndex()) {
            val parsed = Ledger.parse(Json.write(m.m()["file"]), "migration $i")
            if (sorted(Ledger.clockJson(parsed)) != sorted(m.m()["clock"])) failures.add("ledger migration $i: clock differs")
        }
        return failures
    }

    /** batches.json: the exact bytes of each encoded batch. */
    fun batches(doc: Map<String, Any?>): List<String> {
        val failures = ArrayList<String>()
        doc["cases"].l().forEachIndexed { i, c0 ->
            val c = c0.m()
            val reports = c["reports"].l().map { r -> WireReport(r.m()["m"] as String, r.m()["f"] as String, payloadFromJson(r.m()["p"])!!) }
            @Suppress("UNCHECKED_CAST")
            val dims = (c["d"] as? Map<String, String>) ?: emptyMap()
            val body = Hashing.hex(Wire.packBatch(reports, Hashing.unhex(c["batch_id"] as String), dims))
            if (body != c["body"]) failures.add("batch $i: bytes differ: $body")
        }
        return failures
    }

    /** domains.json: numbered and file domains as published, the file's text checked by size and SHA-256, value → index. */
    fun domains(doc: Map<String, Any?>): List<String> {
        val f = Failures()
        val text = Json.write(doc["registry"])
        val texts = doc["domain_texts"].m()
        val lists = HashMap<String, List<String>>()
        for ((name, size, sha) in Registry.fileDomains(text)) {
            lists[name] = Registry.domainValues(texts[name] as String, name, size, sha)
            try {
                Registry.domainValues((texts[name] as String) + "extra\n", name, size, sha)
                f.list.add("domain $name: a changed text was accepted")
            } catch (e: RegistryException) {
                // refused, as it must be
            }
        }
        val reg = Registry.parse(text, noMap(), lists)
        for ((name, fp) in doc["fingerprints"].m()) f.eq(reg[name]?.fingerprint, fp, "fingerprint of $name")
        val ctx = Context(Device(ByteArray(32)), "", 20_000, SecureRandomSource())
        for (c in doc["lookups"].l().map { it.m() }) {
            val metric = reg[c["metric"] as String]!!
            f.eq(metric.lookup(c["value"], Context(ctx.device, metric.name, 20_000, ctx.random))?.index, c["index"], "lookup ${c["metric"]} ${show(c["value"])}")
        }
        return f.list
    }

    /** Every check above, over the seven files. */
    fun all(): List<String> {
        val registry = Vectors.doc("registry.json")["registry"].m()
        val der = Vectors.doc("derivations.json")
        return derivations(der) + roundings(registry, Vectors.doc("roundings.json"), der["secrets"].l()) +
            reports(Vectors.registryText, Vectors.doc("reports.json")) + memo(registry, Vectors.doc("memo.json")) +
            ledger(Vectors.doc("ledger.json")) + batches(Vectors.doc("batches.json")) + domains(Vectors.doc("domains.json"))
    }
}
