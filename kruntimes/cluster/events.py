"""Kubernetes Events, as kube-scheduler emits them for pods: `kubectl describe run` tells the story.

The scheduler's, on Runs, are below; the Runtime controller and runtimed use the same
recorder (``emit``: one Event per occurrence, each reporter named in
``reportingController``), see ``kruntimes.controller.telling`` and runtimed's lifecycle.

``Scheduled`` (Normal, "Successfully assigned NS/RUN to POD") after an assignment is
written, ``FailedScheduling`` (Warning, the Run's bounded Pending message) after a
Pending status is written. events.k8s.io/v1, reported by ``kruntimes.io/scheduler``.

Why a queue and threads: emitting must never block or slow a scheduling cycle. The
binder's caller only puts a small tuple on a bounded queue (never waiting); when the
queue is full the occurrence is dropped and counted (``kruntimes_scheduler_events_dropped_total``).
One background thread decides what to write (below); ``senders`` threads write it, so
Events keep pace with binds as kube-scheduler's do (it sends each in a goroutine of its
own): with one write at a time, 10,000 Runs bound at ~300 a second against the real
API server got an Event for one in seven and dropped the rest (bench/README.md). One Event has one write in flight at
most: its series is patched only once its create is done, and a patch never overtakes
the one before.

Why aggregation: a Run stuck Pending for hours is re-planned on every wake-up and
would otherwise write an Event each time. Occurrences with the same Run, reason and
note are one Event with a series, as client-go's events broadcaster keeps them: the
first is created, repeats raise ``series.count`` and ``series.lastObservedTime`` by a
merge patch. For each Run, FailedScheduling writes (create or patch) are at least
``min_interval`` apart; repeats in between are counted and sent with the next write.
A new note (another Pending reason) starts a new Event, as in kube. State is kept for
``max_runs`` Runs at most (the least recently seen go first) and dropped for a Run
once it is Scheduled. An Event the API refuses is logged and forgotten: Events are a
courtesy to people, never a condition of scheduling.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import kubernetes.client
from kubernetes.client import ApiException
from prometheus_client import CollectorRegistry, Counter

from kruntimes import wire
from kruntimes.api import models
from kruntimes.cluster import direct, errors, event_sending, leader
from kruntimes.scheduler.projection import RunInfo

log = logging.getLogger("kruntimes.cluster.events")

CONTROLLER = wire.EVENTS_REPORTER
SCHEDULED, FAILED_SCHEDULING = "Scheduled", "FailedScheduling"
NOTE_LIMIT = 1024  # bytes, the API server's limit on an Event's note
NORMAL, WARNING = "Normal", "Warning"


@dataclass(frozen=True)
class Regarding:
    """The object an Event is about (``regarding``): a Run, a Runtime, a pod."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def body(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name,
                **({"uid": self.uid} if self.uid else {})}


def run(namespace: str, name: str, uid: str = "") -> Regarding:
    return Regarding(f"{models.GROUP}/{models.VERSION}", "Run", namespace, name, uid)


def runtime(namespace: str, name: str, uid: str = "") -> Regarding:
    return Regarding(f"{models.GROUP}/{models.VERSION}", "Runtime", namespace, name, uid)


@dataclass(frozen=True)
class Occurrence:
    run: RunInfo | None
    reason: str
    note: str
    at: datetime
    #: Any other Event (the controller's, runtimed's): one Event per occurrence, never a series.
    regarding: Regarding | None = None
    type: str = NORMAL
    action: str = ""


@dataclass
class _Series:
    """One Event on the server and the occurrences not yet sent."""

    name: str
    count: int  # occurrences the server knows of
    unsent: int  # occurrences since the last write
    last_seen: datetime
    last_write: float  # monotonic
    # Set by the deciding thread when it hands a write of this Event over, cleared by
    # the sender once it is done: one write of an Event at a time, so its patches
    # follow its create and never overtake each other.
    busy: bool = False
    refused: bool = False  # its create failed: as if it had never been


