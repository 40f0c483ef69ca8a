"""The one page rule of the query layer (collector/estimates.py ``page_rows``), which the query
API (``page_of``), the dashboard and ``ldpt estimate`` (``default_page``) all apply."""

from __future__ import annotations

from cli.estimate_cmd import default_page
from client_sdk.registry import parse_registry
from collector.estimates import DEFAULT_PAGE, LARGE_DOMAIN, is_large, page_rows
from collector.query import page_of


def _spec(d: int):
    cats = ", ".join(f'"c{i}"' for i in range(d))
    return parse_registry(f'[metrics.m]\nkind = "categorical"\nepsilon = 2.0\nprotocol = "hr"\n'
                          f'categories = [{cats}]\n').metrics["m"]


def test_is_large_bounds():
    assert not is_large(LARGE_DOMAIN) and is_large(LARGE_DOMAIN + 1)
    assert not is_large(DEFAULT_PAGE + 1) and is_large(DEFAULT_PAGE + 1, table=True)
    assert not is_large(DEFAULT_PAGE, table=True)


def test_api_and_cli_pages_agree():
    small, mid, large = _spec(50), _spec(DEFAULT_PAGE + 5), _spec(LARGE_DOMAIN + 5)
    assert page_rows(small) is None and page_rows(small, top=3) == (0, 3)
    assert page_rows(mid) is None and page_rows(mid, table=True) == (0, DEFAULT_PAGE)
    assert page_rows(large) == (0, DEFAULT_PAGE) and page_rows(large, full=True) is None
    assert page_rows(large, limit=5, offset=10) == (10, 5) and page_rows(large, offset=7) == (7, DEFAULT_PAGE)
    for spec in (small, mid, large):
        for top in (None, 4):
            assert page_of(spec, {"top": top}) == page_rows(spec, top=top)
            for fmt in ("table", "csv", "json"):
                assert default_page(spec, top, fmt, False, None, None, None) == \
                    page_rows(spec, top=top, table=fmt == "table")
        assert page_of(spec, {"full": True}) is None and default_page(spec, None, "csv", True, None, None, None) is None
        assert default_page(spec, 4, "table", True, None, None, None) == (0, 4)   # --top wins over --all
        assert default_page(spec, 4, "table", False, "window", None, None) is None


def test_remote_estimate_asks_top_of_discover_and_a_page_of_the_others(monkeypatch, tmp_path):
    """--url --top N: a discover metric's top (how many strings), else limit (the page)."""
    import pytest

    from cli import estimate_cmd, remote

    class Asked(Exception):
        pass

    def fake_fetch(url, metric, token, params, candidates=None, context=None):  # noqa: ANN001, ANN202
        raise Asked(params)

    monkeypatch.setattr(remote, "fetch_estimates", fake_fetch)
    token = tmp_path / "token.txt"
    token.write_text("t\n")
    for registry, metric, want in (("docs/examples/discovery.toml", "home_page", {"top": "7", "limit": None}),
                                   ("docs/examples/metrics.toml", "country", {"top": None, "limit": "7"})):
        with pytest.raises(Asked) as asked:
            estimate_cmd.remote_estimate("http://127.0.0.1:9", str(token), registry, metric, None, None, None,
                                         0.95, False, False, None, top=7)
        params = asked.value.args[0]
        assert {k: params[k] for k in want} == want
