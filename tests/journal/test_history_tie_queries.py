"""Binds, churn, conflicts and waits at one recorded instant in two epochs: time, then epoch order, then LSN.

(epoch, LSN) is a record's identity, and LSNs overlap between epochs begun while the
database was away (issue 22 item 9). Here the older epoch holds LSNs 90..103 and the
newer one, begun an hour later, LSNs 100..101; each has a row of every kind at the
same instant, the older epoch's at LSN 103 and the newer one's at 101. Oldest first is
the older epoch's: an order that drops the epoch order (time, then bare LSN) or puts
the epoch ID in its place (the newer epoch's sorts first) gets every answer backwards.
The rows are written straight into the history tables (what is under test is the
reading); the epochs' first records, which decide their order, are stored records.
Both backends.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.history import cycles, runs, tables, waits
from kruntimes.journal.store import backends
from tests.journal.test_history_queries import QUERIES

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
TIE = T0 + timedelta(hours=2)
NS, RUN, UID = "team-a", "r", "u"
OLDER, NEWER = "0" * 31 + "b", "0" * 31 + "a"  # the newer epoch's ID sorts first
#: epoch -> the LSN of its rows at TIE: the older epoch's is the higher
AT_TIE = {OLDER: 103, NEWER: 101}


@pytest.fixture
def tied(journal: backends.Journal) -> backends.Journal:
    journal.append_batch([records.JournalRecord(OLDER, 90, T0, "leader", {"event": "acquired", "identity": OLDER})])
    journal.append_batch([records.JournalRecord(NEWER, 100, T0 + timedelta(hours=1), "leader",
                                                {"event": "acquired", "identity": NEWER})])
    with journal.engine.begin() as conn:
        conn.execute(sa.insert(tables.runs).values(epoch=OLDER, lsn=91, recorded_at=T0 + timedelta(seconds=1),
                                                    event="ADDED", namespace=NS, name=RUN, uid=UID, phase="Pending"))
        for epoch, lsn in AT_TIE.items():
            mine = "old" if epoch == OLDER else "new"
            common = {"epoch": epoch, "lsn": lsn, "namespace": NS, "run_uid": UID}
            conn.execute(sa.insert(tables.binds).values(**common, recorded_at=TIE, result="conflict",
                                                         error=f"bind-{mine}"))
            conn.execute(sa.insert(tables.placements).values(
                **common, decided_at=TIE, run=RUN, pod=f"pod-{mine}", total=7, outcome="scheduled",
                snapshot_lsn=lsn - 1, previous_lsn=lsn - 1, previous_result="conflict", previous_top="pod-x"))
            conn.execute(sa.insert(tables.waits).values(
                epoch=epoch, first_lsn=lsn - 1, namespace=NS, run=RUN, run_uid=UID, first_pending_at=TIE,
                first_reason=f"reason-{mine}", last_epoch=epoch, last_lsn=lsn - 1, last_pending_at=TIE,
                last_reason=f"reason-{mine}", pending_cycles=1, end_epoch=epoch, end_lsn=lsn, ended_at=TIE,
                outcome="scheduled", pod=f"pod-{mine}", waited_us=0))
    return journal


WINDOW: dict[str, Any] = {"since": TIE, "until": TIE + timedelta(seconds=1)}


def test_a_runs_binds_at_one_instant_go_older_epoch_first(tied: backends.Journal) -> None:
    assert [(b["lsn"], b["error"]) for b in runs.binds(tied, NS, [UID])] == [(103, "bind-old"), (101, "bind-new")]


def test_churn_at_one_instant_goes_older_epoch_first_and_its_newest_is_the_newer_epochs(
        tied: backends.Journal) -> None:
    assert [(c["epoch"], c["lsn"]) for c in cycles.churn(tied, **WINDOW)] == [(OLDER, 103), (NEWER, 101)]
    assert [c["pod"] for c in cycles.churn(tied, **WINDOW, limit=1)] == ["pod-new"]


def test_conflicts_at_one_instant_go_older_epoch_first_and_the_newest_is_the_newer_epochs(
        tied: backends.Journal) -> None:
    assert [(c["epoch"], c["lsn"], c["detail"]) for c in cycles.conflicts(tied, **WINDOW)] == [
        (OLDER, 103, "bind-old"), (NEWER, 101, "bind-new")]
    assert [c["detail"] for c in cycles.conflicts(tied, **WINDOW, limit=1)] == ["bind-new"]


def test_a_runs_wait_takes_its_first_placement_and_reason_from_the_older_epoch_at_one_instant(
        tied: backends.Journal) -> None:
    (wait,) = waits.waits(tied)
    assert (wait["pod"], wait["first_reason"], wait["last_reason"]) == ("pod-old", "reason-old", "reason-new")


def test_the_documented_conflicts_query_breaks_a_tie_by_epoch_order(tied: backends.Journal) -> None:
    variants = QUERIES["conflicts-in-window"]
    sql = variants.get(tied.engine.dialect.name) or variants["any"]
    with tied.engine.connect() as conn:
        rows = conn.execute(sa.text(sql), WINDOW).mappings().all()
    assert [(r["epoch"], r["lsn"], r["detail"]) for r in rows] == [(OLDER, 103, "bind-old"), (NEWER, 101, "bind-new")]
