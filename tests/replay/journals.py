"""Journals for the replay tests: written by the real scheduler, then (for damage tests) tampered with.

`scripted` drives the scheduler single-threaded with inline watch delivery, so the
same arguments always give the same records at the same LSNs. `live` runs it the
way production does - concurrent workers, a MemoryApi that delivers late and
injects conflicts, Runs finishing and being deleted, pods going stale as the
injected clock moves and changing capacity - and is what the determinism guard
replays. Both write through the real `JournalSession` (writer, spool, recorder).

Run as a module (`python -m tests.replay.journals URL SEED`) it writes one live
journal, for the subprocess that checks replay under another PYTHONHASHSEED.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa

from kruntimes.journal import chain, prune, prune_record
from kruntimes.journal.store import schema
from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.session import JournalSession
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.projection import PodInfo, RunInfo
from kruntimes.scheduler.queue import WorkQueue
from tests.builders import FakeClock, affinity, pod, run, sel

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
GPU = "example.com/gpu"


@dataclass
class Written:
    url: str
    incarnation: str
    cycles: int  # cycle records written
    records: int


def _session(url: str, spool_dir: Path, config: SchedulerConfig, **options: Any) -> JournalSession:
    options.setdefault("checkpoint_size_ratio", 0)  # these histories want checkpoints exactly where they ask
    return JournalSession(url, config, spool_path=str(spool_dir / f"spool-{uuid.uuid4().hex[:8]}"), **options)


def _count_cycles(url: str, incarnation: str) -> tuple[int, int]:
    journal = Journal.open(url)
    try:
        t = schema.journal_records
        with journal.engine.connect() as conn:
            cycles = conn.execute(sa.select(sa.func.count()).where(t.c.kind == "cycle",
                                                                   t.c.incarnation == incarnation)).scalar()
            records = conn.execute(sa.select(sa.func.count()).where(t.c.incarnation == incarnation)).scalar()
    finally:
        journal.close()
    return int(cycles or 0), int(records or 0)


# -- scripted: deterministic, single-threaded -----------------------------------------------------

def _drain(scheduler: Scheduler, api: MemoryApi, runs: list[RunInfo]) -> None:
    """Process every Pending Run in key order, a few rounds: what a single-threaded worker does."""
    for _ in range(4):
        for r in sorted(runs, key=lambda r: r.key):
            current = api.get(r.key)
            if current is not None and current.phase == "Pending":
                scheduler.process(r.key)


def scripted(url: str, spool_dir: Path, *, checkpoint_every: int = 40, detail: str = "summary",
             config: SchedulerConfig | None = None, top_candidates: int = 3,
             planner: Any = None, **session_options: Any) -> Written:
    """A small, fully deterministic history: placements, affinity, a full pool, completions, deletions.

    ``session_options`` go to the ``JournalSession`` (its ``writer``, ``history``, ...): they change
    how the records are stored, never which records are made.
    """
    config = config or SchedulerConfig()
    session = _session(url, spool_dir, config, checkpoint_every=checkpoint_every, detail=detail,
                       top_candidates=top_candidates, **session_options)
    try:
        cache = ClusterCache(config, session.recorder)
        session.attach(cache)
        api = MemoryApi(conflict_rate=0.25, seed=3)  # inline delivery: still deterministic
        scheduler = Scheduler(cache, api, clock=lambda: NOW, queue=WorkQueue(clock=FakeClock()), planner=planner)
        api.watchers.append(scheduler.on_run)
        for i in range(4):
            scheduler.on_pod(pod(f"p{i}", capacity={"runs": 2, GPU: 1 if i % 2 else 0}, heartbeat=NOW), event="ADDED")
        scheduler.on_pod(pod("stale", heartbeat=NOW - timedelta(minutes=5)), event="ADDED")
        runs = [run(f"r{j:02d}", labels={"team": "red" if j % 2 else "blue"},
                    requests={"runs": 1, **({GPU: 1} if j % 5 == 0 else {})},
                    affinity=affinity(preferred=[(10, sel(team="red"))]) if j % 3 == 0 else affinity())
                for j in range(12)]

        def drain() -> None:
            _drain(scheduler, api, runs)

        for r in runs:
            api.create(r)
        drain()
        for r in api.runs()[:5]:
            if r.active:
                api.finish(r.key, "Succeeded", NOW)
        scheduler.on_pod(replace(pod("p1", capacity={"runs": 3, GPU: 1}, heartbeat=NOW), resource_version="2"))
        for r in api.runs()[:3]:
            if r.terminal:
                scheduler.on_run_deleted(r.namespace, r.name)
        drain()
        # Informer lag: binds land in the API but the cache keeps the assumptions. Then one Run is seen
        # finished, one deleted, one bound elsewhere: every way an assumption is handed off.
        for r in api.runs():
            if r.active:
                api.finish(r.key, "Succeeded", NOW)
        late = [run(f"late-{k}", requests={"runs": 1}) for k in range(3)]
        for r in late:
            api.create(r)
        api.watchers.remove(scheduler.on_run)
        api.conflict_rate = 0.0
        for r in late:
            scheduler.process(r.key)
        finished, deleted, elsewhere = late
        api.finish(finished.key, "Succeeded", NOW)
        scheduler.on_run(api.get(finished.key))  # type: ignore[arg-type]
        scheduler.on_run_deleted(deleted.namespace, deleted.name)
        bound = api.get(elsewhere.key)
        if bound is not None and bound.pod_name is not None:
            other = "p2" if bound.pod_name != "p2" else "p0"
            scheduler.on_run(replace(bound, pod_name=other, pod_uid=f"uid-ns-{other}"))
        api.watchers.append(scheduler.on_run)
        drain()
    finally:
        session.close()
    cycles, records = _count_cycles(url, session.recorder.incarnation)
    return Written(url, session.recorder.incarnation, cycles, records)


# -- devices: claims, classes and inventories (SPEC §7.8) ------------------------------------------

DEVICE_DRIVER = "gpu.example.com"


def device_inventory(models: list[str], *, shared: bool = False) -> str:
    """A `kruntimes.io/devices` text: one GPU per model, NUMA alternating; `shared` adds a sliceable GPU."""
    from kruntimes.devices import inventory_codec

    devices: list[dict[str, Any]] = [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": m}, "numa": {"int": i % 2}}}
        for i, m in enumerate(models)]
    if shared:
        devices.append({"name": "slice", "allowMultipleAllocations": True,
                        "capacity": {f"{DEVICE_DRIVER}/memory": {"value": "40"}}})
    return inventory_codec.canonical_text({"driver": DEVICE_DRIVER, "devices": devices})


def device_claim(doc: dict[str, Any]) -> str:
    from kruntimes.devices import inventory_codec

    return inventory_codec.canonical_text(doc)


def scripted_devices(url: str, spool_dir: Path, *, checkpoint_every: int = 15, detail: str = "summary",
                     planner: Any = None, **session_options: Any) -> Written:
    """A deterministic history with device claims: shared and distinct inventories, classes added, changed
    and deleted, exact, firstAvailable, constrained and capacity claims, completions freeing devices, and an
    inventory re-projected with a device fewer. Checkpoints fall between the inventories' first records."""
    config = SchedulerConfig()
    session = _session(url, spool_dir, config, checkpoint_every=checkpoint_every, detail=detail,
                       top_candidates=3, **session_options)
    try:
        cache = ClusterCache(config, session.recorder)
        session.attach(cache)
        api = MemoryApi(conflict_rate=0.2, seed=5)
        scheduler = Scheduler(cache, api, clock=lambda: NOW, queue=WorkQueue(clock=FakeClock()), planner=planner)
        api.watchers.append(scheduler.on_run)
        model = {"cel": {"expression": f'device.attributes["{DEVICE_DRIVER}"].model == "a100"'}}
        scheduler.on_device_class("gpu", 1, {"selectors": [{"cel": {"expression":
                                                                     f'device.driver == "{DEVICE_DRIVER}"'}}]})
        scheduler.on_device_class("broken", 1, {"selectors": [{"cel": {"expression": "device.attributes.all(x, true)"}}]})
        big, small = device_inventory(["a100", "a100", "t4", "t4"], shared=True), device_inventory(["t4"])
        for i in range(5):
            scheduler.on_pod(replace(pod(f"g{i}", capacity={"runs": 3}, heartbeat=NOW),
                                     devices=big if i < 3 else small), event="ADDED")
        scheduler.on_pod(pod("plain", capacity={"runs": 3}, heartbeat=NOW), event="ADDED")
        claims = [
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]},
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 2, "selectors": [model]}}]},
            {"requests": [{"name": "gpu", "firstAvailable": [
                {"name": "fast", "deviceClassName": "gpu", "selectors": [model]},
                {"name": "any", "deviceClassName": "gpu"}]}]},
            {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu"}},
                          {"name": "b", "exactly": {"deviceClassName": "gpu"}}],
             "constraints": [{"requests": ["a", "b"], "matchAttribute": f"{DEVICE_DRIVER}/numa"}]},
            {"requests": [{"name": "mem", "exactly": {"deviceClassName": "gpu", "capacity": {
                "requests": {f"{DEVICE_DRIVER}/memory": "10"}}}}]},
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "broken"}}]},
        ]
        runs = [replace(run(f"d{j:02d}", requests={"runs": 1}), devices=device_claim(claims[j % len(claims)]))
                for j in range(14)] + [run(f"n{j}", requests={"runs": 1}) for j in range(3)]

        def drain() -> None:
            _drain(scheduler, api, runs)

        for r in runs:
            api.create(r)
        drain()
        for r in api.runs()[:6]:
            if r.active:
                api.finish(r.key, "Succeeded", NOW)
        # The class is fixed and another changes; a pod's inventory loses a device (re-projection).
        scheduler.on_device_class("broken", 2, {"selectors": [{"cel": {"expression": "device.driver != \"\""}}]})
        scheduler.on_pod(replace(pod("g4", capacity={"runs": 3}, heartbeat=NOW), resource_version="2",
                                 devices=device_inventory([])))
        scheduler.on_pod(replace(pod("g5", capacity={"runs": 3}, heartbeat=NOW), devices=small), event="ADDED")
        drain()
        scheduler.on_device_class_deleted("broken")
        for r in api.runs():
            if r.terminal:
                scheduler.on_run_deleted(r.namespace, r.name)
        extra = [replace(run(f"e{j}", requests={"runs": 1}), devices=device_claim(claims[j])) for j in range(4)]
        runs += extra
        for r in extra:
            api.create(r)
        drain()
    finally:
        session.close()
    cycles, records = _count_cycles(url, session.recorder.incarnation)
    return Written(url, session.recorder.incarnation, cycles, records)


