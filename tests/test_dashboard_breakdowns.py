"""The dashboard's breakdown charts in a real browser (issue 22, part 1): one chart per public
dimension of a metric, and no suppressed segment anywhere on the page.

Headless Chromium (selenium) against a real `ldpt serve`, with a store written by `ldpt simulate
--dimension`. The segment channel=nightly holds ~1 % of 20,000 devices, under the registry's
min_reports = 1,000: the page must count it as suppressed and never name it. A screenshot is
saved under $LDPT_TEST_ARTIFACTS (default tests/artifacts/, gitignored).
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.collector_support import serving
from tests.test_dashboard_browser import (  # the same browser fixture and helpers
    TOKEN,
    _ldpt,
    api,
    browser,  # noqa: F401 - a pytest fixture
    console_errors,
    foreign_requests,
    screenshot,
    sign_in,
    wait_svg,
)

pytestmark = pytest.mark.e2e

REGISTRY = """
[dimensions]
min_reports = 1000

[dimensions.os]
values = ["android", "ios"]

[dimensions.channel]
values = ["stable", "beta", "nightly"]

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 2.0
dimensions = ["os", "channel"]
description = "Theme, by os and channel"

[metrics.session_minutes]
kind = "numeric"
range = [0, 120]
unit = "minutes"
epsilon = 2.0
dimensions = ["os"]
"""


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    from selenium.webdriver.common.by import By  # noqa: F401 - imported by the helpers' module too

    tmp = tmp_path_factory.mktemp("breakdowns")
    (tmp / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    (tmp / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (tmp / "token").chmod(0o600)
    day = (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)).isoformat()
    _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "theme", "--clients", "20000", "--seed", "1",
          "--db", "store.sqlite", "--window", day, "--silent", "--dimension", "os=android:0.55,ios:0.45",
          "--dimension", "channel=stable:0.8,beta:0.19,nightly:0.01", cwd=tmp)
    _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "session_minutes", "--clients", "8000",
          "--distribution", "normal:30,10", "--seed", "2", "--db", "store.sqlite", "--window", day,
          "--silent", "--dimension", "os=android:0.7,ios:0.25,other:0.05", cwd=tmp)
    with serving(["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0",
                  "--query-token-file", "token"], tmp) as server:
        yield server


def open_breakdowns(driver, url: str, metric: str, dims: list[str]) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    sign_in(driver, url, TOKEN)
    WebDriverWait(driver, 30).until(ec.visibility_of_element_located((By.ID, "metrics")))
    driver.find_element(By.LINK_TEXT, metric).click()
    wait_svg(driver, "latest-chart", "circle.point")
    for dim in dims:
        wait_svg(driver, f"breakdown-chart-{dim}", "circle.point")
        WebDriverWait(driver, 30).until(lambda d, dim=dim: "suppressed" in d.find_element(
            By.ID, f"breakdown-note-{dim}").text)
    return driver.execute_script("return document.body.innerHTML")


def test_breakdown_chart_per_dimension_without_suppressed_segments(collector, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    page = open_breakdowns(browser, collector.url, "theme", ["os", "channel"])
    window = api(collector.url, "/ui/api/overview")["metrics"][0]["windows"][-1][0]
    for dim, shown, suppressed in (("os", {"android", "ios"}, 0), ("channel", {"stable", "beta"}, 1)):
        doc = api(collector.url, f"/v1/metrics/theme/estimates?window={window}&by={dim}")
        assert {r[dim] for r in doc["estimates"]} == shown and doc["meta"]["suppressed"] == suppressed
        note = browser.find_element(By.ID, f"breakdown-note-{dim}").text
        assert f"{len(shown)} segments shown, {suppressed} segment{'' if suppressed == 1 else 's'} suppressed" in note
        svg = browser.find_element(By.CSS_SELECTOR, f"#breakdown-chart-{dim} svg").get_attribute("outerHTML")
        points = browser.find_elements(By.CSS_SELECTOR, f"#breakdown-chart-{dim} svg circle.point")
        assert len(points) == 3 * len(shown)         # every value of every shown segment
        for value in shown:
            assert f"{value} · " in svg
    assert "nightly" not in page                    # the suppressed segment is never named
    screenshot(browser, "breakdown-theme")
    assert console_errors(browser) == []
    assert foreign_requests(browser, collector.url) == []


def test_mean_metric_breakdown(collector, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    page = open_breakdowns(browser, collector.url, "session_minutes", ["os"])
    svg = browser.find_element(By.CSS_SELECTOR, "#breakdown-chart-os svg").get_attribute("outerHTML")
    assert "mean (minutes)" in svg and len(browser.find_elements(By.CSS_SELECTOR, "#breakdown-chart-os circle.point")) == 2
    assert ">other<" not in page and "1 segment suppressed" in browser.find_element(By.ID, "breakdown-note-os").text
    screenshot(browser, "breakdown-session-minutes")
    assert console_errors(browser) == []
