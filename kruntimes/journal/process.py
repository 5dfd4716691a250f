"""ProcessJournalWriter: the journal writer in a process of its own.

CPython runs one thread of Python at a time, so a writer *thread* takes every
microsecond it spends building payloads, validating and encoding them away from
the scheduler: measured on the demo workload, the thread writer left the scheduler
a third of its journal-off throughput. This front keeps the scheduler's share to
numbering a change (the recorder, under the cache lock), a deque push, and
pickling the change's immutable data in batches (`wire`); a child process builds
the payloads, validates, encodes and writes them with the same ``JournalWriter``
(batching, spool, retries), on the other core.

The parent side:

1. ``append`` buffers (bounded: records not yet settled in the child count, so the
   block and drop policies mean what they mean for ``JournalWriter``);
2. a sender thread takes what is buffered, a few milliseconds' worth at a time,
   keeps it until the child acknowledges it, and sends it over a pipe;
3. a receiver thread reads the child's acknowledgements (records settled: durable
   in the database or the spool, rejected or dropped) and its counters;
4. if the child dies, the receiver starts a new one and sends again everything not
   yet acknowledged. Records the dead child had already stored are skipped by the
   new one (same LSN, same content), so the journal ends complete, exactly once.

A killed scheduler loses what was still in its buffer, as with the thread writer;
the child then stores what it had received and exits. It holds the spool's lock
until it has, and the next incarnation's child waits for that lock before it reads
the last durable LSN, so the two never number the same LSNs.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import backends, errors, metrics, payloads, records, wire
from kruntimes.journal.writer import JournalWriter, Policy, Record

log = logging.getLogger(__name__)

#: Records per message to the child: large enough that pickling and the pipe cost
#: little per record, small enough that the child starts writing early.
SEND_BATCH = 2_000
#: How long the sender lets records gather before it sends a partial batch.
LINGER_SECONDS = 0.005
START_TIMEOUT = 60.0
#: How long a new child waits for the spool a finishing predecessor still holds.
SPOOL_WAIT_SECONDS = 30.0
_ACK_INTERVAL = 0.25


class ProcessJournalWriter:
    """A ``JournalWriter`` in a child process, behind the same producer interface."""

    accepts_deferred = True

    def __init__(
        self,
        url: str,
        *,
        spool_path: str | os.PathLike[str],
        buffer_size: int = 100_000,
        max_batch: int = 1_000,
        policy: Policy = "block",
        registry: CollectorRegistry | None = None,
        start_timeout: float = START_TIMEOUT,
        **writer_options: Any,
    ) -> None:
        if buffer_size < 1 or max_batch < 1:
            raise ValueError("buffer_size and max_batch must be positive")
        if policy not in ("block", "drop"):
            raise ValueError(f"policy must be 'block' or 'drop', not {policy!r}")
        self._url = backends.parse_url(url).render_as_string(hide_password=False)
        self._options: dict[str, Any] = {
            "spool_path": os.fspath(spool_path), "buffer_size": buffer_size, "max_batch": max_batch,
            "policy": policy, **writer_options,
        }
        self._capacity = buffer_size
        self._policy = policy
        self._max_payload_bytes = writer_options.get("max_payload_bytes", records.DEFAULT_MAX_PAYLOAD_BYTES)
        self._rejected = dict.fromkeys(metrics.REJECT_REASONS, 0)  # by the sender, before the child
        self._start_timeout = start_timeout

        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._has_room = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._buffer: deque[Record] = deque()  # appended, not yet sent
        self._appended = 0
        self._settled = 0  # of the appended records, how many the child has settled
        self._dropped_on_append = 0
        self._sender_idle = False
        self._producers_waiting = 0
        self._stopping = False
        self._abandon = False  # close gave up: stop waiting for the child
        self._closed_by_child = False

        # Guarded by _send_lock: what went to the current child and may not be settled yet
        # (trimmed by the sender; _child_base is the receiver thread's own).
        self._send_lock = threading.Lock()
        self._sent = 0
        self._unacked: deque[tuple[int, int, bytes]] = deque()  # (index of the first record, count, message)
        self._child_base = 0  # parent index of the current child's first record
        self._close_sent = False

        self._child_stats = metrics.WriterStats()  # the current child's totals
        self._past_stats = metrics.WriterStats()  # totals of children that died
        self._spooled = 0
        self._replies: dict[int, tuple[Any, str | None]] = {}
        self._request_ids = itertools.count(1)
        self.restarts = 0

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
        with self._lock:
            fresh = self._appended == 0
        if fresh:  # nothing appended since the child read it at start
            if self._ready_error is not None:
                raise errors.JournalUnavailable(self._ready_error)
            return self._ready_lsn
        value, error = self._request("last_lsn", timeout=self._start_timeout)
        if error is not None:
            raise errors.JournalUnavailable(error)
        return value  # type: ignore[no-any-return]

    def append(self, record: Record) -> bool:
        """Queue ``record``; False if the drop policy dropped it. Blocks under the block policy."""
        with self._lock:
            if self._stopping:
                raise errors.JournalError("journal writer is closed")
            if self._appended - self._settled >= self._capacity:
                if self._policy == "drop":
                    self._dropped_on_append += 1
                    return False
                self._producers_waiting += 1
                try:
                    while self._appended - self._settled >= self._capacity and not self._stopping:
                        self._has_room.wait()
                finally:
                    self._producers_waiting -= 1
                if self._stopping:
                    raise errors.JournalError("journal writer closed while append was blocked")
            self._buffer.append(record)
            self._appended += 1
            if self._sender_idle:
                self._sender_idle = False
                self._has_work.notify()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record appended so far is durable (database or spool), rejected or dropped."""
        with self._lock:
            target = self._appended
            return self._progress.wait_for(lambda: self._settled >= target or self._abandon, timeout)

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

        Records still not settled after ``timeout`` are counted as dropped and logged;
        whatever the child had spooled stays in the spool for the next start to drain.
        """
        self.flush(timeout)
        with self._lock:
            self._stopping = True
            self._has_work.notify_all()
            self._has_room.notify_all()
        self._sender.join(timeout)
        with self._send_lock:
            self._close_sent = True
            self._send(("close", timeout))
        self._receiver.join(None if timeout is None else timeout + 5.0)
        with self._lock:
            self._abandon = True
            self._progress.notify_all()
        try:
            self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            log.error("journal writer process %s did not exit; killing it", self._process.pid)
            self._process.kill()
            self._process.wait()
        lost = self._appended - self._settled
        if lost:
            log.error("journal writer closed with %d records neither in the database nor in the spool", lost)
            self._dropped_on_append += lost
            self._settled = self._appended
        self._conn.close()
        self._metrics.collector.retire(self)

    def stats(self) -> metrics.WriterStats:
        """Totals so far, the child's counters included (what the Prometheus metrics report).

        The child's counters are as of its last acknowledgement: at most a quarter of a
        second old, and current after ``flush`` or ``drain`` returns.
        """
        total = metrics.WriterStats()
        total.add(self._past_stats)
        total.add(self._child_stats)
        total.appended = self._appended
        total.dropped += self._dropped_on_append
        for reason, n in self._rejected.items():
            total.rejected[reason] = total.rejected.get(reason, 0) + n
        total.buffer_depth = self._appended - self._settled
        return total

    @property
    def spooled(self) -> int:
        """Records waiting in the spool file, as the child last reported."""
        return self._spooled

    # -- the child -------------------------------------------------------------------

    def _start_child(self) -> tuple[subprocess.Popen[bytes], Connection, int | None, str | None]:
        # A fresh interpreter (`python -m kruntimes.journal.process`), not fork: the
        # scheduler is multi-threaded by then, and multiprocessing's spawn would run
        # the caller's __main__ again in the child.
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL, close_fds=True,
            )
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        try:
            conn.send_bytes(_child_setup(self._url, self._options))
            if not conn.poll(self._start_timeout):
                raise errors.JournalError(
                    f"journal writer process did not start within {self._start_timeout:.0f}s")
            message = wire.loads(conn.recv_bytes())
        except BaseException as exc:
            conn.close()
            process.kill()
            process.wait()
            if isinstance(exc, (EOFError, OSError)):
                raise errors.JournalError(
                    f"journal writer process exited while starting (exit code {process.returncode})") from exc
            raise
        if message[0] != "ready":
            process.wait(5.0)
            conn.close()
            raise errors.JournalError(f"journal writer process could not start: {message[1]}")
        _, last_lsn, error = message
        return process, conn, last_lsn, error

    def _send(self, message: Any) -> None:
        self._send_bytes(wire.dumps(message))

    def _send_bytes(self, data: bytes) -> None:
        """Send on the current pipe (``_send_lock`` held); a dead child is the receiver's to handle."""
        try:
            self._conn.send_bytes(data)
        except (OSError, ValueError):
            pass

    def _send_loop(self) -> None:
        while True:
            with self._lock:
                while not self._buffer and not self._stopping:
                    self._sender_idle = True
                    self._has_work.wait()
                if not self._buffer:
                    return
                # Let a batch gather: one message per record would cost the scheduler
                # a pickle and a wake-up each.
                if len(self._buffer) < SEND_BATCH and not self._stopping:
                    self._has_work.wait(LINGER_SECONDS)
                # Swap the buffer out: O(1), so a producer never waits on the lock while
                # the sender counts records out (and then for the interpreter lock too).
                taken, self._buffer = self._buffer, deque()
            pending = list(taken)
            del taken
            for start in range(0, len(pending), SEND_BATCH):
                self._send_batch(pending[start : start + SEND_BATCH])
            del pending

    def _send_batch(self, batch: list[Record]) -> None:
        # Pickled once, outside the locks; only the bytes are kept for a resend, so
        # the records themselves die young instead of aging into the scheduler's
        # oldest garbage-collector generation while the child stores them.
        n = len(batch)
        message = wire.dumps(("batch", self._encode(batch)))  # type: ignore[arg-type]
        with self._send_lock:
            settled = self._settled
            while self._unacked and self._unacked[0][0] + self._unacked[0][1] <= settled:
                self._unacked.popleft()
            self._unacked.append((self._sent, n, message))
            self._sent += n
            self._send_bytes(message)

    def _encode(self, batch: list[Record | None]) -> list[Record | None]:
        """Encode the finished JournalRecords here; rejected ones go as None (counted, settled).

        A finished payload is a tree of dicts: pickling it for the child costs about
        what encoding it does, and the child would still have to encode it. Deferred
        records go as plain tuples (pickled in C, no per-record reducer call): their
        data is cheap to pickle and their payloads are the child's to build.
        """
        encode, journal_record, deferred = records.encode, records.JournalRecord, payloads.DeferredRecord
        first: Exception | None = None
        for i, record in enumerate(batch):
            if type(record) is deferred:
                batch[i] = tuple(record)  # type: ignore[assignment]  # pickled in C; the child re-wraps it
            elif type(record) is journal_record:
                try:
                    batch[i] = encode(record, max_payload_bytes=self._max_payload_bytes)  # type: ignore[arg-type]
                except Exception as exc:  # noqa: BLE001 - this record's problem only
                    reason = exc.reason if isinstance(exc, errors.RecordRejected) else "malformed"
                    self._rejected[reason] = self._rejected.get(reason, 0) + 1
                    first = first or exc
                    batch[i] = None
        if first is not None:
            log.error("journal writer rejected record(s) of a batch of %d; first: %s", len(batch), first)
        return batch

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
                with self._lock:
                    self._replies[request] = (value, error)
                    self._progress.notify_all()
            elif kind == "closed":
                self._acknowledged(*message[1:])
                self._closed_by_child = True
                return

    def _acknowledged(self, settled: int, stats: metrics.WriterStats, spooled: int, latencies: list[float]) -> None:
        # Never takes _send_lock: the sender may hold it while the pipe to the child
        # is full, and the child may be waiting for this thread to read.
        for seconds in latencies:
            self._metrics.write_latency.observe(seconds)
        settled += self._child_base
        with self._lock:
            self._settled = max(self._settled, settled)
            self._child_stats = stats
            self._spooled = spooled
            self._progress.notify_all()
            if self._producers_waiting:
                self._has_room.notify_all()

    def _restart(self) -> bool:
        """The child is gone: start another and send it everything unsettled. False: give up."""
        try:
            code: int | None = self._process.wait(5.0)
        except subprocess.TimeoutExpired:  # the pipe broke but the process lives on: end it
            self._process.kill()
            code = self._process.wait()
        delay = 0.5
        while True:
            with self._lock:
                if self._abandon:
                    return False
                pending = self._appended - self._settled
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
        with self._lock:
            self._past_stats.add(replace(self._child_stats, buffer_depth=0))
            self._child_stats = metrics.WriterStats()
        with self._send_lock:
            self._process, self._conn = process, conn
            settled = self._settled
            while self._unacked and self._unacked[0][0] + self._unacked[0][1] <= settled:
                self._unacked.popleft()
            # Whole batches go again: the new child settles the records the dead one
            # had stored once more (skipped, same LSN and content), so it counts from
            # the first record of the first batch.
            self._child_base = self._unacked[0][0] if self._unacked else self._sent
            for _, _, message in self._unacked:
                self._send_bytes(message)
            if self._close_sent:
                self._send(("close", None))
        return True

    def _request(self, kind: str, *args: Any, timeout: float | None) -> tuple[Any, str | None]:
        request = next(self._request_ids)
        with self._send_lock:
            self._send((kind, request, *args))
        with self._lock:
            if not self._progress.wait_for(lambda: request in self._replies or self._abandon, timeout):
                return None, f"the journal writer process did not answer {kind!r} within {timeout}s"
            return self._replies.pop(request, (None, "the journal writer is closed"))


