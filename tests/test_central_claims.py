"""The central (ε, δ) stated next to every estimate (issue 28 §3): built from exactly what the
collector recorded of the shuffled batches (collector/claims.py -> estimators.amplification's
policy), in the query API's and `ldpt estimate`'s meta.privacy and the table's header."""

from __future__ import annotations

import asyncio
import json
import math
import os

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk import ohttp
from client_sdk.registry import parse_registry
from collector.claims import privacy_meta, privacy_note, shuffled_window
from collector.storage.shuffled import ShuffleRecord
from estimators.amplification import ShuffledWindow, central_claim
from sketches import server_half

from .collector_support import TOKEN, write_token
from .test_shuffled_batches import collector, device_body, forward, forwarded, key_config
from .test_shuffled_batches import setup as shuffled_setup  # noqa: F401 - a fixture

AUTH = {"Authorization": f"Bearer {TOKEN}"}
REGISTRY = parse_registry("""
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0

[metrics.pages]
kind = "categorical"
categories = ["a", "b", "c", "d", "e", "f", "g", "h"]
protocol = "olh"
epsilon = 2.0
cohorts = 4
reports_per_window = 3

[metrics.words]
kind = "categorical"
categories = ["x", "y", "z", "w"]
protocol = "rappor"
epsilon = 1.0
epsilon_longitudinal = 3.0
""") if False else None


def record(metric="theme", window="2026-12-01", **kw):
    base = dict(reports=500, envelopes=500, batches=2, smallest_batch=240, largest_batch=260,
                smallest_segment=240, smallest_cohort=240, envelope_epsilon=math.nextafter(1.0, 2.0),
                min_reports=1, max_reports=1, max_envelope_reports=1)
    base.update(kw)
    return ShuffleRecord(metric, "fp", window, **base)


def spec_of(text):
    return next(iter(parse_registry(text)))


GRR = spec_of('[metrics.theme]\nkind = "categorical"\ncategories = ["light", "dark", "system"]\n'
              'protocol = "grr"\nepsilon = 1.0\n')
OLH = spec_of('[metrics.pages]\nkind = "categorical"\ncategories = ["a", "b", "c", "d", "e", "f", "g", "h"]\n'
              'protocol = "olh"\nepsilon = 2.0\ncohorts = 4\nreports_per_window = 3\n')


def test_the_policy_inputs_are_what_was_recorded():
    """Each ShuffledWindow field comes from the record or the registry, as collector/claims.py says."""
    w = shuffled_window(GRR, record(), 500)
    assert w == ShuffledWindow(240, math.nextafter(1.0, 2.0), envelopes_per_device=1, unshuffled_reports=0,
                               smallest_segment=240, has_cohorts=False, cohorts_permanent=False,
                               smallest_cohort=None, epsilon_inf=None, krr=3)
    # an envelope held two reports somewhere: no k-RR clones (the envelope is not one grr report)
    assert shuffled_window(GRR, record(max_envelope_reports=2), 500).krr is None
    # reports that came plain are counted against the window
    assert shuffled_window(GRR, record(), 530).unshuffled_reports == 30
    # nothing shuffled: the window's reports are all unshuffled, one envelope per report allowed
    assert shuffled_window(OLH, None, 90) == ShuffledWindow(None, server_half(OLH).epsilon, envelopes_per_device=3,
                                                            unshuffled_reports=90)
    # three reports per window: separate envelopes compose 3 parts; bundled ones are one
    sep = shuffled_window(OLH, record("pages", min_reports=1, max_reports=1, smallest_cohort=50), 500)
    assert (sep.envelopes_per_device, sep.has_cohorts, sep.cohorts_permanent, sep.smallest_cohort) == \
        (3, True, False, 50)
    assert shuffled_window(OLH, record("pages", min_reports=3, max_reports=3), 500).envelopes_per_device == 1
    assert shuffled_window(OLH, record("pages", min_reports=2, max_reports=3), 500).envelopes_per_device == 1


