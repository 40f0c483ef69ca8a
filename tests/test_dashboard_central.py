"""The dashboard states each window's central (ε, δ) next to the local ε (issue 28 §3), in a real
browser: headless Chromium (selenium) against a real `ldpt serve` with gateway keys and a
shuffler token. Three metrics: ``theme`` took one forwarded batch of 300 sealed envelopes (the
window is amplified), ``vote`` one of 10 (too few: no amplification is certified and the page says
why), ``plain`` plain reports of a metric that does not require shuffling (no central line: its
estimate states none). The page's line must carry the API's own figures (meta.privacy); a
screenshot of each page is saved as ``dashboard-central-<metric>.png`` under $LDPT_TEST_ARTIFACTS.

Skips, with the reason, where Chromium, chromedriver or selenium is missing (as
tests/test_dashboard_browser.py, whose browser fixture and helpers it shares).
"""

from __future__ import annotations

import os
import urllib.request

import msgpack
import numpy as np
import pytest

from client_sdk import ohttp
from client_sdk.registry import parse_registry
from collector import ohttp_keys
from collector.shuffled import SHUFFLED_PATH, SHUFFLED_TYPE
from tests.collector_support import make_body, serving, wire_reports
from tests.test_dashboard_browser import (  # the same browser fixture and helpers
    ARTIFACTS,
    TOKEN,
    api,
    browser,  # noqa: F401 - a pytest fixture
    console_errors,
)
from tests.test_dashboard_kinds import error_boxes, open_page

pytestmark = pytest.mark.e2e

SHUFFLER_TOKEN = "dashboard-shuffler-token-0123456789"
REGISTRY = """
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0
shuffle = "required"

[metrics.vote]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
shuffle = "required"

[metrics.plain]
kind = "categorical"
categories = ["a", "b"]
protocol = "grr"
epsilon = 2.0
"""


def _secret_file(path, text: str):  # noqa: ANN001, ANN202
    path.write_text(text + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """`ldpt serve` that took theme's 300 and vote's 10 envelopes shuffled, and plain's 200 reports."""
    tmp = tmp_path_factory.mktemp("dashboard-central")
    (tmp / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    _secret_file(tmp / "token", TOKEN)
    _secret_file(tmp / "shuffler.token", SHUFFLER_TOKEN)
    ohttp_keys.generate(tmp / "keys")
    registry = parse_registry(REGISTRY)
    rng = np.random.default_rng(31)
    with serving(["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0", "--query-token-file", "token",
                  "--ohttp-keys-dir", "keys", "--shuffler-token-file", "shuffler.token"], tmp) as server:
        with urllib.request.urlopen(server.url + ohttp.GATEWAY_PATH, timeout=30) as resp:
            config = ohttp.choose(ohttp.decode_key_configs(resp.read()))
        for metric, envelopes in (("theme", 300), ("vote", 10)):
            spec = registry.get(metric)
            sealed = [ohttp.seal_request(config, ohttp.inner_request(make_body(
                wire_reports(spec, rng.integers(0, 2, 1), rng)))).envelope for _ in range(envelopes)]
            body = msgpack.packb({"v": 1, "batch_id": os.urandom(16), "envelopes": sealed})
            assert _post(server.url + SHUFFLED_PATH, body, {"Content-Type": SHUFFLED_TYPE,
                                                           "Authorization": f"Bearer {SHUFFLER_TOKEN}"}) == 200
        spec = registry.get("plain")
        for _ in range(4):
            body = make_body(wire_reports(spec, rng.integers(0, 2, 50), rng))
            assert _post(server.url + "/v1/reports", body, {"Content-Type": "application/msgpack"}) == 200
        yield server


def shown_claim(driver) -> tuple[str, str] | None:  # noqa: ANN001
    """The page's central-claim line (text, data-amplified), or None where there is none."""
    return driver.execute_script(
        "const e = document.getElementById('central-claim'); return e ? [e.textContent, e.dataset.amplified] : null")


def test_an_amplified_window_shows_its_central_epsilon_beside_the_local_one(collector, browser):  # noqa: F811
    open_page(browser, collector.url, "theme", 1280)
    (row,) = api(collector.url, "/v1/metrics/theme/estimates?format=json")["meta"]["privacy"]["windows"]
    assert row["amplified"] and row["n"] == 300 and row["epsilon"] < 0.5 and row["local_epsilon"] == pytest.approx(1.0)
    text, amplified = shown_claim(browser)
    assert amplified == "1"
    assert f"({row['epsilon']:.3g}, 1e-8) for this window by {row['theorem']}; {row['reason']};" in text, text
    assert "the smallest shuffled batch (300)" in text, text
    assert "each report's local ε = 1.00" in text and "collude" in text, text
    assert not error_boxes(browser) and not console_errors(browser)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-central-theme.png"))


def test_a_window_too_small_to_amplify_says_why_and_keeps_the_local_epsilon(collector, browser):  # noqa: F811
    open_page(browser, collector.url, "vote", 1280)
    (row,) = api(collector.url, "/v1/metrics/vote/estimates?format=json")["meta"]["privacy"]["windows"]
    assert not row["amplified"] and row["n"] == 10
    text, amplified = shown_claim(browser)
    assert amplified == "0"
    assert text == f"central ε: none for this window ({row['reason']}); each report's local ε = 1.00 stands", text
    assert not error_boxes(browser) and not console_errors(browser)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-central-vote.png"))


def test_a_metric_that_never_met_a_shuffler_states_no_central_claim(collector, browser):  # noqa: F811
    open_page(browser, collector.url, "plain", 1280)
    assert "privacy" not in api(collector.url, "/v1/metrics/plain/estimates?format=json")["meta"]
    assert shown_claim(browser) is None
    assert not error_boxes(browser) and not console_errors(browser)
