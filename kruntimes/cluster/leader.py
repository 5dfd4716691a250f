"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Exactly one scheduler plans at a time (SPEC §3.6). The rules:

- Acquire when the Lease is free (no holder: never held or released) or expired.
  "Expired" is judged on THIS process's monotonic clock: a candidate notes when it
  first saw the lease's current version - when the read's answer arrived, which is
  after that version was written - and waits the holder's `leaseDurationSeconds`
  from then, so clock skew between machines cannot make two leaders. Every write
  is guarded by the lease's resourceVersion: of two candidates racing for it, one
  gets a 409.
- Renew every retry period. A leader that has not renewed for the renew deadline has
  lost: `is_leader()` turns False at that instant (the fence; `fence_deadline()` is
  that instant, carried by every write), and the elector calls `on_stopped`, which
  stops the scheduling loop. Another candidate cannot take over before `duration` has passed since it saw the last renewal, and
  `renew_deadline < duration`, so the old leader has stopped writing by then.
- On shutdown: `on_stopped("shutdown")` (finish the cycle in flight, flush the
  journal), then release the lease (clear the holder) so a standby takes over at
  once instead of after a lease duration.
- Every Lease request is sent once (the client re-sends nothing, `client`). A 429
  (API Priority and Fairness, with `Retry-After`) is logged and counted
  (`throttling`) and the next attempt waits at least `Retry-After` - but a leader
  never waits past its renew deadline: if throttling outlasts it, the lease is lost,
  visibly, rather than renewed by a hidden re-send nobody accounted for.

After losing the lease an elector goes back to being a candidate; a process is
never leader twice at the same time, and each term starts from scratch.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes.cluster import errors
from kruntimes.cluster.settings import LeaseSettings
from kruntimes.cluster.throttling import Throttling

log = logging.getLogger(__name__)

SHUTDOWN = "shutdown"
START_FAILED = "start failed"


