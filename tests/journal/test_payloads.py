"""Payloads built from the scheduler's data: the kinds the writer does not walk again are exact.

The writer skips the JSON-exactness walk for the kinds `payloads` assembles field by
field from typed projections (`EXACT_KINDS`). That is only sound while every such
payload would pass the walk anyway, so this holds the trusted and the checked
encoding equal on every record a real scheduling run produces.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from kruntimes import demo
from kruntimes.api import ingest
from kruntimes.journal import errors, payloads, records
from kruntimes.journal.recorder import JournalRecorder
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.queue import WorkQueue


class ListSink:
    accepts_deferred = True

    def __init__(self) -> None:
        self.records: list[payloads.DeferredRecord] = []

    def append(self, record: payloads.DeferredRecord) -> None:
        self.records.append(record)


def scheduled_records(detail: str) -> list[payloads.DeferredRecord]:
    """Every record of the demo workload's first 600 Runs, scheduled by the real scheduler."""
    sink = ListSink()
    config = SchedulerConfig(workers=1)
    recorder = JournalRecorder(sink, start_lsn=0, detail=detail, checkpoint_every=400, checkpoint_size_ratio=0)
    recorder.start(config, top_candidates=5, instance="test")
    cache = ClusterCache(config, recorder)
    recorder.state_source = cache
    api = MemoryApi(conflict_rate=0.05, seed=11)
    scheduler = Scheduler(cache, api, clock=lambda: demo.NOW, queue=WorkQueue(base_delay=1e-6, max_delay=1e-4))
    api.watchers.append(scheduler.on_run)
    workload = demo.generate()
    for pod in workload.pods:
        info = ingest.pod_info(pod)
        assert info is not None
        scheduler.on_pod(info)
    for obj in workload.runs[::9]:  # every Runtime and the invalid Runs, a ninth of the volume
        api.create(ingest.run_info(obj))
    while (key := scheduler.queue.get(timeout=0)) is not None or not scheduler.queue.idle():
        if key is not None:
            try:
                scheduler.process(key)
            finally:
                scheduler.queue.done(key)
    return sink.records


@pytest.mark.parametrize("detail", payloads.DETAILS)
def test_every_trusted_payload_of_a_real_run_encodes_as_the_checked_path_encodes_it(detail: str) -> None:
    deferred = scheduled_records(detail)
    kinds: Counter[str] = Counter()
    for d in deferred:
        checked = records.encode(payloads.realize(d))  # raises if the payload is not JSON-exact
        assert payloads.encoded(d, max_payload_bytes=records.DEFAULT_MAX_PAYLOAD_BYTES) == checked
        kinds[d.kind] += 1
    assert set(payloads.EXACT_KINDS) <= set(kinds), kinds  # every trusted kind was exercised


@pytest.mark.parametrize(("fields", "message"), [
    ((1, 0, "bind", {"result": "ok", "score": 0.5}), "float"),  # a passed-through payload is still walked
    ((0, 0, "bind", {"result": "ok"}), "lsn must be"),
    ((1, 0, "vote", {"result": "ok"}), "kind 'vote'"),
    ((1, datetime(2026, 1, 1), "bind", {"result": "ok"}), "aware"),
], ids=["a float in a passed-through payload", "lsn 0", "an unknown kind", "a naive timestamp"])
def test_what_the_fast_path_does_not_trust_it_still_refuses(fields: tuple[Any, ...], message: str) -> None:
    lsn, at, kind, data = fields
    deferred: Any = payloads.DeferredRecord("7f0c1d2e3b4a59687766554433221100", lsn, at, kind, data, "summary", 5)
    with pytest.raises(errors.RecordRejected, match=message):
        payloads.encoded(deferred, max_payload_bytes=records.DEFAULT_MAX_PAYLOAD_BYTES)
