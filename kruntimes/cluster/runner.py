"""`ClusterScheduler`: informers, cache, scheduler, elector and journal in one process, binders beside it.

Start-up order: the informers start at once (a standby keeps its cache warm); the
campaign thread waits until every informer has listed, then campaigns for the lease
(or, without leader election, leads at once). Each time the lease is won a term
begins (`term.Terms.begin`); each time it is lost or the process stops, the term
ends. `stop()` is the graceful path SIGTERM takes: end the term (the cycle in flight
finishes, the journal is flushed), release the lease, stop the informers. `kill()`
is the crash tests need: everything stops, nothing is released or recorded.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Callable

import kubernetes.client
from prometheus_client import CollectorRegistry, Gauge

from kruntimes.cluster import client, events, sources
from kruntimes.cluster.backoff import Backoff
from kruntimes.cluster.binder.processes import BinderProcesses
from kruntimes.cluster.informer import Handler, Informer
from kruntimes.cluster.informer_metrics import InformerMetrics
from kruntimes.cluster.intake import Intake, RuntimeStore
from kruntimes.cluster.leader import LeaderElector, LeaseRecord
from kruntimes.cluster.settings import ClusterSettings
from kruntimes.cluster.term import Terms
from kruntimes.cluster.throttling import Throttling
from kruntimes.journal.write import recovery
from kruntimes.journal.write import settings as journal_settings  # "settings" here are the cluster's
from kruntimes.journal.write.session import JournalSession, default_spool
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.recording import Recorder
from kruntimes.scheduler.loop import Scheduler, utc_now
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.writes import NO_DEADLINE

log = logging.getLogger(__name__)

#: Longest pause between the journal writer's attempts to reach a database that is
#: away: the spool drains at most this long after the database is back.
JOURNAL_MAX_RETRY_SECONDS = 2.0


class ClusterScheduler:
    def __init__(self, api: kubernetes.client.ApiClient, settings: ClusterSettings, *,
                 registry: CollectorRegistry | None = None, clock: Callable[[], datetime] = utc_now,
                 recorder: Recorder | None = None,
                 configuration_source: Callable[[], kubernetes.client.Configuration] | None = None) -> None:
        """`recorder` numbers (and may observe) the cache's changes whenever no journal term is open.

        `configuration_source` loads the client's configuration in each binder process
        (picklable: a module-level function or a partial of one); default: a copy of `api`'s.
        """
        self.settings = settings
        # Never a client that re-sends writes on its own (SPEC §3.2 step 6): a copy of
        # `api` with kruntimes' retry policy unless it was built with it; closed on stop.
        self._own_api = not client.never_retries_writes(api)
        api = self.api = client.without_write_retries(api) if self._own_api else api
        self.registry = registry if registry is not None else CollectorRegistry()
        self.identity = settings.lease.identity
        self.cache = ClusterCache(settings.scheduler_config(), recorder)
        self.throttling = Throttling(self.registry)
        self.elector = LeaderElector(api, settings.lease, on_started=self._begin, on_stopped=self._end,
                                     throttling=self.throttling) if settings.leader_elect else None
        # The read that settles an unanswered bind decides a write: bounded like one, so that
        # no cycle outlives its term's end (`shutdown_timeout`) waiting for it.
        self.binder = BinderProcesses(configuration_source or api.configuration, processes=settings.binders,
                                      concurrency=settings.bind_concurrency, timeout=settings.write_timeout,
                                      read_timeout=settings.write_timeout, deadline=self._write_deadline,
                                      throttling=self.throttling)
        self.scheduler = Scheduler(self.cache, self.binder, clock=clock, metrics=SchedulerMetrics(self.registry),
                                   sender=self.binder, deadline=self._write_deadline)
        # Events on Runs, from threads of their own: a write that landed enqueues, never waits.
        # As many Event writes in flight as status writes, since each bind is followed by one.
        self.events = (events.EventRecorder(api, instance=self.identity, min_interval=settings.event_interval,
                                            senders=settings.binders * settings.bind_concurrency,
                                            timeout=settings.write_timeout, registry=self.registry)
                       if settings.event_interval > 0 else None)
        if self.events is not None:
            recorder = self.events
            self.scheduler.on_written = lambda run, status: events.tell(recorder, run, status)
            self.scheduler.on_pending_again = recorder.failed_scheduling
        self.intake = Intake(self.scheduler, clock)
        self.informer_metrics = InformerMetrics(self.registry)
        self.runtimes = RuntimeStore()
        ns = settings.namespace
        self.informers = {
            "Runtime": self._informer(sources.runtimes(api, ns), self.runtimes),
            "Pod": self._informer(sources.runtime_pods(api, ns), self.intake.pods()),
            "Run": self._informer(sources.runs(api, ns), self.intake.runs()),
            "RuntimeDeviceClass": self._informer(sources.device_classes(api), self.intake.device_classes()),
        }
        self.terms = Terms(self.scheduler, self.intake, settings, identity=self.identity,
                           resync=[self.informers["Pod"], self.informers["Run"]],
                           open_journal=self._open_journal, standby_recorder=self.cache.recorder)
        Gauge("kruntimes_scheduler_leader", "1 while this scheduler holds the leader lease and schedules.",
              registry=self.registry).set_function(lambda: 1.0 if self.terms.leading else 0.0)
        # A standby's cache is warm but it plans nothing: like its other scheduling metrics, its
        # Pending gauge stays at zero, so that summing the schedulers counts each Run once.
        self.scheduler.metrics.count_pending(lambda: self.cache.pending_counts() if self.terms.leading else {})
        self._recovery: recovery.SpoolRecovery | None = None
        self._stop = threading.Event()
        self._killed = threading.Event()
        self._thread: threading.Thread | None = None

    def _informer(self, source: sources.Source, handler: Handler) -> Informer:
        s = self.settings
        return Informer(source, handler, watch_timeout=s.watch_timeout, request_timeout=s.request_timeout,
                        backoff=Backoff(s.backoff_initial, s.backoff_max), bookmark_interval=s.bookmark_interval,
                        metrics=self.informer_metrics)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> ClusterScheduler:
        self.binder.start()
        self._recover_spool()
        if self.events is not None:
            self.events.start()
        for informer in self.informers.values():
            informer.start()
        self._thread = threading.Thread(target=self._campaign, name="kruntimes-leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Graceful: end the term (cycle in flight, journal flush), release the lease, stop watching."""
        timeout = timeout if timeout is not None else 2 * self.settings.shutdown_timeout
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("the leader election thread did not stop within %.1fs", timeout)
        self._stop_recovery()
        for informer in self.informers.values():
            informer.stop()
        self.binder.close(timeout)
        if self.events is not None:
            self.events.stop()
        self._close_api()

    def kill(self) -> None:
        """Crash, for tests: stop every thread; no lease release, no leader record, no further writes."""
        self._killed.set()
        if self.elector is not None:
            self.elector.abandon()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.binder.kill()
        self.terms.crash()
        self._stop_recovery()
        for informer in self.informers.values():
            informer.stop()
        if self.events is not None:
            self.events.abandon()
        self._close_api()

    def _close_api(self) -> None:
        if self._own_api:
            self._own_api = False
            self.api.close()

    def wait_synced(self, timeout: float) -> bool:
        return all(i.wait_synced(timeout) for i in self.informers.values())

    # -- health ---------------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        return self.terms.leading

    def ready(self) -> bool:
        """Caches synced, binders up: able to lead (on a standby too)."""
        return (not self._stop.is_set() and all(i.synced and i.alive for i in self.informers.values())
                and self.binder.ready())

    def healthy(self) -> bool:
        """Every thread that must run is running."""
        return (not self._stop.is_set() and self._thread is not None and self._thread.is_alive()
                and all(i.alive for i in self.informers.values()))

    # -- the campaign ---------------------------------------------------------------------
    def _campaign(self) -> None:
        while not self._stop.is_set():
            # Lead only once the binders can send: a write queued behind a binder's start
            # could outlive the deadline it carries.
            if all(i.wait_synced(0.1) for i in self.informers.values()) and self.binder.wait_ready(0.1):
                break
        if self._stop.is_set():
            return
        log.info("caches synced", extra={"runs": len(self.informers["Run"]), "pods": len(self.informers["Pod"]),
                                         "runtimes": len(self.runtimes), "identity": self.identity})
        if self.elector is not None:
            self.elector.run(self._stop)
            return
        self._begin(LeaseRecord(holder=self.identity, duration=0, transitions=0, resource_version=""))
        self._stop.wait()
        if not self._killed.is_set():
            self._end("shutdown")

    def _begin(self, lease: LeaseRecord) -> None:
        self.terms.begin(lease)

    def _end(self, reason: str) -> None:
        self.terms.end(reason)

    def _write_deadline(self) -> float:
        """The fence, as the deadline a write handed over now carries (monotonic, -inf: closed).

        Under leader election: until the renew deadline of the last renewal. Without:
        no limit while the term is open.
        """
        if self.elector is not None:
            return self.elector.fence_deadline()
        return NO_DEADLINE if self.terms.leading else float("-inf")

    def _recover_spool(self) -> None:
        """What an earlier run left on the spool (records, epochs to close) is recovered while this replica is a standby."""
        s = self.settings
        if s.journal_url and recovery.left_behind(self._spool_path()):
            self._recovery = recovery.SpoolRecovery(s.journal_url, self._spool_path(),
                                                    migrate=s.journal_migrate == "auto", registry=self.registry,
                                                    history=s.journal_history, patience=self._journal_patience()).start()

    def _stop_recovery(self) -> None:
        found, self._recovery = self._recovery, None
        if found is not None:
            found.stop(self.settings.shutdown_timeout)

    def _spool_path(self) -> str:
        s = self.settings
        return s.journal_spool or default_spool(s.journal_url or "")

    def _open_journal(self) -> JournalSession | None:
        s = self.settings
        if not s.journal_url:
            return None
        self._stop_recovery()  # the term's writer takes the spool over
        return JournalSession(s.journal_url, self.cache.config, detail=s.journal_detail,
                              checkpoint_every=s.journal_checkpoint_every,
                              checkpoint_size_ratio=s.journal_checkpoint_size_ratio, registry=self.registry,
                              spool_path=self._spool_path(), writer=s.journal_writer, history=s.journal_history,
                              migrate=s.journal_migrate == "auto", key_file=s.journal_key_file,
                              after_lsn=self.terms.last_journal_lsn, patience=self._journal_patience())

    def _journal_patience(self) -> journal_settings.Patience:
        """The journal writer's bound on each database call, and how long it waits between retries."""
        return journal_settings.Patience(write_timeout=self.settings.journal_write_timeout,
                                         max_retry_interval=JOURNAL_MAX_RETRY_SECONDS)
