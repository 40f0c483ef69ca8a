package dev.ldptelemetry.sdk

import java.io.File
import java.io.FileOutputStream
import java.io.RandomAccessFile
import java.nio.channels.FileLock
import java.security.SecureRandom
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.TimeUnit
import java.util.concurrent.locks.ReentrantLock

/** One batch in the outbox: the exact bytes that go on the wire (randomised reports only). */
class StoredBatch(
    /** The store's name of the entry (unique; sorts oldest first). */
    val name: String,
    val body: ByteArray,
    val reports: Int,
    /** Wall-clock milliseconds when the batch was built. */
    val created: Long,
) {
    /** The stored sealed container ([SEALED_MAGIC], the body, the envelope…) once the batch was sealed, else null. */
    var sealed: ByteArray? = null
}

/**
 * A sealed batch's stored form starts with these bytes (a plain batch is a msgpack map), then
 * 4-byte lengths and parts — body, envelope, enc, response secret — and the key id
 * (client_sdk/queue.py's; the `sealed` artifact writes it): resends after a restart send the
 * same envelope.
 */
internal val SEALED_MAGIC = Hashing.ascii("\u0000ldpt-sealed-1\n")

/** A stored batch from its file's bytes: plain, or a sealed container (its body the first part). */
internal fun storedBatch(name: String, raw: ByteArray, reports: Int, created: Long): StoredBatch {
    val m = SEALED_MAGIC.size
    var sealed = raw.size >= m + 4
    for (i in 0 until m) if (sealed && raw[i] != SEALED_MAGIC[i]) sealed = false
    if (!sealed) return StoredBatch(name, raw, reports, created)
    val n = ((raw[m].toInt() and 0xff) shl 24) or ((raw[m + 1].toInt() and 0xff) shl 16) or ((raw[m + 2].toInt() and 0xff) shl 8) or (raw[m + 3].toInt() and 0xff)
    if (n < 0 || n > raw.size - m - 4) throw LdptException("$name: a sealed batch file is truncated")
    return StoredBatch(name, raw.copyOfRange(m + 4, m + 4 + n), reports, created).also { it.sealed = raw }
}

/** Caps of the offline queue (the Python SDK's OutboxLimits); the oldest batches go first. */
class OutboxLimits @JvmOverloads constructor(
    val maxBatches: Int = 1000,
    val maxBytes: Long = 16L * 1024 * 1024,
    /** Milliseconds. */
    val maxAge: Long = 7L * 86_400_000,
)

/** Batches waiting for the collector, shared by every process of the device. */
interface Outbox {
    /** Reports dropped by the caps (oldest first) and by expiry, since this object was made. */
    val droppedReports: Long
    val expiredReports: Long

    /** Store a new batch (before its first send), enforcing the caps. */
    fun add(batchId: ByteArray, body: ByteArray, reports: Int, created: Long)

    /** Take the oldest waiting batch for sending (exclusive: no other sender gets it). */
    fun claim(now: Long): StoredBatch?

    /** Put a claimed batch back (to be retried). */
    fun release(batch: StoredBatch)

    /** Remove a batch for good (acknowledged or finally rejected). */
    fun done(batch: StoredBatch)

    /** Store a claimed batch's sealed container in its place (before the envelope is first sent). */
    fun seal(batch: StoredBatch, container: ByteArray)

    fun pending(): Int
    fun clear()
}

/**
 * What a store provides for one device (one state directory): the secret, the ledger's locked
 * read-modify-write, the outbox, the opt-out marker and the cached registry. [FileStore] is the
 * one apps use; dev.ldptelemetry.sdk.testing.MemoryStore is for tests.
 */
interface DeviceStore {
    /** Where the state lives: for messages and stats(). */
    val where: String
    val outbox: Outbox

    /** Read the secret, creating it atomically when absent (never overwritten). */
    fun loadSecret(): ByteArray

    /** The ledger text (null when none yet), read without the lock (writes are atomic). */
    fun readLedger(): String?

    /**
     * Read-modify-write of the ledger text under the device's exclusive lock: [fn] gets the
     * current text and returns the text to write (null: nothing) and a result.
     */
    fun <T> updateLedger(fn: (String?) -> Pair<String?, T>): T
    fun isOptedOut(): Boolean

    /** Write the opt-out marker, delete the secret and the outbox. */
    fun optOut()
    fun optIn()
    fun readRegistry(): String?
    fun writeRegistry(text: String)

    /** A file domain's text by its SHA-256 (docs/wire-format.md, "Large domains"), null when not cached. */
    fun readDomain(sha256: String): String? = null
    fun writeDomain(sha256: String, text: String) {}
}