# -- child process ------------------------------------------------------------------


def _child_setup(url: str, options: dict[str, Any]) -> bytes:
    """What the child needs: where to write, the writer's options, and how to log like us."""
    root = logging.getLogger()
    formatter = next((h.formatter for h in root.handlers if h.formatter is not None), None)
    try:
        return wire.dumps((url, options, root.getEffectiveLevel(), formatter))
    except Exception:  # noqa: BLE001 - a formatter bound to a stream: log in the default format
        return wire.dumps((url, options, root.getEffectiveLevel(), None))


def _child_main(conn: Connection) -> None:
    # Ctrl-C reaches the whole process group; the parent decides when the writer stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    url, options, level, formatter = wire.loads(conn.recv_bytes())
    # Every record this process holds is acyclic and short-lived, but unpickling a
    # batch allocates thousands of containers, and each default-sized generation 0
    # pass walks all of them: measured 5x slower unpickling. Collect rarely.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter or logging.Formatter("%(asctime)s journal-writer %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    send_lock = threading.Lock()

    def send(message: Any) -> None:
        with send_lock:
            conn.send_bytes(wire.dumps(message))

    latencies: list[float] = []
    try:
        journal = backends.Journal(backends.create_engine(url))
        writer = JournalWriter(journal, registry=CollectorRegistry(), observe_latency=latencies.append,
                               spool_wait=SPOOL_WAIT_SECONDS, **options)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    try:
        last_lsn, error = writer.last_lsn(), None
    except errors.JournalUnavailable as exc:
        last_lsn, error = None, str(exc)
    send(("ready", last_lsn, error))
    writer.start()
    acker = _Acker(writer, send, latencies)
    acker.start()
    close_timeout: float | None = 30.0
    try:
        while True:
            try:
                message = wire.loads(conn.recv_bytes())
            except (EOFError, OSError):
                log.warning("journal writer: the scheduler process is gone; storing what it sent, then exiting")
                break
            kind = message[0]
            if kind == "batch":
                rejected, batch = _unwrap(message[1])
                acker.dropped += rejected + writer.extend(batch)
            elif kind == "last_lsn":
                try:
                    send(("reply", message[1], writer.last_lsn(), None))
                except errors.JournalUnavailable as exc:
                    send(("reply", message[1], None, str(exc)))
            elif kind == "drain":
                drained = writer.drain(message[2])
                send(("ack", *acker.snapshot()))  # the counters as of the drain, before the answer
                send(("reply", message[1], drained, None))
            elif kind == "close":
                close_timeout = message[1]
                break
    finally:
        writer.close(close_timeout)
        acker.stop()
        journal.close()
        try:
            send(("closed", *acker.snapshot()))
        except (OSError, ValueError):
            pass
        conn.close()


