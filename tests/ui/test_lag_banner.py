"""The web view's banner while the history tables trail the records, without a browser.

A journal whose second half a ``--journal-history follow`` scheduler stored shows, on
every page, how far the tables trail and the command that catches up; once
``kruntimes journal index`` has run, and on a journal written inline, no page has it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kruntimes.journal import records
from kruntimes.ui import markup, queries, server
from tests.journal.history_journal import END, Generated
from tests.journal.test_history_follow import index, store
from tests.journal.test_history_tables import empty_journal_url

pytest_plugins = ("tests.journal.history_fixtures",)

BANNER = '<div class="lag-banner" role="status">'


def _pages(indexed: list[records.JournalRecord]) -> list[str]:
    cycle = next(r for r in indexed if r.kind == "cycle")
    run, pod = cycle.payload["run"], cycle.payload["chosen"]
    namespace = cycle.payload["namespace"]
    return ["/", "/timeline", "/whatif", "/pod", "/integrity", f"/run/{namespace}/{run}",
            f"/pod/{namespace}/{pod}?at={markup.iso(END)}", f"/replay/{cycle.lsn}"]


def _get(app: server.App, path: str) -> str:
    route, _, query = path.partition("?")
    status, _, body = app.respond("GET", route, query)
    assert status == "200 OK", (path, status, body[:300])
    return body.decode("utf-8")


@pytest.fixture
def half_followed(generated: Generated, request: pytest.FixtureRequest) -> Iterator[tuple[str, list, list]]:
    half = len(generated.records) // 2
    with empty_journal_url(request, "sqlite") as url:
        store(url, generated.records[:half], history="inline")
        store(url, generated.records[half:], history="follow")
        yield url, generated.records[:half], generated.records[half:]


def test_every_page_says_how_far_the_history_tables_trail_and_what_catches_up(half_followed: tuple) -> None:
    url, indexed, pending = half_followed
    reader = queries.open_reader(url)
    try:
        app = server.App(reader)
        for path in _pages(indexed):
            body = _get(app, path)
            assert body.count(BANNER) == 1, path
            assert "</nav>" + BANNER in body, f"{path}: the banner sits under the navigation"
            assert (f"trail the journal in 1 epoch(s) by {len(pending)} LSNs (from LSN {pending[0].lsn} of epoch "
                    f"{pending[0].incarnation[:12]})"
                    in body), path
            assert "run &quot;kruntimes journal index&quot;" in body, path
        status, _, fragment = app.respond("GET", _pages(indexed)[-1], "fragment=1")
        assert status == "200 OK" and not fragment.startswith(b"<!doctype")
        assert BANNER.encode() not in fragment, "a fragment inside a page gets no banner of its own"
    finally:
        reader.close()


def test_no_page_has_the_banner_once_the_indexer_has_caught_up(half_followed: tuple) -> None:
    url, indexed, _ = half_followed
    index(url, 500)
    reader = queries.open_reader(url)
    try:
        app = server.App(reader)
        for path in _pages(indexed):
            assert "lag-banner" not in _get(app, path).split("</nav>", 1)[1], path
    finally:
        reader.close()


def test_a_journal_written_inline_shows_no_banner(generated: Generated, request: pytest.FixtureRequest) -> None:
    with empty_journal_url(request, "sqlite") as url:
        store(url, generated.records, history="inline")
        reader = queries.open_reader(url)
        try:
            app = server.App(reader)
            for path in _pages(generated.records):
                assert BANNER not in _get(app, path), path
        finally:
            reader.close()


def test_the_banner_goes_under_the_layouts_navigation_only() -> None:
    document = markup.page("</nav> in a title", markup.h("nav", "its own nav"))
    framed = markup.with_banner(document, markup.h("div", "B"))
    assert framed.count(b"<div>B</div>") == 1
    assert framed.index(b"<div>B</div>") < framed.index(b"its own nav")
    assert markup.with_banner(b"<p>fragment</p>", markup.h("div", "B")) == b"<p>fragment</p>"
