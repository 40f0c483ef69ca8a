"""``ldpt serve --access-log`` logs no query value (issue 26 §5): a token pasted into a query
string, or carried in a Referer, never reaches the log; the names of the collector's own
parameters stay."""

from __future__ import annotations

import time

import pytest

from collector.access_log import strip_query_values

from .collector_support import TOKEN, Http, serving, write_registry, write_token


@pytest.mark.parametrize("target, logged", [
    ("/v1/metrics/theme/estimates", "/v1/metrics/theme/estimates"),
    ("/v1/metrics/theme/estimates?window=2026-01-02&format=csv", "/v1/metrics/theme/estimates?window=&format="),
    ("/v1/metrics/theme/estimates?token=abc&window=2026-01-02", "/v1/metrics/theme/estimates?…&window="),
    ("/v1/x?access_token=s3cr3t&&format=csv#frag", "/v1/x?…&format="),
    ("/ui/?" + TOKEN, "/ui/?…"),                                   # a secret pasted as a bare name
    ("https://dash.example/ui/?by=os&token=abc", "https://dash.example/ui/?by=&…"),
    ("/ui/charts/theme/series.svg?value=a&value=b&width=600", "/ui/charts/theme/series.svg?value=&value=&width="),
    ("/v1/x?top=1=2&candidates", "/v1/x?top=&candidates="),
])
def test_query_values_are_stripped_and_names_kept(target, logged):
    assert strip_query_values(target) == logged


@pytest.mark.e2e
def test_a_token_in_a_query_string_is_not_logged(tmp_path):
    """The issue's case: with --access-log, GET ...?token=<the query token> was logged as sent."""
    write_registry(tmp_path / "metrics.toml")
    write_token(tmp_path / "token")
    secret = "pasted-token-0123456789"
    with serving(["--metrics", str(tmp_path / "metrics.toml"), "--db", str(tmp_path / "c.sqlite"),
                  "--port", "0", "--query-token-file", str(tmp_path / "token"), "--access-log"],
                 tmp_path) as server:
        http = Http(server.url)
        status, _, _ = http.request("GET", f"/v1/metrics/theme/estimates?token={secret}&window=2026-01-02",
                                    headers={"Referer": f"https://dash.example/ui/?token={secret}"})
        assert status == 401
        http.request("GET", f"/healthz?{secret}")
        deadline = time.monotonic() + 30
        while "/healthz" not in server.text() and time.monotonic() < deadline:
            time.sleep(0.05)
        http.close()
        text = server.text()
    assert "/v1/metrics/theme/estimates?…&window= HTTP/1.1\" 401" in text, text
    assert '"https://dash.example/ui/?…"' in text and "/healthz?… HTTP/1.1" in text
    assert secret not in text
