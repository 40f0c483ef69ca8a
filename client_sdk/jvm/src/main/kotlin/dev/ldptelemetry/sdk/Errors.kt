package dev.ldptelemetry.sdk

/**
 * The SDK's exceptions, one tree (as client_sdk/errors.py):
 *
 *     LdptException
 *     ├── RegistryException   the published registry cannot be used (unknown encoder, pin mismatch, bad field)
 *     ├── LedgerException     the privacy ledger file is unreadable: nothing is reported until it is repaired
 *     ├── StateException      the state directory cannot be used (unwritable, a bad secret file, a lock timeout)
 *     ├── TransportException  no HTTP response came back (refused, reset, timeout)
 *     └── ReportException     a report was refused (thrown only with `strict`; otherwise counted in stats())
 *
 * report() never throws any of them on the app's thread unless the client is `strict`.
 */
open class LdptException(message: String, cause: Throwable? = null) : RuntimeException(message, cause)

class RegistryException(message: String, cause: Throwable? = null) : LdptException(message, cause)

class LedgerException(message: String, cause: Throwable? = null) : LdptException(message, cause)

class StateException(message: String, cause: Throwable? = null) : LdptException(message, cause)

class TransportException(message: String, cause: Throwable? = null) : LdptException(message, cause)

class ReportException(message: String) : LdptException(message)
