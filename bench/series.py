"""A 30-window series of a 100-value metric (10^5 reports per window), from the CLI and the API.

The bar (issue 10): `ldpt estimate --by window` and `GET /v1/metrics/M/estimates?by=window`
give identical bytes, each in under 2 s on 2 cores. The store is a SQLite file of 30 day
windows; each window's sketch holds the counters of 10^4 encoded reports (a Zipf(1.1)
population, the real encoder) scaled to 10^5 — every counter grows in proportion to the
reports, and the estimate's cost depends on the sketch's cells, not on n.

Columns: protocol; ``library`` the in-process time of loading the 30 windows and building
the frame; ``cli`` the wall time of the whole `ldpt estimate --by window --format csv`
process (interpreter start-up included) and ``cli cpu`` its CPU time (user + system: what it
costs on an idle machine); ``api`` the wall time of the HTTP request to a
running `ldpt serve`; ``bytes`` the CSV size; ``identical`` whether CLI and API bytes agree.

Run: `python bench/series.py` (``--quick`` for one protocol and one repetition).
"""

from __future__ import annotations

import os

from sketches import server_half

# The in-process column runs with one BLAS thread, as the test-suite does (tests/conftest.py):
# on a busy 2-core machine a multi-threaded BLAS makes OLH's small solves ~10x slower. The CLI
# and the collector are measured as users run them, with the environment they inherit.
_INHERITED_BLAS = os.environ.get("OPENBLAS_NUM_THREADS")
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import ROOT, median_time, print_table  # noqa: E402

from client_sdk.registry import load_registry  # noqa: E402
from collector.storage.base import SketchKey  # noqa: E402
from collector.storage.sqlite import SQLiteStore  # noqa: E402
from estimators.formats import frame_to_csv  # noqa: E402
from estimators.series import series_frame, window_grid  # noqa: E402

WINDOWS, VALUES, REPORTS, ENCODED = 30, 100, 100_000, 10_000
FIRST = dt.date(2026, 1, 1)
TOKEN = "bench-series-token-0123456789"


def registry_text(protocol: str) -> str:
    cats = ", ".join(f'"v{i:03d}"' for i in range(VALUES))
    return f'[metrics.m]\nkind = "categorical"\nprotocol = "{protocol}"\nepsilon = 1.0\ncategories = [{cats}]\n'


def fill(db: Path, spec, rng: np.random.Generator) -> list[str]:
    weights = 1.0 / np.arange(1, VALUES + 1) ** 1.1
    weights /= weights.sum()
    proto = server_half(spec)
    days = window_grid(FIRST.isoformat(), (FIRST + dt.timedelta(days=WINDOWS - 1)).isoformat(), False)
    store = SQLiteStore(db, create=True)
    try:
        for day in days:
            sketch = proto.new_sketch()
            proto.accumulate(sketch, proto.encode(rng.choice(VALUES, ENCODED, p=weights), rng))
            sketch.counts *= REPORTS // ENCODED
            sketch.reports *= REPORTS // ENCODED
            store.add_sketch(SketchKey(spec.name, spec.fingerprint, day), sketch)
    finally:
        store.close()
    return days


def library_time(db: Path, spec, days: list[str]) -> float:
    def run() -> str:
        store = SQLiteStore(db, create=False)
        try:
            sketches = [(d, store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch(), [d]))
                        for d in days]
        finally:
            store.close()
        return frame_to_csv(series_frame(spec, sketches))
    return median_time(run, 3)


def ldpt_cmd() -> list[str]:
    return [sys.executable, "-c", "from cli.main import main; main()"]


def measure(protocol: str, tmp: Path, repeat: int) -> list[object]:
    (tmp / "metrics.toml").write_text(registry_text(protocol), encoding="utf-8")
    (tmp / "token").write_text(TOKEN + "\n", encoding="utf-8")
    spec = load_registry(tmp / "metrics.toml").get("m")
    db = tmp / f"{protocol}.sqlite"
    days = fill(db, spec, np.random.default_rng(1))
    since, until = days[0], days[-1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_") and k != "OPENBLAS_NUM_THREADS"}
    if _INHERITED_BLAS is not None:
        env["OPENBLAS_NUM_THREADS"] = _INHERITED_BLAS
    cli_args = [*ldpt_cmd(), "estimate", "--metrics", "metrics.toml", "--metric", "m", "--db", db.name,
                "--by", "window", "--since", since, "--until", until, "--format", "csv"]
    cli_times, cli_cpu, cli_out = [], [], b""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        cli_out = subprocess.run(cli_args, cwd=tmp, env=env, capture_output=True, check=True).stdout
        cli_times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli_cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    server = subprocess.Popen([*ldpt_cmd(), "serve", "--metrics", "metrics.toml", "--db", db.name, "--port", "0",
                               "--query-token-file", "token"], cwd=tmp, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in server.stderr:  # type: ignore[union-attr]
            m = re.search(r"listening on (http://[\d.]+:\d+)", line)
            if m:
                url = m.group(1)
                break
        if url is None:
            raise RuntimeError("ldpt serve did not start")
        req = urllib.request.Request(f"{url}/v1/metrics/m/estimates?by=window&since={since}&until={until}"
                                     "&format=csv", headers={"Authorization": f"Bearer {TOKEN}"})
        api_times, api_out = [], b""
        for _ in range(repeat):
            start = time.perf_counter()
            with urllib.request.urlopen(req, timeout=120) as resp:
                api_out = resp.read()
            api_times.append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(60)
    return [spec.protocol, library_time(db, spec, days), float(np.median(cli_times)),
            float(np.median(cli_cpu)), float(np.median(api_times)), len(cli_out), "yes" if cli_out == api_out else "NO"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one protocol, one repetition")
    args = parser.parse_args()
    protocols = ["auto"] if args.quick else ["auto", "grr", "oue", "olh"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for protocol in protocols:
            rows.append(measure(protocol, Path(tmp), 1 if args.quick else 3))
    print(f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall times grow "
          "with other work on the machine; 'cli cpu s' does not")
    print_table(["protocol", "library s", "cli s", "cli cpu s", "api s", "bytes", "identical"], rows,
                f"{WINDOWS}-window series, {VALUES} values, {REPORTS:,} reports per window "
                f"(bar: identical, < 2 s) — {ROOT.name}")


if __name__ == "__main__":
    main()
