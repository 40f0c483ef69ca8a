"""Throughput benchmark: encode reports/s (vectorised and one at a time) and estimate time.

- vectorised encode, n = 100,000 values, d = 128, ε = 1, seeded numpy Generator;
- one report at a time through the SDK path (batch of one, OS CSPRNG): µs per report;
- estimate time for d = 128 and d = 1,000,000 (sketch decoding; OLH only where supported);
- large domains, d ∈ {10⁴, 10⁵, 10⁶} at ε ∈ {1, 4}, for the O(log d)-bit protocols (HR, OLH):
  vectorised encode rate (n = 1,000,000), single-report p50/p99 (µs, ``encode_one``: the SDK's
  report() path), estimate seconds and the
  peak RSS growth of the estimate (bars of issue 14: >= 1M reports/s, p99 <= 50 µs, decode of
  d = 10⁶ <= 10 s and <= 2 GB).
Peers measured on this machine (n = 100,000, from the issue): multi-freq-ldpy GRR 3.3M/s,
pure-LDP GRR 2.7M/s, multi-freq-ldpy OUE (d=128) 0.68M/s, SS 0.63M/s, pure-LDP OLH 0.37M/s,
HR 0.26M/s; their OLH estimate takes 6–7 s at d = 128. Run: `python bench/throughput.py`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _common import median_time, print_table

from sketches import build_server

PEERS = {"grr": 3.3e6, "oue": 0.68e6, "ss": 0.63e6, "olh": 0.37e6, "hr": 0.26e6}
PROTOCOLS = ("rr", "grr", "oue", "sue", "olh", "hr", "ss")
LARGE_DOMAINS = (10_000, 100_000, 1_000_000)
LARGE_EPSILONS = (1.0, 4.0)
LARGE_PROTOCOLS = ("hr", "olh")


def vectorised(name: str, d: int, eps: float, n: int) -> float:
    proto = build_server(name, d, eps, {})
    rng = np.random.default_rng(1)
    values = rng.integers(0, d, n)
    proto.encode(values[:1000], rng)  # warm caches
    return n / median_time(lambda: proto.encode(values, rng), repeat=5)


def one_at_a_time(name: str, d: int, eps: float, count: int) -> tuple[float, float]:
    """(median, p99) µs per single-report encode with the OS CSPRNG."""
    proto = build_server(name, d, eps, {})
    value = np.array([d // 3])
    proto.encode(value)
    samples = []
    for _ in range(count):
        start = time.perf_counter_ns()
        proto.encode(value)
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return statistics.median(samples) / 1e3, samples[int(0.99 * len(samples))] / 1e3


def sdk_report_us(proto, index: int, count: int) -> tuple[float, float]:
    """(median, p99) µs of ``encode_one``: what TelemetryClient.report() calls (OS CSPRNG)."""
    proto.randomise(index)
    samples = []
    for _ in range(count):
        start = time.perf_counter_ns()
        proto.randomise(index)
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return statistics.median(samples) / 1e3, samples[int(0.99 * len(samples))] / 1e3


def estimate_seconds(name: str, d: int, eps: float, n: int) -> float | str:
    try:
        proto = build_server(name, d, eps, {})
    except ValueError as exc:
        return f"n/a ({str(exc)[:30]}...)"
    rng = np.random.default_rng(2)
    sketch = proto.new_sketch()
    if d <= 4096:
        proto.accumulate(sketch, proto.encode(rng.integers(0, d, n), rng))
    else:  # decoding cost does not depend on the values: fill the counters directly
        sketch.counts[...] = rng.integers(0, n // 10 + 1, sketch.counts.shape)
        sketch.reports[...] = n // sketch.reports.shape[0]
    proto.estimate(sketch)  # warm (OLH caches its decoding matrices per sketch shape)
    return median_time(lambda: proto.estimate(sketch), repeat=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=20_000, help="single-report encodes to time")
    parser.add_argument("--large-only", action="store_true", help="only the d ∈ {10⁴, 10⁵, 10⁶} table")
    args = parser.parse_args()
    print_table(["protocol", "d", "eps", "report bits", "sketch cells", "vectorised M reports/s",
                 "report() p50 µs", "report() p99 µs", "estimate s", "estimate peak MB"],
                large_rows(max(args.clients, 1_000_000), args.single),
                "Large domains: encode (n = 1,000,000 seeded; single reports on the OS CSPRNG) and decode")
    if args.large_only:
        return
    rows = []
    for name in PROTOCOLS:
        d = 2 if name == "rr" else 128
        rate = vectorised(name, d, 1.0, args.clients)
        med, p99 = one_at_a_time(name, d, 1.0, args.single)
        peer = PEERS.get(name)
        rows.append((name, d, rate / 1e6, "-" if peer is None else f"{rate / peer:.1f}x", med, p99))
    print_table(["protocol", "d", "vectorised M reports/s", "vs best peer", "single p50 µs", "single p99 µs"],
                rows, f"Encode, ε = 1, n = {args.clients:,} (seeded) / one report at a time (OS CSPRNG)")
    est_rows = []
    for name in PROTOCOLS:
        if name == "rr":
            continue
        small = estimate_seconds(name, 128, 1.0, args.clients)
        large = estimate_seconds(name, 1_000_000, 1.0, args.clients)
        est_rows.append((name, _ms(small), _ms(large)))
    print_table(["protocol", "estimate d=128 (ms)", "estimate d=1,000,000 (ms)"], est_rows,
                "Estimate time (median of 3; peers' OLH estimate: 6,000-7,000 ms at d=128)")


def peak_rss_growth_mb(work) -> tuple[float, float]:
    """(seconds, peak RSS growth in MB) of ``work()`` run in a forked child (fresh high-water mark)."""
    import os
    import resource

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: measure and report through the pipe
        os.close(read)
        try:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            start = time.perf_counter()
            work()
            seconds = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            os.write(write, f"{seconds} {(after - before) / 1024}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read().split()
    os.waitpid(pid, 0)
    return (float(text[0]), float(text[1])) if text else (float("nan"), float("nan"))


def large_rows(clients: int, single: int) -> list[tuple]:
    rows = []
    for d in LARGE_DOMAINS:
        for eps in LARGE_EPSILONS:
            for name in LARGE_PROTOCOLS:
                proto = build_server(name, d, eps, {})
                rate = vectorised(name, d, eps, clients)
                med, p99 = sdk_report_us(proto, d // 3, single)
                rng = np.random.default_rng(3)
                sketch = proto.new_sketch()
                sketch.counts[...] = rng.integers(1, 20, sketch.counts.shape)  # every cohort non-empty
                sketch.reports[...] = sketch.counts.sum(axis=tuple(range(1, sketch.counts.ndim)))
                seconds, mb = peak_rss_growth_mb(lambda p=proto, s=sketch: p.estimate(s))
                rows.append((name, d, eps, proto.payload_bits, int(sketch.counts.size), rate / 1e6,
                             med, p99, seconds, mb))
    return rows


def _ms(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value * 1e3:,.2f}"


if __name__ == "__main__":
    main()
