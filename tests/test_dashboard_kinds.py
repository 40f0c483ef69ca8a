"""Every metric kind's dashboard page in a real browser, at 1280 px and at 390 px (issue 31).

Headless Chromium (selenium) against a real `ldpt serve` whose store holds three days of one
metric of each kind: boolean, categorical, a RAPPOR string (decoded against candidates the
analyst types on the page), a discover string, a numeric mean, a histogram, a memoised
categorical, two joint metrics (a category × boolean, a category × bucketed number) and a
categorical with a public dimension (its breakdown). Each page is opened, left to finish every
request, and must show no error box, log no console error and never scroll sideways; a
screenshot of the whole page is saved as ``dashboard-kind-<metric>-<width>.png`` under
$LDPT_TEST_ARTIFACTS (default tests/artifacts/). The joint pages' tables (marginals, shares,
means, independence) must equal the query API's numbers.

Skips, with the reason, where Chromium, chromedriver or selenium is missing (as
tests/test_dashboard_browser.py, whose browser fixture and helpers it shares).
"""

from __future__ import annotations

import datetime as dt

import pytest
from click.testing import CliRunner

from cli.main import main
from tests.collector_support import serving
from tests.test_dashboard_browser import (  # the same browser fixture and helpers
    ARTIFACTS,
    TOKEN,
    api,
    browser,  # noqa: F401 - a pytest fixture
    console_errors,
    foreign_requests,
    sign_in,
)

pytestmark = pytest.mark.e2e