def _unwrap(batch: list[Any]) -> tuple[int, list[Record]]:
    """(records the parent rejected, the rest) with deferred records wrapped again."""
    make, plain = payloads.DeferredRecord._make, tuple
    out = [make(r) if type(r) is plain else r for r in batch if r is not None]
    return len(batch) - len(out), out


class _Acker:
    """Child thread: tells the parent how many records have settled, and the counters."""

    def __init__(self, writer: JournalWriter, send: Callable[[Any], None], latencies: list[float]) -> None:
        self.writer, self.send, self.latencies = writer, send, latencies
        self.dropped = 0  # records settled without the writer: refused on append, or rejected by the parent
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kruntimes-journal-acker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def snapshot(self) -> tuple[int, metrics.WriterStats, int, list[float]]:
        latencies = self.latencies[:]
        del self.latencies[: len(latencies)]
        settled = self.writer.progress(-1, 0)
        return settled + self.dropped, self.writer.stats(), self.writer.spooled, latencies

    def _run(self) -> None:
        last: tuple[Any, ...] | None = None
        settled = 0
        while not self._stop.is_set():
            settled = self.writer.progress(settled, _ACK_INTERVAL)
            snapshot = self.snapshot()
            if snapshot[3] or (snapshot[0], snapshot[1], snapshot[2]) != last:
                last = snapshot[:3]
                try:
                    self.send(("ack", *snapshot))
                except (OSError, ValueError):
                    return




if __name__ == "__main__":
    _child_main(Connection(int(sys.argv[1])))
