package dev.ldptelemetry.sdk

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * conformance/vectors/invalid_blocks.json (docs/conformance.md, "Checks an SDK applies to a
 * block"): every inconsistent block is refused when the registry builds its encoder, with a
 * RegistryException naming the metric and the member; registry.json itself parses.
 */
class InvalidBlocksTest {
    private val registry = Vectors.doc("registry.json")["registry"].m()

    @Test
    fun `the published registry's blocks pass the checks`() {
        assertEquals(registry["metrics"].l().size, Registry.parse(Vectors.registryText).names.size)
    }

    @Test
    fun `every inconsistent block is refused naming its metric and member`() {
        val failures = mutableListOf<String>()
        for (case in Vectors.doc("invalid_blocks.json")["cases"].l().map { it.m() }) {
            val metrics = registry["metrics"].l().map { e ->
                val entry = e.m()
                if (entry["name"] == case["metric"]) LinkedHashMap(entry).also { it["encoder"] = case["block"] } else entry
            }
            val doc = LinkedHashMap(registry).also { it["metrics"] = metrics }
            val message = try {
                Registry.parse(Json.write(doc))
                null
            } catch (e: RegistryException) {
                e.message
            }
            val want = "metric ${case["metric"]}: field ${case["field"]}: "
            if (message == null || !message.startsWith(want)) failures.add("${case["reason"]}: $message (want $want…)")
        }
        assertTrue(failures.isEmpty(), failures.joinToString("\n"))
    }

    @Test
    fun `a block over another domain than its metric's is refused`() {
        // GRR at d = 2^40 for five themes keeps the value with the published p but spreads the rest
        // over 2^40 values: ε ≈ 28 where the ledger charges the published ε
        for ((metric, d) in listOf("theme" to (1L shl 40), "theme" to 6L, "theme" to 4L, "crash" to 3L, "country" to 41L)) {
            val metrics = registry["metrics"].l().map { e ->
                val entry = e.m()
                if (entry["name"] != metric) entry
                else LinkedHashMap(entry).also { it["encoder"] = LinkedHashMap(entry["encoder"].m()).also { b -> b["d"] = d } }
            }
            val doc = LinkedHashMap(registry).also { it["metrics"] = metrics }
            val e = assertThrows(RegistryException::class.java) { Registry.parse(Json.write(doc)) }
            assertTrue(e.message!!.startsWith("metric $metric: field d: "), "$metric at d = $d: ${e.message}")
        }
    }

    @Test
    fun `a metric listed twice is refused, not overwritten by the later entry`() {
        val metrics = registry["metrics"].l()
        val doc = LinkedHashMap(registry).also { it["metrics"] = metrics + metrics.first { e -> e.m()["name"] == "theme" } }
        val e = assertThrows(RegistryException::class.java) { Registry.parse(Json.write(doc)) }
        assertEquals("metric theme: field name: listed twice", e.message)
    }

    @Test
    fun `an integer member must be a JSON integer, a threshold within 2^32`() {
        val theme = registry["metrics"].l().map { it.m() }.first { it["name"] == "theme" }
        for ((member, value) in listOf("d" to 5.0, "d" to true, "d" to "5", "keep_threshold" to 3.0e9,
                "keep_threshold" to (1L shl 32) + 1, "keep_threshold" to -1L)) {
            val block = LinkedHashMap(theme["encoder"].m()).also { it[member] = value }
            val e = assertThrows(RegistryException::class.java) { checkBlock(block) }
            assertTrue(e.message!!.startsWith("field $member: "), "$member = $value: ${e.message}")
        }
    }
}