def test_meta_states_each_windows_claim_from_the_policy():
    windows = {"2026-12-01": 500, "2026-12-02": 530, "2026-12-03": 40}
    records = [record(window="2026-12-01"), record(window="2026-12-02", reports=500)]
    meta = privacy_meta(GRR, windows, records, delta=1e-8)
    rows = {row["window"]: row for row in meta["windows"]}
    assert list(rows) == list(windows)
    first = central_claim(shuffled_window(GRR, records[0], 500), 1e-8)
    assert first.amplified and first.epsilon < 1.0
    assert rows["2026-12-01"]["epsilon"] == first.epsilon and rows["2026-12-01"]["theorem"] == first.theorem.value
    assert rows["2026-12-01"]["inputs"]["smallest_batch"] == 240 and rows["2026-12-01"]["n"] == 240
    assert rows["2026-12-01"]["shuffled_reports"] == 500
    # 30 reports of the second window came unshuffled: only the local epsilon, with the reason
    assert rows["2026-12-02"]["amplified"] is False and rows["2026-12-02"]["epsilon"] == pytest.approx(1.0)
    assert "30 reports" in rows["2026-12-02"]["reason"]
    assert rows["2026-12-03"]["amplified"] is False and "40 reports" in rows["2026-12-03"]["reason"]
    assert meta["central_epsilon"] == pytest.approx(1.0) and meta["amplified_windows"] == 1
    e = server_half(GRR).epsilon
    assert (meta["epsilon_per_report"], meta["local_epsilon"], meta["delta"]) == (e, e, 1e-8)
    json.dumps(meta)   # plain JSON
    note = privacy_note(meta)
    assert note.startswith(f"  central epsilon per window {first.epsilon:.4g} to 1 ") and \
        "over 3 windows, 2 of them only the local epsilon" in note
    assert privacy_note(privacy_meta(GRR, {"w": 40}, [])) == ""          # nothing to add to the header


def test_collusion_never_enters_and_a_smaller_batch_weakens_the_claim():
    big = privacy_meta(GRR, {"w": 500}, [record(window="w")])["windows"][0]
    small = privacy_meta(GRR, {"w": 500}, [record(window="w", smallest_batch=60, smallest_segment=60)])["windows"][0]
    assert big["amplified"] and small["epsilon"] > big["epsilon"]


@pytest.fixture
def shuffled_store(shuffled_setup, tmp_path):  # noqa: F811 - the imported fixture
    """A collector that took 300 theme-only envelopes in one shuffled batch and 40 plain reports
    of ``app`` (which does not require shuffling): the store, and the API's answers for both."""
    path, registry, _, _, db = shuffled_setup
    rng = np.random.default_rng(11)
    token = write_token(tmp_path / "query.token")

    async def scenario():
        async with collector(shuffled_setup, query_token_file=token) as (client, _):
            config = await key_config(client)
            envelopes = [ohttp.seal_request(config, ohttp.inner_request(device_body(registry, rng))).envelope
                         for _ in range(300)]
            status, _, data = await forward(client, forwarded(envelopes, os.urandom(16)))
            assert status == 200, data
            for _ in range(4):
                resp = await client.post("/v1/reports", data=device_body(registry, rng, theme=False, app=1),
                                         headers={"Content-Type": "application/msgpack"})
                assert resp.status == 200, await resp.text()
            out = {}
            for metric in ("theme", "app"):
                resp = await client.get(f"/v1/metrics/{metric}/estimates", headers=AUTH)
                assert resp.status == 200, await resp.text()
                out[metric] = (await resp.json())["meta"]
            return out

    return path, db, asyncio.run(scenario())


def test_the_api_and_the_cli_state_the_central_claim(shuffled_store):
    path, db, api = shuffled_store
    theme = api["theme"]["privacy"]
    (row,) = theme["windows"]
    assert row["inputs"]["envelope_epsilon"] == pytest.approx(1.0, rel=1e-8)   # grr's realised epsilon, rounded up
    expected = central_claim(ShuffledWindow(300, row["inputs"]["envelope_epsilon"], smallest_segment=300, krr=3))
    assert row["amplified"] and row["epsilon"] == expected.epsilon < 1.0
    assert (row["theorem"], row["n"], row["reports"], row["shuffled_reports"]) == (expected.theorem.value, 300, 300, 300)
    assert theme["shuffle_required"] is True and theme["central_epsilon"] == expected.epsilon
    runner = CliRunner()
    result = runner.invoke(main, ["estimate", "--metrics", str(path), "--db", str(db), "--metric", "theme", "--format", "json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cli_meta = json.loads(result.stdout)["meta"]["privacy"]
    assert cli_meta == theme
    table = runner.invoke(main, ["estimate", "--metrics", str(path), "--db", str(db), "--metric", "theme"],
                          catch_exceptions=False)
    line = table.stdout.splitlines()[0]
    assert line.startswith("metric theme") and "crowd 300" in line
    assert f"central (epsilon, delta) = ({expected.epsilon:.4g}, 1e-08) by {expected.theorem.value}" in line
    # app came plain and does not require shuffling: the header is the local one, as before
    plain = runner.invoke(main, ["estimate", "--metrics", str(path), "--db", str(db), "--metric", "app"],
                          catch_exceptions=False)
    assert plain.stdout.splitlines()[0].startswith("metric app") and "central" not in plain.stdout
    # and its JSON meta has no privacy block: nothing of it met a shuffler (collector.estimates.privacy)
    assert "privacy" not in api["app"]
