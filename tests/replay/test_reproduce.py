"""Snapshot reconstruction and reproduction: the rebuilt snapshot is the live one, and decisions come out identical.

The scripted history places, fills a pool, finishes and deletes Runs and changes a
pod's capacity. It is written with checkpoints every record (so every checkpoint
lands inside some cache method, the hard case), every few records, and never.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.snapshot import Snapshot
from replay import engine, source, verify
from tests.replay import journals


def _views(snapshot: Snapshot) -> list[tuple[Any, ...]]:
    return [(v.info, dict(v.capacity), dict(v.used), dict(v.assumed), dict(v.free)) for v in snapshot.pods]


def _targets(snapshot: Snapshot) -> dict[str, Any]:
    return dict(snapshot.targets.targets)


class RecordingPlanner(Planner):
    """The live planner, keeping what each cycle's snapshot held."""

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self.seen: dict[tuple[int, str], Any] = {}

    def plan(self, snapshot: Snapshot) -> Any:
        self.seen[(snapshot.lsn, snapshot.run.uid)] = (snapshot.run, snapshot.now, _views(snapshot),
                                                       _targets(snapshot), snapshot.names)
        return super().plan(snapshot)


@pytest.mark.parametrize("checkpoint_every", [1, 7, 100_000], ids=lambda n: f"checkpoint every {n} records")
def test_the_rebuilt_snapshot_of_every_cycle_is_the_snapshot_the_live_cycle_planned_on(
        journal_url: str, tmp_path: Path, checkpoint_every: int) -> None:
    live_planner = RecordingPlanner(SchedulerConfig())
    written = journals.scripted(journal_url, tmp_path, checkpoint_every=checkpoint_every, planner=live_planner)
    journal = Journal.open(journal_url)
    try:
        cycles = engine.select(journal, source.Selection())
        rebuilt = {}
        for r in engine.replay(journal, cycles, lambda ctx: (lambda s: (s.run, s.now, _views(s), _targets(s),
                                                                        s.names, s.lsn))(ctx.snapshot())):
            run, now, views, targets, names, lsn = r.value
            rebuilt[(lsn, run.uid)] = (run, now, views, targets, names)
    finally:
        journal.close()
    assert written.cycles == len(cycles) > 10
    assert rebuilt == live_planner.seen


@pytest.mark.parametrize("detail", ["summary", "full"])
@pytest.mark.parametrize("checkpoint_every", [1, 7, 100_000], ids=lambda n: f"checkpoint every {n} records")
def test_every_cycle_of_a_history_replays_identically_in_one_walk(
        journal_url: str, tmp_path: Path, checkpoint_every: int, detail: str) -> None:
    written = journals.scripted(journal_url, tmp_path, checkpoint_every=checkpoint_every, detail=detail)
    journal = Journal.open(journal_url)
    try:
        report = verify.verify(journal)
    finally:
        journal.close()
    assert report.ok, [str(d) for r in report.diverged for d in r.differences]
    assert report.replayed == report.identical == written.cycles
    # One walk, from the newest checkpoint before the first snapshot, proving every checkpoint after it.
    cycles = journals.lsns_of(journal_url, "cycle")
    first_snapshot = min(journals.payload_of(journal_url, lsn)["snapshot_lsn"] for lsn in cycles)
    checkpoints = journals.lsns_of(journal_url, "checkpoint")
    start = max([min(journals.lsns_of(journal_url, "incarnation"))] + [c for c in checkpoints if c <= first_snapshot])
    assert report.stats.started_from == [start]
    assert report.stats.checkpoints_compared == len([c for c in checkpoints if start < c < max(cycles)])
    if checkpoint_every < 100_000:
        assert report.stats.checkpoints_compared > 0


@pytest.mark.parametrize("checkpoint_every", [1, 3, 7], ids=lambda n: f"checkpoint every {n} records")
def test_each_cycle_replays_alone_from_the_newest_checkpoint_at_or_before_its_snapshot(
        tmp_path: Path, checkpoint_every: int) -> None:
    url = f"sqlite:///{tmp_path}/j.db"
    journals.scripted(url, tmp_path, checkpoint_every=checkpoint_every)
    checkpoints = journals.lsns_of(url, "checkpoint")
    journal = Journal.open(url)
    try:
        for lsn in journals.lsns_of(url, "cycle"):
            snapshot_lsn = journals.payload_of(url, lsn)["snapshot_lsn"]
            report = verify.verify(journal, source.Selection(lsns=(lsn,)))
            assert report.ok and report.replayed == 1, (lsn, [str(d) for r in report.diverged for d in r.differences])
            assert report.stats.started_from == [max(c for c in checkpoints if c <= snapshot_lsn)]
            assert report.stats.warnings == []
    finally:
        journal.close()


def test_a_replay_starting_from_a_checkpoint_after_a_pruned_prefix_reproduces_exactly(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/j.db"
    journals.scripted(url, tmp_path, checkpoint_every=10)
    cycle = journals.lsns_of(url, "cycle")[-1]
    snapshot_lsn = journals.payload_of(url, cycle)["snapshot_lsn"]
    checkpoint = max(c for c in journals.lsns_of(url, "checkpoint") if c <= snapshot_lsn)
    journals.prune_to(url, checkpoint)
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, source.Selection(lsns=(cycle,)))
    finally:
        journal.close()
    # Checkpoints are taken between whole changes, so nothing before one is needed.
    assert report.ok and report.stats.warnings == []


def test_a_cycle_records_the_recorded_configuration_and_replay_uses_it(journal_url: str, tmp_path: Path) -> None:
    config = SchedulerConfig(scores=(("PreferredRunAffinity", 5), ("LeastLoaded", 2)), default_runs_capacity=3)
    written = journals.scripted(journal_url, tmp_path, config=config)
    journal = Journal.open(journal_url)
    try:
        report = verify.verify(journal)
    finally:
        journal.close()
    assert report.ok and report.replayed == written.cycles
