"""Rebuilding the cache: `ClusterCache.restore`, and checkpoints the live recorder took in the middle of a change.

The live recorder writes a checkpoint from inside `record`, i.e. possibly right
after a mutation's record and before the rest of that cache method ran: a Run's
deletion (the Run is still in the checkpoint) or the hand-off of its assumption
(still assumed). Replay starting there must finish that change, exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.recorder import JournalRecorder
from kruntimes.journal.records import JournalRecord
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from replay import source, verify
from tests.builders import NOW, active, affinity, pod, run, sel
from tests.replay import journals


def _views(cache: ClusterCache) -> dict[Any, Any]:
    out = {}
    for p in cache.pods():
        v = cache.pod_view(p.namespace, p.name)
        assert v is not None
        out[p.key] = (v.info, dict(v.capacity), dict(v.used), dict(v.assumed), dict(v.free))
    return out


def test_restore_rebuilds_usage_targets_and_assumptions_from_a_checkpoints_three_lists() -> None:
    live = ClusterCache(SchedulerConfig())
    for p in (pod("a"), pod("b", capacity={"runs": 2, "gpu": 1}), pod("c")):
        live.upsert_pod(p, now=NOW)
    live.upsert_run(active("by-uid", on="a", labels={"team": "red"}, affinity=affinity(anti=[sel(team="blue")])))
    live.upsert_run(active("by-name", on="b", pod_uid=None, workspace="ws"))
    pending = run("pending", labels={"team": "blue"}, requests={"runs": 1, "gpu": 1})
    live.upsert_run(pending)
    assert live.reserve(pending, "b")
    doomed = run("doomed")
    live.upsert_run(doomed)
    assert live.reserve(doomed, "c")
    live.delete_pod("ns", "c")  # an assumption may outlive its pod

    rebuilt = ClusterCache(SchedulerConfig())
    rebuilt.restore(live.state(), lsn=42)
    assert rebuilt.state() == live.state() and rebuilt.lsn == 42
    assert _views(rebuilt) == _views(live)
    assert rebuilt.usage("ns", "b") == live.usage("ns", "b") == {"runs": 2, "gpu": 1}
    probe = run("probe", labels={"team": "red"}, affinity=affinity(required=[sel(team="red")]))
    for cache in (live, rebuilt):
        cache.upsert_run(probe)
    planner = Planner(SchedulerConfig())
    with live.lock, rebuilt.lock:
        a = planner.plan(live.snapshot(probe, NOW)).encode()
        b = planner.plan(rebuilt.snapshot(probe, NOW)).encode()
    assert a | {"snapshot_lsn": 0} == b | {"snapshot_lsn": 0}


def test_restore_keeps_runs_and_assumptions_on_an_earlier_pod_uid_on_no_pod() -> None:
    # SPEC §2.2 one pod identity: pod "a" re-added under a new UID (a missed DELETE). The
    # checkpoint holds only projections, so the UID keying is rebuilt, not stored.
    live = ClusterCache(SchedulerConfig())
    live.upsert_pod(pod("a", uid="uid-a-1"), now=NOW)
    live.upsert_pod(pod("b"), now=NOW)
    live.upsert_run(active("old", on="a", pod_uid="uid-a-1", labels={"team": "red"},
                           affinity=affinity(anti=[sel(team="blue")]), workspace="ws"))
    assumed = run("assumed", labels={"team": "red"})
    live.upsert_run(assumed)
    assert live.reserve(assumed, "a", "uid-a-1")
    live.upsert_pod(pod("a", uid="uid-a-2"), now=NOW)
    rebuilt = ClusterCache(SchedulerConfig())
    rebuilt.restore(live.state(), lsn=7)
    assert rebuilt.state() == live.state()
    assert _views(rebuilt) == _views(live) and rebuilt.usage("ns", "a") == {}
    planner = Planner(SchedulerConfig())
    for probe in (run("blue", labels={"team": "blue"}, workspace="ws"),
                  run("red", affinity=affinity(required=[sel(team="red")]))):
        outcomes = []
        for cache in (live, rebuilt):
            cache.upsert_run(probe)
            with cache.lock:
                outcomes.append(planner.plan(cache.snapshot(probe, NOW)).encode() | {"snapshot_lsn": 0})
        assert outcomes[0] == outcomes[1]
        assert outcomes[0]["status"] == ("scheduled" if probe.name == "blue" else "unschedulable")


def _mid_deletion_journal(tmp_path: Path) -> tuple[str, int, int]:
    """A Run deleted in the record right before a checkpoint; then a cycle that needs its capacity."""
    url = f"sqlite:///{tmp_path}/j.db"
    journal = Journal.open(url)
    written: list[JournalRecord] = []

    class Sink:
        def append(self, record: JournalRecord) -> None:
            written.append(record)

    config = SchedulerConfig()
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=3, checkpoint_size_ratio=0)
    recorder.start(config, top_candidates=3)
    cache = ClusterCache(config, recorder)
    recorder.state_source = cache
    cache.upsert_pod(pod("only", capacity={"runs": 1}), now=NOW, event="ADDED")  # 1 record since start
    cache.upsert_run(active("old", on="only"), event="ADDED")  # 2
    cache.delete_run("ns", "old")  # 3: the checkpoint comes right after this mutation record
    new = run("new")
    cache.upsert_run(new, event="ADDED")
    with cache.lock:
        outcome = Planner(config).plan(cache.snapshot(new, NOW))
        assert outcome.chosen == "only"
    cache.record("cycle", {"outcome": outcome, "result": "scheduled", "duration": 0.0, "top": 3})
    journal.append_batch(written)
    journal.close()
    checkpoint = next(r.lsn for r in written if r.kind == "checkpoint")
    cycle = next(r.lsn for r in written if r.kind == "cycle")
    return url, checkpoint, cycle


def test_a_checkpoint_right_after_a_runs_deletion_holds_the_state_after_the_whole_deletion(
        tmp_path: Path) -> None:
    url, checkpoint, cycle = _mid_deletion_journal(tmp_path)
    assert journals.kind_of(url, checkpoint - 1) == "mutation"
    assert journals.payload_of(url, checkpoint)["runs"] == []
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, source.Selection(lsns=(cycle,)))
    finally:
        journal.close()
    assert report.stats.started_from == [checkpoint]
    assert report.ok and report.stats.warnings == []


def test_with_the_deletion_record_pruned_replay_from_that_checkpoint_is_still_identical(tmp_path: Path) -> None:
    url, checkpoint, cycle = _mid_deletion_journal(tmp_path)
    journals.prune_to(url, checkpoint)  # the deletion record is the one right before the checkpoint
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, source.Selection(lsns=(cycle,)))
    finally:
        journal.close()
    assert report.ok and report.stats.warnings == []


def test_no_checkpoint_is_ever_followed_by_the_drop_of_a_change_recorded_before_it(tmp_path: Path) -> None:
    # Checkpoints are taken only between whole changes: a hand-off a Run update causes
    # is recorded before the checkpoint, never after it.
    url = f"sqlite:///{tmp_path}/j.db"
    journals.scripted(url, tmp_path, checkpoint_every=2)
    checkpoints = journals.lsns_of(url, "checkpoint")
    assert len(checkpoints) > 10
    drops = set(journals.lsns_of(url, "drop"))
    assert drops and not any(c + 1 in drops for c in checkpoints)
    cycles = journals.lsns_of(url, "cycle")
    middle = checkpoints[len(checkpoints) // 2]
    later = [c for c in cycles if journals.payload_of(url, c)["snapshot_lsn"] >= middle]
    journals.prune_to(url, middle)
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, source.Selection(lsns=tuple(later)))
    finally:
        journal.close()
    assert later and report.ok and report.replayed == len(later)


def test_a_leadership_term_that_starts_with_a_checkpoint_of_a_warm_cache_replays_from_it(tmp_path: Path) -> None:
    # What kruntimes.cluster.term does: the standby cache is filled without a journal; the term opens a new
    # incarnation, checkpoints the whole cache, records `leader`, schedules, and at the end releases its
    # assumptions (`aborted`) and records `leader` again.
    from kruntimes.journal.write.session import JournalSession
    from kruntimes.memory.api import MemoryApi
    from kruntimes.scheduler.loop import Scheduler
    from kruntimes.scheduler.queue import WorkQueue
    from tests.builders import FakeClock

    url = f"sqlite:///{tmp_path}/j.db"
    config = SchedulerConfig()
    cache = ClusterCache(config)
    api = MemoryApi()
    scheduler = Scheduler(cache, api, clock=lambda: NOW, queue=WorkQueue(clock=FakeClock()))
    for p in (pod("a", capacity={"runs": 3}), pod("b", capacity={"runs": 2})):
        cache.upsert_pod(p, now=NOW, event="ADDED")
    cache.upsert_run(active("warm", on="a"), event="ADDED")
    with JournalSession(url, config, spool_path=str(tmp_path / "spool")) as session:
        with cache.lock:
            session.attach(cache)
            cache.recorder = session.recorder
            cache.lsn = session.recorder.checkpoint()
            cache.record("leader", {"event": "acquired", "identity": "test"})
        api.watchers.append(scheduler.on_run)
        for name in ("x", "y", "z"):
            api.create(run(name))
            scheduler.process(("ns", name))
        api.watchers.clear()
        late = run("late")
        api.create(late)
        cache.upsert_run(api.get(late.key))  # type: ignore[arg-type]
        scheduler.process(late.key)  # bound, but the informer never shows it: the term ends with it assumed
        with cache.lock:
            for a in list(cache.assumed):
                cache.release(a.namespace, a.run_uid, "aborted")
            cache.record("leader", {"event": "lost", "identity": "test", "reason": "test"})
    incarnation = journals.lsns_of(url, "incarnation")[0]
    assert journals.lsns_of(url, "checkpoint")[0] == incarnation + 1
    assert journals.lsns_of(url, "release")
    journal = Journal.open(url)
    try:
        report = verify.verify(journal)
    finally:
        journal.close()
    assert report.ok and report.replayed == len(journals.lsns_of(url, "cycle")) == 4
    assert report.stats.started_from == [incarnation + 1] and report.stats.warnings == []
