"""The journal writer process: a ``JournalWriter`` fed through a pipe by ``ProcessJournalWriter``.

``launch`` starts it; ``main`` is what runs in it. The first message says where to
write and how to log; then it receives batches (finished rows, plain tuples of
deferred records whose payloads it builds, None for records the parent rejected),
answers requests (last LSN, drain) and acknowledges settled records, with its
counters, from an acker thread. When the pipe closes without a "close" message the
scheduler is gone: it stores what it received and exits.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import errors, payloads
from kruntimes.journal.store import backends
from kruntimes.journal.write import handover, metrics, settings, wire
from kruntimes.journal.write.writer import JournalWriter, Record

# As run (``-m``) the child logs as ``__main__``; imported, under the name log configuration knows.
log = logging.getLogger(__name__ if __name__ == "__main__" else "kruntimes.journal.child")

#: How long a new writer waits for the spool a finishing predecessor still holds.
SPOOL_WAIT_SECONDS = 30.0
#: How long a new writer asks the database for its last LSN before the scheduler starts
#: without it (SPEC §5 "Availability": an epoch starts in the spool if need be).
START_PROBE_SECONDS = 1.0
#: Acknowledgements go out on progress, and at least this often with fresh counters.
ACK_INTERVAL = 0.25
#: ... but not more often than this, each one wakes a thread of the scheduler's;
#: and this often while the scheduler waits in ``flush`` for records not yet acknowledged.
ACK_GAP = 0.025
FLUSH_ACK_GAP = 0.005


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the writer process is told first: where to write and how its ``JournalWriter`` is set."""

    store: settings.Store
    #: The spool's path; the child waits ``SPOOL_WAIT_SECONDS`` for it whatever ``wait`` says.
    spool: settings.Spool
    batching: settings.Batching
    patience: settings.Patience
    epochs: settings.Epochs
    #: The least gap between acknowledgements (``ACK_GAP``).
    ack_gap: float = ACK_GAP


def launch(setup: Setup, timeout: float) -> tuple[subprocess.Popen[bytes], Connection, int | None, str | None]:
    """Start a writer process as ``setup`` says; (process, pipe, last durable LSN, why it is unknown).

    A fresh interpreter (``python -m kruntimes.journal.write.child``), not fork: the
    scheduler is multi-threaded by then, and multiprocessing's spawn would run the
    caller's ``__main__`` again in the child.
    """
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
        conn.send_bytes(_first_message(setup))
        if not conn.poll(timeout):
            raise errors.JournalError(f"journal writer process did not start within {timeout:.0f}s")
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


def _first_message(setup: Setup) -> bytes:
    """What the child needs: its ``Setup``, and how to log like us."""
    root = logging.getLogger()
    formatter = next((h.formatter for h in root.handlers if h.formatter is not None), None)
    try:
        return wire.dumps((setup, root.getEffectiveLevel(), formatter))
    except Exception:  # noqa: BLE001 - a formatter bound to a stream: log in the default format
        return wire.dumps((setup, root.getEffectiveLevel(), None))


def main(conn: Connection) -> None:
    """The writer process: set up from the first message, then store batches until told to stop."""
    # Ctrl-C reaches the whole process group; the parent decides when the writer stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup, level, formatter = wire.loads(conn.recv_bytes())
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
    store, epochs = setup.store, setup.epochs
    try:
        # No connection yet: the schema is checked before the first write (SPEC §5 "Availability").
        journal = backends.Journal.deferred(store.url, migrate=store.migrate, history=store.history)
        writer = JournalWriter(
            journal, dataclasses.replace(setup.spool, wait=SPOOL_WAIT_SECONDS), batching=setup.batching,
            patience=setup.patience, epochs=epochs,
            instruments=settings.Instruments(registry=CollectorRegistry(), observe_latency=latencies.append))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    try:
        last_lsn, error = writer.last_lsn(START_PROBE_SECONDS), None
    except errors.JournalUnavailable as exc:
        last_lsn, error = None, str(exc)
    send(("ready", last_lsn, error))
    # How far the scheduler handed this epoch's records over, noted before the writer takes them:
    # what a crash loses before they are durable is then named, not silent (SPEC §5 "Crash vs loss").
    mark = handover.Mark(os.fspath(setup.spool.path), epochs.epoch) if epochs.epoch else None
    writer.start()
    acker = _Acker(writer, send, latencies, setup.ack_gap)
    acker.start()
    close_timeout: float | None = 30.0
    try:
        close_timeout = _serve(conn, writer, acker, mark, send)
    finally:
        writer.close(close_timeout)
        if mark is not None:
            mark.close(ended=writer.ended)
        acker.stop()
        journal.close()
        try:
            send(("closed", *acker.snapshot()))
        except (OSError, ValueError):
            pass
        conn.close()


