"""The web view's story of a Run follows (epoch, LSN), not the bare LSN (issue 22 items 3 and 9).

LSNs overlap between epochs begun while the database was away: here the older epoch
placed the Run at LSNs 900-901 and the newer one, numbered from 120, placed it again.
The Run page shows the newest records (the newer epoch's, though their LSNs are
lower) and lists them epoch by epoch, oldest first, each in LSN order; the integrity
page lists incarnations and leader records by time, and a pod page reads the
configuration of the epoch that observed the pod. Both backends.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from kruntimes.journal import records
from kruntimes.journal.store import backends
from kruntimes.ui import queries
from tests.journal.history_journal import fresh_postgres_schema

T0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
NS, RUN = "team-a", "etl-1"
OLDER, NEWER = "0" * 31 + "b", "0" * 31 + "a"  # the newer epoch's ID sorts first: neither order comes by accident


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/journal.db"
        return
    base = os.environ.get("KRUNTIMES_TEST_POSTGRES_URL")
    if not base:
        pytest.skip("KRUNTIMES_TEST_POSTGRES_URL is not set")
    with fresh_postgres_schema(base) as url:
        yield url


def _leader(epoch: str, lsn: int, at: datetime) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "leader", {"event": "acquired", "identity": epoch})


def _cycle(epoch: str, lsn: int, at: datetime, pod: str) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "cycle", {
        "namespace": NS, "run": RUN, "run_uid": "uid-1", "status": "scheduled", "result": "scheduled",
        "chosen": pod, "candidates": [], "rejections": []})


def _incarnation(epoch: str, lsn: int, at: datetime, staleness: int) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "incarnation", {
        "version": "0", "config_hash": epoch, "config": {"heartbeat_staleness_seconds": staleness}})


@pytest.fixture
def reader(journal_url: str) -> Iterator[queries.Reader]:
    journal = backends.Journal.open(journal_url)
    journal.append_batch([_incarnation(OLDER, 899, T0, 30), _leader(OLDER, 1899, T0),
                          _cycle(OLDER, 900, T0, "pod-old"), _cycle(OLDER, 901, T0 + timedelta(seconds=1), "pod-old")])
    later = T0 + timedelta(hours=1)
    journal.append_batch([_incarnation(NEWER, 119, later, 60), _leader(NEWER, 1119, later),
                          _cycle(NEWER, 120, later, "pod-new"), _cycle(NEWER, 121, later + timedelta(seconds=1),
                                                                        "pod-new")])
    r = queries.Reader(journal)
    yield r
    r.close()


def test_a_runs_records_go_epoch_by_epoch_oldest_first(reader: queries.Reader) -> None:
    got = [(r.incarnation, r.lsn) for r in reader.run_records(NS, RUN)]
    assert got == [(OLDER, 900), (OLDER, 901), (NEWER, 120), (NEWER, 121)]


def test_the_newest_records_of_a_run_are_the_newest_epoch_s_not_the_highest_lsns(reader: queries.Reader) -> None:
    got = [(r.incarnation, r.lsn) for r in reader.run_records(NS, RUN, limit=2)]
    assert got == [(NEWER, 120), (NEWER, 121)]


def test_incarnations_and_leader_records_go_by_time_and_each_epoch_has_its_own_configuration(
        reader: queries.Reader) -> None:
    assert [r.incarnation for r in reader.incarnations()] == [OLDER, NEWER]
    assert [r.incarnation for r in reader.leader_records(limit=1)] == [NEWER]
    assert reader.config_at(120, NEWER)["heartbeat_staleness_seconds"] == 60
    assert reader.config_at(900, OLDER)["heartbeat_staleness_seconds"] == 30
