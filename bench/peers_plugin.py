"""ldp-telemetry's frequency oracles as adapters for a side-by-side peers benchmark.

The benchmark harness (one adapter = encode a population, estimate proportions) runs pure-LDP
and multi-freq-ldpy next to these; figures are quoted in docs/benchmarks.md. Adapters: our
general Hadamard response (``ours/HR``), OLH (``ours/OLH``) and `auto` within a 64-byte report
budget (``ours/auto-64B``), each with its default parameters for (d, ε). Encoding uses the seeded
numpy Generator the harness passes in (simulation mode); estimates are the unbiased counts over n.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from client_sdk.protocols.factory import choose_protocol  # noqa: E402
from sketches import build_server  # noqa: E402


def _pair(name_of):
    """(encode_population, estimate) for the protocol ``name_of(d, eps)`` names."""
    def encode(values: np.ndarray, eps: float, d: int, rng: np.random.Generator):
        proto = build_server(name_of(d, eps), d, eps, {})
        return proto, proto.encode(np.asarray(values, dtype=np.int64), rng)

    def estimate(reports, eps: float, d: int) -> np.ndarray:
        proto, payloads = reports
        sketch = proto.new_sketch()
        proto.accumulate(sketch, payloads)
        est = proto.estimate(sketch)
        return est.counts / max(est.n, 1)

    return encode, estimate


def _adapter(label: str, name_of) -> dict:
    encode, estimate = _pair(name_of)
    return {"name": f"ours/{label}", "encode_population": encode, "estimate": estimate,
            "library": "ldp-telemetry", "protocol": label}


ADAPTERS = [
    _adapter("HR", lambda d, eps: "hr"),
    _adapter("OLH", lambda d, eps: "olh"),
    _adapter("auto-64B", lambda d, eps: choose_protocol(d, eps, max_report_bytes=64)),
]
