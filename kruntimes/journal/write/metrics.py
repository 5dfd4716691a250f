"""Prometheus metrics of the journal writer, bounded labels only.

Counters are plain ints on each writer (no lock or metric call on the scheduler's
``append`` path) and are summed at scrape time by one collector per registry, so
several writers -- tests create many -- never raise "Duplicated timeseries". A
closed writer's totals are kept so counters never go down.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

REJECT_REASONS = ("malformed", "oversized", "conflict", "chain")
#: WriterStats fields that are gauges: several writers' combine as the largest, not the sum.
GAUGES = ("head_lsn", "history_deferred")


@dataclass
class WriterStats:
    """Totals of one writer (or, in the collector, of every writer on a registry)."""

    appended: int = 0
    written: int = 0
    spilled: int = 0
    dropped: int = 0
    rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))
    write_errors: int = 0
    buffer_depth: int = 0
    #: The stored head of the writer's epoch (a gauge: the newest of several writers').
    head_lsn: int = 0
    #: Records moved to the quarantine file (also counted in ``rejected``).
    quarantined: int = 0
    #: 1 while the writer leaves its records' history rows to ``kruntimes journal index``
    #: (``--journal-history follow``, or inline while the tables trail); a gauge.
    history_deferred: int = 0

    def add(self, other: WriterStats) -> None:
        for f in fields(self):
            if f.name == "rejected":
                for reason, n in other.rejected.items():
                    self.rejected[reason] = self.rejected.get(reason, 0) + n
            elif f.name in GAUGES:
                setattr(self, f.name, max(getattr(self, f.name), getattr(other, f.name)))
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class _Source(Protocol):
    def stats(self) -> WriterStats: ...


class _Collector:
    def __init__(self) -> None:
        self._sources: weakref.WeakSet[_Source] = weakref.WeakSet()
        self._retired = WriterStats()
        self._lock = threading.Lock()

    def attach(self, source: _Source) -> None:
        with self._lock:
            self._sources.add(source)

    def retire(self, source: _Source) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.discard(source)
                final = source.stats()
                final.buffer_depth = final.head_lsn = final.history_deferred = 0  # gauges, not totals
                self._retired.add(final)

    def describe(self) -> Iterator[Metric]:
        return self._families(WriterStats())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            total = WriterStats()
            total.add(self._retired)
            for source in list(self._sources):
                total.add(source.stats())
        return self._families(total)

    @staticmethod
    def _families(s: WriterStats) -> Iterator[Metric]:
        def counter(name: str, doc: str, value: int) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        yield counter("kruntimes_journal_records_appended", "Records accepted by JournalWriter.append.", s.appended)
        yield counter("kruntimes_journal_records_written", "Records committed to the journal database.", s.written)
        yield counter("kruntimes_journal_records_spilled", "Records written to the local spool file.", s.spilled)
        yield counter(
            "kruntimes_journal_records_dropped",
            "Records lost on purpose under the drop policy (buffer full, or spool unwritable).",
            s.dropped,
        )
        rejected = CounterMetricFamily(
            "kruntimes_journal_records_rejected",
            "Records refused: malformed, oversized, a key (epoch, LSN) stored with other content (conflict),"
            " or a spooled record whose hash or link does not follow from its epoch's stored head (chain).",
            labels=["reason"],
        )
        for reason in REJECT_REASONS:
            rejected.add_metric([reason], s.rejected.get(reason, 0))
        yield rejected
        yield counter(
            "kruntimes_journal_write_errors",
            "Failed or too slow database writes and failed spool writes.",
            s.write_errors,
        )
        yield GaugeMetricFamily(
            "kruntimes_journal_buffer_depth", "Records waiting in the in-memory buffer.", value=s.buffer_depth
        )
        yield GaugeMetricFamily(
            "kruntimes_journal_head_lsn",
            "LSN of the current epoch's head stored in the database (the `journal head` log line has its hash).",
            value=s.head_lsn,
        )
        yield GaugeMetricFamily(
            "kruntimes_journal_history_deferred",
            "1 while the writer leaves its records' history rows to `kruntimes journal index` "
            "(--journal-history follow, or inline while the history tables trail the records).",
            value=s.history_deferred,
        )
        yield counter("kruntimes_journal_records_quarantined",
                      "Records a spool drain refused to store, moved to the quarantine file next to the spool.",
                      s.quarantined)


@dataclass(frozen=True)
class RegistryMetrics:
    collector: _Collector
    write_latency: Histogram


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, RegistryMetrics] = weakref.WeakKeyDictionary()
_by_registry_lock = threading.Lock()


def for_registry(registry: CollectorRegistry | None) -> RegistryMetrics:
    """The journal metrics registered on ``registry`` (default: the global one), created once."""
    registry = REGISTRY if registry is None else registry
    with _by_registry_lock:
        found = _by_registry.get(registry)
        if found is None:
            collector = _Collector()
            registry.register(collector)  # type: ignore[arg-type]
            latency = Histogram(
                "kruntimes_journal_write_latency_seconds",
                "Duration of one batch write to the journal database (one transaction).",
                buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                registry=registry,
            )
            found = _by_registry[registry] = RegistryMetrics(collector, latency)
        return found