class EventRecorder:
    """Emits Events from a background thread; ``scheduled``/``failed_scheduling``/``emit`` never block.

    The scheduler's Run Events aggregate into series (above). ``emit`` serves the other
    reporters (``controller``: the Runtime controller, runtimed): their Events are rare
    (a pod created, a Run admitted or ended), so each is one Event, created once.
    """

    def __init__(self, api: kubernetes.client.ApiClient, *, instance: str, controller: str = CONTROLLER,
                 capacity: int = 1000, senders: int = 1,
                 min_interval: float = 60.0, max_runs: int = 10_000, timeout: float = 10.0,
                 registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        if senders < 1:
            raise ValueError("an event recorder needs at least one sender")
        self._events: Any = (
            event_sending.DirectEvents(direct.Direct(api.configuration, api.default_headers, keep=senders))
            if direct.supports(api.configuration) else kubernetes.client.EventsV1Api(api))
        self.senders = senders
        self.instance = instance[:128]
        self.controller = controller
        self.min_interval = min_interval
        self.max_runs = max_runs
        self.timeout = timeout
        self._clock, self._now = clock, now
        self._queue: queue.Queue[Occurrence | None] = queue.Queue(maxsize=capacity)
        self._series: OrderedDict[tuple[str, str, str], dict[tuple[str, str], _Series]] = OrderedDict()
        self._thread: threading.Thread | None = None
        # Until started, writes are sent by the caller of handle/flush, one at a time.
        self._senders: event_sending.Senders | None = None
        self._stopping = threading.Event()
        self._abandoned = threading.Event()
        self._counting = threading.Lock()  # the counters below are raised by the senders
        self.dropped = self.created = self.patched = self.failed = 0
        self._dropped_metric = Counter(
            "kruntimes_scheduler_events_dropped", "Run Events not emitted because the event queue was full.",
            registry=registry) if registry is not None else None

    # -- the scheduling side: O(1), never waits ---------------------------------------------

    def scheduled(self, run: RunInfo, pod: str) -> None:
        self._offer(Occurrence(run, SCHEDULED, f"Successfully assigned {run.namespace}/{run.name} to {pod}",
                               self._now()))

    def failed_scheduling(self, run: RunInfo, message: str) -> None:
        self._offer(Occurrence(run, FAILED_SCHEDULING, message, self._now()))

    def emit(self, regarding: Regarding, reason: str, note: str, *, type: str = NORMAL,  # noqa: A002 - the API's
             action: str = "") -> None:
        """One Event about ``regarding`` (``type`` Normal or Warning; ``action`` defaults to ``reason``)."""
        self._offer(Occurrence(None, reason, note, self._now(), regarding, type, action or reason))

    def _offer(self, occurrence: Occurrence) -> None:
        try:
            self._queue.put_nowait(occurrence)
        except queue.Full:
            self.dropped += 1
            if self._dropped_metric is not None:
                self._dropped_metric.inc()

    # -- the sender ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._senders = event_sending.Senders(self.senders, "kruntimes-events-sender")
            self._thread = threading.Thread(target=self._run, name="kruntimes-events", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (within ``timeout``), then end the threads."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        self._stopping.set()
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._thread = None
        if self._senders is not None:
            self._senders.stop(deadline)
            self._senders = None
        if isinstance(self._events, event_sending.DirectEvents):
            self._events.close()

    def abandon(self, timeout: float = 5.0) -> None:
        """End the thread without another write (a crashed scheduler sends nothing more)."""
        self._abandoned.set()
        self.stop(timeout)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=min(1.0, self.min_interval))
            except queue.Empty:
                item = None
            if self._abandoned.is_set():
                return
            if item is not None:
                self.handle(item)
            self.flush()
            if item is None and self._stopping.is_set():
                return

    def handle(self, o: Occurrence) -> None:
        """Turn one occurrence into a create, a patch, or a count to send later."""
        if o.run is None:
            self._create(o)
            return
        run_key = (o.run.namespace, o.run.name, o.run.uid)
        if o.reason == SCHEDULED:
            self._series.pop(run_key, None)  # it waits no more: its FailedScheduling series ends
            self._create(o)
            return
        by_note = self._series.setdefault(run_key, {})
        self._series.move_to_end(run_key)
        while len(self._series) > self.max_runs:
            self._series.popitem(last=False)
        for key in [k for k, s in by_note.items() if s.refused]:
            del by_note[key]  # its create failed: the next occurrence creates it again
        note = _bounded(o.note)
        series = by_note.get((o.reason, note))
        if series is None:
            if self._recent_write(by_note):
                # Another Pending reason within the interval: counted under the newest series.
                series = max(by_note.values(), key=lambda s: s.last_write)
                series.unsent += 1
                series.last_seen = o.at
                return
            series = by_note[(o.reason, note)] = _Series("", 1, 0, o.at, self._clock(), busy=True)
            series.name = self._create(Occurrence(o.run, o.reason, note, o.at), series=series)
            return
        series.unsent += 1
        series.last_seen = o.at

    def flush(self) -> None:
        """Patch every series whose Run may be written again and has unsent occurrences."""
        now = self._clock()
        for run_key, by_note in list(self._series.items()):
            for series in by_note.values():
                if (series.unsent and not series.busy and not series.refused
                        and now - series.last_write >= self.min_interval):
                    self._patch(run_key[0], series)

    def _recent_write(self, by_note: dict[tuple[str, str], _Series]) -> bool:
        now = self._clock()
        return any(now - s.last_write < self.min_interval for s in by_note.values())

    def _create(self, o: Occurrence, series: _Series | None = None) -> str:
        if o.run is not None:
            run = o.run
            regarding = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Run",
                         "namespace": run.namespace, "name": run.name, "uid": run.uid,
                         **({"resourceVersion": run.resource_version} if run.resource_version else {})}
            action = "Binding" if o.reason == SCHEDULED else "Scheduling"
            kind = NORMAL if o.reason == SCHEDULED else WARNING
        else:
            assert o.regarding is not None
            regarding, action, kind = o.regarding.body(), o.action or o.reason, o.type
        namespace, about = regarding["namespace"], f"{regarding['kind']} {regarding['namespace']}/{regarding['name']}"
        name = f"{regarding['name']}.{time.time_ns():x}"[:253]
        body = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(o.at),
            "reportingController": self.controller, "reportingInstance": self.instance,
            "action": action, "reason": o.reason, "type": kind, "note": _bounded(o.note), "regarding": regarding,
        }

        def write() -> None:
            if self._abandoned.is_set():
                return
            try:
                self._events.create_namespaced_event(namespace, body, _request_timeout=self.timeout)
            except Exception as exc:  # noqa: BLE001 - a courtesy: logged, never raised
                if series is not None:
                    series.refused = True
                self._count("failed")
                log.warning("could not create the %s Event of %s: %s", o.reason, about,
                            errors.describe(exc) if isinstance(exc, ApiException) else exc)
                return
            finally:
                if series is not None:
                    series.busy = False
            self._count("created")

        self._send(write)
        return name

    def _patch(self, namespace: str, series: _Series) -> None:
        # Whether it lands or not, the total is what the next patch starts from: a
        # refused patch is not retried, the next occurrence's patch carries the total.
        count = series.count + series.unsent
        body = {"series": {"count": count, "lastObservedTime": _micro_time(series.last_seen)}}
        series.last_write = self._clock()
        series.count, series.unsent = count, 0
        series.busy = True
        name = series.name

        def write() -> None:
            if self._abandoned.is_set():
                return
            try:
                self._events.patch_namespaced_event(name, namespace, body, _request_timeout=self.timeout,
                                                    _content_type="application/merge-patch+json")
            except Exception as exc:  # noqa: BLE001 - a courtesy: logged, never raised
                self._count("failed")
                log.warning("could not update the Event %s/%s: %s", namespace, name,
                            errors.describe(exc) if isinstance(exc, ApiException) else exc)
                return
            finally:
                series.busy = False
            self._count("patched")

        self._send(write)

    def _send(self, write: Callable[[], None]) -> None:
        """Hand ``write`` to the senders (or make it here, when not started)."""
        senders = self._senders
        if senders is None:
            write()
        else:
            senders.submit(write)

    def _count(self, what: str) -> None:
        with self._counting:
            setattr(self, what, getattr(self, what) + 1)


def _micro_time(t: datetime) -> str:
    """A MicroTime the API server accepts after the client has been through it: the client
    parses an Event body into its model and writes the time back with ``isoformat()``, which
    drops a whole second's zero fraction, and a real server then refuses the Event with 400
    (found against kube-apiserver 1.37; the Lease writer learnt it first)."""
    return leader.micro_time(t)


def _bounded(note: str) -> str:
    encoded = note.encode()
    if len(encoded) <= NOTE_LIMIT:
        return note
    return encoded[:NOTE_LIMIT - 3].decode(errors="ignore") + "..."


def pending_message(status: dict[str, Any]) -> str | None:
    """The Pending message of a status body the scheduler writes (its Scheduled=False condition)."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == wire.CONDITION_SCHEDULED and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return None


def tell(recorder: EventRecorder, run: RunInfo, status: dict[str, Any]) -> None:
    """The Event a status write that landed calls for: ``Scheduled`` or ``FailedScheduling``."""
    phase = status.get("phase")
    if phase == wire.SCHEDULED:
        recorder.scheduled(run, str((status.get("assignment") or {}).get("podName") or "?"))
    elif phase == wire.PENDING:
        message = pending_message(status)
        if message:
            recorder.failed_scheduling(run, message)
