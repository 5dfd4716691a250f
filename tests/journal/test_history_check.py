"""`kruntimes journal reindex --check`: the history tables are what the records derive, or it says where not.

SPEC §5 (amended 2026-12-04): verify checks, or names the command that checks, that
the history tables are what the records derive. Someone with write access changes a row
of a table that `kruntimes history` and the UI read, leaving every record alone: the
check names the table (exit 3) and changes nothing; an untouched journal passes, and a
pruned one passes with a note on the counts a prune leaves. Both backends, on a journal
the real scheduler wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli
from kruntimes.journal import prune
from kruntimes.journal.history import derive
from kruntimes.journal.store import backends, engines
from tests.journal.history_journal import PHASE2, Generated, load

pytest_plugins = ("tests.journal.history_fixtures",)  # the generated journal's fixtures

Tamper = Callable[[sa.Connection], None]


def _first(conn: sa.Connection, table: sa.Table) -> Any:
    return conn.execute(sa.select(table.c.epoch, table.c.lsn).order_by(table.c.epoch, table.c.lsn).limit(1)).one()


def _moved_placement(conn: sa.Connection) -> None:
    p = derive.placements
    epoch, lsn = _first(conn, p)
    conn.execute(sa.update(p).where(p.c.epoch == epoch, p.c.lsn == lsn).values(pod="elsewhere"))


def _deleted_cycle(conn: sa.Connection) -> None:
    c = derive.cycles
    epoch, lsn = _first(conn, c)
    conn.execute(sa.delete(c).where(c.c.epoch == epoch, c.c.lsn == lsn))


def _forged_bind(conn: sa.Connection) -> None:
    b = derive.binds
    epoch, lsn = _first(conn, b)
    row = dict(conn.execute(sa.select(b).where(b.c.epoch == epoch, b.c.lsn == lsn)).mappings().one())
    conn.execute(sa.insert(b).values({**row, "lsn": 10**9, "result": "conflict"}))


def _bumped_count(conn: sa.Connection) -> None:
    conn.execute(sa.update(derive.pod_hours).values(placements=derive.pod_hours.c.placements + 1))


CASES: dict[str, tuple[Tamper, str]] = {
    "a placement moved to another pod": (_moved_placement, "history_placements"),
    "a cycle deleted": (_deleted_cycle, "history_cycles"),
    "a bind conflict invented": (_forged_bind, "history_binds"),
    "a placement count raised": (_bumped_count, "history_pod_hours"),
}


def _check(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["journal", "reindex", "--check", "--journal", url])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _snapshot(url: str, table: sa.Table) -> list[Any]:
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.select(table).order_by(*table.primary_key.columns))]
    finally:
        engine.dispose()


def test_an_untouched_journal_passes_and_verify_names_the_check(journal_url: str, generated: Generated,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    load(journal_url, generated)
    code, out = _check(journal_url, capsys)
    assert code == 0 and out.startswith(f"OK: {len(derive.TABLES)} history tables compared"), out
    assert cli.main(["replay", "verify", "--journal", journal_url, "--workers", "1"]) == 0
    assert "`kruntimes journal reindex --check` compares them" in capsys.readouterr().out


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_a_history_row_changed_outside_the_writer_is_named_and_nothing_is_changed(
        journal_url: str, generated: Generated, case: tuple[Tamper, str], capsys: pytest.CaptureFixture[str]) -> None:
    tamper, table = case
    load(journal_url, generated)
    engine = engines.create_engine(journal_url)
    try:
        with engine.begin() as conn:
            tamper(conn)
    finally:
        engine.dispose()
    stored = _snapshot(journal_url, derive.TABLES[derive.TABLE_NAMES.index(table)])
    code, out = _check(journal_url, capsys)
    assert code == 3 and out.splitlines()[-1].startswith("DIFFERS in 1 table"), out
    assert [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("differs")] == [table]
    assert _snapshot(journal_url, derive.TABLES[derive.TABLE_NAMES.index(table)]) == stored  # rolled back


def test_a_pruned_journal_passes_with_a_note_on_the_counts_it_left(journal_url: str, generated: Generated,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    load(journal_url, generated)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        assert prune.prune(journal, PHASE2 - timedelta(minutes=30)).total > 0
    finally:
        journal.close()
    code, out = _check(journal_url, capsys)
    assert code == 0 and out.splitlines()[-1].startswith("OK:"), out
    assert any(line.startswith("note history_pod_hours") for line in out.splitlines()), out
