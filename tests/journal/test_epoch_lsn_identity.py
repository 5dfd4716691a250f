"""(epoch, LSN) is a record's identity; LSNs overlap between epochs begun while the database was away (issue 22
item 9), so no history query may join or order on the LSN alone.

Two epochs placed the same Run: the older one at LSNs above the newer one's (a new
epoch numbers from the highest LSN its process knows, which need not be the
database's). "The Run's latest placement", its cycles oldest first and the documented
why-placed query must follow the time and the epoch, not the bare LSN. Rows are
written straight into the history tables: what is under test is the reading. Both
backends.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from kruntimes.journal.history import derive
from kruntimes.journal.history import runs as history_runs
from kruntimes.journal.store import backends
from tests.journal.test_history_queries import QUERIES

AT = datetime(2026, 11, 20, tzinfo=timezone.utc)
NS, RUN = "team-a", "etl-1"
#: epoch -> (LSN of its placing cycle, when, pod): the older epoch numbered higher
PLACED = {"older-epoch": (900, AT, "pod-old"), "newer-epoch": (120, AT + timedelta(hours=1), "pod-new")}


@pytest.fixture
def placed(journal: backends.Journal) -> backends.Journal:
    with journal.engine.begin() as conn:
        for epoch, (lsn, at, pod) in PLACED.items():
            common = {"epoch": epoch, "lsn": lsn, "decided_at": at, "namespace": NS, "run": RUN, "run_uid": "uid-1"}
            conn.execute(sa.insert(derive.cycles).values(**common, snapshot_lsn=lsn - 1, status="scheduled",
                                                         result="scheduled", chosen=pod, total=7,
                                                         pods_evaluated=2, pods_feasible=2, duration_us=10))
            conn.execute(sa.insert(derive.placements).values(**common, pod=pod, total=7, outcome="scheduled",
                                                             snapshot_lsn=lsn - 1))
            conn.execute(sa.insert(derive.candidates).values(epoch=epoch, lsn=lsn, rank=1, pod=pod, total=7,
                                                             plugin_scores='[["LeastLoaded",1,7]]'))
    return journal


def test_the_latest_placement_of_a_run_is_the_newest_by_time_not_by_bare_lsn(placed: backends.Journal) -> None:
    found = history_runs.run_placement(placed, NS, RUN)
    assert found is not None and (found["pod"], found["lsn"]) == ("pod-new", 120)


def test_a_runs_cycles_are_listed_oldest_first_across_epochs(placed: backends.Journal) -> None:
    assert [c["chosen"] for c in history_runs.run_cycles(placed, NS, RUN)] == ["pod-old", "pod-new"]
    assert [c["chosen"] for c in history_runs.run_cycles(placed, NS, RUN, limit=1)] == ["pod-new"]


def test_the_documented_why_placed_query_reads_the_newest_placement(placed: backends.Journal) -> None:
    variants = QUERIES["why-placed"]
    sql = variants.get(placed.engine.dialect.name) or variants["any"]
    with placed.engine.connect() as conn:
        rows = conn.execute(sa.text(sql), {"namespace": NS, "run": RUN}).mappings().all()
    assert [(r["pod"], r["chosen"]) for r in rows] == [("pod-new", 1)]
