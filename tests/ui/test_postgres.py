"""The web view on PostgreSQL: the demo's journal copied there renders the same pages, and cannot be written."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.store import backends, schema
from kruntimes.ui import queries, server
from tests.journal.history_journal import fresh_postgres_schema
from tests.ui.conftest import DemoJournal

pytestmark = pytest.mark.postgres
URL_ENV = "KRUNTIMES_TEST_POSTGRES_URL"


@pytest.fixture(scope="module")
def postgres_copy(demo_journal: DemoJournal) -> Iterator[str]:
    base = os.environ.get(URL_ENV)
    if not base:
        pytest.skip(f"{URL_ENV} is not set: the PostgreSQL case of the web view needs a server")
    with fresh_postgres_schema(base) as url:
        source = backends.Journal.open(demo_journal.url, create=False)
        target = backends.Journal.open(url)
        try:
            t = schema.journal_records
            with source.engine.connect() as conn:
                rows = [records.EncodedRecord(*row) for row in conn.execute(sa.select(
                    t.c.lsn, t.c.incarnation, t.c.recorded_at, t.c.kind, t.c.schema_version, t.c.payload,
                    t.c.payload_sha256).order_by(t.c.lsn))]
            target.append_batch(rows)
        finally:
            source.close()
            target.close()
        yield url


def _pages(url: str) -> dict[str, str]:
    reader = queries.open_reader(url)
    try:
        app = server.App(reader)
        bounds = reader.bounds()
        assert bounds is not None
        window = f"since={bounds.first_at.isoformat()}&until={bounds.last_at.isoformat()}".replace("+", "%2B")
        out = {}
        for path, query in (("/timeline", window + "&per=200"), ("/integrity", ""), ("/pod", ""), ("/whatif", ""),
                            ("/waits", "limit=500")):
            status, _, body = app.respond("GET", path, query)
            assert status.startswith("200"), (path, body[:300])
            out[path] = body.decode()
        return out
    finally:
        reader.close()


def _figure(page: str, name: str) -> str:
    found = re.search(rf'<script type="application/json" id="{name}-spec">(.*?)</script>', page)
    assert found is not None
    return found.group(1)


def test_postgresql_and_sqlite_draw_the_same_timeline(postgres_copy: str, demo_journal: DemoJournal) -> None:
    on_postgres, on_sqlite = _pages(postgres_copy), _pages(demo_journal.url)
    for figure in ("lanes", "utilisation", "pending", "binds"):
        assert _figure(on_postgres["/timeline"], figure) == _figure(on_sqlite["/timeline"], figure)
    assert "postgresql" in on_postgres["/integrity"]


def test_postgresql_and_sqlite_list_the_same_waits_in_queue_and_unschedulable(
        postgres_copy: str, demo_journal: DemoJournal) -> None:
    on_postgres, on_sqlite = _pages(postgres_copy), _pages(demo_journal.url)

    def waits(page: str) -> str:
        found = re.search(r'<dl id="waits-summary">.*?</dl>.*?<table id="waits">.*?</table>', page, re.S)
        assert found is not None
        return found.group(0)

    assert waits(on_postgres["/waits"]) == waits(on_sqlite["/waits"])
    assert "waiting in queue" in on_postgres["/waits"]


def test_the_views_postgresql_sessions_are_read_only(postgres_copy: str) -> None:
    reader = queries.open_reader(postgres_copy)
    try:
        with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
            with reader.journal.engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM journal_records"))
    finally:
        reader.close()
