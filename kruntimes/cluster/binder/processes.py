"""Binder processes: the scheduler's status writes, sent from interpreters of their own.

kube-scheduler's split. The scheduling loop plans and reserves one Run after the
other; a status write is a round trip to the API server, and the client's work
around it (serialising, urllib3, deserialising the answer) is Python that would
share the scheduling process's interpreter with the planner. So the loop hands each
write to a binder process over a pipe and plans on; the binder sends it with the
real client (`KubernetesBinder`, `concurrency` requests at a time) and sends the
answer back. The answer comes to this process, where the loop gives it its meaning
(`kruntimes.scheduler.binding`): the assumption lives until then, a 409 releases and
requeues, the journal's bind record is written here, in this process's order.

The rules across the process boundary:

- **The fence.** Every write carries its deadline on `time.monotonic()`, which on
  Linux is CLOCK_MONOTONIC, one clock for every process of the machine: the end of
  the window in which the lease was certainly held when the write was handed over
  (`LeaderElector.fence_deadline`, the renewal's send time plus the renew deadline).
  The binder checks it immediately before the request goes out and answers "late"
  instead of sending after it - the check `KubernetesBinder`'s fence made in this
  process before (its docstring has the timing argument; only the place of the
  check moved, next to the send). A deadline taken when the write was handed over is
  never later than the fence at the moment of sending, so the argument holds as is.
- **Nothing is re-sent.** The child's client never re-sends a write (`client`), and
  this module never re-sends one either: a write whose answer is lost is answered
  `BindAmbiguous`, and only the loop decides, after a read, to send a bind again.
- **A binder that dies** (killed, crashed) takes its unanswered requests with it:
  each of its writes may have been sent and may still land, so each is answered
  `BindAmbiguous` (the loop keeps the assumption until the Run is observed, SPEC
  §3.2 step 6); each of its reads fails. A new binder takes its place.
- **Answers come in any order**: each request has an id, and its answer is matched
  to it, whichever binder thread finished first.

`update_status` and `observe` are the same requests, waited for: the synchronous
`Binder` interface, for callers outside the loop. What runs inside a binder process
is `child`.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
import time
from collections import Counter
from typing import Any, Callable

import kubernetes.client

from kruntimes.cluster import errors
from kruntimes.cluster.binder import child
from kruntimes.cluster.binder.child import Answer, ConfigurationSource, Fixed, Outbox
from kruntimes.cluster.throttling import Throttling
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.writes import NO_DEADLINE, ReadDone, WriteDone

log = logging.getLogger(__name__)

RESTART_DELAY = 5.0  # before replacing a binder that died before it was ready


class BinderExited(errors.ApiError):
    """A read lost with the binder process that was making it."""


def forkserver() -> Any:
    """Binders fork from a server process started once, with the client already imported.

    Never `fork` from the scheduler itself (its threads may hold locks a child would
    inherit held), and `spawn` imports the client anew for every binder: a second
    or more on a loaded machine, for each replacement and each test's scheduler.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([child.__name__])
    return context



class _Pending:
    __slots__ = ("kind", "run", "done")

    def __init__(self, kind: str, run: RunInfo, done: Callable[..., None]) -> None:
        self.kind, self.run, self.done = kind, run, done


class _Link:
    """One binder process and the two threads that talk to it."""

    def __init__(self, pool: BinderProcesses, index: int) -> None:
        self.pool = pool
        context = forkserver()
        conn, its_end = context.Pipe()
        self.process = context.Process(
            target=child.serve, name=f"kruntimes-binder-{index}", daemon=True,
            args=(its_end, pool.configuration_source, pool.concurrency, pool.timeout, pool.read_timeout))
        self.process.start()
        its_end.close()
        self.conn = conn
        self.outbox = Outbox(conn)
        self.inflight: dict[int, _Pending] = {}
        self.alive = True
        self.ready = threading.Event()  # set by the binder's first message
        self._sender = threading.Thread(target=self.outbox.run, name=f"kruntimes-binder-{index}-send", daemon=True)
        self._receiver = threading.Thread(target=self._receive, name=f"kruntimes-binder-{index}-receive",
                                          daemon=True)
        self._sender.start()
        self._receiver.start()

    def _receive(self) -> None:
        while True:
            try:
                batch = self.conn.recv()
            except (EOFError, OSError):
                break
            self.ready.set()
            for item in batch:
                self.pool._answered(self, item)
        self.pool._exited(self)

    def join(self, timeout: float) -> None:
        self._receiver.join(timeout)
        self._sender.join(timeout)
        self.process.join(timeout)


