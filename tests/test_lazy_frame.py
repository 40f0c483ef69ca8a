"""A LazyFrame (estimators/lazy_frame.py) writes the same bytes as the whole DataFrame.

The collector answers every frequency estimate without a page from ``estimate_frame(...,
lazy=True)``, whose rows are built piece by piece as iter_json/iter_csv write them; here
each categorical protocol's lazy answer is compared with the eager frame's, in pieces
smaller than the domain (so pieces end inside it) and with the options that change rows."""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.registry import parse_registry
from estimators.formats import frame_to_csv, frame_to_json, iter_csv, iter_json
from estimators.frequency import estimate_frame
from estimators.lazy_frame import LazyFrame
from estimators.simulation import Population, simulate_sketch

K = 37
TABLES = {
    "grr": {"protocol": "grr", "epsilon": 2.0},
    "oue": {"protocol": "oue", "epsilon": 1.0},
    "olh": {"protocol": "olh", "epsilon": 2.0},
    "hr": {"protocol": "hr", "epsilon": 1.5},
    "dbitflip": {"protocol": "dbitflip", "epsilon": 5.0, "epsilon_inf": 7.0, "sampled_buckets": 1},
}


#: dbitflip's sampled exact intervals (a hypergeometric search per bound, per piece) make its case
#: ~8 s of CPU: it runs with the seeded statistical checks, the other protocols in the fast subset.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.statistical) if n == "dbitflip" else n
                                  for n in sorted(TABLES)])
def test_a_lazy_frame_writes_the_whole_frames_bytes(name):
    table = {"kind": "categorical", "categories": [f"=v{i}\x1b" for i in range(K)], **TABLES[name]}
    spec = parse_registry({"metrics": {"m": table}}).get("m")
    truth = np.zeros(K, dtype=np.int64)
    truth[:5] = [900, 400, 150, 30, 3]
    sketch = simulate_sketch(spec, Population(list(spec.domain), truth), np.random.default_rng(len(name)))
    for options in ({}, {"simultaneous": True}, {"confidence": 0.9, "control": "fdr"}):
        whole = estimate_frame(spec, sketch, **options)
        lazy = estimate_frame(spec, sketch, lazy=True, **options)
        assert isinstance(lazy, LazyFrame) and len(lazy) == len(whole) == K
        assert frame_to_json(lazy) == frame_to_json(whole)
        assert frame_to_csv(lazy) == frame_to_csv(whole) and frame_to_csv(lazy, raw=True) == frame_to_csv(whole, raw=True)
        assert "".join(iter_json(lazy, rows_per_piece=10)) == frame_to_json(whole)
        assert "".join(iter_csv(lazy, rows_per_piece=10)) == frame_to_csv(whole)
        assert lazy.to_frame().equals(whole)
