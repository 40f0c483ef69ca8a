"""End to end: SDK clients with memoised metrics -> a real `ldpt serve` -> `ldpt estimate`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk import MemoryState, RetryPolicy, TelemetryClient, Uploader
from client_sdk.transport import HTTPTransport

from .sdk_support import collector, make_registry
from .test_longitudinal_sdk import MEMO_TOML

pytestmark = pytest.mark.e2e

#: metric -> its values (MEMO_TOML)
VALUES = {"theme": ["light", "dark", "system"], "bars": [f"b{i}" for i in range(10)],
          "city": [f"c{i}" for i in range(12)], "hist": [f"h{i}" for i in range(8)]}
#: The SDK encodes on the OS CSPRNG (TelemetryClient takes no seed), so each of the 33 estimates
#: is checked at |estimate - truth| <= Z standard errors: two-sided normal tail 2.0e-9 per value,
#: 6.5e-8 per run for the 33 (was 4.5 σ at 600 devices: 2.2e-4 per run). 1,200 devices keep the
#: power relative to the counts: 6 σ at 1,200 is 4.2 σ of 600 as a share of each true count.
Z = 6.0
DEVICES = 1200


def test_memoised_metrics_through_a_real_collector(tmp_path):
    registry = make_registry(MEMO_TOML)
    rng = np.random.default_rng(8)
    devices = DEVICES
    truth = {m: rng.integers(0, len(v), devices) for m, v in VALUES.items()}
    with collector(tmp_path, MEMO_TOML) as col:
        uploader = Uploader(HTTPTransport(col.url), batch_size=100, max_batch_age=0.05,
                            retry=RetryPolicy(initial=0.05, maximum=0.5))
        for i in range(devices):
            client = TelemetryClient(registry=registry, state=MemoryState(), uploader=uploader, strict=True)
            for metric, values in VALUES.items():
                assert client.report(metric, values[truth[metric][i]])
        assert uploader.flush(30.0)
        uploader.close(5.0)
    runner = CliRunner()
    for metric, values in VALUES.items():
        out = runner.invoke(main, ["estimate", "--metrics", str(col.metrics), "--metric", metric,
                                   "--db", str(col.db), "--format", "json"])
        assert out.exit_code == 0, out.output
        doc = json.loads(out.output)
        assert doc["meta"]["n_reports"] == devices
        counts = np.bincount(truth[metric], minlength=len(values))
        for row, true_count in zip(doc["estimates"], counts):
            # a defect moving an estimate by >= 6 standard errors fails (theme: ~250 of a count of ~400)
            assert abs(row["estimate"] - true_count) <= Z * row["std_err"], (metric, row, true_count)
