"""The JavaScript SDK end to end in a real browser: headless Chromium (selenium) against `ldpt serve`.

The test page (client_sdk/js/e2e/fleet.html) is served from its own origin, another port than
the collector's, so every request of the SDK is cross-origin: the collector answers CORS for
that origin only (`--cors-origins`). The page loads the built, minified bundle and

- simulates 2,000 devices — each a `TelemetryClient` with its own IndexedDB namespace, secret
  and ledger — reporting a categorical, a string (RAPPOR) and a numeric metric; the collector's
  estimates cover the truth;
- in two tabs of one origin, spends one shared device budget ([device] epsilon_per_window):
  together they never charge or send more than the cap (Web Locks + IndexedDB transactions);
- checks the IndexedDB store itself (e2e/storage.html): outbox caps, exclusive claims across two
  store objects of one namespace, one secret, and 24 concurrent ledger commits under a cap of 10;
- queues a report and sends it when the page is hidden (`visibilitychange`), or left for
  another page (`pagehide`: the keepalive fetch starts in the event handler), nothing flushed;
- runs every conformance vector (conformance/vectors/: derivations, roundings, reports for given
  random bytes, memoised responses, ledger charges, batch bytes) in Chromium, through the same
  checks as the Node tests (client_sdk/js/test/conformance_check.ts, bundled for the browser).

Screenshots of the page are saved under $LDPT_TEST_ARTIFACTS (default tests/artifacts/,
gitignored). Skips, with the reason, without Chromium/chromedriver/selenium or node/npm.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.collector_support import wait_until
from tests.js_runtime_support import PageServer, assert_covers_truth, built_sdk, e2e_collector, estimate

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(os.environ.get("LDPT_TEST_ARTIFACTS") or Path(__file__).parent / "artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
DEVICES = 2000

try:
    from selenium import webdriver
except ImportError:  # pragma: no cover - the [dev] extra installs it
    webdriver = None

if webdriver is None:
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)
if CHROMIUM is None or DRIVER is None:
    pytest.skip("Chromium or chromedriver not found (apt-get install chromium chromium-driver; "
                ".ci/run does it)", allow_module_level=True)


@pytest.fixture
def page():
    built_sdk()
    server = PageServer()
    yield server
    server.close()


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--no-first-run",
                "--disable-extensions", "--window-size=1100,900",
                # background tabs keep their timers: the two-tab test runs both at once
                "--disable-background-timer-throttling", "--disable-renderer-backgrounding"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_page(driver, page: PageServer, endpoint: str) -> None:
    driver.get(f"{page.origin}/fleet.html?endpoint={endpoint}")
    deadline = time.monotonic() + 30
    while not driver.execute_script("return window.ldptReady === true"):
        assert time.monotonic() < deadline, "the test page did not load the SDK bundle"
        time.sleep(0.1)


def wait_result(driver, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        result = driver.execute_script("return window.ldptResult")
        if result:
            assert "error" not in result, result["error"]
            return result
        assert time.monotonic() < deadline, driver.find_element("id", "status").text
        time.sleep(0.25)


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_every_conformance_vector_passes_in_chromium(page, browser):
    browser.get(f"{page.origin}/conformance.html")
    def result():
        return browser.execute_script("return document.body.dataset.result || null")
    assert wait_until(result, timeout=120), "the conformance page never finished"
    doc = json.loads(result())
    screenshot(browser, "js-sdk-browser-conformance.png")
    assert doc["failures"] == [], "\n".join(doc["failures"][:20])
    assert doc["counted"]["reports"] >= 600 and doc["counted"]["ledger_sequences"] >= 6
    assert "Chrome" in doc["userAgent"]


def test_browser_fleet_estimates_cover_the_truth(tmp_path, page, browser):
    with e2e_collector(tmp_path, origins=page.origin) as server:
        open_page(browser, page, server.url)
        browser.execute_script("window.ldptStart('fleet', arguments[0], 'fleet')", DEVICES)
        fleet = wait_result(browser, 600)
        screenshot(browser, "js-sdk-browser-fleet.png")
        assert fleet["disabled"] == []
        assert fleet["devices"] == fleet["flushed"] == DEVICES
        assert fleet["reported"] == fleet["acked"] == 3 * DEVICES
        assert console_errors(browser) == []
        assert_covers_truth(server, tmp_path, DEVICES)


def test_browser_devices_send_sealed_batches_to_the_gateway(tmp_path, page, browser):
    """The sealed bundle in Chromium: every batch sealed (WebCrypto X25519) to a real ldpt serve
    gateway, cross-origin; no plain batch reaches the collector; the estimates cover the truth."""
    devices = 300
    with e2e_collector(tmp_path, origins=page.origin, sealed=True) as server:
        open_page(browser, page, server.url)
        browser.execute_script("window.ldptStart('sealed', arguments[0], 'sealed')", devices)
        fleet = wait_result(browser, 600)
        screenshot(browser, "js-sdk-browser-sealed-fleet.png")
        assert fleet["disabled"] == []
        assert fleet["devices"] == fleet["flushed"] == devices
        assert fleet["reported"] == fleet["acked"] == 3 * devices
        assert console_errors(browser) == []
        assert_covers_truth(server, tmp_path, devices)
        log = server.text()
    posts = [p for p in re.findall(r'"POST (\S+) HTTP', log) if not p.startswith("/v1/metrics/")]
    assert posts and set(posts) == {"/.well-known/ohttp-gateway"}


def test_two_tabs_never_overspend_one_device_budget(tmp_path, page, browser):
    with e2e_collector(tmp_path, origins=page.origin) as server:
        open_page(browser, page, server.url)
        first = browser.current_window_handle
        browser.switch_to.new_window("tab")
        open_page(browser, page, server.url)
        second = browser.current_window_handle
        for handle in (first, second):   # both tabs load the device's book, then report at once
            browser.switch_to.window(handle)
            browser.execute_script("window.ldptStart('shared', 5, 'shared-device')")
        for handle in (first, second):
            browser.switch_to.window(handle)
            deadline = time.monotonic() + 60
            while not browser.execute_script("return window.ldptArmed === true"):
                assert time.monotonic() < deadline, "a tab did not open the device state"
                time.sleep(0.05)
        for handle in (first, second):
            browser.switch_to.window(handle)
            browser.execute_script("window.ldptGo()")
        results = []
        for handle in (first, second):
            browser.switch_to.window(handle)
            results.append(wait_result(browser, 120))
            screenshot(browser, f"js-sdk-browser-tab-{len(results)}.png")
        # [device] epsilon_per_window = 6 and load costs ε = 2: three reports in the window in all.
        # Each tab's mirror allowed three (both read an empty book), so three more were queued
        # and then refused by the locked commit: never sent
        assert [r["accepted"] for r in results] == [3, 3], results
        assert sum(r["charged"] for r in results) == sum(r["acked"] for r in results) == 3, results
        assert sum(r["refusedAtCommit"] for r in results) == 3, results
    (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")


def test_hiding_the_page_sends_what_is_queued(tmp_path, page, browser):
    with e2e_collector(tmp_path, origins=page.origin) as server:
        open_page(browser, page, server.url)
        browser.execute_script("window.ldptStart('hide', 1, 'hide-device')")
        deadline = time.monotonic() + 60
        while not browser.execute_script("return window.ldptArmed === true"):
            assert time.monotonic() < deadline, "the page did not report"
            time.sleep(0.05)
        time.sleep(0.5)
        assert browser.execute_script("return window.ldptResult") is None   # queued, not sent
        browser.execute_script("Object.defineProperty(document, 'visibilityState', {value: 'hidden'});"
                               "document.dispatchEvent(new Event('visibilitychange'));")
        result = wait_result(browser, 60)
        assert (result["acked"], result["queued"]) == (1, 0), result


def test_leaving_the_page_sends_what_is_queued(tmp_path, page, browser):
    with e2e_collector(tmp_path, origins=page.origin) as server:
        open_page(browser, page, server.url)
        browser.execute_script("window.ldptStart('hide', 1, 'leave-device')")
        deadline = time.monotonic() + 60
        while not browser.execute_script("return window.ldptArmed === true"):
            assert time.monotonic() < deadline, "the page did not report"
            time.sleep(0.05)
        browser.get("about:blank")   # pagehide: charged, stored and sent with keepalive
        assert wait_until(lambda: estimate_count(server, tmp_path, "theme") == 1, 30), \
            "the report queued before leaving the page never arrived"


def estimate_count(server, tmp_path, metric: str) -> int:
    try:
        return estimate(server, tmp_path, metric)["meta"]["n_reports"]
    except AssertionError:   # no data yet
        return 0


def test_indexeddb_state_outbox_caps_claims_and_the_locked_ledger(page, browser):
    browser.get(f"{page.origin}/storage.html")
    result = wait_result(browser, 60)
    assert result == {"pending": 3, "dropped": 1, "claimed": [1, 2], "reclaimed": True, "afterDone": 2,
                      "sameSecret": True, "charged": 10, "windowReports": 10, "outboxVector": [],
                      "redatedElsewhere": True}, result
