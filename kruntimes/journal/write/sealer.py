"""Sealing: the process writer's records turned into pickled chunks, in the producer's own thread.

Every ``process.SEAL_AT`` records the intake has the ``ProcessJournalWriter`` seal its
buffer (and the sender or ``flush`` seal what is left): finished ``JournalRecord`` s are
encoded here, deferred ones travel as plain tuples (their payloads are the child's to
build), and the batch is pickled into the ``Outbox`` at once - except a checkpoint's,
which the sender pickles later, outside every lock (``outbox``). Only the bytes are
kept (for a resend), so the records themselves die young instead of aging into the
scheduler's oldest garbage-collector generation while the child stores them.

A record that cannot be encoded or pickled is rejected and counted here, before the
child; it travels as None so the child still counts it as settled.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kruntimes.journal import payloads, records
from kruntimes.journal.write import intake, metrics, outbox, wire

log = logging.getLogger("kruntimes.journal.process")  # the process writer's lines, as operators know them


class Sealer:
    """Encodes and pickles the intake's buffer into the outbox; counts what it rejects."""

    def __init__(self, outbox: outbox.Outbox, max_payload_bytes: int) -> None:
        self._outbox = outbox
        self._max_payload_bytes = max_payload_bytes
        self.rejected = dict.fromkeys(metrics.REJECT_REASONS, 0)  # by the producer, before the child
        self.unpicklable = 0  # records whose data would not pickle: rejected as malformed, before the child
        self._unpicklable_lock = threading.Lock()

    def seal(self, i: intake.Intake) -> None:
        """(Intake lock held.) Pickle every buffered record into one chunk for the child.

        Never raises: a record that cannot be pickled is rejected and counted, like an
        invalid one.
        """
        batch = list(i.buffer)
        i.buffer.clear()
        self._outbox.trim(i.settled)
        self._outbox.seal(self._encode(batch), self.dumps)  # a checkpoint is pickled later, by the sender

    def dumps(self, batch: list[Any]) -> bytes:
        """The chunk of ``batch``; a record whose data will not pickle goes as None (rejected, counted)."""
        try:
            return wire.dumps(batch)
        except Exception:  # noqa: BLE001 - some record's data will not pickle: find it, send the rest
            return wire.dumps([self._picklable(r) for r in batch])

    def _picklable(self, record: Any) -> Any:
        try:
            wire.dumps(record)
        except Exception as exc:  # noqa: BLE001
            with self._unpicklable_lock:  # the producer (intake lock held) and the sender (not) get here
                self.unpicklable += 1
            log.error("journal writer rejected a record whose data cannot be pickled: %s", exc)
            return None
        return record

    def _encode(self, batch: list[Any]) -> list[Any]:
        """Encode the finished JournalRecords here; rejected ones go as None (counted, settled).

        A finished payload is a tree of dicts: pickling it for the child costs about
        what encoding it does, and the child would still have to encode it. Deferred
        records go as plain tuples (pickled in C, no per-record reducer call): their
        data is cheap to pickle and their payloads are the child's to build.
        """
        deferred = payloads.DeferredRecord
        if all(type(r) is deferred for r in batch):  # the scheduler's records: nothing to encode here
            return list(map(tuple, batch))
        plain = [tuple(r) if type(r) is deferred else r for r in batch]
        out, first = records.encode_batch(plain, max_payload_bytes=self._max_payload_bytes, rejected=self.rejected)
        if first is not None:
            log.error("journal writer rejected record(s) of a batch of %d; first: %s", len(batch), first)
        return out
