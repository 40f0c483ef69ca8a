package dev.ldptelemetry.sdk

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.io.TempDir
import java.io.File

/**
 * A state directory belongs to one SDK (its `owner` file, docs/conformance.md): the SDKs' ledger
 * locks do not exclude one another, so a directory another SDK owns is refused before anything
 * is charged, and this SDK claims its own and unowned directories.
 */
class OwnerTest {
    @TempDir
    lateinit var tmp: File

    private fun charge(dir: File): String = FileStore(dir).updateLedger { before -> Pair("{\"charged\": true}", before ?: "none") }

    @Test
    fun `a directory another SDK owns is refused and its ledger is never written`() {
        for (owner in listOf("python", "node", "swift")) {
            val dir = File(tmp, owner).apply { mkdirs() }
            File(dir, "owner").writeText("$owner\n")
            val e = assertThrows(StateException::class.java) { charge(dir) }
            assertTrue(e.message!!.contains("belongs to the '$owner' SDK (its owner file)"), e.message)
            assertFalse(File(dir, "ledger.json").exists())
        }
    }

    @Test
    fun `a directory the Python SDK used before owner files is refused`() {
        val dir = File(tmp, "old").apply { mkdirs() }
        File(dir, "ledger.lock").writeBytes(ByteArray(0))
        val e = assertThrows(StateException::class.java) { charge(dir) }
        assertTrue(e.message!!.contains("'python' SDK (its lock file ledger.lock)"), e.message)
        assertFalse(File(dir, "owner").exists())
        assertFalse(File(dir, "ledger.json").exists())
    }

    @Test
    fun `this SDK claims a new directory, keeps it, and rewrites an empty owner file a killed write left`() {
        val dir = File(tmp, "new")
        assertEquals("none", charge(dir))
        assertEquals("jvm\n", File(dir, "owner").readText())
        assertEquals("{\"charged\": true}", charge(dir))
        File(dir, "owner").writeBytes(ByteArray(0))
        charge(dir)
        assertEquals("jvm\n", File(dir, "owner").readText())
    }
}