internal const val SECRET_BYTES = 32
/** A claim older than this (ms) was abandoned by a process that died: sent again. */
internal const val CLAIM_TIMEOUT = 120_000L

/** Enforce caps on waiting batches (oldest first): indices to expire and to drop. */
internal fun overCaps(created: LongArray, sizes: LongArray, limits: OutboxLimits, now: Long): Pair<List<Int>, List<Int>> {
    val expired = ArrayList<Int>()
    val keep = ArrayList<Int>()
    for (i in created.indices) (if (now - created[i] > limits.maxAge) expired else keep).add(i)
    var total = 0L
    for (i in keep) total += sizes[i]
    val dropped = ArrayList<Int>()
    while (keep.isNotEmpty() && (keep.size > limits.maxBatches || total > limits.maxBytes)) {
        val i = keep.removeAt(0)
        dropped.add(i)
        total -= sizes[i]
    }
    return expired to dropped
}

/**
 * A waiting batch seen by a claim at wall time [now] (ms): its name and date, a date after [now]
 * (built under a clock that ran ahead, since set right) re-dated to [now] — the outbox stores the
 * new name, so dates only move back — or null when it is older than [maxAge] (expired).
 * conformance/vectors/outbox.json; docs/privacy.md, "Clock errors".
 */
internal fun redate(name: String, created: Long, now: Long, maxAge: Long): Pair<String, Long>? = when {
    now - created > maxAge -> null
    created > now -> (Json.pad((now * 1000).toString(), 17) + name.substring(17)) to now
    else -> name to created
}

/** Outbox entry names: `<created µs, 17 digits>-<reports>-<batch id hex>`, sorting oldest first. */
internal fun batchName(created: Long, reports: Int, batchId: ByteArray): String =
    Json.pad((created * 1000).toString(), 17) + "-" + reports + "-" + Hashing.hex(batchId)

/** (created ms, reports) of an entry name `<17 digits>-<digits>-<32 hex>`, or null. */
internal fun parseBatchName(name: String): Pair<Long, Int>? {
    @Suppress("PLATFORM_CLASS_MAPPED_TO_KOTLIN")
    val dash = (name as java.lang.String).indexOf('-'.code, 18)
    if (name.length < 18 + 2 + 32 || name[17] != '-' || dash < 19 || name.length - dash - 1 != 32) return null
    for (i in 0 until name.length) {
        val c = name[i]
        val ok = if (i == 17 || i == dash) c == '-' else if (i < dash) c in '0'..'9' else c in '0'..'9' || c in 'a'..'f'
        if (!ok) return null
    }
    val reports = parseLongOrNull(name.substring(18, dash))?.toInt() ?: return null
    return (name.substring(0, 17).toLong() / 1000) to reports
}

/**
 * The ledger of one device over its store: each [commit] is one locked transaction. A random
 * generation tag per write tells this object whether someone else wrote the book since.
 */
internal class DeviceLedger(private val store: DeviceStore, private val random: SecureRandom) {
    private var written: String? = null

    class Result(val outcomes: List<Refusal?>, val book: Book, val foreign: Boolean)

    fun snapshot(): Book = Ledger.parse(store.readLedger(), store.where)

    private fun tag(): String = ByteArray(8).also { random.nextBytes(it) }.let(Hashing::hex)

    /** Apply refusal counts and charges in order, in one locked transaction; [ticker] (the elapsed
     *  clock) is read once, inside it (the device clock rule compares readings in update order). */
    fun commit(charges: List<Charge>, refusals: List<RefusalCount>, ticker: Ticker): Result = store.updateLedger { text ->
        val book = Ledger.parse(text, store.where)
        val foreign = book.generation != written
        val outcomes = Ledger.commitCharges(book, charges, refusals, Ledger.reading(ticker))
        if (charges.isEmpty() && refusals.isEmpty()) return@updateLedger null to Result(outcomes, book, foreign)
        val t = tag()
        written = t
        Ledger.dump(book, t) to Result(outcomes, book, foreign)
    }

    fun forgetValues() {
        store.updateLedger { text ->
            val book = Ledger.parse(text, store.where)
            if (!Ledger.forgetValues(book.accounts)) return@updateLedger null to Unit
            val t = tag()
            written = t
            Ledger.dump(book, t) to Unit
        }
    }
}

