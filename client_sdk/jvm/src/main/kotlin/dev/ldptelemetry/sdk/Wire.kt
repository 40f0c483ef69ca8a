package dev.ldptelemetry.sdk

/**
 * Wire format v1 (docs/wire-format.md): one msgpack map {v, batch_id, reports: [{m, f, p}], d?},
 * byte for byte the Python reference's (conformance/vectors/batches.json).
 */
internal object Wire {
    const val VERSION = 1L
    const val BATCH_ID_BYTES = 16

    /** The body of one batch; [dimensions] (public, in clear) go as the batch's `d` map when not empty. */
    fun packBatch(reports: List<WireReport>, batchId: ByteArray, dimensions: Map<String, String> = noMap()): ByteArray {
        require(batchId.size == BATCH_ID_BYTES) { "a batch id is $BATCH_ID_BYTES bytes" }
        val doc = LinkedHashMap<String, Any?>()
        doc["v"] = VERSION
        doc["batch_id"] = batchId
        doc["reports"] = reports.mapped { mapOfPairs<String, Any?>("m" to it.m, "f" to it.f, "p" to it.p) }
        if (dimensions.isNotEmpty()) doc["d"] = LinkedHashMap(dimensions)
        return Msgpack.pack(doc)
    }

    /** The reports and dimensions of a batch body written by [packBatch]. */
    fun unpackBatch(body: ByteArray): Pair<List<WireReport>, Map<String, String>> {
        val doc = Msgpack.unpack(body) as? Map<*, *> ?: throw IllegalArgumentException("not a wire-format batch")
        val reports = (doc["reports"] as? List<*> ?: throw IllegalArgumentException("not a wire-format batch")).mapped {
            val r = it as Map<*, *>
            WireReport(r["m"] as String, r["f"] as String, r["p"]!!)
        }
        @Suppress("UNCHECKED_CAST")
        val dims = (doc["d"] as? Map<String, String>) ?: noMap()
        return reports to dims
    }
}

/** One randomised report as it goes on the wire: metric, fingerprint, payload. */
internal class WireReport(val m: String, val f: String, val p: Any)

/** Test support: a batch body decoded (the id as hex, the reports, the dimensions). */
internal object BatchDecoding {
    fun decode(body: ByteArray): Triple<String, List<Map<String, Any?>>, Map<String, Any?>> {
        val doc = Msgpack.unpack(body) as Map<*, *>
        @Suppress("UNCHECKED_CAST")
        val reports = (doc["reports"] as List<Map<String, Any?>>)
        @Suppress("UNCHECKED_CAST")
        return Triple(Hashing.hex(doc["batch_id"] as ByteArray), reports, (doc["d"] as? Map<String, Any?>) ?: noMap())
    }
}
