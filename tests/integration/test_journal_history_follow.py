"""The live scheduler with ``journal_history="follow"``: its term's writer (a process of its own)
stores records only; ``Journal.index`` then gives the history tables a placement for every Run
it placed, and replay still finds every cycle identical."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import sqlalchemy as sa

from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.journal.history import tables as history_tables
from kruntimes.journal.store.backends import Journal
from replay import verify
from tests.integration.cluster import Cluster, wait_for


def _history_rows(journal: Journal) -> int:
    with journal.engine.connect() as conn:
        return sum(int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
                   for table in history_tables.TABLES)


def _scheduled(journal: Journal) -> set[tuple[str, str]]:
    p = history_tables.placements
    with journal.engine.connect() as conn:
        return {(run, pod) for run, pod in conn.execute(sa.select(p.c.run, p.c.pod).where(p.c.outcome == "scheduled"))}


def test_a_follow_scheduler_stores_records_only_and_once_indexed_its_tables_hold_every_placement(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    cluster_api.add_pod("python-0", runs=2)
    a = start_scheduler(identity="a", journal_url=url, journal_spool=str(tmp_path / "a.spool"),
                        journal_history="follow")
    wait_for(lambda: a.leading, what="a leading")
    names = ["r0", "r1", "r2"]
    for name in names:
        cluster_api.add_run(name)
    wait_for(lambda: len(cluster_api.placements()) == 2 and all(
        cluster_api.pending_message(n) for n in names if n not in cluster_api.placements()), what="2 placed, 1 Pending")
    wait_for(lambda: a.binder.writes == 3, what="a's writes counted")  # two placements, one Pending message
    placed = cluster_api.placements()
    a.stop()
    journal = Journal.open(url, create=False)
    try:
        assert _history_rows(journal) == 0, "the term's writer stored records only"
        assert [lag.history_lsn for lag in journal.history_lag()] == [None]
        assert journal.index() > 0
        assert journal.history_lag() == []
        assert _scheduled(journal) == set(placed.items())
        report = verify.verify(journal)
    finally:
        journal.close()
    assert report.ok and report.identical == report.selected >= 3, report.problems