/**
 * An exclusive lock shared by every process (and every client in this process) of one state
 * directory: [FileChannel.lock][java.nio.channels.FileChannel.tryLock] on `ledger.jvmlock` —
 * fcntl(2) record locks on Linux and Android, held by the kernel for the process. A holder that
 * dies releases it with its last descriptor, so there is never a takeover: a paused holder
 * (SIGSTOP, a debugger, a frozen app) keeps it, and a waiter gives up after [timeoutMs] with a
 * [StateException] — the reports it was charging are dropped, never sent uncharged. Within one
 * JVM, fcntl locks do not exclude (they are per process, and closing any descriptor of the file
 * drops them), so a ReentrantLock per canonical path serialises this process's clients first.
 */
internal class DirectoryLock(private val file: File, private val timeoutMs: Long) {
    private val local: ReentrantLock = LOCAL_LOCKS.getOrPut(file.canonicalPath) { ReentrantLock() }

    fun <T> hold(fn: () -> T): T {
        val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs)
        if (!local.tryLock(timeoutMs, TimeUnit.MILLISECONDS)) throw StateException("$file: locked by another client of this process for more than $timeoutMs ms")
        try {
            RandomAccessFile(file, "rw").use { raf ->
                var wait = 1L
                var lock: FileLock? = raf.channel.tryLock()
                while (lock == null) {
                    if (System.nanoTime() > deadline) {
                        throw StateException("$file: held by another process for more than $timeoutMs ms (paused or stuck?); nothing was charged")
                    }
                    Thread.sleep(wait)
                    wait = minOf(50L, wait * 2)
                    lock = raf.channel.tryLock()
                }
                try {
                    return fn()
                } finally {
                    lock.release()
                }
            }
        } finally {
            local.unlock()
        }
    }
}

/** One in-process lock per state directory (fcntl locks do not exclude within a process). */
private val LOCAL_LOCKS = ConcurrentHashMap<String, ReentrantLock>()

/** File helpers: owner-only permissions, write-temp-fsync-rename. java.io only (Android API 24 has no java.nio.file). */
/**
 * Which SDK owns a state directory (docs/conformance.md, "The state directory"): the file `owner`
 * names it. The SDKs lock the ledger differently (flock(2) on ledger.lock, a lock file
 * ledger.nodelock, fcntl(2) on ledger.jvmlock) and those locks do not exclude one another, so two
 * SDKs charging one directory could spend one budget twice; the first to charge writes its name,
 * every other SDK refuses the directory. Called under the directory lock before every ledger
 * transaction: another JVM process never sees a half-written file, and an empty one can only be
 * the leftover of a JVM killed while writing it (the other SDKs create theirs whole, by link), so
 * it is written again.
 */
internal object Owner {
    const val FILE = "owner"
    const val SDK = "jvm"
    /** The lock file each SDK leaves in a directory it used before owner files existed. */
    private val LOCK_FILES = mapOf("python" to "ledger.lock")

    fun claim(dir: File) {
        val f = File(dir, FILE)
        var text = Files.readOrNull(f)?.toString(Charsets.UTF_8)
        if (text == null) {
            for ((sdk, lock) in LOCK_FILES) if (File(dir, lock).exists()) refuse(dir, sdk, "its lock file $lock")
            try {
                f.createNewFile()     // exclusive: another SDK's file, created meanwhile, stands
            } catch (e: java.io.IOException) {
                throw StateException("$f: cannot create the state directory's owner file (${e.message})", e)
            }
            text = Files.readOrNull(f)?.toString(Charsets.UTF_8) ?: ""
        }
        if (text.isEmpty()) {
            FileOutputStream(f).use { out -> out.write("$SDK\n".toByteArray()); out.fd.sync() }
            text = "$SDK\n"
        }
        val owner = text.take(64).trim()
        if (owner != SDK) refuse(dir, owner, "its $FILE file")
    }

    private fun refuse(dir: File, owner: String, evidence: String): Nothing =
        throw StateException("$dir: the state directory belongs to the '$owner' SDK ($evidence); SDKs lock the " +
            "ledger differently, so two of them sharing one directory could spend one budget twice — give each " +
            "SDK its own state directory")
}

internal object Files {
    private val random = Csprng.random

    fun ownerOnly(f: File) {
        f.setReadable(false, false); f.setReadable(true, true)
        f.setWritable(false, false); f.setWritable(true, true)
        if (f.isDirectory) { f.setExecutable(false, false); f.setExecutable(true, true) }
    }

    fun mkdirs(dir: File) {
        if (!dir.isDirectory) {
            if (!dir.mkdirs() && !dir.isDirectory) throw StateException("$dir: cannot create the directory")
            ownerOnly(dir)
        }
    }