def micro_time(t: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, in UTC.

    Never on a whole second: the client parses the string into its Lease model and
    writes it back with ``isoformat()``, which drops a zero fraction; the API server
    parses MicroTimes with exactly six fractional digits and would refuse the Lease
    with 400. One microsecond later is the same instant for a lease.
    """
    t = t.astimezone(timezone.utc)
    if t.microsecond == 0:
        t += timedelta(microseconds=1)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """What the Lease says, as read or written."""

    holder: str
    duration: int
    transitions: int
    resource_version: str
    acquire_time: str | None = None
    renew_time: str | None = None

    @classmethod
    def of(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(holder=str(spec.get("holderIdentity") or ""),
                   duration=int(spec.get("leaseDurationSeconds") or 0),
                   transitions=int(spec.get("leaseTransitions") or 0),
                   resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"))


class LeaderElector:
    def __init__(self, api: kubernetes.client.ApiClient, settings: LeaseSettings, *,
                 on_started: Callable[[LeaseRecord], None], on_stopped: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 rng: random.Random | None = None, throttling: Throttling | None = None) -> None:
        self._api = kubernetes.client.CoordinationV1Api(api)
        self.throttling = throttling if throttling is not None else Throttling()
        self._throttled_until = 0.0  # no Lease request before this (monotonic), after a 429
        self.requests = 0  # Lease requests sent, for tests: the server must have seen exactly these
        self.settings = settings
        self.identity = settings.identity
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._clock = clock
        self._wall = wall
        self._rng = rng or random.Random()
        self._leading = False
        self._renewed_at: float | None = None  # when the last successful acquire/renew was SENT
        self._lease: dict[str, Any] | None = None  # the lease as we last wrote it, while leading
        self._observed_rv = ""
        self._observed_at = 0.0
        self._taken_by: str | None = None
        self._abandoned = threading.Event()
        self.terms = 0

    # -- what the rest of the process asks ---------------------------------------------------
    def is_leader(self) -> bool:
        """True while this process holds the lease: renewed less than the renew deadline ago."""
        renewed = self._renewed_at
        return self._leading and renewed is not None and self._clock() < renewed + self.settings.renew_deadline

    def fence_deadline(self) -> float:
        """Until when (on this elector's clock) `is_leader` is certainly true: -inf when it is not.

        A write handed over now may be sent until then (`binder.processes`); with the default
        clock, `time.monotonic`, the deadline means the same in every process.
        """
        renewed = self._renewed_at
        if not self._leading or renewed is None:
            return float("-inf")
        return renewed + self.settings.renew_deadline

    def abandon(self) -> None:
        """Stop campaigning at once, without callbacks and without releasing: a crash, for tests."""
        self._abandoned.set()

    # -- the loop ------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Campaign, lead, and campaign again after a loss, until `stop` is set."""
        while not stop.is_set() and not self._abandoned.is_set():
            if not self._acquire(stop):
                return
            self._leading = True
            self.terms += 1
            record = LeaseRecord.of(self._lease or {})
            log.info("acquired the leader lease", extra={"lease": self._lease_name, "identity": self.identity,
                                                         "transitions": record.transitions})
            # The term starts on its own thread (a relist and opening the journal take
            # time) while this one keeps renewing, as client-go runs OnStartedLeading.
            failed = threading.Event()
            starter = threading.Thread(target=self._start_term, args=(record, failed), name="kruntimes-term-start",
                                       daemon=True)
            starter.start()
            reason = self._hold(stop, failed)
            starter.join()
            if self._abandoned.is_set():
                return
            if reason not in (SHUTDOWN, START_FAILED):
                self._leading = False  # the fence closed at the deadline already; make it explicit
                log.warning("lost the leader lease: %s", reason, extra={"lease": self._lease_name})
            self._on_stopped(reason)
            if reason in (SHUTDOWN, START_FAILED):
                self.release()  # a term that cannot start must not keep the others waiting
            if reason == SHUTDOWN:
                return
            if reason == START_FAILED:
                stop.wait(self.settings.retry_period)

    def _start_term(self, record: LeaseRecord, failed: threading.Event) -> None:
        try:
            self._on_started(record)
        except Exception:  # noqa: BLE001 - reported, and the term ends
            log.exception("could not start a leadership term; stepping down")
            failed.set()

    def _acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set() and not self._abandoned.is_set():
            if self._try_acquire_or_renew(self.settings.renew_deadline):
                return True
            stop.wait(self._after_throttling(self.settings.retry_period * (1 + 0.2 * self._rng.random())))
        return False

    def _hold(self, stop: threading.Event, failed: threading.Event) -> str:
        """Renew every retry period; return why the term ended."""
        while True:
            assert self._renewed_at is not None
            deadline = self._renewed_at + self.settings.renew_deadline
            pause = min(self._after_throttling(self.settings.retry_period), max(0.0, deadline - self._clock()))
            if stop.wait(pause):
                return SHUTDOWN
            if self._abandoned.is_set():
                return "abandoned"
            if failed.is_set():
                return START_FAILED
            now = self._clock()
            if now >= deadline:
                return f"not renewed within the renew deadline ({self.settings.renew_deadline}s)"
            if not self._try_acquire_or_renew(deadline - now) and self._taken_by is not None:
                return f"the lease is held by {self._taken_by}"

    # -- one attempt ---------------------------------------------------------------------------
    def _try_acquire_or_renew(self, timeout: float) -> bool:
        started = self._clock()
        self._taken_by = None
        timeout = max(0.05, timeout)
        if self._leading and self._lease is not None:
            try:  # the common case: renew what we wrote last, no read needed
                return self._write(self._updated(self._lease, LeaseRecord.of(self._lease)), started, timeout)
            except errors.LeaseError as exc:
                if exc.code != 409:
                    log.warning("renewing the leader lease failed: %s", exc)
                    return False
                # Someone else wrote it: read it and decide below.
        try:
            lease = self._call(self._api.read_namespaced_lease, self.settings.name, self.settings.namespace,
                               timeout=timeout, call="lease_read")
        except errors.LeaseError as exc:
            if exc.code == 404:
                return self._create(started, timeout)
            log.warning("reading the leader lease failed: %s", exc)
            return False
        record = LeaseRecord.of(lease)
        if record.resource_version != self._observed_rv:
            # Timed from the ANSWER, as client-go does: the version was written before the
            # answer, but maybe after the request left, by up to the read's duration.
            self._observed_rv, self._observed_at = record.resource_version, self._clock()
        if record.holder and record.holder != self.identity:
            if self._leading:
                self._taken_by = record.holder
                return False
            if self._observed_at + max(record.duration, 1) > started:
                return False  # held by another, not expired as far as we have watched it
        try:
            return self._write(self._updated(lease, record), started, timeout)
        except errors.LeaseError as exc:
            if exc.code != 409:
                log.warning("taking the leader lease failed: %s", exc)
            return False

    def _updated(self, lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        now = micro_time(self._wall())
        ours = record.holder == self.identity
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**(lease.get("metadata") or {}), "resourceVersion": record.resource_version},
                "spec": {**(lease.get("spec") or {}), "holderIdentity": self.identity,
                         "leaseDurationSeconds": self.settings.duration, "renewTime": now,
                         "acquireTime": record.acquire_time if ours and record.acquire_time else now,
                         "leaseTransitions": record.transitions if ours else record.transitions + 1}}

    def _write(self, body: dict[str, Any], started: float, timeout: float) -> bool:
        self._lease = self._call(self._api.replace_namespaced_lease, self.settings.name, self.settings.namespace,
                                 body, timeout=timeout)
        self._accepted(started)
        return True

    def _create(self, started: float, timeout: float) -> bool:
        now = micro_time(self._wall())
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.settings.duration,
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        try:
            self._lease = self._call(self._api.create_namespaced_lease, self.settings.namespace, body,
                                     timeout=timeout)
        except errors.LeaseError as exc:
            if exc.code != 409:  # 409: another candidate created it first
                log.warning("creating the leader lease failed: %s", exc)
            return False
        self._accepted(started)
        return True

    def _accepted(self, started: float) -> None:
        assert self._lease is not None
        self._renewed_at = started
        self._observed_rv, self._observed_at = LeaseRecord.of(self._lease).resource_version, started

    def release(self) -> bool:
        """Give the lease up (holder cleared) if we hold it; True when it is released."""
        lease, self._lease = self._lease, None
        self._leading = False
        self._renewed_at = None
        if lease is None or LeaseRecord.of(lease).holder != self.identity:
            return False
        record = LeaseRecord.of(lease)
        now = micro_time(self._wall())
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**(lease.get("metadata") or {}), "resourceVersion": record.resource_version},
                "spec": {**(lease.get("spec") or {}), "holderIdentity": None, "leaseDurationSeconds": 1,
                         "acquireTime": now, "renewTime": now, "leaseTransitions": record.transitions}}
        try:
            self._call(self._api.replace_namespaced_lease, self.settings.name, self.settings.namespace, body,
                       timeout=self.settings.renew_deadline)
        except errors.LeaseError as exc:
            log.warning("releasing the leader lease failed (it will expire instead): %s", exc)
            return False
        log.info("released the leader lease", extra={"lease": self._lease_name, "identity": self.identity})
        return True

    # -- plumbing -----------------------------------------------------------------------------
    @property
    def _lease_name(self) -> str:
        return f"{self.settings.namespace}/{self.settings.name}"

    def _after_throttling(self, delay: float) -> float:
        """`delay`, or longer while the server's last `Retry-After` has not passed."""
        return max(delay, self._throttled_until - self._clock())

    def _call(self, method: Callable[..., Any], *args: Any, timeout: float,
              call: str = "lease_write") -> dict[str, Any]:
        """One client call, sent once, its JSON as a dict; failures as `LeaseError` with the HTTP code."""
        self.requests += 1
        try:
            response = method(*args, _preload_content=False, _request_timeout=timeout)
            try:
                return dict(json.loads(response.data))
            finally:
                response.release_conn()
        except ApiException as exc:
            if errors.status_code(exc) == 429:
                wait = self.throttling.note(call, exc)
                self._throttled_until = self._clock() + (wait if wait is not None else self.settings.retry_period)
            raise errors.LeaseError(f"lease {self._lease_name}: {errors.describe(exc)}",
                                    errors.status_code(exc)) from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise errors.LeaseError(f"lease {self._lease_name}: {errors.describe(exc)}") from exc
