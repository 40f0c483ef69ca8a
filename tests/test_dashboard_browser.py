"""The dashboard in a real browser: headless Chromium (selenium) against a real `ldpt serve`.

The store holds six past days written by `ldpt simulate --db` and today's window filled over
HTTP by `ldpt simulate --url`. Checked: the page loads without console errors and without a
request to another origin, a wrong token is refused, the charts render (SVG with points,
lines and bands), and every number of the tables equals the query API's. A screenshot of each
page is saved under $LDPT_TEST_ARTIFACTS (default tests/artifacts/, gitignored).

Skips, with the reason, where Chromium, chromedriver or selenium is missing (`.ci/run`
installs Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from cli.output import format_number
from tests.collector_support import serving

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(os.environ.get("LDPT_TEST_ARTIFACTS") or Path(__file__).parent / "artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
TOKEN = "dashboard-test-token-0123456789"
REGISTRY = """
[metrics.country]
kind = "categorical"
protocol = "grr"
epsilon = 2.0
categories = ["AR", "AU", "BR", "CA", "CN", "DE", "EG", "ES", "FR", "GB", "<script>x</script>", "other"]
description = "Country setting"

[metrics.session_minutes]
kind = "numeric"
range = [0, 120]
unit = "minutes"
protocol = "auto"
epsilon = 1.0
description = "Minutes in the session"

[metrics.startup_ms]
kind = "numeric"
range = [0, 5000]
unit = "ms"
buckets = [0, 250, 500, 1000, 2000, 5000]
protocol = "auto"
epsilon = 2.0
description = "Start-up time (a histogram)"

[metrics.home]
kind = "string"
protocol = "rappor"
bloom_bits = 64
hashes = 2
cohorts = 8
epsilon = 4.0
description = "Home page (strings: no compare)"

[metrics.crash]
kind = "boolean"
protocol = "rr"
epsilon = 2.0
description = "Crashed today (one window only)"
"""

try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the [dev] extra installs it
    webdriver = None

if webdriver is None:
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)
if CHROMIUM is None or DRIVER is None:
    pytest.skip("Chromium or chromedriver not found (apt-get install chromium chromium-driver; "
                ".ci/run does it)", allow_module_level=True)


def _ldpt(*args: str, cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
    subprocess.run([sys.executable, "-c", "from cli.main import main; main()", *args], cwd=cwd, env=env,
                   check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """A collector on 127.0.0.1 (ephemeral port) with seven days of two metrics."""
    tmp = tmp_path_factory.mktemp("dashboard")
    (tmp / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    (tmp / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (tmp / "token").chmod(0o600)   # the collector refuses a token file others can read
    (tmp / "hosts.csv").write_text("value,count\na.example,5\nb.example,3\n", encoding="utf-8")
    today = dt.datetime.now(dt.timezone.utc).date()
    for back in range(6, 0, -1):
        day = (today - dt.timedelta(days=back)).isoformat()
        shift = "zipf:1.1" if back > 2 else "zipf:0.8"  # a visible change two days ago
        _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "country", "--clients", "20000",
              "--distribution", shift, "--seed", str(back), "--db", "store.sqlite", "--window", day,
              "--silent", cwd=tmp)
        _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "session_minutes", "--clients", "5000",
              "--distribution", f"normal:{30 + 3 * back},15", "--seed", str(100 + back), "--db",
              "store.sqlite", "--window", day, "--silent", cwd=tmp)
        _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "startup_ms", "--clients", "5000",
              "--distribution", "lognormal:6.5,0.6", "--seed", str(200 + back), "--db",
              "store.sqlite", "--window", day, "--silent", cwd=tmp)
        _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "home", "--clients", "2000",
              "--distribution", "csv:hosts.csv", "--seed", str(300 + back), "--db",
              "store.sqlite", "--window", day, "--silent", cwd=tmp)
    with serving(["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0",
                  "--query-token-file", "token", "--workers", "2"], tmp) as server:
        for metric, clients in (("country", "5000"), ("session_minutes", "3000"), ("startup_ms", "3000"),
                                ("crash", "2000")):
            _ldpt("simulate", "--metrics", "metrics.toml", "--metric", metric, "--clients", clients,
                  "--seed", "7", "--url", server.url, "--silent", cwd=tmp)
        yield server


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1800", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def api(url: str, path: str) -> dict:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"dashboard-{name}.png"
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1280, max(900, min(int(height) + 40, 6000)))
    driver.save_screenshot(str(path))
    return path


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def foreign_requests(driver, origin: str) -> list[str]:
    names = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [n for n in names if not n.startswith(origin)]


def sign_in(driver, url: str, token: str) -> None:
    driver.get(url + "/ui/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(url + "/ui/")
    field = WebDriverWait(driver, 30).until(ec.visibility_of_element_located((By.ID, "token")))
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()


def wait_svg(driver, container: str, inner: str) -> None:
    WebDriverWait(driver, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#{container} svg {inner}"),
        f"no {inner} in #{container}")


def cells(driver, table_id: str) -> dict[str, dict[str, str]]:
    out = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr"):
        out[tr.get_attribute("data-key")] = {td.get_attribute("data-col"): td.text
                                             for td in tr.find_elements(By.TAG_NAME, "td")}
    return out


def open_metric(driver, url: str, metric: str, compare: bool = True) -> list[str]:
    """Sign in, open METRIC's page, wait until its charts and tables are drawn; its windows."""
    sign_in(driver, url, TOKEN)
    WebDriverWait(driver, 30).until(ec.visibility_of_element_located((By.ID, "metrics")))
    driver.find_element(By.LINK_TEXT, metric).click()
    wait_svg(driver, "latest-chart", "circle.point")
    wait_svg(driver, "series-chart", "polyline.line")
    wait_svg(driver, "series-chart", "polygon.band")
    if compare:
        wait_svg(driver, "compare-chart", "circle.point")
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#compare tbody tr"))
    else:
        WebDriverWait(driver, 30).until(ec.visibility_of_element_located((By.ID, "compare-note")))
    overview = {m["name"]: m for m in api(url, "/ui/api/overview")["metrics"]}
    return [w for w, _ in overview[metric]["windows"]]


