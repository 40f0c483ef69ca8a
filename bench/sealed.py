"""Sealed batches: real batch sizes (which size class they fall in) and the CPU sealing adds.

    python bench/sealed.py            # sizes of real SDK batches, then CPU per batch
    python bench/sealed.py --quick    # fewer repeats
    python bench/sealed.py --profile  # where a seal's CPU goes: a timing split and cProfile

Batches are made by the real SDK (``TelemetryClient`` -> ``RecordingCollector``) from the
example registries of docs/examples: one report per metric per window, as the ledger allows a
device, and — for the larger classes — many reports of a metric with a large
``reports_per_window``. "Sealing adds" is the CPU time (``time.process_time``) the SDK spends
per batch on top of a plain send: the padded Binary HTTP request, the HPKE seal (one X25519
key generation and exchange, the key schedule, AES-128-GCM) and, when the answer comes back,
opening the encapsulated response. Medians over repeats of many batches each; distinct
batches (fresh batch ids and randomised reports).

``--profile`` splits one seal and one open of a first-class (1,024-byte) request into its
parts, each timed alone (``time.process_time``) in interleaved rounds so that the machine's
load falls on every part alike, and counts the library calls a seal makes under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import tempfile
import time

import _common  # noqa: F401 - puts the repository root on sys.path
from _common import ROOT, print_table

from client_sdk import TelemetryClient, ohttp
from client_sdk.registry import load_registry, parse_registry
from client_sdk.testing import MemoryTransport, RecordingCollector

PER_PASS = 500
EXAMPLES = ["metrics.toml", "dimensions.toml", "longitudinal.toml", "discovery.toml"]
WIDE = """
[metrics.page]
kind = "categorical"
categories = [{cats}]
protocol = "oue"
epsilon = 2.0
reports_per_window = 1000
"""


def value_for(spec, rng: random.Random):
    kind = spec.kind.value
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "numeric":
        lo, hi = spec.range
        return rng.uniform(lo, hi)
    cats = getattr(spec, "categories", None)
    if cats:
        return rng.choice(list(cats))
    return f"https://site{rng.randrange(50)}.example/"


def real_batches(registry, reports_per_metric: int, devices: int, seed: int) -> list[bytes]:
    """Batch bodies the SDK sends: each device reports every metric ``reports_per_metric`` times."""
    rng = random.Random(seed)
    out = []
    for _ in range(devices):
        collector = RecordingCollector(registry)
        with tempfile.TemporaryDirectory() as state:
            client = TelemetryClient(transport=MemoryTransport(collector), registry=registry, state_dir=state,
                                     batch_size=1000, max_batch_age=3600)
            for _ in range(reports_per_metric):
                for spec in registry:
                    if spec.kind.value == "string" and not getattr(spec, "categories", None) and \
                            spec.protocol not in ("rappor", "discover"):
                        continue
                    client.report(spec.name, value_for(spec, rng))
            client.close(5)
        out += [b for m, p, _, b in collector.requests if m == "POST"]
    return out


def cpu_per_batch(bodies: list[bytes], key: ohttp.PrivateKey, repeat: int) -> tuple[float, float, float]:
    """Median CPU µs per batch: (seal = inner request + HPKE, open the gateway's answer, and the
    X25519 floor timed in the same passes, so that the machine's load falls on all three alike)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    peer = X25519PublicKey.from_public_bytes(key.config.public_key)
    ack = ohttp.inner_response(200, [("content-type", "application/json")], b'{"accepted": 5, "duplicate": false}')
    answers = []
    for body in bodies:       # the gateway's answers, made outside the timed loops
        sealed = ohttp.seal_request(key.config, ohttp.inner_request(body))
        answers.append((sealed, ohttp.seal_response(ohttp.open_request({key.config.key_id: key}, sealed.envelope), ack)))
    for body in bodies[:20]:
        ohttp.seal_request(key.config, ohttp.inner_request(body))   # warm-up: imports, caches
    rounds = max(1, PER_PASS // len(bodies))       # each pass seals at least PER_PASS batches
    seal_t, open_t, floor_t = [], [], []
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(rounds * len(bodies)):
            eph = X25519PrivateKey.generate()
            eph.public_key().public_bytes_raw()
            eph.exchange(peer)
        floor_t.append((time.process_time() - t) / (rounds * len(bodies)) * 1e6)
        t = time.process_time()
        for _ in range(rounds):
            for body in bodies:
                ohttp.seal_request(key.config, ohttp.inner_request(body))
        seal_t.append((time.process_time() - t) / (rounds * len(bodies)) * 1e6)
        t = time.process_time()
        for _ in range(rounds):
            for sealed, answer in answers:
                ohttp.open_response(sealed, answer)
        open_t.append((time.process_time() - t) / (rounds * len(answers)) * 1e6)
    return statistics.median(seal_t), statistics.median(open_t), statistics.median(floor_t)


def _interleaved(parts: list[tuple[str, object]], rounds: int, calls: int) -> dict[str, float]:
    """Median CPU µs per call of each part, the parts timed in turn in each of ``rounds``."""
    times: dict[str, list[float]] = {label: [] for label, _ in parts}
    for _ in range(rounds):
        for label, func in parts:
            t = time.process_time()
            for _ in range(calls):
                func()
            times[label].append((time.process_time() - t) / calls * 1e6)
    return {label: statistics.median(ts) for label, ts in times.items()}


def _where(key: tuple[str, int, str]) -> str:
    """A cProfile entry's name, short: package/file:line function, or the builtin's name."""
    path, line, func = key
    if path == "~":
        return func.replace("cryptography.hazmat.bindings._rust.openssl.", "")
    return f"{path.split('site-packages/')[-1].replace(str(ROOT) + '/', '')}:{line} {func}"


def profile(key: ohttp.PrivateKey, rounds: int) -> None:
    """Where a seal and an open go: each part timed alone, then cProfile's call counts."""
    import hashlib
    import hmac

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import hmac as chmac
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    body = os.urandom(300)                           # a metrics.toml batch is ~314 bytes
    message = ohttp.inner_request(body)
    config = key.config
    suite = ohttp._suite()
    recipient = ohttp._recipient(config)
    peer = X25519PublicKey.from_public_bytes(config.public_key)
    own = X25519PrivateKey.generate()
    _, ctx = suite.create_sender_context(recipient.public_key, recipient.info)
    sealed = ohttp.seal_request(config, message)
    ack = ohttp.inner_response(200, [("content-type", "application/json")], b'{"accepted": 5, "duplicate": false}')
    answer = ohttp.seal_response(ohttp.open_request({config.key_id: key}, sealed.envelope), ack)
    k32, k16, n12 = os.urandom(32), os.urandom(16), os.urandom(12)
    gcm, ct = AESGCM(k16), AESGCM(k16).encrypt(n12, ack, b"")

    def pyhpke_hmac() -> bytes:                      # one HKDF step as pyhpke makes it
        h = chmac.HMAC(k32, hashes.SHA256())
        h.update(k32 + b"HPKE-v1" + b"suite-id")
        return h.finalize()

    def keygen() -> bytes:
        return X25519PrivateKey.generate().public_key().public_bytes_raw()

    seal_all, open_all = "seal_request + inner_request (all of a seal)", "open_response (all of an open)"
    in_ctx, keygen_l, exchange_l = ("  create_sender_context: KEM + key schedule [pyhpke]",
                                    "    X25519 key generation [OpenSSL]", "    X25519 exchange [OpenSSL]")
    parts = [
        (seal_all, lambda: ohttp.seal_request(config, ohttp.inner_request(body))),
        ("  inner_request: Binary HTTP + padding [ours]", lambda: ohttp.inner_request(body)),
        ("  the key configuration's cached recipient [ours]", lambda: ohttp._recipient(config)),
        (in_ctx, lambda: suite.create_sender_context(recipient.public_key, recipient.info)),
        (keygen_l, keygen),
        (exchange_l, lambda: own.exchange(peer)),
        ("    one HMAC-SHA256 as pyhpke makes it [cryptography]", pyhpke_hmac),
        ("  ctx.seal: AES-128-GCM of the request [pyhpke]", lambda: ctx.seal(message)),
        ("  ctx.export: one labeled expand [pyhpke]", lambda: ctx.export(ohttp.RESPONSE_LABEL, 16)),
        (open_all, lambda: ohttp.open_response(sealed, answer)),
        ("  one HMAC-SHA256, hmac.digest (3 an open) [stdlib]", lambda: hmac.digest(k32, k32, hashlib.sha256)),
        ("  AES-128-GCM key + decrypt of the answer [cryptography]", lambda: AESGCM(k16).decrypt(n12, ct, b"")),
        ("  AES-128-GCM decrypt alone [cryptography]", lambda: gcm.decrypt(n12, ct, b"")),
    ]
    for _, func in parts:
        func()                                        # warm-up
    us = _interleaved(parts, rounds, 400)
    # cProfile: how many library calls a seal makes, and where its (profiler-inflated) time goes
    n = 2000
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        ohttp.seal_request(config, ohttp.inner_request(body))
    prof.disable()
    stats = pstats.Stats(prof).stats                  # type: ignore[attr-defined]

    def calls(match: str) -> float:
        return sum(v[1] for k, v in stats.items() if match in f"{k[0]}:{k[2]}") / n

    hmacs = calls("<method 'finalize' of 'cryptography.hazmat.bindings._rust.openssl.hmac.HMAC'")
    x25519 = us[keygen_l] + us[exchange_l]
    rest = us[in_ctx] - x25519
    total = us[seal_all] + us[open_all]
    rows: list[tuple[str, float, float]] = []
    for label, v in us.items():
        rows.append((label, v, 100 * v / total))
        if label == exchange_l:
            rows.append(("    the rest: 8 of the 9 HMACs, objects, bytes [pyhpke]", rest, 100 * rest / total))
    print_table(("part (indented: inside the line above)", "CPU µs", "% of seal + open"), rows,
                title=f"Where sealing's CPU goes: one seal and one open of a {len(message):,}-byte request "
                      f"(time.process_time per call, median of {rounds} interleaved rounds of 400; "
                      f"load average {os.getloadavg()[0]:.1f})")
    whole = sum(v[2] for v in stats.values())
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:10]
    print_table(("function (file:line or builtin)", "calls a seal", "% of own time"),
                [(_where(k), v[1] / n, 100 * v[2] / whole) for k, v in top],
                title=f"cProfile of {n:,} seals, top 10 by own time (the profiler inflates small calls)")
    exchange_calls = calls("<method 'exchange'")
    print(f"\nper seal: {hmacs:.0f} HMAC-SHA256 through cryptography HMAC objects "
          f"({calls('pyhpke/kdf.py:labeled_extract'):.0f} labeled extracts, "
          f"{calls('pyhpke/kdf.py:labeled_expand'):.0f} labeled expands), "
          f"{calls('default_backend'):.0f} default_backend() calls, one X25519 key generation and "
          f"{exchange_calls:.0f} exchange")
    floor = x25519 + us["  AES-128-GCM key + decrypt of the answer [cryptography]"] + 3 * us[
        "  one HMAC-SHA256, hmac.digest (3 an open) [stdlib]"]
    print(f"X25519 alone (key generation + exchange): {x25519:.1f} µs; with the open's 3 HMACs and "
          f"AES-GCM: {floor:.1f} µs before any key schedule; pyhpke's key schedule and objects "
          f"{rest:.1f} µs; seal + open {total:.1f} µs")
    candidates(config, message, recipient.info, rounds)


def candidates(config: ohttp.KeyConfig, message: bytes, info: bytes, rounds: int) -> None:
    """Other HPKE libraries, where installed, sealing the same request, interleaved with ours."""
    from importlib import metadata

    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    peer = X25519PublicKey.from_public_bytes(config.public_key)

    def x25519() -> bytes:
        eph = X25519PrivateKey.generate()
        eph.public_key().public_bytes_raw()
        return eph.exchange(peer)

    rows: list[tuple[str, str, object]] = [
        ("pyhpke (the SDK: seal_request)", "context, Export, given skE", lambda: ohttp.seal_request(config, message)),
        ("X25519 key generation + exchange alone (cryptography)", "the floor of any X25519 HPKE", x25519)]
    try:   # cryptography 45+: native (Rust over OpenSSL), single-shot only
        from cryptography.hazmat.primitives import hpke as native

        suite = native.Suite(native.KEM.X25519, native.KDF.HKDF_SHA256, native.AEAD.AES_128_GCM)
        rows.append((f"cryptography {metadata.version('cryptography')} hpke.Suite.encrypt", "single-shot: no "
                     "Export (cannot open the answer), no given skE", lambda: suite.encrypt(message, peer, info)))
    except (ImportError, AttributeError):
        rows.append(("cryptography hpke", "absent (cryptography < 45)", None))
    try:   # hpke-rs (Rust) through PyO3
        import hybrid_pke

        hp = hybrid_pke.Hpke(hybrid_pke.Mode.BASE, hybrid_pke.Kem.DHKEM_X25519, hybrid_pke.Kdf.HKDF_SHA256,
                             hybrid_pke.Aead.AES_128_GCM)

        def hybrid() -> bytes:
            enc, ctx = hp.setup_sender(config.public_key, info)
            return enc + ctx.seal(b"", message) + ctx.export(ohttp.RESPONSE_LABEL, 16)

        rows.append((f"hybrid-pke {metadata.version('hybrid-pke')} setup_sender + seal + export",
                     "context, Export; no given skE", hybrid))
    except ImportError:
        rows.append(("hybrid-pke", "not installed (pip install hybrid-pke)", None))
    try:   # pure Python over cryptography, as pyhpke
        import rfc9180

        r = rfc9180.create_hpke()
        pkr = r._deserialize_public_key(config.public_key)

        def pure() -> bytes:
            enc, ctx = r.setup.setup_base_sender(pkr, info)
            return enc + ctx.seal(b"", message) + ctx.export(ohttp.RESPONSE_LABEL, 16)

        rows.append((f"rfc9180 {metadata.version('rfc9180')} setup_base_sender + seal + export",
                     "context, Export", pure))
    except ImportError:
        rows.append(("rfc9180", "not installed (pip install rfc9180)", None))
    try:   # pycryptodome 4.4+: Crypto.Protocol.HPKE, over its own C primitives
        from Crypto.Protocol import HPKE
        from Crypto.PublicKey import ECC

        receiver = ECC.construct(curve="X25519", point_x=int.from_bytes(config.public_key, "little"))

        def dome() -> bytes:
            c = HPKE.new(receiver_key=receiver, aead_id=HPKE.AEAD.AES128_GCM, info=info)
            return c.enc + c.seal(message) + c.export(ohttp.RESPONSE_LABEL, 16)

        rows.append((f"pycryptodome {metadata.version('pycryptodome')} HPKE.new + seal + export",
                     "context, Export; skE not given publicly", dome))
    except ImportError:
        rows.append(("pycryptodome (Crypto.Protocol.HPKE)", "not installed (pip install pycryptodome)", None))
    timed = [(label, func) for label, _, func in rows if func is not None]
    for _, func in timed:
        func()
    us = _interleaved(timed, rounds, 300)
    print_table(("library", "what it offers OHTTP", "seal CPU µs"),
                [(label, offers, us.get(label, "-")) for label, offers, _ in rows],
                title=f"HPKE libraries sealing the same {len(message):,}-byte request to the same key "
                      f"(median of {rounds} interleaved rounds of 300; the open, ~10 µs, is on top)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer devices and repeats")
    parser.add_argument("--profile", action="store_true", help="only the split of one seal and open")
    args = parser.parse_args()
    devices, repeat = (5, 3) if args.quick else (40, 7)
    key = ohttp.PrivateKey.generate(1)
    if args.profile:
        profile(key, 5 if args.quick else 11)
        return
    cases = []
    for name in EXAMPLES:
        registry = load_registry(ROOT / "docs" / "examples" / name)
        cases.append((f"{name} (1 per metric)", real_batches(registry, 1, devices, 1)))
    wide = parse_registry(WIDE.format(cats=", ".join(f'"p{i}"' for i in range(1000))), "wide")
    cases.append(("oue d=1000 x 1", real_batches(wide, 1, devices, 2)))
    cases.append(("oue d=1000 x 30", real_batches(wide, 30, max(2, devices // 8), 3)))
    rows, all_bodies = [], []
    load = os.getloadavg()[0]
    for label, bodies in cases:
        sizes = [len(b) for b in bodies]
        classes = sorted({ohttp.padded_length(len(ohttp.inner_request(b))) + ohttp.ENVELOPE_OVERHEAD
                          for b in bodies})
        seal_us, open_us, floor_us = cpu_per_batch(bodies, key, repeat)
        rows.append((label, len(bodies), min(sizes), max(sizes), ", ".join(map(str, classes)),
                     seal_us, open_us, seal_us + open_us, floor_us, seal_us + open_us - floor_us))
        all_bodies += bodies
    print_table(("batches of", "n", "bytes min", "bytes max", "envelope bytes", "seal µs", "open answer µs",
                 "sealing adds µs", "X25519 alone µs", "adds above X25519 µs"), rows,
                title=f"Real SDK batches, their size classes and the CPU sealing adds per batch "
                      f"(time.process_time, median of {repeat} passes; load average "
                      f"{load:.1f} -> {os.getloadavg()[0]:.1f})")
    print("\nX25519 alone: key generation + exchange (cryptography/OpenSSL), the two operations every seal "
          "makes, timed in the same passes")
    small = [b for b in all_bodies if len(b) < 1024 - ohttp.MAX_FRAMING]
    print(f"\n{len(small)} of {len(all_bodies)} batches fit the first class (1,024 bytes: envelopes of "
          f"{1024 + ohttp.ENVELOPE_OVERHEAD} bytes); classes: {', '.join(map(str, ohttp.PAD_CLASSES))}")


if __name__ == "__main__":
    main()