    /** Readers see the old file or the new one, never a torn one. */
    fun atomicWrite(target: File, data: ByteArray) {
        val tmp = File(target.parentFile, ".${target.name}.${Hashing.hex(ByteArray(4).also { random.nextBytes(it) })}.tmp")
        try {
            FileOutputStream(tmp).use { out ->
                ownerOnly(tmp)
                out.write(data)
                out.fd.sync()
            }
            if (!tmp.renameTo(target)) throw StateException("$target: cannot replace the file")
        } finally {
            if (tmp.exists()) tmp.delete()
        }
    }

    fun readOrNull(f: File): ByteArray? = try {
        java.io.FileInputStream(f).use { input ->
            val out = java.io.ByteArrayOutputStream(maxOf(32, f.length().toInt()))
            val buf = ByteArray(8192)
            while (true) {
                val n = input.read(buf)
                if (n < 0) break
                out.write(buf, 0, n)
            }
            out.toByteArray()
        }
    } catch (e: java.io.FileNotFoundException) {
        null
    }

    /** Temporary files a killed write left behind (older than a minute: another process may be writing one now). */
    fun removeStaleTemps(dir: File) {
        val names = dir.list() ?: return
        val now = System.currentTimeMillis()
        for (n in names) {
            if (!n.starts(".") || !n.ends(".tmp")) continue
            val f = File(dir, n)
            if (now - f.lastModified() > 60_000) f.delete()
        }
    }
}

/**
 * One device's state in a directory the app gives (Android: `context.filesDir`), laid out as the
 * Python SDK's (docs/guide-app-teams.md, "The state directory"), so `ldpt ledger --state-dir DIR`
 * reads it:
 *
 *     secret          32 random bytes, mode 0600, created once under the lock (never overwritten)
 *     ledger.json     the privacy ledger, replaced atomically under the lock
 *     ledger.jvmlock  the lock file every JVM process of the directory locks (DirectoryLock)
 *     outbox/         batches waiting for the collector, `<name>.ldpb`; claimed by renaming
 *     registry.json   the last fetched registry
 *     opted-out       present after optOut()
 *     owner           "jvm": the SDK whose lock guards this directory (Owner)
 *
 * The lock is this SDK's own: a Python or Node process and a JVM process must not share one
 * directory (they lock with flock(2) and a lock file), and the owner file makes sure they do not.
 */
class FileStore @JvmOverloads constructor(
    val dir: File,
    limits: OutboxLimits = OutboxLimits(),
    /** How long a ledger transaction waits for the lock before it fails (ms). */
    lockTimeoutMs: Long = 10_000,
) : DeviceStore {
    override val where: String = dir.path
    override val outbox: FileOutbox = FileOutbox(File(dir, "outbox"), limits)
    private val lock = DirectoryLock(File(dir, "ledger.jvmlock"), lockTimeoutMs)
    private val ledgerFile = File(dir, "ledger.json")

    init {
        try {
            Files.mkdirs(dir)
            if (!dir.canWrite()) throw StateException("$dir: the state directory is not writable")
            Files.removeStaleTemps(dir)
        } catch (e: SecurityException) {
            throw StateException("$dir: the state directory cannot be used (${e.message})", e)
        }
    }

    override fun loadSecret(): ByteArray {
        val f = File(dir, "secret")
        val data = Files.readOrNull(f) ?: lock.hold {
            Files.readOrNull(f) ?: ByteArray(SECRET_BYTES).also {
                Csprng.random.nextBytes(it)   // the secret: never leaves this directory
                Files.atomicWrite(f, it)
            }
        }
        if (data.size != SECRET_BYTES) throw StateException("$f: not a client secret (${data.size} bytes, expected $SECRET_BYTES)")
        return data
    }

    override fun readLedger(): String? = Files.readOrNull(ledgerFile)?.toString(Charsets.UTF_8)

    /**
     * Under the lock; and before the write, a compare-and-swap: the book must still be the text
     * this transaction read (a writer that ignored the lock — another SDK on the same directory —
     * makes it start over, at most three times, then fail: nothing is charged twice or lost).
     */
    override fun <T> updateLedger(fn: (String?) -> Pair<String?, T>): T = lock.hold {
        Owner.claim(dir)
        var attempt = 0
        while (true) {
            val before = readLedger()
            val (text, result) = fn(before)
            if (text == null) return@hold result
            if (readLedger() != before) {
                if (++attempt < 3) continue
                throw StateException("$ledgerFile: changed during a locked transaction (a process not honouring ledger.jvmlock?)")
            }
            Files.atomicWrite(ledgerFile, text.toByteArray(Charsets.UTF_8))
            return@hold result
        }
        @Suppress("UNREACHABLE_CODE")
        throw IllegalStateException()
    }

    override fun isOptedOut(): Boolean = File(dir, "opted-out").exists()

    override fun optOut() {
        Files.atomicWrite(File(dir, "opted-out"), "opted out: nothing is reported\n".toByteArray())
        File(dir, "secret").delete()
        outbox.clear()
        outbox.dir.delete()
    }

    override fun optIn() {
        File(dir, "opted-out").delete()
    }

    override fun readRegistry(): String? = Files.readOrNull(File(dir, "registry.json"))?.toString(Charsets.UTF_8)

    override fun writeRegistry(text: String) = Files.atomicWrite(File(dir, "registry.json"), text.toByteArray(Charsets.UTF_8))

    private fun domainFile(sha256: String): File? =
        if (sha256.length == 64 && sha256.all { it in '0'..'9' || it in 'a'..'f' }) File(dir, "domain-$sha256.txt") else null

    override fun readDomain(sha256: String): String? = domainFile(sha256)?.let { Files.readOrNull(it)?.toString(Charsets.UTF_8) }

    override fun writeDomain(sha256: String, text: String) {
        domainFile(sha256)?.let { Files.atomicWrite(it, text.toByteArray(Charsets.UTF_8)) }
    }
}