def test_wrong_token_is_refused(collector, browser):
    sign_in(browser, collector.url, "not-the-token")
    error = WebDriverWait(browser, 30).until(ec.visibility_of_element_located((By.ID, "login-error")))
    assert "refused" in error.text
    assert not browser.find_element(By.ID, "app").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('ldpt-query-token')") is None
    assert "not-the-token" not in browser.current_url
    screenshot(browser, "wrong-token")
    # Only the 401 of the refused token reaches the console (Chromium logs failed fetches).
    errors = console_errors(browser)
    assert all("401" in m for m in errors), errors


def test_metric_list_matches_the_store(collector, browser):
    sign_in(browser, collector.url, TOKEN)
    WebDriverWait(browser, 30).until(ec.visibility_of_element_located((By.ID, "metrics")))
    overview = api(collector.url, "/ui/api/overview")
    shown = cells(browser, "metrics")
    for m in overview["metrics"]:
        assert shown[m["name"]]["n_reports"] == f"{m['n_reports']:,}"  # separated as the CLI prints it
        assert shown[m["name"]]["protocol"] == m["protocol"]
        assert shown[m["name"]]["windows"] == {"crash": "1", "home": "6"}.get(m["name"], "7")
    assert shown["startup_ms"]["kind"] == "numeric (histogram), ms"
    assert TOKEN not in browser.current_url
    screenshot(browser, "metrics")
    assert console_errors(browser) == []
    assert foreign_requests(browser, collector.url) == []


