"""A small journal written by the real scheduler, for the history views, queries, CLI and prune.

The real queue, planner, assumed cache and workers schedule a small workload against
the MemoryApi (with injected 409s) while a ``JournalRecorder`` collects every record.
Its clock is a fixed, stepping one so time-window queries are deterministic:

- phase 1 at 10:00 UTC: 12 cpu Runs on 3 ready cpu pods of 4, 3 and 2 slots (3 stay
  Pending for insufficient capacity; cpu-003 is not ready), 4 one-GPU Runs on 2 GPU
  pods (2 stay Pending), one invalid Run;
- phase 2 at 11:30 UTC: two GPU pods arrive (the 2 Pending GPU Runs are placed after
  waiting ~90 minutes), three more cpu Runs arrive and stay Pending, then gpu-001 stops
  being ready.

The same records are loaded into SQLite and PostgreSQL, so both backends must answer
alike; ``Truth`` holds what the MemoryApi ended with, to check the answers against.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from kruntimes.api import capacity as capacity_annotations
from kruntimes.api import ingest, models
from kruntimes.journal import records
from kruntimes.journal.store import backends, engines
from kruntimes.journal.write.recorder import JournalRecorder
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler

NS = "shop"
PLANNER_NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
PHASE1 = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)
PHASE2 = datetime(2026, 11, 29, 11, 30, tzinfo=timezone.utc)
END = PHASE2 + timedelta(minutes=5)  # "now" for the last-hour questions
CHECKPOINT_EVERY = 40
SCORES = (("PreferredRunAffinity", 1), ("LeastLoaded", 2))  # a weight > 1 to see in the totals


class SteppingClock:
    """recorded_at for each record: the phase's start plus one millisecond per record."""

    def __init__(self, start: datetime) -> None:
        self._lock = threading.Lock()
        self.jump(start)

    def jump(self, start: datetime) -> None:
        with self._lock:
            self._next = start

    def __call__(self) -> datetime:
        with self._lock:
            now, self._next = self._next, self._next + timedelta(milliseconds=1)
            return now


class ListSink:
    def __init__(self) -> None:
        self.records: list[records.JournalRecord] = []

    def append(self, record: records.JournalRecord) -> None:
        self.records.append(record)  # called under the cache lock: ordered by LSN


@dataclass
class Truth:
    """What the MemoryApi ended with, and what happened in which phase."""

    placed: dict[str, str] = field(default_factory=dict)  # run name -> pod name
    pending: dict[str, str] = field(default_factory=dict)  # run name -> pending message
    failed: set[str] = field(default_factory=set)
    pending_after_phase1: set[str] = field(default_factory=set)
    late_runs: set[str] = field(default_factory=set)  # cpu Runs created in phase 2
    injected_conflicts: int = 0


@dataclass
class Generated:
    records: list[records.JournalRecord]
    truth: Truth


def _pod(runtime: str, i: int, capacity: dict[str, str], ready: bool = True) -> dict[str, Any]:
    annotations = capacity_annotations.annotations(capacity)  # the Runtime controller's form (SPEC §2.1)
    annotations[models.HEARTBEAT_ANNOTATION] = (PLANNER_NOW - timedelta(seconds=5)).isoformat()
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{runtime}-{i:03d}", "namespace": NS, "uid": f"{NS}-{runtime}-{i}",
                         "labels": {models.RUNTIME_LABEL: runtime}, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _run(name: str, runtime: str, requests: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": {"args": ["python", "job.py"]}}}
    if requests is not None:
        spec["resources"] = {"requests": requests}
    return {"apiVersion": models.API_VERSION, "kind": "Run",
            "metadata": {"name": name, "namespace": NS, "uid": f"{NS}-{name}", "labels": {"app": runtime}},
            "spec": spec}


CPU_RUNS = (4, 3, 2, 3)  # cpu-003 is not ready: 9 usable slots
GPU = {"runs": "4", "example.com/gpu": "1"}


def generate() -> Generated:
    """Schedule the two phases with the real scheduler; return its records and the API's end state."""
    clock = SteppingClock(PHASE1)
    sink = ListSink()
    config = SchedulerConfig(workers=2, scores=SCORES)
    recorder = JournalRecorder(sink, start_lsn=0, checkpoint_every=CHECKPOINT_EVERY,
                               checkpoint_size_ratio=0, clock=clock,
                               incarnation="history0" + "0" * 24)
    recorder.start(config, top_candidates=5, instance="test")
    cache = ClusterCache(config, recorder)
    recorder.state_source = cache
    api = MemoryApi(conflict_rate=0.15, seed=3)
    scheduler = Scheduler(cache, api, clock=lambda: PLANNER_NOW)
    api.watchers.append(scheduler.on_run)
    truth = Truth()

    def pod(obj: dict[str, Any], event: str) -> None:
        info = ingest.pod_info(obj)
        assert info is not None
        scheduler.on_pod(info, event=event)

    for i, runs in enumerate(CPU_RUNS):
        pod(_pod("cpu", i, {"runs": str(runs)}, ready=i != 3), "ADDED")
    for i in range(2):
        pod(_pod("gpu", i, GPU), "ADDED")
    scheduler.start(2)
    try:
        for i in range(12):
            api.create(ingest.run_info(_run(f"etl-{i:02d}", "cpu")))
        for i in range(4):
            api.create(ingest.run_info(_run(f"train-{i}", "gpu", {"example.com/gpu": "1"})))
        api.create(ingest.run_info(_run("typo-0", "cpu", {"runs": "500m"})))
        _settle(scheduler, api)
        truth.pending_after_phase1 = {r.name for r in api.runs() if r.phase == "Pending"}

        clock.jump(PHASE2)
        pod(_pod("gpu", 2, GPU), "ADDED")
        pod(_pod("gpu", 3, GPU), "ADDED")
        _settle(scheduler, api)
        for i in range(3):
            api.create(ingest.run_info(_run(f"late-{i}", "cpu")))
            truth.late_runs.add(f"late-{i}")
        _settle(scheduler, api)
        pod(_pod("gpu", 1, GPU, ready=False), "MODIFIED")
        _settle(scheduler, api)
    finally:
        scheduler.stop()
        api.close()
    for r in api.runs():
        if r.pod_name:
            truth.placed[r.name] = r.pod_name
        elif r.phase == "Pending":
            truth.pending[r.name] = r.pending_message or ""
        elif r.phase == "Failed":
            truth.failed.add(r.name)
    truth.injected_conflicts = api.injected_conflicts
    return Generated(records=list(sink.records), truth=truth)


def _settle(scheduler: Scheduler, api: MemoryApi, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if scheduler.queue.idle() and api.idle():
            time.sleep(0.05)  # let a last event land, then confirm
            if scheduler.queue.idle():
                return
        time.sleep(0.02)
    raise AssertionError("the scheduler did not settle")


def load(url: str, generated: Generated) -> None:
    journal = backends.Journal.open(url)
    try:
        journal.append_batch(generated.records)
    finally:
        journal.close()


@contextmanager
def fresh_postgres_schema(base_url: str) -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a schema of its own, dropped on exit."""
    base = engines.parse_url(base_url)
    name = f"kh_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{name}"'))
        yield base.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()
