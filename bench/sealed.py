"""Sealed batches: real batch sizes (which size class they fall in) and the CPU sealing adds.

    python bench/sealed.py            # sizes of real SDK batches, then CPU per batch
    python bench/sealed.py --quick    # fewer repeats

Batches are made by the real SDK (``TelemetryClient`` -> ``RecordingCollector``) from the
example registries of docs/examples: one report per metric per window, as the ledger allows a
device, and — for the larger classes — many reports of a metric with a large
``reports_per_window``. "Sealing adds" is the CPU time (``time.process_time``) the SDK spends
per batch on top of a plain send: the padded Binary HTTP request, the HPKE seal (one X25519
key generation and exchange, the key schedule, AES-128-GCM) and, when the answer comes back,
opening the encapsulated response. Medians over repeats of many batches each; distinct
batches (fresh batch ids and randomised reports).
"""

from __future__ import annotations

import argparse
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


def cpu_per_batch(bodies: list[bytes], key: ohttp.PrivateKey, repeat: int) -> tuple[float, float]:
    """Median CPU µs per batch: (seal = inner request + HPKE, open the gateway's answer)."""
    ack = ohttp.inner_response(200, [("content-type", "application/json")], b'{"accepted": 5, "duplicate": false}')
    answers = []
    for body in bodies:       # the gateway's answers, made outside the timed loops
        sealed = ohttp.seal_request(key.config, ohttp.inner_request(body))
        answers.append((sealed, ohttp.seal_response(ohttp.open_request({key.config.key_id: key}, sealed.envelope), ack)))
    for body in bodies[:20]:
        ohttp.seal_request(key.config, ohttp.inner_request(body))   # warm-up: imports, caches
    rounds = max(1, PER_PASS // len(bodies))       # each pass seals at least PER_PASS batches
    seal_t, open_t = [], []
    for _ in range(repeat):
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
    return statistics.median(seal_t), statistics.median(open_t)


def x25519_floor(key: ohttp.PrivateKey, repeat: int) -> float:
    """CPU µs of the two X25519 operations every seal needs (cryptography/OpenSSL), for scale."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    peer = X25519PublicKey.from_public_bytes(key.config.public_key)
    times = []
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(PER_PASS):
            eph = X25519PrivateKey.generate()
            eph.public_key().public_bytes_raw()
            eph.exchange(peer)
        times.append((time.process_time() - t) / PER_PASS * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer devices and repeats")
    args = parser.parse_args()
    devices, repeat = (5, 3) if args.quick else (40, 7)
    key = ohttp.PrivateKey.generate(1)
    cases = []
    for name in EXAMPLES:
        registry = load_registry(ROOT / "docs" / "examples" / name)
        cases.append((f"{name} (1 per metric)", real_batches(registry, 1, devices, 1)))
    wide = parse_registry(WIDE.format(cats=", ".join(f'"p{i}"' for i in range(1000))), "wide")
    cases.append(("oue d=1000 x 1", real_batches(wide, 1, devices, 2)))
    cases.append(("oue d=1000 x 30", real_batches(wide, 30, max(2, devices // 8), 3)))
    rows, all_bodies = [], []
    for label, bodies in cases:
        sizes = [len(b) for b in bodies]
        classes = sorted({ohttp.padded_length(len(ohttp.inner_request(b))) + ohttp.ENVELOPE_OVERHEAD
                          for b in bodies})
        seal_us, open_us = cpu_per_batch(bodies, key, repeat)
        rows.append((label, len(bodies), min(sizes), max(sizes), ", ".join(map(str, classes)),
                     seal_us, open_us, seal_us + open_us))
        all_bodies += bodies
    print_table(("batches of", "n", "bytes min", "bytes max", "envelope bytes", "seal µs", "open answer µs",
                 "sealing adds µs"), rows,
                title=f"Real SDK batches, their size classes and the CPU sealing adds per batch "
                      f"(time.process_time, median of {repeat} passes)")
    print(f"\nthe floor, X25519 key generation + exchange alone (one per seal): {x25519_floor(key, repeat):.1f} µs")
    small = [b for b in all_bodies if len(b) < 1024 - ohttp.MAX_FRAMING]
    print(f"\n{len(small)} of {len(all_bodies)} batches fit the first class (1,024 bytes: envelopes of "
          f"{1024 + ohttp.ENVELOPE_OVERHEAD} bytes); classes: {', '.join(map(str, ohttp.PAD_CLASSES))}")


if __name__ == "__main__":
    main()
