"""The journal's local files are private: the spool and a new SQLite journal are created 0600.

They hold what the scheduler saw (Run and pod names, arguments, capacities): nobody
but the scheduler's user has a reason to read them, whatever the process umask says.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.journal.write import spool
from kruntimes.journal.store import backends
from tests.journal.factories import record


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the usual default, which would give 0644
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_spool_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "spool" / "journal.spool"
    opened = spool.Spool.open(path)
    try:
        assert mode(path) == 0o600
    finally:
        opened.close()


def test_a_new_sqlite_journal_and_its_wal_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = backends.Journal.open(f"sqlite:///{path}")
    try:
        journal.append_batch([record(1, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64})])
        files = [p for p in tmp_path.iterdir() if p.name.startswith("journal.db")]
        assert {p.name for p in files} >= {"journal.db", "journal.db-wal"}
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    finally:
        journal.close()


def test_an_existing_sqlite_journal_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    backends.Journal.open(f"sqlite:///{path}").close()
    path.chmod(0o640)
    backends.Journal.open(f"sqlite:///{path}").close()
    assert mode(path) == 0o640
