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

from bench import journal_overhead
from kruntimes.journal import errors, payloads, records
from kruntimes.journal.write.recorder import JournalRecorder
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from tests import builders


class ListSink:
    accepts_deferred = True

    def __init__(self) -> None:
        self.records: list[payloads.DeferredRecord] = []

    def append(self, record: payloads.DeferredRecord) -> None:
        self.records.append(record)


def scheduled_records(detail: str) -> list[payloads.DeferredRecord]:
    """Every record of the demo workload's every ninth Run (each Runtime, invalid Runs, conflicts)."""
    sink = ListSink()
    recorder = JournalRecorder(sink, start_lsn=0, detail=detail, checkpoint_every=400, checkpoint_size_ratio=0)
    recorder.start(SchedulerConfig(workers=1), top_candidates=5, instance="test")
    journal_overhead.schedule(recorder, every=9)
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


def test_a_checkpoint_lists_the_cache_in_key_order_however_its_state_was_copied() -> None:
    # The recorder copies the cache unsorted under its lock; the payload sorts, off that lock.
    cache = ClusterCache()
    for name in ("p2", "p10", "p1"):
        cache.upsert_pod(builders.pod(name, capacity={"runs": 4}), now=builders.NOW, event="ADDED")
    for name, pod in (("r3", "p2"), ("r1", "p1"), ("r2", "p10")):
        cache.upsert_run(builders.active(name, on=pod), event="ADDED")
    for name in ("b", "a"):
        run = builders.run(name)
        cache.upsert_run(run, event="ADDED")
        assert cache.reserve(run, "p2")
    unsorted = cache.checkpoint_state()
    assert [p.name for p in unsorted["pods"]] == ["p2", "p10", "p1"]  # insertion order: a real test of the sort
    payload = payloads.checkpoint_payload(unsorted)
    assert payload == payloads.checkpoint_payload(cache.state())
    assert [p["name"] for p in payload["pods"]] == ["p1", "p10", "p2"]
    assert [r["name"] for r in payload["runs"]] == ["a", "b", "r1", "r2", "r3"]
    assert [a["run_uid"] for a in payload["assumed"]] == sorted(a.run_uid for a in unsorted["assumed"])
    assert len(payload["assumed"]) == 2
