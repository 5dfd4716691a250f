"""A database call that does not answer within a bound is given up on, and its connections are cut.

SPEC §5 "Availability" (amended 2026-12-04): a record handed to the writer is durable -
acknowledged by the database or in the spool - within a stated bound, whatever the
database does. A refused connection fails at once; a database that accepts and never
answers fails nothing by itself: a partition behind a peer that still acknowledges TCP
(a proxy, a load balancer) defeats keepalives and ``tcp_user_timeout``, a hung server
never reads the ``statement_timeout`` it was sent, and a ``LOCK TABLE journal_records``
holds a statement for as long as the lock is held. Hoping for a driver timeout, the
writer once waited on such a connection for minutes while records piled up in memory.

So the writer makes each call to the database through ``Deadline.call``: on a thread
of its own (``_Caller``, one long-lived thread: starting a thread per call cost the
writer process 6-8% of its CPU at a few hundred batches a second), waited for at most
``seconds``. A late call counts as failed
(``JournalTimeout``: the writer spools its batch like a refused one) and every
connection of the journal's engine is cut - the socket under psycopg shut down, an
SQLite statement interrupted - so that the call returns soon and frees its thread.
Until it has, later calls fail at once: one stuck call at a time, never a pile of
them. A call that committed just as it was given up on has its rows in the spool as
well; the drain stores each key once (``skip_existing``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event

from kruntimes.journal import errors

log = logging.getLogger("kruntimes.journal.deadline")  # the name operators' log configuration knows

#: The writer's default bound (``--journal-write-timeout``): a call the database has not
#: answered by then is given up on and its batch spooled.
DEFAULT_SECONDS = 5.0
#: How long closing waits for a call it has cut to return.
CLOSE_WAIT_SECONDS = 5.0

T = TypeVar("T")


def bounded(call: Callable[[], T], timeout: float, late: str) -> T:
    """``call()``'s result, or ``JournalTimeout(late)`` if it takes longer than ``timeout``.

    The call goes on in its thread (a daemon) until it returns by itself.
    """
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="kruntimes-journal-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise errors.JournalTimeout(late)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


class Deadline:
    """Runs the writer's database calls, each answered within ``seconds`` or given up on."""

    def __init__(self, engine: sa.Engine | None, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError(f"the journal write timeout must be positive, got {seconds}")
        self.seconds = seconds
        self._dialect = engine.dialect.name if engine is not None else None
        self._lock = threading.Lock()
        self._connections: dict[int, Any] = {}  # the engine's open DBAPI connections, by id
        self._caller: _Caller | None = None  # the thread the calls run on, started by the first
        self._stuck: _Job | None = None  # a call given up on that has not returned yet
        self.timeouts = 0
        self._engine = engine
        self._listeners = (("connect", self._opened), ("close", self._closed), ("close_detached", self._closed),
                           ("invalidate", self._closed))
        if engine is not None:
            for name, listener in self._listeners:
                event.listen(engine, name, listener)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, or ``JournalTimeout`` after ``seconds`` (its connections then cut).

        One caller at a time (the writer's committer thread makes every call)."""
        stuck = self._stuck
        if stuck is not None:
            if stuck.running():
                self._cut()  # a connection it opened after the first cut
                raise errors.JournalTimeout(f"the journal database has not yet answered a call given up on "
                                            f"{self.seconds:g} s after it began")
            self._stuck = None
        if self._caller is None:
            self._caller = _Caller()
        job = self._caller.submit(fn, args, kwargs)
        if not job.wait(self.seconds):
            self._stuck = job  # the caller thread is still in it: later calls fail at once until it returns
            self.timeouts += 1
            self._cut()
            raise errors.JournalTimeout(f"the journal database did not answer a {what} within {self.seconds:g} s "
                                        "(hung, blackholed or locked): given up on, its connections cut")
        return job.result()

    def close(self, timeout: float = CLOSE_WAIT_SECONDS) -> None:
        """Cut a call still stuck, wait (bounded) for its thread to end, and stop watching the engine."""
        stuck, self._stuck = self._stuck, None
        if stuck is not None and stuck.running():
            self._cut()
            if not stuck.wait(timeout):
                log.error("a journal database call given up on did not return within %.1fs of being cut", timeout)
        caller, self._caller = self._caller, None
        if caller is not None:
            caller.stop(0.0 if stuck is not None and stuck.running() else timeout)
        engine, self._engine = self._engine, None
        if engine is not None:
            for name, listener in self._listeners:
                event.remove(engine, name, listener)

    # -- the engine's connections --------------------------------------------------------

    def _opened(self, dbapi_connection: Any, _record: Any) -> None:
        with self._lock:
            self._connections[id(dbapi_connection)] = dbapi_connection

    def _closed(self, dbapi_connection: Any, *_: Any) -> None:
        with self._lock:
            self._connections.pop(id(dbapi_connection), None)

    def _cut(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
        for connection in connections:
            cut(self._dialect, connection)


class _Job:
    """One call handed to a ``_Caller``: its outcome, and a lock held until it has one."""

    __slots__ = ("call", "outcome", "_done")

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call: Callable[[], Any] | None = call
        self.outcome: tuple[bool, Any] | None = None
        self._done = threading.Lock()
        self._done.acquire()

    def run(self) -> None:
        call, self.call = self.call, None  # its arguments (a batch's rows) are not kept while the thread waits
        try:
            self.outcome = (True, call())  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.outcome = (False, exc)
        finally:
            self._done.release()

    def wait(self, timeout: float) -> bool:
        """Whether the call has returned, waiting up to ``timeout`` seconds for it."""
        if self._done.acquire(timeout=timeout):
            self._done.release()  # so that a later wait sees it done too
            return True
        return False

    def running(self) -> bool:
        return self._done.locked()

    def result(self) -> Any:
        ok, value = self.outcome  # type: ignore[misc]
        if not ok:
            raise value
        return value


class _Caller:
    """The thread ``Deadline.call`` runs calls on, one after another; a call given up on keeps it
    until it returns (``Deadline`` refuses calls meanwhile), then it takes the next."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kruntimes-journal-call", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Job:
        job = _Job(functools.partial(fn, *args, **kwargs))
        self._jobs.put(job)
        return job

    def stop(self, timeout: float) -> None:
        """End the thread once it is done with its call (waiting up to ``timeout`` seconds for that)."""
        self._jobs.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            job.run()


def cut(dialect: str | None, dbapi_connection: Any) -> None:
    """Make whatever waits on ``dbapi_connection`` fail now (from any thread)."""
    with contextlib.suppress(Exception):  # closed meanwhile, or already cut
        if dialect == "sqlite":
            dbapi_connection.interrupt()
        elif dialect == "postgresql":
            # Shut the socket down under libpq: a read blocked on it returns at once, and the
            # driver reports the connection lost. The duplicate closes; the driver's descriptor stays.
            with socket.socket(fileno=os.dup(dbapi_connection.pgconn.socket)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
