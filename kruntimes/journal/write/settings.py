"""What a journal writer is told: a few settings, each grouping what belongs together.

A writer (``JournalWriter``, ``ProcessJournalWriter``, ``SpoolRecovery``, and the
``JournalSession`` that opens one) is built from these instead of a long row of
keywords, so the same group means the same thing wherever it is passed on:

- ``Store``: which database, whether the writer may migrate its schema, and how the
  history tables are kept (the process writer's child opens the store itself);
- ``Spool``: where records wait while the database is away;
- ``Batching``: how records are buffered, bounded and gathered into transactions;
- ``Patience``: how long the database gets, and how a writer retries it;
- ``Epochs``: whose records these are, the key that chains them, which earlier epochs
  to close;
- ``Instruments``: where a thread writer reports and which clocks it reads (tests
  inject fakes; these never cross to a writer process).

All but ``Instruments`` pickle: the process writer sends them to its child as they are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry

from kruntimes.journal import records
from kruntimes.journal.history import indexer
from kruntimes.journal.store import deadline
from kruntimes.journal.write import intake


@dataclass(frozen=True)
class Store:
    """The database a writer process opens for itself (SPEC §5 "Availability": never waited for at start)."""

    url: str
    #: Check and migrate the schema before the first write; without it, wait for `kruntimes db upgrade`.
    migrate: bool = False
    #: The history tables: derived in each batch ("inline") or left to the indexer ("follow").
    history: str = indexer.DEFAULT_HISTORY


@dataclass(frozen=True)
class Spool:
    """Where records wait, fsync'd, while the database does not take them."""

    path: str | os.PathLike[str]
    #: How long to wait for the spool's lock while a finishing predecessor still holds it.
    wait: float = 0.0


@dataclass(frozen=True)
class Batching:
    """How records are buffered, bounded and gathered into one transaction."""

    #: Records the producer may hand over before the policy applies.
    buffer_size: int = 100_000
    #: Most records in one transaction.
    max_batch: int = 1_000
    #: A bigger payload is rejected (a checkpoint may be bigger: ``records.MAX_CHECKPOINT_BYTES``).
    max_payload_bytes: int = records.DEFAULT_MAX_PAYLOAD_BYTES
    #: Fewer than ``max_batch`` records wait this long after the last batch began; None:
    #: the writer's own default (the thread writer commits at once, the process writer's
    #: child every ``process.COMMIT_INTERVAL``).
    commit_interval: float | None = None
    #: A full buffer when neither database nor spool takes records: "block" the producer, or "drop" and count.
    policy: intake.Policy = "block"


@dataclass(frozen=True)
class Patience:
    """How long the database gets, and how often a writer tries it again after a failure."""

    #: A call not answered within this counts as failed: its batch goes to the spool (SPEC §5).
    write_timeout: float = deadline.DEFAULT_SECONDS
    #: A write that took longer succeeded, but the next batches go to the spool for a while.
    slow_write_seconds: float = 5.0
    #: The first retry after a failure, doubling up to ``max_retry_interval``.
    retry_interval: float = 0.5
    max_retry_interval: float = 30.0


@dataclass(frozen=True)
class Epochs:
    """Whose records a writer stores, and which earlier epochs it closes (SPEC §5 "Several writers, one truth")."""

    #: This writer's epoch: noted until its end record is durable, so a later writer can close it.
    epoch: str | None = None
    #: The chain's HMAC key (``chain.load_key``); None: the key-less chain.
    key_file: str | None = None
    #: No epoch of its own (a standby draining a killed term's spool): every epoch found is one to close.
    recover_all: bool = False


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Instruments:
    """Where a thread writer reports, and the clocks it reads."""

    #: Its Prometheus metrics' registry; None: the default one.
    registry: CollectorRegistry | None = None
    #: Called with each write's seconds; None: the registry's latency histogram.
    observe_latency: Callable[[float], None] | None = None
    #: Batching, retries and slow writes are timed by this.
    clock: Callable[[], float] = field(default=time.monotonic)
    #: Stamps the end records of recovered epochs.
    wall_clock: Callable[[], datetime] = field(default=_utc_now)
