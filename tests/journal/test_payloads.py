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
from kruntimes.journal.recorder import JournalRecorder
from kruntimes.scheduler.config import SchedulerConfig


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
