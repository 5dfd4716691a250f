"""ProcessJournalWriter: the journal writer in a process of its own.

CPython runs one thread of Python at a time, so a writer *thread* takes every
microsecond it spends building payloads, validating and encoding them away from
the scheduler. This front keeps the scheduler's share to numbering a change (the
recorder, under the cache lock), a buffer push, and pickling the change's
immutable data in chunks (`wire`); a child process builds the payloads, encodes
and writes them with the same ``JournalWriter`` (batching, spool, retries), on
another core. On the demo workload the scheduler keeps ~0.83 of its journal-off
throughput this way, ~0.6 with the thread writer (bench/journal_overhead.py).

The parent side:

1. ``append`` buffers (bounded: records not yet settled in the child count, so the
   block and drop policies mean what they mean for ``JournalWriter``), and every
   ``SEAL_AT`` records pickles the buffer into a chunk, right there in the
   producer's thread (``sealer``): a record is gone again a few cycles after it was made, and
   no other thread has to take the interpreter from the scheduler to serialise it;
2. a sender thread writes the chunks sealed since it last looked to the pipe as one
   message (sealing what has waited ``LINGER_SECONDS`` itself), and keeps them
   until the child acknowledges them;
3. a receiver thread reads the child's acknowledgements (records settled: durable
   in the database or the spool, rejected or dropped) and its counters;
4. if the child dies, the receiver starts a new one and sends again every chunk not
   yet acknowledged. Records the dead child had already stored are skipped by the
   new one (same LSN, same content), so the journal ends complete, exactly once.

A killed scheduler loses what was still in its buffer, as with the thread writer;
the child then stores what it had received and exits. It holds the spool's lock
until it has, and the next incarnation's child waits for that lock before it reads
the last durable LSN, so the two never number the same LSNs.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import errors
from kruntimes.journal.store import deadline, engines
from kruntimes.journal.write import child, intake, metrics, outbox, sealer, settings, wire
from kruntimes.journal.write.writer import SPOOL_AT_CLOSE_SECONDS, Record

log = logging.getLogger("kruntimes.journal.process")  # the name operators' log configuration knows

#: Records the producer pickles into one chunk, in its own thread, as it appends
#: them: few enough that they are gone again within a few cycles, enough that
#: pickle's per-call cost and shared values (a runtime's pod names) are paid once
#: per chunk.
SEAL_AT = 64
#: How often the sender writes what was sealed since it last did, as one message,
#: and how long records may wait for the rest of their chunk before it seals them.
#: Each wake-up takes the interpreter from the scheduler (at 10 ms, with the child's
#: acknowledgements every 5 ms, the two threads cost the scheduler ~2% on the demo
#: workload; at 25 ms ~0.6%); ``flush`` wakes it at once.
LINGER_SECONDS = 0.025
#: The child's writer commits at most this often unless a full batch is waiting
#: (``settings.Batching.commit_interval``) or a flush asks: it gets one message every
#: few cycles, and a batch costs it ~1.4 ms whatever its size (the commit, the
#: handover mark's fdatasync, the hand-over to the database's thread; bench/journal_child.py:
#: 342 µs a 1,000-pod cycle at 13 cycles a batch, 277 at 34, 235 at 70, one message a
#: batch). Against the real API server (bench/realkube.py) the gain was within the noise
#: (3.9-4.1 s of the child's CPU per 10,000 binds, 4.0-4.4 before): the sender's 25 ms
#: messages still cost per message. A record is still durable well inside SPEC §5's bound.
COMMIT_INTERVAL = 0.1
START_TIMEOUT = 60.0


class ProcessJournalWriter:
    """A ``JournalWriter`` in a child process, behind the same producer interface."""

    accepts_deferred = True

    def __init__(self, store: settings.Store, spool_settings: settings.Spool, *,
                 batching: settings.Batching = settings.Batching(), patience: settings.Patience = settings.Patience(),
                 epochs: settings.Epochs = settings.Epochs(), registry: CollectorRegistry | None = None,
                 start_timeout: float = START_TIMEOUT, ack_gap: float = child.ACK_GAP) -> None:
        if batching.max_batch < 1:
            raise ValueError("buffer_size and max_batch must be positive")
        # Bounded by records not yet settled: those sent are kept until the child confirms them.
        self._in = intake.Intake(batching.buffer_size, batching.policy, bound_unsettled=True, seal=self._seal,
                                 seal_at=SEAL_AT)
        if batching.commit_interval is None:
            batching = replace(batching, commit_interval=COMMIT_INTERVAL)
        self._setup = child.Setup(
            replace(store, url=engines.parse_url(store.url).render_as_string(hide_password=False)),
            replace(spool_settings, path=os.fspath(spool_settings.path)), batching, patience, epochs, ack_gap)
        self._start_timeout = start_timeout
        self._write_timeout = float(patience.write_timeout)
        self._closed_by_child = False  # the child confirmed close: its pipe ends on purpose

        # Guarded by the intake's lock: chunks sealed and not yet settled, and those of
        # them not yet written to the current child. Writing to the pipe happens under
        # _send_lock (taken before the intake's lock, never after it), so the chunks
        # reach each child once and in order; _child_base is the receiver thread's own.
        self._send_lock = threading.Lock()
        self._outbox = outbox.Outbox()
        self._sealer = sealer.Sealer(self._outbox, batching.max_payload_bytes)
        self._flushing = False  # a flush waits: the next message says so
        self._child_base = 0  # parent index of the current child's first record
        self._close_sent = False

        self._child_stats = metrics.WriterStats()  # the current child's totals
        self._past_stats = metrics.WriterStats()  # totals of children that died
        self._spooled = 0
        self._replies: dict[int, tuple[Any, str | None]] = {}
        self._request_ids = itertools.count(1)
        self.restarts = 0

        # The producer's path is the intake's own: one call fewer for every record.
        self.append = self._in.append  # type: ignore[method-assign]
        self._metrics = metrics.for_registry(registry)
        self._process, self._conn, self._ready_lsn, self._ready_error = self._start_child()
        self._metrics.collector.attach(self)
        self._sender = threading.Thread(target=self._send_loop, name="kruntimes-journal-sender", daemon=True)
        self._receiver = threading.Thread(target=self._receive_loop, name="kruntimes-journal-receiver", daemon=True)
        self._sender.start()
        self._receiver.start()

    # -- producer side (same contract as JournalWriter) -----------------------------

    def start(self) -> ProcessJournalWriter:
        """The child runs from construction on; kept for symmetry with JournalWriter."""
        return self

    def __enter__(self) -> ProcessJournalWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The writer process's id (tests kill it to prove a restart loses nothing)."""
        return self._process.pid

    def last_lsn(self) -> int | None:
        """The last durable LSN; raises ``JournalUnavailable`` when neither spool nor database can say."""
        if self._in.appended == 0:  # nothing appended since the child read it at start
            if self._ready_error is not None:
                raise errors.JournalUnavailable(self._ready_error)
            return self._ready_lsn
        value, error = self._request("last_lsn", timeout=self._start_timeout)
        if error is not None:
            raise errors.JournalUnavailable(error)
        return value  # type: ignore[no-any-return]

    def append(self, record: Record) -> bool:
        """Queue ``record``; False if the drop policy dropped it. Blocks under the block policy."""
        return self._in.append(record)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record appended so far is durable (database or spool), rejected or dropped."""
        i = self._in
        with i.lock:
            if i.buffer:
                self._seal()
            self._flushing = True  # the sender tells the child to hurry too
            i.has_work.notify_all()  # the sender may be lingering: send now
        return i.flush(timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """Like ``flush``, but wait until the records are in the database (the child's spool is empty)."""
        started = time.monotonic()
        if not self.flush(timeout):
            return False
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        value, error = self._request("drain", left, timeout=None if left is None else left + 5.0)
        return error is None and bool(value)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, stop the child and the threads.

        What the database has not taken within ``timeout`` the child sends to the spool,
        for the next start to drain (SPEC §5), and this waits for it as long as the
        child's acknowledgements show records settling. Only records neither the database
        nor the spool took are counted as dropped and logged.
        """
        started = time.monotonic()
        self.flush(timeout)
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        self._in.stop()
        # The sender writes what is left (the child reads as fast as it comes): "close" must come after it.
        self._sender.join(None if left is None else max(left, self._write_timeout + SPOOL_AT_CLOSE_SECONDS))
        with self._send_lock:
            self._close_sent = True
            self._send(("close", left))  # the database's time is up: the child spools the rest at once
        self._await_child_close(left)
        self._in.stop(abandon=True)
        try:
            self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            log.error("journal writer process %s did not exit; killing it", self._process.pid)
            self._process.kill()
            self._process.wait()
        lost = self._in.appended - self._in.settled
        if lost:
            log.error("journal writer closed with %d records neither in the database nor in the spool", lost)
            self._in.dropped += lost
            self._in.settled = self._in.appended
        self._conn.close()
        self._metrics.collector.retire(self)

    def _await_child_close(self, left: float | None) -> None:
        """Wait for the child's "closed": while its records keep settling, then for its last call and exit."""
        i = self._in
        window = self._write_timeout + SPOOL_AT_CLOSE_SECONDS + (left or 0.0)
        with i.lock:
            settled = i.settled
            while left is not None and settled < i.appended and not self._closed_by_child:
                before = settled
                i.progress.wait_for(lambda: i.settled > before or self._closed_by_child or i.abandon, window)
                settled = i.settled
                if settled == before and not self._closed_by_child:
                    log.error("journal writer process settled no record for %.1fs while closing", window)
                    break
                window = self._write_timeout + SPOOL_AT_CLOSE_SECONDS
        # Settled: the child still closes its spool and waits (bounded) for a call it gave up on.
        self._receiver.join(None if left is None else self._write_timeout + deadline.CLOSE_WAIT_SECONDS + 5.0)

    def stats(self) -> metrics.WriterStats:
        """Totals so far, the child's counters included (what the Prometheus metrics report).

        The child's counters are as of its last acknowledgement: at most a quarter of a
        second old, and current after ``flush`` or ``drain`` returns.
        """
        total = metrics.WriterStats()
        total.add(self._past_stats)
        total.add(self._child_stats)
        total.appended = self._in.appended
        total.dropped += self._in.dropped
        for reason, n in self._sealer.rejected.items():
            total.rejected[reason] = total.rejected.get(reason, 0) + n
        total.rejected["malformed"] = total.rejected.get("malformed", 0) + self._sealer.unpicklable
        total.buffer_depth = self._in.appended - self._in.settled
        return total

    @property
    def spooled(self) -> int:
        """Records waiting in the spool file, as the child last reported."""
        return self._spooled

    # -- the child -------------------------------------------------------------------

    def _start_child(self) -> tuple[subprocess.Popen[bytes], Connection, int | None, str | None]:
        return child.launch(self._setup, self._start_timeout)

    def _send(self, message: Any) -> None:
        self._send_bytes(wire.dumps(message))

    def _send_bytes(self, data: bytes) -> None:
        """Send on the current pipe (``_send_lock`` held); a dead child is the receiver's to handle."""
        try:
            self._conn.send_bytes(data)
        except (OSError, ValueError):
            pass

    def _seal(self) -> None:
        """(Intake lock held.) The intake's buffer into a chunk for the child (``sealer``)."""
        self._sealer.seal(self._in)

    def _send_loop(self) -> None:
        i = self._in
        while True:
            with i.lock:
                while not self._outbox and not i.buffer and not self._flushing:
                    if i.stopping:
                        return
                    i.consumer_waiting = True  # the next append wakes us
                    i.has_work.wait()
                if not i.stopping and not self._flushing:
                    i.has_work.wait(LINGER_SECONDS)  # let chunks gather; flush and close wake us early
                if i.buffer and not self._outbox:
                    self._seal()  # nothing sealed for a whole linger: what waited goes now
            with self._send_lock:
                with i.lock:
                    chunks = self._outbox.take_unsent()
                    flushing, self._flushing = self._flushing, False
                # One pipe message for every chunk sealed since the last: the child
                # pays per message (a read, a hand-over to its writer, an acknowledgement).
                # A checkpoint is pickled here, with no lock a scheduler thread waits for.
                self._send_bytes(wire.chunks_message([c.pickle(self._sealer.dumps) for c in chunks], flush=flushing))
                del chunks

    def _receive_loop(self) -> None:
        while True:
            try:
                message = wire.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                if self._closed_by_child or not self._restart():
                    return
                continue
            kind = message[0]
            if kind == "ack":
                self._acknowledged(*message[1:])
            elif kind == "reply":
                _, request, value, error = message
                with self._in.lock:
                    self._replies[request] = (value, error)
                    self._in.progress.notify_all()
            elif kind == "closed":
                self._closed_by_child = True  # before the acknowledgement wakes close()
                self._acknowledged(*message[1:])
                return

    def _acknowledged(self, settled: int, stats: metrics.WriterStats, spooled: int, latencies: list[float]) -> None:
        # Never takes _send_lock: the sender may hold it while the pipe to the child
        # is full, and the child may be waiting for this thread to read.
        for seconds in latencies:
            self._metrics.write_latency.observe(seconds)
        with self._in.lock:
            self._child_stats = stats
            self._spooled = spooled
            self._in.settle(self._child_base + settled)

    def _restart(self) -> bool:
        """The child is gone: start another and send it everything unsettled. False: give up."""
        try:
            code: int | None = self._process.wait(5.0)
        except subprocess.TimeoutExpired:  # the pipe broke but the process lives on: end it
            self._process.kill()
            code = self._process.wait()
        delay = 0.5
        while True:
            with self._in.lock:
                if self._in.abandon:
                    return False
                pending = self._in.appended - self._in.settled
            log.error("journal writer process exited (code %s) with %d records unsettled; starting another",
                      code, pending)
            try:
                process, conn, _, _ = self._start_child()
                break
            except errors.JournalError as exc:
                log.error("journal writer process: %s; retrying in %.1fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        self.restarts += 1
        with self._in.lock:
            self._past_stats.add(replace(self._child_stats, buffer_depth=0, head_lsn=0, history_deferred=0))
            self._child_stats = metrics.WriterStats()
        with self._send_lock:
            self._process, self._conn = process, conn
            with self._in.lock:
                self._child_base, resend = self._outbox.resend(self._in.settled)
            if resend:
                self._send_bytes(wire.chunks_message([c.pickle(self._sealer.dumps) for c in resend]))
            if self._close_sent:
                self._send(("close", None))
        return True

    def _request(self, kind: str, *args: Any, timeout: float | None) -> tuple[Any, str | None]:
        request = next(self._request_ids)
        with self._send_lock:
            self._send((kind, request, *args))
        with self._in.lock:
            if not self._in.progress.wait_for(lambda: request in self._replies or self._in.abandon, timeout):
                return None, f"the journal writer process did not answer {kind!r} within {timeout}s"
            return self._replies.pop(request, (None, "the journal writer is closed"))