def _serve(conn: Connection, writer: JournalWriter, acker: _Acker, mark: handover.Mark | None,
           send: Callable[[Any], None]) -> float | None:
    """Hand the parent's batches to ``writer`` and answer its requests; the close's timeout once it says "close".

    When the pipe ends without a "close" the scheduler is gone: what it sent is stored
    within the usual 30 seconds.
    """
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            log.warning("journal writer: the scheduler process is gone; storing what it sent, then exiting")
            return 30.0
        if wire.is_chunks(data):
            received: list[Any] = []
            for chunk in wire.chunks_of(data):
                received += chunk
            rejected, batch = _unwrap(received)
            if mark is not None:
                mark.advance(batch)
            acker.dropped += rejected + writer.extend(batch)
            acker.received += len(received)
            if data[:1] == wire.FLUSH:
                writer.hurry()  # the scheduler waits for these: no commit interval for them
                acker.hurry()
            continue
        message = wire.loads(data)
        kind = message[0]
        if kind == "last_lsn":
            try:
                send(("reply", message[1], writer.last_lsn(), None))
            except errors.JournalUnavailable as exc:
                send(("reply", message[1], None, str(exc)))
        elif kind == "drain":
            drained = writer.drain(message[2])
            send(("ack", *acker.snapshot()))  # the counters as of the drain, before the answer
            send(("reply", message[1], drained, None))
        elif kind == "close":
            return message[1]  # type: ignore[no-any-return]


def _unwrap(batch: list[Any]) -> tuple[int, list[Record]]:
    """(records the parent rejected, the rest) with deferred records wrapped again."""
    make, plain = payloads.DeferredRecord._make, tuple
    out = [make(r) if type(r) is plain else r for r in batch if r is not None]
    return len(batch) - len(out), out


class _Acker:
    """Child thread: tells the parent how many records have settled, and the counters."""

    def __init__(self, writer: JournalWriter, send: Callable[[Any], None], latencies: list[float],
                 gap: float = ACK_GAP) -> None:
        self.writer, self.send, self.latencies, self.gap = writer, send, latencies, gap
        self.dropped = 0  # records settled without the writer: refused on append, or rejected by the parent
        self.received = 0  # records received from the parent (the main thread's count)
        self._flush_target = 0  # a flush waits until this many have settled: acknowledge in short gaps
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kruntimes-journal-acker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(5.0)

    def hurry(self) -> None:
        """(Main thread.) The parent waits for every record received so far: report now, then in short gaps."""
        self._flush_target = self.received
        self._wake.set()

    def snapshot(self) -> tuple[int, metrics.WriterStats, int, list[float]]:
        latencies = self.latencies[:]
        del self.latencies[: len(latencies)]
        settled = self.writer.progress(-1, 0)
        return settled + self.dropped, self.writer.stats(), self.writer.spooled, latencies

    def _run(self) -> None:
        last: tuple[Any, ...] | None = None
        settled = 0
        while True:
            # While a flush waits for records not yet reported, the short gap: waiting for
            # exactly its last record instead would wake this thread on every commit.
            hurried = last is not None and last[0] < self._flush_target
            self._wake.wait(FLUSH_ACK_GAP if hurried else self.gap)
            self._wake.clear()
            if self._stop.is_set():
                return
            settled = self.writer.progress(settled, ACK_INTERVAL)
            snapshot = self.snapshot()
            if snapshot[3] or (snapshot[0], snapshot[1], snapshot[2]) != last:
                last = snapshot[:3]
                try:
                    self.send(("ack", *snapshot))
                except (OSError, ValueError):
                    return


if __name__ == "__main__":
    main(Connection(int(sys.argv[1])))