# -- live: concurrent, the production shape ------------------------------------------------------

class Clock:
    """The injected scheduler clock; the test moves it so heartbeats age."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass(frozen=True)
class LiveWorkload:
    pods: tuple[PodInfo, ...]
    runs: tuple[RunInfo, ...]
    conflict_rate: float
    max_delay: float
    rounds: int
    seed: int
    checkpoint_every: int
    detail: str


def random_workload(seed: int, *, checkpoint_every: int = 25, detail: str = "summary") -> LiveWorkload:
    rng = random.Random(seed)
    pods, runs = [], []
    for runtime in ("rt-a", "rt-b")[: rng.randint(1, 2)]:
        for i in range(rng.randint(2, 8)):
            cap = {"runs": rng.randint(1, 3)}
            if rng.random() < 0.5:
                cap[GPU] = rng.randint(0, 2)
            pods.append(pod(f"{runtime}-p{i}", runtime=runtime, capacity=cap, heartbeat=NOW,
                            ready=rng.random() < 0.9))
    runtimes = sorted({p.runtime for p in pods})
    for j in range(rng.randint(8, 80)):
        labels = {"team": rng.choice(["red", "blue"])}
        roll = rng.random()
        aff = (affinity(anti=[sel(team=labels["team"])]) if roll < 0.15
               else affinity(preferred=[(rng.randint(1, 50), sel(team="red"))]) if roll < 0.4 else affinity())
        runs.append(run(f"r{j:03d}", runtime=rng.choice(runtimes), labels=labels, affinity=aff,
                        requests={"runs": 1, **({GPU: 1} if rng.random() < 0.3 else {})},
                        workspace=rng.choice([None, None, "ws"])))
    return LiveWorkload(pods=tuple(pods), runs=tuple(runs), conflict_rate=rng.choice([0.0, 0.1, 0.3]),
                        max_delay=rng.choice([0.0, 0.001, 0.003]), rounds=rng.randint(2, 5), seed=seed,
                        checkpoint_every=checkpoint_every, detail=detail)


def _quiet(scheduler: Scheduler, api: MemoryApi, deadline: float) -> None:
    stable = 0
    while time.monotonic() < deadline and stable < 3:
        q = scheduler.queue
        stable = stable + 1 if len(q) == 0 and q.processing_count() == 0 and api.idle() else 0
        time.sleep(0.002)


def live(url: str, spool_dir: Path, w: LiveWorkload, *, workers: int = 4, deadline_seconds: float = 10.0,
         writer: str = "process") -> Written:
    """Run the live scheduler on `w` with the journal on (`writer`: process or thread); return what it wrote."""
    config = SchedulerConfig(heartbeat_staleness_seconds=30, workers=workers)
    session = _session(url, spool_dir, config, checkpoint_every=w.checkpoint_every, detail=w.detail,
                       top_candidates=3, writer=writer)
    rng = random.Random(w.seed)
    clock = Clock(NOW)
    skipped = [0.0]
    cache = ClusterCache(config, session.recorder)
    session.attach(cache)
    api = MemoryApi(conflict_rate=w.conflict_rate, delay=(0.0, w.max_delay), seed=w.seed)
    scheduler = Scheduler(cache, api, clock=clock,
                          queue=WorkQueue(clock=lambda: time.monotonic() + skipped[0]))
    api.watchers.append(scheduler.on_run)
    pods = {p.key: p for p in w.pods}
    version = [1]

    def update(p: PodInfo, **changes: Any) -> None:
        version[0] += 1
        pods[p.key] = replace(p, resource_version=str(version[0]), **changes)
        scheduler.on_pod(pods[p.key])

    try:
        for p in w.pods:
            scheduler.on_pod(p, event="ADDED")
        scheduler.start(workers)
        batches = [w.runs[i::w.rounds] for i in range(w.rounds)]
        deadline = time.monotonic() + deadline_seconds
        for batch in batches:
            for r in batch:
                api.create(r)
                time.sleep(rng.uniform(0, 0.0005))
            # Meanwhile, the cluster moves: heartbeats age, some are refreshed, capacity changes,
            # Runs finish and finished ones are deleted.
            clock.now += timedelta(seconds=rng.choice([5, 20, 31, 45]))
            for p in list(pods.values()):
                roll = rng.random()
                if roll < 0.6:
                    update(p, heartbeat=clock.now)
                elif roll < 0.75:
                    capacity = dict(p.capacity)
                    capacity["runs"] = max(0, capacity.get("runs", 1) + rng.choice([-1, 1]))
                    update(p, capacity=tuple(sorted(capacity.items())))
            with cache.lock:
                active = [r for r in cache.runs() if r.active]
            for r in active:
                if rng.random() < 0.4:
                    api.finish(r.key, "Succeeded", clock.now)
            _quiet(scheduler, api, deadline)
            with cache.lock:
                done = [r for r in cache.runs() if r.terminal]
            for r in done:
                if rng.random() < 0.5:
                    scheduler.on_run_deleted(r.namespace, r.name)
            skipped[0] += 1000.0  # let backoffs from conflicts come due
            scheduler.queue.poke()
            _quiet(scheduler, api, deadline)
    finally:
        scheduler.stop()
        api.close()
        session.close()
    cycles, records = _count_cycles(url, session.recorder.incarnation)
    return Written(url, session.recorder.incarnation, cycles, records)


# -- tampering ----------------------------------------------------------------------------------------

def _rows(url: str, stmt: Any) -> list[Any]:
    journal = Journal.open(url)
    try:
        with journal.engine.begin() as conn:
            result = conn.execute(stmt)
            return list(result) if result.returns_rows else []
    finally:
        journal.close()


T = schema.journal_records


def lsns_of(url: str, kind: str) -> list[int]:
    return [r[0] for r in _rows(url, sa.select(T.c.lsn).where(T.c.kind == kind).order_by(T.c.lsn))]


def payload_of(url: str, lsn: int) -> dict[str, Any]:
    import json

    return json.loads(_rows(url, sa.select(T.c.payload).where(T.c.lsn == lsn))[0][0])


def payload_of_epoch(url: str, epoch: str, lsn: int) -> dict[str, Any]:
    import json

    return json.loads(_rows(url, sa.select(T.c.payload).where(T.c.incarnation == epoch, T.c.lsn == lsn))[0][0])


def kind_of(url: str, lsn: int) -> str:
    return str(_rows(url, sa.select(T.c.kind).where(T.c.lsn == lsn))[0][0])


def delete_lsns(url: str, first: int, last: int) -> None:
    _rows(url, sa.delete(T).where(T.c.lsn.between(first, last)))


def epoch_of(url: str, lsn: int) -> str:
    return str(_rows(url, sa.select(T.c.incarnation).where(T.c.lsn == lsn))[0][0])


def reseal(url: str, epoch: str, key: chain.ChainKey | None = None, *, from_lsn: int = 1) -> None:
    """Recompute an epoch's chain over the records it now holds (from `from_lsn` on), and its head: what a
    tamperer with write access (and, for a keyed chain, the key) can do after editing."""
    rows = _rows(url, sa.select(T.c.lsn, T.c.recorded_at, T.c.kind, T.c.schema_version, T.c.payload_sha256,
                                T.c.chain_hash).where(T.c.incarnation == epoch, T.c.lsn != 0).order_by(T.c.lsn))
    prev, updates = chain.GENESIS, []
    for lsn, at, kind, version, sha, stored in rows:
        prev = chain.link(prev, epoch, lsn, at, kind, version, sha, key) if lsn >= from_lsn else stored
        updates.append((lsn, prev))
    journal = Journal.open(url)
    try:
        with journal.engine.begin() as conn:
            for lsn, link in updates:
                conn.execute(sa.update(T).where(T.c.incarnation == epoch, T.c.lsn == lsn).values(chain_hash=link))
            E = schema.journal_epochs
            conn.execute(sa.update(E).where(E.c.epoch == epoch).values(head_lsn=updates[-1][0], head_hash=prev))
    finally:
        journal.close()


def rewrite(url: str, lsn: int, change: Callable[[dict[str, Any]], None], *, rehash: bool = True,
            reseal_chain: bool = True) -> None:
    """Edit a record's payload in place - as a tamperer would, with a matching hash unless told not to, and
    with the epoch's chain recomputed (`reseal`) unless told not to: then only replay can find the edit."""
    from kruntimes import canonical

    payload = payload_of(url, lsn)
    change(payload)
    text = canonical.text(payload)
    values: dict[str, Any] = {"payload": text}
    if rehash:
        values["payload_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    _rows(url, sa.update(T).where(T.c.lsn == lsn).values(**values))
    if rehash and reseal_chain:
        if lsn == prune.PRUNE_LSN:
            relink_prunes(url)
        else:
            reseal(url, epoch_of(url, lsn))


def relink_prunes(url: str, key: chain.ChainKey | None = None) -> None:
    """Recompute the prune records' chain (plain, or with `key`): what a tamperer can do after editing one."""
    rows = _rows(url, sa.select(T.c.incarnation, T.c.recorded_at, T.c.payload_sha256)
                 .where(T.c.lsn == prune.PRUNE_LSN).order_by(T.c.recorded_at))
    previous = chain.GENESIS
    for number, (incarnation, at, sha) in enumerate(rows, 1):
        previous = prune_record.link(previous, number, at, sha, key)
        _rows(url, sa.update(T).where(T.c.lsn == prune.PRUNE_LSN, T.c.incarnation == incarnation)
              .values(chain_hash=previous))


def prune_to(url: str, checkpoint: int) -> None:
    """What `journal prune` leaves when it cuts at `checkpoint`: incarnations, the prune record, the checkpoint on."""
    journal = Journal.open(url)
    try:
        prune.prune_to(journal, checkpoint)
    finally:
        journal.close()


def set_schema_version(url: str, lsn: int, version: int) -> None:
    """Change a record's schema version, and recompute its epoch's chain (the version is in the link)."""
    _rows(url, sa.update(T).where(T.c.lsn == lsn).values(schema_version=version))
    reseal(url, epoch_of(url, lsn))


if __name__ == "__main__":  # python -m tests.replay.journals URL SEED SPOOL_DIR
    written = live(sys.argv[1], Path(sys.argv[3]), random_workload(int(sys.argv[2]), checkpoint_every=15))
    print(written.incarnation, written.cycles)
