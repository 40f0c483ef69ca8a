"""Sealing in Chromium: the time the JavaScript SDK spends to seal one batch (bar: ≤ 1 ms).

Headless Chromium opens client_sdk/js/e2e/seal-bench.html (cross-origin isolated: 5 µs timers)
with the sealed bundle (dist/ldpt-sealed.min.js) and times `sealRequest(config,
innerRequest(batch))` — the padded Binary HTTP request and the HPKE seal through WebCrypto
(X25519 key generation and exchange, AES-128-GCM) and the SDK's HMAC-SHA256 — for real batches
of the example registries (as bench/sealed.py makes them with the Python SDK: the bytes are the
same in every SDK) and one wide batch. Wall time in the page, which is what a seal costs the
page's event loop (the WebCrypto work runs on the browser's threads); medians and p90 over
the timed seals. Prints the sizes of both browser bundles against their budgets too.

Run: `.venv/bin/python bench/js_sealed.py` (`--rounds N`, default 500).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time

import _common  # noqa: F401 - puts the repository root on sys.path
import js_sdk
from _common import ROOT
from sealed import real_batches

from client_sdk import ohttp
from client_sdk.registry import load_registry, parse_registry

SEALED_BUNDLE = js_sdk.JS / "dist" / "ldpt-sealed.min.js"
SEALED_BUDGET = 25_000
BAR_MS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500, help="timed seals per batch")
    parser.add_argument("--warmup", type=int, default=50, help="untimed seals first")
    args = parser.parse_args()
    js_sdk.build()
    for path, budget in ((js_sdk.BUNDLE, js_sdk.SIZE_BUDGET), (SEALED_BUNDLE, SEALED_BUDGET)):
        raw = path.read_bytes()
        packed = len(gzip.compress(raw, compresslevel=9))
        print(f"{path.relative_to(ROOT)}: {len(raw):,} bytes minified, {packed:,} bytes gzip "
              f"(budget {budget:,}) -> {'OK' if packed <= budget else 'OVER BUDGET'}")
    bodies = [real_batches(load_registry(ROOT / "docs" / "examples" / "metrics.toml"), 1, 1, 1)[0],
              real_batches(load_registry(ROOT / "docs" / "examples" / "longitudinal.toml"), 1, 1, 2)[0]]
    from sealed import WIDE

    wide = parse_registry(WIDE.format(cats=", ".join(f'"p{i}"' for i in range(1000))), "wide")
    bodies.append(real_batches(wide, 30, 1, 3)[0])
    keys = ohttp.encode_key_configs([ohttp.PrivateKey.generate(1).config]).hex()
    files_patch = {"/seal-bench.html": (js_sdk.JS / "e2e" / "seal-bench.html", "text/html; charset=utf-8"),
                   "/sdk-sealed.js": (SEALED_BUNDLE, "text/javascript; charset=utf-8")}
    httpd, origin = serve_with(files_patch)
    driver = js_sdk.chromium()
    try:
        driver.set_script_timeout(600)
        driver.get(f"{origin}/seal-bench.html")
        deadline = time.monotonic() + 30
        while not driver.execute_script("return window.ldptReady === true"):
            if time.monotonic() > deadline:
                raise SystemExit("seal-bench.html did not load the sealed bundle")
            time.sleep(0.1)
        version = driver.capabilities.get("browserVersion", "?")
        result = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "window.ldptSealBench(arguments[0], arguments[1], arguments[2], arguments[3]).then(done,"
            " (e) => done({error: String(e)}));", keys, [b.hex() for b in bodies], args.rounds, args.warmup)
    finally:
        driver.quit()
        httpd.shutdown()
    if "error" in result:
        raise SystemExit(result["error"])
    print(f"\nsealing one batch in Chromium {version} (crossOriginIsolated={result['isolated']}), "
          f"{args.rounds} seals per batch after {args.warmup} warm-up:\n")
    print(f"{'batch bytes':>11} {'envelope':>9} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}  bar {BAR_MS} ms")
    worst = 0.0
    for size, times in result["times"].items():
        t = sorted(times)
        p50, p90 = t[len(t) // 2] / 1000, t[int(0.9 * len(t))] / 1000
        worst = max(worst, p50)
        env = ohttp.padded_length(int(size) + ohttp.MAX_FRAMING) + ohttp.ENVELOPE_OVERHEAD
        print(f"{size:>11} {env:>9} {p50:>8.3f} {p90:>8.3f} {t[-1] / 1000:>8.3f}  {'OK' if p50 <= BAR_MS else 'OVER'}")
    return 0 if worst <= BAR_MS else 1


def serve_with(extra: dict) -> tuple:
    """js_sdk's cross-origin-isolated server with more files."""
    import http.server
    import threading

    files = {"/sdk.js": (js_sdk.BUNDLE, "text/javascript; charset=utf-8"), **extra}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            entry = files.get(self.path.split("?", 1)[0])
            if entry is None:
                self.send_error(404)
                return
            body = entry[0].read_bytes()
            self.send_response(200)
            for name, value in (("Content-Type", entry[1]), ("Content-Length", str(len(body))),
                                ("Cross-Origin-Opener-Policy", "same-origin"),
                                ("Cross-Origin-Embedder-Policy", "require-corp")):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


if __name__ == "__main__":
    sys.exit(main())
