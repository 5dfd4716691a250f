"""With the typed history tables (issue 15), every question goes through their indexes and
gets the answer the records give: both paths, side by side, on the demo's journal."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from kruntimes.ui import markup, queries, server
from tests.ui.conftest import DemoJournal


@pytest.fixture(scope="module")
def reader(demo_journal: DemoJournal) -> Iterator[queries.Reader]:
    found = queries.open_reader(demo_journal.url)
    if not found.tables:
        found.close()
        pytest.skip("this journal schema has no typed history tables yet (issue 15)")
    yield found
    found.close()


def _both(reader: queries.Reader, path: str, **params: object) -> tuple[str, str]:
    app = server.App(reader)
    query = "&".join(f"{k}={markup.iso(v) if hasattr(v, 'isoformat') else v}" for k, v in params.items())
    pages = []
    for tables in (True, False):
        reader.tables = tables
        status, _, body = app.respond("GET", path, query.replace("+", "%2B"))
        assert status.startswith("200"), body[:300]
        pages.append(body.decode())
    reader.tables = True
    return pages[0], pages[1]


def _figures(page: str) -> dict[str, str]:
    return dict(re.findall(r'<script type="application/json" id="([a-z-]+)-spec">(.*?)</script>', page))


def test_the_timeline_drawn_from_the_tables_is_the_one_the_records_draw(reader: queries.Reader) -> None:
    bounds = reader.bounds()
    assert bounds is not None
    middle = bounds.first_at + (bounds.last_at - bounds.first_at) / 2
    for window in ({}, {"since": middle - timedelta(seconds=1), "until": middle + timedelta(seconds=1)}):
        from_tables, from_records = _both(reader, "/timeline", per=200, **window)
        assert _figures(from_tables) == _figures(from_records)
        assert len(_figures(from_tables)) == 4


def test_a_runs_cycles_and_binds_come_from_the_tables_as_from_the_records(reader: queries.Reader) -> None:
    with reader.journal.engine.connect() as conn:
        namespace, run = conn.execute(sa.text(
            "SELECT namespace, run FROM cycles WHERE result = 'conflict' ORDER BY lsn LIMIT 1")).one()
    from_tables, from_records = _both(reader, f"/run/{namespace}/{run}")
    sections = re.compile(r'<section class="cycle".*?</section>', re.S)
    assert sections.findall(from_tables) == sections.findall(from_records) != []
    summary = re.compile(r'<dl id="summary">.*?</dl>', re.S)
    assert summary.findall(from_tables) == summary.findall(from_records)


def test_what_a_pod_held_comes_from_the_tables_as_from_the_records(reader: queries.Reader) -> None:
    with reader.journal.engine.connect() as conn:
        namespace, pod, at = conn.execute(sa.text(
            "SELECT namespace, pod, decided_at FROM placements WHERE outcome = 'scheduled' ORDER BY lsn DESC "
            "LIMIT 1 OFFSET 20")).one()
    at = queries._at(at) + timedelta(milliseconds=1)
    from_tables, from_records = _both(reader, f"/pod/{namespace}/{pod}", at=at)
    for table in ("capacity", "pod-state"):
        pattern = re.compile(rf'id="{table}">.*?</(table|dl)>', re.S)
        assert pattern.search(from_tables).group(0) == pattern.search(from_records).group(0)  # type: ignore[union-attr]
    held = re.compile(r'<table id="held">.*?</table>', re.S)
    runs = re.compile(r'href="/run/[^"]+"')
    # The same Runs; the tables date a placement by its cycle, the records by its reservation just before.
    assert sorted(runs.findall(held.search(from_tables).group(0))) == sorted(  # type: ignore[union-attr]
        runs.findall(held.search(from_records).group(0))) != []  # type: ignore[union-attr]