class BinderProcesses:
    """Implements `writes.Sender` (the loop's writes) and `writes.Binder` (waited-for calls); thread-safe.

    `configuration_source` builds the client's configuration in each binder process
    (a `Configuration` is copied there; credentials that refresh need a loader).
    `processes` binder processes, each with `concurrency` requests in flight at most;
    requests go to the one with the fewest unanswered. `deadline()` is the send-by
    deadline of a write made through `update_status`. The counters are this
    process's view of the answers, for tests and the benchmark.
    """

    def __init__(self, configuration_source: ConfigurationSource | kubernetes.client.Configuration, *,
                 processes: int = 1,
                 concurrency: int = 16, timeout: float = 30.0, read_timeout: float | None = None,
                 deadline: Callable[[], float] = lambda: NO_DEADLINE, throttling: Throttling | None = None,
                 backlog: int | None = None) -> None:
        if processes < 1 or concurrency < 1:
            raise ValueError("need at least one binder process and one request in flight")
        if backlog is not None and backlog < 1:
            raise ValueError("the backlog must allow at least one request")
        # Called in each binder process (so it must pickle): a `Configuration` stands for `Fixed(it)`.
        self.configuration_source = Fixed(configuration_source) \
            if isinstance(configuration_source, kubernetes.client.Configuration) else configuration_source
        self.processes = processes
        self.concurrency = concurrency
        self.timeout = timeout
        self.read_timeout = read_timeout if read_timeout is not None else timeout
        self.deadline = deadline
        self.throttling = throttling if throttling is not None else Throttling()
        # Requests handed over and not answered, beyond which `wait_for_room` says wait: twice
        # what the binders send at once, so each has its next requests queued and none waits long.
        self.backlog = backlog if backlog is not None else 2 * processes * concurrency
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified whenever a request is answered
        self._ids = itertools.count(1)
        self._links: list[_Link] = []
        self._closing = False
        self.writes = self.conflicts = self.failures = self.refused = self.ambiguous = self.reads = 0
        self.lost = 0  # requests answered for a binder that exited
        self.seconds = 0.0  # time the binders spent in the client, summed
        self.sent: Counter[str] = Counter()  # writes handed to the client, per Run name

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> BinderProcesses:
        with self._lock:
            self._closing = False
            while len(self._links) < self.processes:
                self._links.append(_Link(self, len(self._links)))
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking requests; the binders answer what they hold, then exit."""
        with self._lock:
            self._closing = True
            self._room.notify_all()
            links = list(self._links)
        for link in links:
            link.outbox.put(None)  # after every request already queued
            link.outbox.close()
        self._reap(links, timeout)

    def kill(self) -> None:
        """Crash, for tests: the binders die at once; what they held is answered as lost."""
        with self._lock:
            self._closing = True
            self._room.notify_all()
            links = list(self._links)
        for link in links:
            link.process.kill()
            link.outbox.close()
        self._reap(links, 10.0)

    def _reap(self, links: list[_Link], timeout: float) -> None:
        for link in links:
            link.join(timeout)
            if link.process.is_alive():
                log.error("a binder process did not stop within %.1fs; killing it", timeout)
                link.process.kill()
                link.join(timeout)
        with self._lock:
            self._links = [link for link in self._links if link not in links]

    def ready(self) -> bool:
        """Every binder process is up, its client built: a write handed over now is sent at once."""
        with self._lock:
            links = list(self._links)
        return len(links) == self.processes and all(link.alive and link.ready.is_set() for link in links)

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [link.process.pid for link in self._links if link.alive and link.process.pid is not None]

    def inflight(self) -> int:
        with self._lock:
            return self._unanswered()

    def _unanswered(self) -> int:
        return sum(len(link.inflight) for link in self._links)

    def wait_for_room(self, timeout: float) -> bool:
        """True once fewer than `backlog` requests are unanswered (or when closing: a write
        handed over then is answered at once); False after `timeout` seconds without room."""
        with self._room:
            return self._room.wait_for(lambda: self._closing or self._unanswered() < self.backlog, timeout)

    # -- writes.Sender -------------------------------------------------------------------------
    def write(self, run: RunInfo, body: dict[str, Any], deadline: float, done: WriteDone) -> None:
        self._submit("w", run, body, deadline, done)

    def read(self, run: RunInfo, done: ReadDone) -> None:
        self._submit("r", run, None, NO_DEADLINE, done)

    def _submit(self, kind: str, run: RunInfo, body: Any, deadline: float, done: Callable[..., None]) -> None:
        rid = next(self._ids)
        pending = _Pending(kind, run, done)
        with self._lock:
            live = [link for link in self._links if link.alive]
            link = min(live, key=lambda link: len(link.inflight)) if live and not self._closing else None
            if link is not None:
                link.inflight[rid] = pending
                if kind == "r":
                    self.reads += 1
        if link is None:
            self._fail(pending, "no binder process is running", sent=False)
            return
        link.outbox.put((rid, kind, run.namespace, run.name, run.uid, run.resource_version, body, deadline))

    def _answered(self, link: _Link, item: Answer) -> None:
        rid, outcome, message, code, retry_after, seconds, observed = item
        with self._lock:
            pending = link.inflight.pop(rid, None)
            if pending is None:
                return
            self._room.notify_all()
            self.seconds += seconds
            if pending.kind == "w":
                counter = {"ok": "writes", "conflict": "conflicts", "ambiguous": "ambiguous",
                           "late": "refused"}.get(outcome, "failures")
                setattr(self, counter, getattr(self, counter) + 1)
                if outcome != "late":
                    self.sent[pending.run.name] += 1
        run = pending.run
        if code == 429:
            retry_after = self.throttling.record("status_write" if pending.kind == "w" else "run_read", retry_after)
        if pending.kind == "r":
            if outcome == "ok" and observed is not None:
                pending.done(st.Observed(uid=observed[0], resource_version=observed[1], phase=observed[2],
                                         pod_uid=observed[3]), None)
            elif outcome == "gone":
                pending.done(None, None)
            else:
                pending.done(None, errors.ApiError(message, code, retry_after))
            return
        if outcome == "ok":
            pending.done(None)
        elif outcome == "conflict":
            pending.done(errors.BindConflict(message))
        elif outcome == "ambiguous":
            pending.done(errors.BindAmbiguous(message, code))
        elif outcome == "late":
            pending.done(st.Late(f"status write of Run {run.namespace}/{run.name} not sent: its deadline passed "
                                 "(the leader lease may have been lost since it was handed over)"))
        else:
            pending.done(errors.ApiError(message, code, retry_after))

    def _exited(self, link: _Link) -> None:
        """The binder's pipe closed: start another in its place unless stopping, and answer what it held."""
        with self._lock:
            link.alive = False
            lost, link.inflight = list(link.inflight.values()), {}
            self._room.notify_all()
            self.lost += len(lost)
            replace = not self._closing and link in self._links
        link.outbox.close()
        if lost:
            log.warning("a binder process exited with %d requests unanswered; each write among them may "
                        "have been sent", len(lost))
        if replace and not link.ready.is_set():
            # It died before it could serve (its configuration, its imports): answer what
            # waited for it, and do not restart it in a tight loop.
            log.error("a binder process exited before it was ready (exit code %s); starting another in %.0fs",
                      link.process.exitcode, RESTART_DELAY)
            self._lose(lost)
            lost = []
            time.sleep(RESTART_DELAY)
        if replace:  # before answering, so that the loop's next requests (the reads that settle these) have one
            with self._lock:
                replace = not self._closing
            if replace:
                fresh = _Link(self, self._links.index(link))
                with self._lock:
                    self._links[self._links.index(link)] = fresh
                    if self._closing:
                        fresh.outbox.put(None)
                        fresh.outbox.close()
        self._lose(lost)
        link.process.join(5)

    def _lose(self, lost: list[_Pending]) -> None:
        for pending in lost:
            self._fail(pending, "the binder process exited before answering", sent=True)

    def _fail(self, pending: _Pending, why: str, *, sent: bool) -> None:
        run = pending.run
        if pending.kind == "r":
            pending.done(None, BinderExited(f"reading Run {run.namespace}/{run.name}: {why}"))
            return
        what = f"status write of Run {run.namespace}/{run.name} at resourceVersion {run.resource_version}"
        with self._lock:
            if sent:
                self.ambiguous += 1
            else:
                self.failures += 1
        if sent:
            pending.done(errors.BindAmbiguous(f"{what}: outcome unknown ({why})"))
        else:
            pending.done(errors.ApiError(f"{what} was not sent: {why}"))

    # -- loop.Binder: the same requests, waited for --------------------------------------------
    def update_status(self, run: RunInfo, status: dict[str, Any]) -> None:
        deadline = self.deadline()
        if time.monotonic() >= deadline:
            with self._lock:
                self.refused += 1
            raise errors.NotLeader(f"not writing the status of Run {run.namespace}/{run.name}: "
                                   "this scheduler does not hold the leader lease")
        box: list[BaseException | None] = []
        answered = threading.Event()

        def done(exc: BaseException | None) -> None:
            box.append(exc)
            answered.set()

        self.write(run, status, deadline, done)
        answered.wait()
        if box[0] is not None:
            raise box[0]

    def observe(self, run: RunInfo) -> st.Observed | None:
        box: list[tuple[st.Observed | None, BaseException | None]] = []
        answered = threading.Event()

        def done(seen: st.Observed | None, exc: BaseException | None) -> None:
            box.append((seen, exc))
            answered.set()

        self.read(run, done)
        answered.wait()
        seen, exc = box[0]
        if exc is not None:
            raise exc
        return seen
