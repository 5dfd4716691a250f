"""Replay names a cycle by (epoch, LSN): LSNs overlap between epochs begun while the database was away.

Two epochs placed the same Run: the older one at LSNs above the newer one's. A Run's
cycles come oldest epoch first (the epochs' order is their first records' time, as
``kruntimes.journal.history.order`` decides it), a selection by (epoch, LSN) takes only
that epoch's record at that LSN, and "the newest cycle" at one recorded instant goes
to the newer epoch. Records are appended straight to the store: what is under test
is the reading. Both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from kruntimes.journal.store import backends
from replay import source
from tests.journal.factories import T0, record

OLDER, NEWER = "b" * 32, "a" * 32  # the older epoch sorts after the newer by ID: ID order is no age
RUN = {"namespace": "team-a", "run": "etl-1"}


@pytest.fixture
def journal(journal_url: str) -> Iterator[backends.Journal]:
    j = backends.Journal.open(journal_url)
    # The older epoch: its Run's cycles at LSNs 900 and 901.
    j.append_batch([record(899, "mutation", incarnation=OLDER, recorded_at=T0),
                    record(900, payload=RUN, incarnation=OLDER, recorded_at=T0 + timedelta(seconds=1)),
                    record(901, payload=RUN, incarnation=OLDER, recorded_at=T0 + timedelta(seconds=2))])
    # The newer one, an hour on, numbered from 4: its cycle of the Run at 5, another Run's at 900.
    later = T0 + timedelta(hours=1)
    j.append_batch([record(4, "mutation", incarnation=NEWER, recorded_at=later),
                    record(5, payload=RUN, incarnation=NEWER, recorded_at=later + timedelta(seconds=1)),
                    record(900, payload={"namespace": "team-a", "run": "other"}, incarnation=NEWER,
                           recorded_at=later + timedelta(seconds=2))])
    yield j
    j.close()


def _keys(found: Iterator[source.Record]) -> list[tuple[str, int]]:
    return [(r.incarnation, r.lsn) for r in found]


def test_a_runs_cycles_come_oldest_epoch_first_not_by_bare_lsn(journal: backends.Journal) -> None:
    found = _keys(source.cycles(journal, source.Selection(run=("team-a", "etl-1"))))
    assert found == [(OLDER, 900), (OLDER, 901), (NEWER, 5)]


def test_a_selection_by_epoch_and_lsn_takes_only_that_epochs_record(journal: backends.Journal) -> None:
    assert _keys(source.cycles(journal, source.Selection(keys=((OLDER, 900), (NEWER, 5))))) == [
        (OLDER, 900), (NEWER, 5)]
    assert _keys(source.cycles(journal, source.Selection(keys=((NEWER, 900),)))) == [(NEWER, 900)]


def test_the_newest_cycle_at_one_recorded_instant_is_the_newer_epochs(journal: backends.Journal) -> None:
    at = T0 + timedelta(hours=2)
    journal.append_batch([record(902, payload=RUN, incarnation=OLDER, recorded_at=at),
                          record(6, payload=RUN, incarnation=NEWER, recorded_at=at)])
    assert source.last_cycle(journal) == (NEWER, 6)