def test_categorical_metric_page(collector, browser):
    windows = open_metric(browser, collector.url, "country")
    latest = api(collector.url, f"/v1/metrics/country/estimates?window={windows[-1]}")
    shown = cells(browser, "estimates")
    assert len(shown) == len(latest["estimates"]) == 12
    for row in latest["estimates"]:
        got = shown[str(row["value"])]
        assert got["estimate"] == f"{row['estimate']:,.1f}"
        assert got["proportion"] == f"{row['proportion']:.4f}"
        assert got["ci_low"] == f"{row['ci_low']:,.1f}" and got["ci_high"] == f"{row['ci_high']:,.1f}"
    order = [float(tr.find_elements(By.TAG_NAME, "td")[1].text.replace(",", ""))
             for tr in browser.find_elements(By.CSS_SELECTOR, "#estimates tbody tr")]
    assert order == sorted(order, reverse=True)  # largest first
    cmp = api(collector.url, f"/v1/metrics/country/compare?a={windows[-2]}&b={windows[-1]}")
    shown = cells(browser, "compare")
    for row in cmp["estimates"]:
        assert shown[str(row["value"])]["difference"] == f"{row['difference']:.4f}"
        assert shown[str(row["value"])]["changed"] == ("CHANGED" if row["changed"] else "")
    # a value that looks like markup is shown as text, never run
    assert browser.find_elements(By.XPATH, "//td[text()='<script>x</script>']")
    screenshot(browser, "country")
    assert console_errors(browser) == []
    assert foreign_requests(browser, collector.url) == []