/** The outbox as files `<name>.ldpb` in a directory; a sender claims one by renaming it to `.sending`. */
class FileOutbox(val dir: File, private val limits: OutboxLimits = OutboxLimits()) : Outbox {
    @Volatile override var droppedReports: Long = 0
        private set
    @Volatile override var expiredReports: Long = 0
        private set
    private val random = Csprng.random

    private fun names(): Array<String> = dir.list() ?: emptyArray()

    private fun waiting(): List<String> =
        names().filter { it.ends(SUFFIX) && parseBatchName(it.dropSuffix(SUFFIX)) != null }.sortedList()

    override fun add(batchId: ByteArray, body: ByteArray, reports: Int, created: Long) {
        Files.mkdirs(dir)
        Files.atomicWrite(File(dir, batchName(created, reports, batchId) + SUFFIX), body)
        val names = waiting()
        val meta = names.mapped { parseBatchName(it.dropSuffix(SUFFIX))!! }
        val (expired, dropped) = overCaps(LongArray(names.size) { meta[it].first },
            LongArray(names.size) { File(dir, names[it]).length() }, limits, created)
        for (i in expired) if (File(dir, names[i]).delete()) expiredReports += meta[i].second
        for (i in dropped) if (File(dir, names[i]).delete()) droppedReports += meta[i].second
    }

    override fun claim(now: Long): StoredBatch? {
        for (c in names()) {   // abandoned claims (their sender died) go back to the queue
            if (!c.ends(CLAIMED)) continue
            val f = File(dir, c)
            if (now - f.lastModified() > CLAIM_TIMEOUT) f.renameTo(File(dir, c.before(SUFFIX) + SUFFIX))
        }
        val ready = ArrayList<Triple<String, Long, Int>>()
        for (n in waiting()) {   // every waiting batch: re-dated (renamed) or expired (redate)
            val (created, reports) = parseBatchName(n.dropSuffix(SUFFIX))!!
            val r = redate(n, created, now, limits.maxAge)
            if (r == null) { if (File(dir, n).delete()) expiredReports += reports; continue }
            if (r.first != n && !File(dir, n).renameTo(File(dir, r.first))) continue   // another process took it
            ready.add(Triple(r.first, r.second, reports))
        }
        for ((n, created, reports) in ready) {
            val claimed = File(dir, "$n.${Hashing.hex(ByteArray(3).also { random.nextBytes(it) })}$CLAIMED")
            if (!File(dir, n).renameTo(claimed)) continue   // another process claimed (or finished) it first
            claimed.setLastModified(now)                   // the claim's age starts now
            val raw = Files.readOrNull(claimed) ?: continue
            return storedBatch(claimed.path, raw, reports, created)
        }
        return null
    }

    override fun release(batch: StoredBatch) {
        val f = File(batch.name)
        f.renameTo(File(dir, f.name.before(SUFFIX) + SUFFIX))
    }

    override fun done(batch: StoredBatch) {
        File(batch.name).delete()
    }

    override fun seal(batch: StoredBatch, container: ByteArray) {
        Files.atomicWrite(File(batch.name), container)
        batch.sealed = container
    }

    override fun pending(): Int = names().count { it.ends(CLAIMED) || (it.ends(SUFFIX) && parseBatchName(it.dropSuffix(SUFFIX)) != null) }

    override fun clear() {
        for (n in names()) if (n.ends(SUFFIX) || n.ends(CLAIMED)) File(dir, n).delete()
    }
}

private const val SUFFIX = ".ldpb"
private const val CLAIMED = ".sending"