REGISTRY = """
[dimensions]
min_reports = 500

[dimensions.os]
values = ["android", "ios"]

[metrics.crashed]
kind = "boolean"
protocol = "rr"
epsilon = 2.0
description = "Crashed today"

[metrics.country]
kind = "categorical"
protocol = "grr"
epsilon = 2.0
categories = ["AR", "BR", "CA", "DE", "FR", "GB", "IN", "JP", "US", "other"]

[metrics.home_rappor]
kind = "string"
protocol = "rappor"
bloom_bits = 64
hashes = 2
cohorts = 8
epsilon = 4.0
description = "Home page (RAPPOR: decoded against candidates)"

[metrics.home_discover]
kind = "string"
protocol = "discover"
epsilon = 4.0
max_length = 16
description = "Home page (discovered)"

[metrics.session_minutes]
kind = "numeric"
range = [0, 120]
unit = "minutes"
epsilon = 1.0

[metrics.startup_ms]
kind = "numeric"
range = [0, 5000]
unit = "ms"
buckets = [0, 250, 500, 1000, 2000, 5000]
epsilon = 2.0

[metrics.theme_daily]
kind = "categorical"
categories = ["light", "dark", "system"]
epsilon = 1.0
epsilon_inf = 4.0
description = "Memoised (L-GRR)"

[metrics.crash_by_os]
kind = "joint"
epsilon = 2.0
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios", "windows", "macos"] },
  { name = "crashed", kind = "boolean" },
]

[metrics.startup_by_os]
kind = "joint"
epsilon = 2.0
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios", "windows", "macos"] },
  { name = "startup_ms", kind = "numeric", range = [0, 5000], buckets = [0, 250, 500, 1000, 2000, 5000], unit = "ms" },
]

[metrics.theme_by_os]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 2.0
dimensions = ["os"]
"""
HOSTS = {"news.example": 50, "mail.example": 30, "search.example": 20, "video.example": 10}
#: metric -> extra `ldpt simulate` options and the clients per window.
SIMULATED = {
    "crashed": ([], 5000),
    "country": (["--distribution", "zipf:1.1"], 8000),
    "home_rappor": (["--distribution", "csv:hosts.csv"], 8000),
    "home_discover": (["--distribution", "csv:hosts.csv"], 20000),
    "session_minutes": (["--distribution", "normal:30,12"], 4000),
    "startup_ms": (["--distribution", "lognormal:6.5,0.6"], 6000),
    "theme_daily": ([], 4000),
    "crash_by_os": ([], 20000),
    "startup_by_os": ([], 20000),
    "theme_by_os": (["--dimension", "os=android:0.6,ios:0.4"], 6000),
}
METRICS = list(SIMULATED)
WIDTHS = (1280, 390)


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """A collector on 127.0.0.1 (ephemeral port) with three days of every metric."""
    tmp = tmp_path_factory.mktemp("kinds")
    (tmp / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    (tmp / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (tmp / "token").chmod(0o600)
    (tmp / "hosts.csv").write_text("value,count\n" + "".join(f"{h},{c}\n" for h, c in HOSTS.items()))
    today = dt.datetime.now(dt.timezone.utc).date()
    runner = CliRunner()
    for seed, metric in enumerate(METRICS):
        extra, clients = SIMULATED[metric]
        extra = [str(tmp / x) if x == "hosts.csv" else "csv:" + str(tmp / "hosts.csv") if x == "csv:hosts.csv"
                 else x for x in extra]
        for back in (3, 2, 1):
            if metric == "home_discover" and back != 1:
                continue  # discovery is the slow decode: one window
            day = (today - dt.timedelta(days=back)).isoformat()
            result = runner.invoke(main, ["simulate", "--metrics", str(tmp / "metrics.toml"), "--metric", metric,
                                          "--clients", str(clients), "--seed", str(100 * seed + back),
                                          "--db", str(tmp / "store.sqlite"), "--window", day, "--silent", *extra])
            assert result.exit_code == 0, (metric, result.output)
    with serving(["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0",
                  "--query-token-file", "token"], tmp) as server:
        yield server


def settle(driver, timeout: float = 120) -> None:
    """Wait until the page has drawn everything it asked for (app.js counts requests in flight)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: d.execute_script(
        "const e = document.documentElement; return e.dataset.ready === '1' && e.dataset.pending === '0'"),
        "the page did not finish its requests")


def open_page(driver, url: str, metric: str, width: int) -> None:
    driver.set_window_size(width, 900)
    sign_in(driver, url, TOKEN)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(ec.visibility_of_element_located((By.ID, "metrics")))
    # The list page is already ready; the click's hashchange is a task of its own, so a loaded
    # browser can answer settle() before routing starts. Clear the flag: route() sets it again.
    driver.execute_script("document.documentElement.dataset.ready = '0'")
    driver.find_element(By.LINK_TEXT, metric).click()
    settle(driver)


def error_boxes(driver) -> list[str]:
    """The text of every error box shown on the page."""
    return driver.execute_script(
        "return [...document.querySelectorAll('.error')].filter(e => !e.hidden && e.offsetParent !== null)"
        ".map(e => e.textContent)")


def full_screenshot(driver, name: str, width: int) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, max(900, min(int(height) + 40, 8000)))
    settle(driver)  # a new width redraws nothing, but wait for any chart still drawing
    driver.save_screenshot(str(ARTIFACTS / f"dashboard-kind-{name}-{width}.png"))


def decode_candidates(driver, strings: list[str]) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "candidates")
    box.clear()
    box.send_keys("\n".join(strings))
    driver.find_element(By.ID, "candidates-go").click()
    settle(driver)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("metric", METRICS)
def test_every_metric_kind_page_shows_no_error(collector, browser, metric, width):  # noqa: F811
    try:
        open_page(browser, collector.url, metric, width)
        if metric == "home_rappor":  # first the page asks for candidates, with one explanation
            assert error_boxes(browser) == []
            full_screenshot(browser, metric + "-asking", width)
            decode_candidates(browser, [*HOSTS, "decoy.example"])
        assert error_boxes(browser) == [], error_boxes(browser)
        charts = browser.execute_script("return [...document.querySelectorAll('.chart')].map(c => "
                                        "[c.id, c.querySelectorAll('svg').length, c.textContent.slice(0, 80)])")
        assert charts and all(n == 1 for _, n, _ in charts), charts  # every chart drawn, none loading
        assert browser.execute_script("return document.documentElement.scrollWidth") <= \
            browser.execute_script("return window.innerWidth"), "the page scrolls sideways"
        full_screenshot(browser, metric, width)
        assert console_errors(browser) == []
        assert foreign_requests(browser, collector.url) == []
    finally:
        browser.set_window_size(1280, 1800)


def joint_tables(driver) -> dict[str, dict[str, dict[str, str]]]:
    """statistic -> row key -> column -> the text shown, for every table of a joint page."""
    return {stat: dict(rows) for stat, rows in driver.execute_script(
        "return [...document.querySelectorAll('table.joint')].map(t => [t.dataset.statistic, "
        "[...t.querySelectorAll('tbody tr')].map(tr => [tr.dataset.key, Object.fromEntries("
        "[...tr.querySelectorAll('td')].map(td => [td.dataset.col, td.textContent]))])])")}


def shown_detected(value) -> str:
    return "" if value is None else "yes" if value else "no"


@pytest.mark.parametrize("metric", ["crash_by_os", "startup_by_os"])
def test_joint_page_shows_every_statistic_as_the_api_gives_it(collector, browser, metric):  # noqa: F811
    """Cells, marginals, shares P(T | G), means per category and the independence test: each a
    table (and the marginals aside, a chart) whose every number is the query API's, in the
    CLI's number style (issue 31: the page showed a toFixed error instead)."""
    from cli.output import format_number, format_p

    open_page(browser, collector.url, metric, 1280)
    assert error_boxes(browser) == []
    windows = [w for w, _ in {m["name"]: m for m in api(collector.url, "/ui/api/overview")["metrics"]}[metric]["windows"]]
    doc = api(collector.url, f"/v1/metrics/{metric}/estimates?window={windows[-1]}")
    n = doc["meta"]["n_reports"]
    tables = joint_tables(browser)
    expected = list(dict.fromkeys(r["statistic"] for r in doc["estimates"]))
    assert list(tables) == expected
    kinds = {s.split(" ")[0].split("(")[0] for s in expected}
    assert kinds == {"count", "P", "mean", "independence"} if metric == "startup_by_os" else \
        {"count", "P", "independence"}
    saw_floor = False
    for row in doc["estimates"]:
        stat, got = row["statistic"], tables[row["statistic"]][str(row["value"])]
        if stat == "count":
            assert got["estimate"] == f"{row['estimate']:,.1f}" and got["share"] == f"{row['estimate'] / n:.4f}"
            assert got["ci_low"] == f"{row['ci_low']:,.1f}" and got["ci_high"] == f"{row['ci_high']:,.1f}"
            assert got["p_value"] == format_p(row["p_value"]) and got["detected"] == shown_detected(row["detected"])
            saw_floor |= row["p_value"] == 0 and got["p_value"] == "<1e-300"
        elif stat.startswith("count "):
            assert got["estimate"] == f"{row['estimate']:,.1f}" and got["std_err"] == f"{row['std_err']:,.1f}"
        elif stat.startswith("P("):
            t, g = str(row["value"]).split(" | ")
            assert (got["value"], got["given"]) == (t, g)
            assert [got[c] for c in ("estimate", "ci_low", "ci_high")] == \
                [f"{row[c]:.4f}" for c in ("estimate", "ci_low", "ci_high")]
        elif stat.startswith("mean "):
            assert [got[c] for c in ("estimate", "std_err", "ci_low", "ci_high")] == \
                [format_number(row[c]) for c in ("estimate", "std_err", "ci_low", "ci_high")]
        else:
            assert got["estimate"] == format_number(row["estimate"]) and got["p_value"] == format_p(row["p_value"])
            assert got["reading"] == ("dependent (independence rejected)" if row["p_value"] <= 0.05
                                      else "no dependence detected")
    assert metric != "crash_by_os" or saw_floor  # 20,000 reports: some cell's p-value underflows
    # a chart per share and mean statistic, one point per row
    points = browser.execute_script(
        "return [...document.querySelectorAll('.joint-section')].filter(s => s.querySelector('.chart')).map(s => "
        "[s.querySelector('table').dataset.statistic, s.querySelectorAll('.chart svg circle.point').length])")
    charted = [s for s in expected if s.startswith(("P(", "mean "))]
    assert [s for s, _ in points] == charted
    for stat, count in points:
        assert count == sum(r["statistic"] == stat for r in doc["estimates"]), stat
    assert console_errors(browser) == []


def test_joint_series_picker_offers_the_cells_and_draws_each_tick(collector, browser):  # noqa: F811
    """The series of a joint metric is per cell: the picker lists its 8 cells (not the 31 rows of
    the breakdown) and every value ticked by default is a line of the chart (issue 31)."""
    from selenium.webdriver.common.by import By

    open_page(browser, collector.url, "crash_by_os", 1280)
    picker = browser.find_element(By.ID, "series-values")
    values = [b.get_attribute("value") for b in picker.find_elements(By.CSS_SELECTOR, "input[type=checkbox]")]
    cells = {r["value"] for r in api(collector.url, "/v1/metrics/crash_by_os/estimates")["estimates"]
             if r["statistic"] == "count"}
    assert len(values) == 8 and set(values) == cells
    assert picker.find_element(By.TAG_NAME, "summary").text == "cells (8 cells)"
    ticked = [b.get_attribute("value") for b in picker.find_elements(By.CSS_SELECTOR, "input[type=checkbox]")
              if b.is_selected()]
    svg = browser.find_element(By.CSS_SELECTOR, "#series-chart svg").get_attribute("outerHTML")
    assert len(ticked) == 5 and all(f">{v}</text>" in svg for v in ticked)
    assert svg.count('class="line"') == 5