def test_mean_metric_page(collector, browser):
    latest_window = open_metric(browser, collector.url, "session_minutes")[-1]
    latest = api(collector.url, f"/v1/metrics/session_minutes/estimates?window={latest_window}")
    mean = next(r for r in latest["estimates"] if r["statistic"] == "mean")
    assert cells(browser, "estimates")["mean"]["estimate"] == format_number(mean["estimate"])
    assert "estimate (minutes)" in [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#estimates th")]
    screenshot(browser, "session-minutes")
    assert console_errors(browser) == []


def test_histogram_metric_page(collector, browser):
    """Bucket counts apart from the mean and quantiles (in ms); the mean's bias bound said; the
    unequal buckets drawn as densities; the series of p50 and p90 (issue 23)."""
    latest_window = open_metric(browser, collector.url, "startup_ms")[-1]
    latest = api(collector.url, f"/v1/metrics/startup_ms/estimates?window={latest_window}")
    buckets, stats = cells(browser, "estimates"), cells(browser, "statistics")
    for row in latest["estimates"]:
        if row["statistic"] == "count":
            assert buckets[row["value"]]["estimate"] == f"{row['estimate']:,.1f}"
        else:
            assert stats[row["statistic"]]["estimate"] == format_number(row["estimate"])
    assert set(stats) == {"mean", "p10", "p25", "p50", "p75", "p90", "p99"} and len(buckets) == 5
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#statistics th")]
    assert "estimate (ms)" in headers
    assert "density (per ms)" in [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#estimates th")]
    note = browser.find_element(By.ID, "statistics-note").text
    assert "bias bound" in note and format_number(latest["meta"]["mean_bias_bound"]) in note
    latest_svg = browser.find_element(By.CSS_SELECTOR, "#latest-chart svg").get_attribute("outerHTML")
    assert "density: proportion of reports per ms" in latest_svg
    series_svg = browser.find_element(By.CSS_SELECTOR, "#series-chart svg").get_attribute("outerHTML")
    assert ">p50</text>" in series_svg and ">p90</text>" in series_svg and "quantile (ms)" in series_svg
    assert len(cells(browser, "compare")) == 5  # the buckets
    screenshot(browser, "startup-ms")
    assert console_errors(browser) == []


def test_string_metric_page_offers_no_compare(collector, browser):
    """A RAPPOR string metric is decoded against candidates: the page says so once and asks for
    them (it used to show the API's 422 three times, naming a CLI flag); decoded, it draws the
    strings' estimates and series, and offers no comparison."""
    sign_in(browser, collector.url, TOKEN)
    WebDriverWait(browser, 30).until(ec.visibility_of_element_located((By.ID, "metrics")))
    browser.find_element(By.LINK_TEXT, "home").click()
    box = WebDriverWait(browser, 30).until(ec.visibility_of_element_located((By.ID, "candidates")))
    assert "Bloom filters, not strings" in browser.find_element(By.ID, "candidates-help").text
    assert not [e for e in browser.find_elements(By.CSS_SELECTOR, ".error") if e.is_displayed()]
    box.send_keys("a.example\nb.example\nnot-there.example")
    browser.find_element(By.ID, "candidates-go").click()
    note = WebDriverWait(browser, 60).until(ec.visibility_of_element_located((By.ID, "compare-note")))
    assert "not on strings" in note.text
    wait_svg(browser, "latest-chart", "circle.point")
    wait_svg(browser, "series-chart", "polyline.line")
    assert set(cells(browser, "estimates")) == {"a.example", "b.example", "not-there.example"}
    assert not browser.find_elements(By.ID, "compare-a") and not browser.find_elements(By.ID, "compare-go")
    screenshot(browser, "home")
    assert console_errors(browser) == []


def test_single_window_metric_says_compare_needs_two(collector, browser):
    open_metric(browser, collector.url, "crash", compare=False)
    note = browser.find_element(By.ID, "compare-note").text
    assert "needs two windows" in note and "1 such window" in note
    assert not browser.find_elements(By.ID, "compare-a")
    assert "1 window." in browser.find_element(By.CSS_SELECTOR, "p.meta").text  # not "1 windows"


def test_series_values_are_picked_on_the_page(collector, browser):
    open_metric(browser, collector.url, "country")
    picker = browser.find_element(By.ID, "series-values")
    picker.find_element(By.TAG_NAME, "summary").click()
    boxes = picker.find_elements(By.CSS_SELECTOR, "input[type=checkbox]")
    assert len(boxes) == 12 and sum(b.is_selected() for b in boxes) == 5
    rare = boxes[-1]
    value = rare.get_attribute("value")
    before = browser.find_element(By.CSS_SELECTOR, "#series-chart svg").get_attribute("outerHTML")
    assert f">{value}</text>" not in before
    rare.click()
    WebDriverWait(browser, 60).until(lambda d: f">{value}</text>" in d.find_element(
        By.CSS_SELECTOR, "#series-chart svg").get_attribute("outerHTML"))
    legend = browser.find_element(By.CSS_SELECTOR, "#latest-chart svg g.legend").text
    assert "detected" in legend and "not detected" in legend
    title = browser.find_element(By.CSS_SELECTOR, "#compare-chart svg text").text
    a, b = (browser.find_element(By.ID, i).get_attribute("value") for i in ("compare-a", "compare-b"))
    assert f"from A {a} to B {b}" in title  # the selectors' order


PHONE = 390


@pytest.mark.parametrize("metric", ["country", "startup_ms", "session_minutes"])
def test_phone_width_has_no_sideways_page_scroll(collector, browser, metric):
    """At 390 px (a phone) charts scale to the width and tables scroll in their own box: the
    page never scrolls sideways and every chart lies within the viewport (issue 23)."""
    try:
        browser.set_window_size(PHONE, 900)
        open_metric(browser, collector.url, metric)
        inner = browser.execute_script("return window.innerWidth")
        assert inner <= PHONE
        page = browser.execute_script("return document.documentElement.scrollWidth")
        assert page <= inner, f"the page is {page} px wide in a {inner} px viewport"
        boxes = browser.execute_script(
            "return [...document.querySelectorAll('.chart svg')].map(s => {"
            "const r = s.getBoundingClientRect(); return [r.left, r.right, r.width, r.height]; })")
        assert len(boxes) == 3
        for left, right, width, height in boxes:
            assert left >= 0 and right <= inner and width > 0.7 * (inner - 40) and height > 50
        wraps = browser.execute_script(
            "return [...document.querySelectorAll('table')].map(t => t.parentElement.className)")
        assert wraps and all(c == "table-wrap" for c in wraps)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        height = browser.execute_script("return document.body.scrollHeight")
        browser.set_window_size(PHONE, max(900, min(int(height) + 40, 6000)))
        assert browser.execute_script("return document.documentElement.scrollWidth") <= PHONE
        browser.save_screenshot(str(ARTIFACTS / f"dashboard-phone-{metric}.png"))
        assert console_errors(browser) == []
    finally:
        browser.set_window_size(1280, 1800)
