"""runtimed over the real Kubernetes client: watches, guarded writes, heartbeat (SPEC §4.1).

`kruntimes runtimed` runs one `Agent`. It has run against the API emulator (with the
live scheduler, and as a process), not yet against a real cluster. Its seams, each a
small piece the tests can replace:

- `Settings`: the pod's identity (from the downward API, as the Runtime controller
  injects it: `kruntimes.controller.reconcile.POD_ENV`), the work directory on a
  writable volume, and runtimed's state directory (ends not yet written, pid files of
  its Runs' processes) on a volume that outlives the container.
- Runs: an `Informer` (the scheduler's: paged list, resumable watch, relist on 410,
  no duplicates) over Runs assigned to this pod. Where the server allows it, it asks
  for `status.assignment.podName=<pod>` only (the Run CRD's `selectableFields`,
  served from Kubernetes 1.31); a server that answers such a selector with 400 gets
  the namespace's Runs instead, and `Lifecycle` ignores Runs of other pods.
  `run_field_selector` forces either way (None: ask the server once at start-up).
- The own pod: an `Informer` with `metadata.name=<pod>`; capacity changes re-check
  the waiting Runs, and the pod's deletion stops every execution.
- Writes: `KubernetesBinder` (replace status at the observed resourceVersion; 409
  and 404 are `Conflict`), reads: one GET.
- Cluster settings: the default runs capacity comes from the ConfigMap the scheduler
  reads too (`kruntimes.cluster.shared_settings`), read before anything is admitted
  and again every `settings_period` (a minute), on the heartbeat's thread.
- Heartbeat: a merge patch of `kruntimes.io/runtimed-heartbeat` on the own pod,
  every `heartbeat_period` seconds (default 10 s, a third of the scheduler's 30 s
  staleness window, so one lost renewal never makes the pod stale).
- Execution: as deployed, by the Runtime Server in the runtime container
  (`Settings.runtime_server`, its socket; `server_client`), so no Run shares runtimed's
  user, token or processes; without it, as runtimed's own children.
- Devices (SPEC §7.1, publisher Runtimed): before the informers start, one GET of the
  own pod; where the controller gave runtimed's container `KRUNTIMES_DEVICE_DISCOVER`,
  `discovery.publish` runs discover and a merge patch writes the pod's
  `kruntimes.io/devices` (the inventory, or a malformed one saying why discover failed),
  so the pod informer's first list already carries what this runtimed found.
- Orphans: on every heartbeat, exited processes that Runs left behind and that were
  re-parented to runtimed are reaped (`Executor.reap_orphans`).
- Start-up order: both informers synced, then `Lifecycle.recover` with everything
  the Run informer listed (Running Runs counted before any Scheduled one is
  admitted), then live events.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes import wire
from kruntimes.api import cluster_settings, models
from kruntimes.cluster import decode, errors, events, shared_settings
from kruntimes.cluster.binder.kube import KubernetesBinder
from kruntimes.cluster.informer import Informer
from kruntimes.cluster.probes import ProbeServer
from kruntimes.cluster.sources import RUNS, Source
from kruntimes.runtimed import discovery, metrics
from kruntimes.runtimed.admission import Capacity
from kruntimes.runtimed.lifecycle import Lifecycle
from kruntimes.runtimed.metrics import RuntimedMetrics
from kruntimes.runtimed.outcomes import RunRef
from kruntimes.runtimed.reading import pod_capacity
from kruntimes.scheduler.status import rfc3339

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
DEFAULT_HEARTBEAT_PERIOD = 10.0  # seconds; a third of the scheduler's default 30 s staleness window
NOT_READ_YET = "the pod's capacity has not been read yet"
# One GET of the settings ConfigMap per pod per minute: a thousand pods cost the API server ~17 reads a second.
DEFAULT_SETTINGS_PERIOD = 60.0
STATE_SUBDIR = ".runtimed"  # never a namespace (a DNS label), so never a Run's working directory


@dataclass(frozen=True)
class Settings:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    work_dir: Path
    settings_namespace: str = cluster_settings.DEFAULT_NAMESPACE  # where the shared ConfigMap is (SPEC §2.3)
    settings_period: float = DEFAULT_SETTINGS_PERIOD  # seconds between two reads of it
    state_dir: Path | None = None  # runtimed's own files (kept ends, its Runs' pid files); default work_dir/.runtimed
    runtime_server: Path | None = None  # the Runtime Server's socket; None: Runs are runtimed's own children
    heartbeat_period: float = DEFAULT_HEARTBEAT_PERIOD
    run_field_selector: bool | None = None
    request_timeout: float = 30.0
    metrics_port: int | None = None  # serve /metrics (`runtimed.metrics`) on this port; None: not at all
    metrics_address: str = "0.0.0.0"
    discover_timeout: float = discovery.DEFAULT_TIMEOUT  # seconds discover may take (publisher Runtimed)


class _Reader:
    def __init__(self, api: kubernetes.client.ApiClient, timeout: float) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self._timeout = timeout

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            # As the informers read (`decode`): a spec nested too deeply for the client's
            # parser keeps the metadata and status a claim or an end is settled by.
            obj = decode.response_value(self._custom.get_namespaced_custom_object(
                models.GROUP, models.VERSION, namespace, RUNS, name, _request_timeout=self._timeout,
                _preload_content=False))
        except ApiException as exc:
            if errors.status_code(exc) == 404:
                return None
            raise errors.ApiError(f"reading Run {namespace}/{name} failed: {errors.describe(exc)}",
                                  errors.status_code(exc)) from exc
        return obj if isinstance(obj, dict) else None


class _RunEvents:
    """Informer handler: buffers the first list for `recover`, then passes events straight on."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._lifecycle = lifecycle
        self._lock = threading.Lock()
        self._buffer: list[dict[str, Any]] | None = []

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        with self._lock:
            if self._buffer is not None:
                self._buffer.append(obj)
                return
        self._lifecycle.observe(obj)

    def delete(self, namespace: str, name: str) -> None:
        with self._lock:
            if self._buffer is not None:
                self._buffer = [o for o in self._buffer
                                if (o["metadata"].get("namespace"), o["metadata"].get("name")) != (namespace, name)]
                return
        self._lifecycle.forget(namespace, name)

    def recover(self) -> None:
        # Under the lock: the informer's next event waits until recovery has counted everything.
        with self._lock:
            listed, self._buffer = self._buffer or [], None
            self._lifecycle.recover(listed)


class _PodEvents:
    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self._lock = threading.Lock()
        self._pod: dict[str, Any] | None = None  # the newest object of this pod
        self._default_runs = cluster_settings.BUILT_IN_DEFAULT_RUNS_CAPACITY

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("uid") != self._agent.settings.pod_uid:
            return
        if meta.get("deletionTimestamp"):
            self._agent.lifecycle.pod_leaving()
        with self._lock:
            self._pod = obj
            default = self._default_runs
        self._agent.lifecycle.set_capacity(pod_capacity(obj, default))

    def set_default_runs(self, value: int) -> None:
        """The cluster's default runs capacity (SPEC §2.3): the pod's capacity is re-read when it changes."""
        with self._lock:
            changed, self._default_runs, pod = value != self._default_runs, value, self._pod
        if changed and pod is not None:
            self._agent.lifecycle.set_capacity(pod_capacity(pod, value))

    def delete(self, namespace: str, name: str) -> None:
        self._agent.lifecycle.pod_leaving()
        self._agent.stop()  # the pod is gone: nothing here may run any more


class Agent:
    """One runtimed: its pod's Runs, capacity and heartbeat."""

    def __init__(self, api: kubernetes.client.ApiClient, settings: Settings) -> None:
        self.settings = settings
        self._core = kubernetes.client.CoreV1Api(api)
        # Events on its Runs (Admitted, Started, Completed, Failed, Lost): `kubectl describe run`.
        self.events = events.EventRecorder(api, instance=settings.pod_name, controller=wire.RUNTIMED_EVENTS_REPORTER,
                                           timeout=settings.request_timeout)
        # Nothing is admitted before the pod informer has read the capacity (it syncs before recovery).
        self.lifecycle = Lifecycle(settings.pod_name, settings.pod_uid, Capacity(problem=NOT_READ_YET),
                                   KubernetesBinder(api, timeout=settings.request_timeout),
                                   _Reader(api, settings.request_timeout), settings.work_dir,
                                   state_dir=settings.state_dir or settings.work_dir / STATE_SUBDIR,
                                   runtime_server=settings.runtime_server, tell=self._tell)
        self.metrics = RuntimedMetrics()
        self.lifecycle.guard.on_device_wait = self._device_wait
        self._metrics_server: ProbeServer | None = None
        self._runs = _RunEvents(self.lifecycle)
        custom = kubernetes.client.CustomObjectsApi(api)
        self._custom = custom
        self._run_selector: dict[str, str] = {}  # chosen at start-up (`_select_runs`)
        self.run_informer = Informer(Source("Run", lambda **kw: custom.list_namespaced_custom_object(
            models.GROUP, models.VERSION, settings.pod_namespace, RUNS, **self._run_selector, **kw)), self._runs)
        self._pod_events = _PodEvents(self)
        self.pod_informer = Informer(Source("Pod", lambda **kw: self._core.list_namespaced_pod(
            settings.pod_namespace, field_selector=f"metadata.name={settings.pod_name}", **kw)), self._pod_events)
        self._api = api
        self._settings_due = 0.0  # when the cluster settings are read again (monotonic seconds)
        self._stopping = threading.Event()

    def _device_wait(self, why: str) -> None:
        reason = metrics.wait_reason(why)
        if reason is not None:
            self.metrics.device_wait(reason)

    def _select_runs(self) -> dict[str, str]:
        """The Run list's field selector: this pod's Runs only, where the server can select them."""
        wanted = self.settings.run_field_selector
        selector = {"field_selector": f"status.assignment.podName={self.settings.pod_name}"}
        if wanted is False:
            return {}
        try:
            # Only the answer's code matters: its one Run (perhaps a deeply nested one) is never decoded.
            decode.drain(self._custom.list_namespaced_custom_object(
                models.GROUP, models.VERSION, self.settings.pod_namespace, RUNS, limit=1,
                _request_timeout=self.settings.request_timeout, _preload_content=False, **selector))
        except ApiException as exc:
            if exc.status != 400 or wanted:
                raise errors.ApiError(f"runtimed could not list its Runs: {errors.describe(exc)}") from exc
            log.info("the API server cannot select Runs by status.assignment.podName (the Run CRD's "
                     "selectableFields needs Kubernetes 1.31+); watching the namespace's Runs")
            return {}
        return selector

    def run(self, sync_timeout: float = 60.0) -> None:
        """Sync, recover, then renew the heartbeat until `stop`; stops every execution on the way out."""
        if self.settings.metrics_port is not None:
            # /metrics only matters while runtimed runs: healthy and ready are the process being up.
            self._metrics_server = ProbeServer(self.metrics.registry, healthy=lambda: True, ready=lambda: True,
                                               address=self.settings.metrics_address,
                                               port=self.settings.metrics_port).start()
        try:
            # The cluster's settings first: no capacity is computed with a default of runtimed's own.
            self._pod_events.set_default_runs(shared_settings.read(
                self._api, self.settings.settings_namespace, self.settings.request_timeout).default_runs_capacity)
            self._settings_due = time.monotonic() + self.settings.settings_period
            self._run_selector = self._select_runs()
            self.publish_devices()
            self.events.start()
            self.pod_informer.start()
            self.run_informer.start()
            synced = self.pod_informer.wait_synced(sync_timeout) and self.run_informer.wait_synced(sync_timeout)
            if not synced and not self._stopping.is_set():
                raise errors.ApiError(f"runtimed could not list its pod and Runs within {sync_timeout:.0f}s")
            if self._stopping.is_set():
                return
            self._runs.recover()
            log.info("runtimed started", extra={"pod": self.settings.pod_name,
                                                "admitted": len(self.lifecycle.guard.admitted())})
            while not self._stopping.is_set():
                self.heartbeat()
                if time.monotonic() >= self._settings_due:
                    self.refresh_settings()
                self.lifecycle.executor.reap_orphans()
                self._stopping.wait(self.settings.heartbeat_period)
        finally:
            self._check_pod_leaving()
            self.lifecycle.shutdown()
            self.run_informer.stop()
            self.pod_informer.stop()
            if self._metrics_server is not None:
                self._metrics_server.stop()
            self.events.stop()  # what is queued (the ends just written) is sent within its timeout

    def publish_devices(self) -> discovery.Published | None:
        """Publish the pod's inventory from discover (publisher Runtimed); None when the controller publishes."""
        name, namespace = self.settings.pod_name, self.settings.pod_namespace
        try:
            pod = decode.response_value(self._core.read_namespaced_pod(
                name, namespace, _request_timeout=self.settings.request_timeout, _preload_content=False))
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            log.error("reading pod %s to publish its devices failed: %s; Runs asking for devices are not placed "
                      "here until runtimed restarts", name, errors.describe(exc))
            return None
        if not isinstance(pod, dict) or (pod.get("metadata") or {}).get("uid") != self.settings.pod_uid:
            return None
        wanted = discovery.discover_of(pod)
        if wanted is None:
            return None
        published = discovery.publish(wanted, self.settings.discover_timeout)
        if published.problem is None:
            log.info("publishing the device inventory discover found on pod %s (digest %s)", name, published.digest)
            self.metrics.device_discovery(metrics.PUBLISHED)
        else:
            log.warning("device discovery failed on pod %s: %s; its inventory is published as malformed, so Runs "
                        "asking for devices are not placed here (others are) until discover works and runtimed "
                        "restarts", name, published.problem)
            self.metrics.device_discovery(metrics.MALFORMED)
        if ((pod.get("metadata") or {}).get("annotations") or {}).get(discovery.DEVICES_ANNOTATION) == published.text:
            return published
        body = {"metadata": {"annotations": {discovery.DEVICES_ANNOTATION: published.text}}}
        try:
            self._core.patch_namespaced_pod(name, namespace, body, _content_type=MERGE_PATCH,
                                            _request_timeout=self.settings.request_timeout)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            log.error("publishing the device inventory of pod %s failed: %s", name, errors.describe(exc))
        return published

    def heartbeat(self) -> None:
        body = {"metadata": {"annotations": {models.HEARTBEAT_ANNOTATION: rfc3339(datetime.now(timezone.utc))}}}
        try:
            self._core.patch_namespaced_pod(self.settings.pod_name, self.settings.pod_namespace, body,
                                            _content_type=MERGE_PATCH,
                                            _request_timeout=self.settings.request_timeout)
        except (ApiException, OSError) as exc:
            log.warning("renewing the heartbeat of pod %s failed: %s", self.settings.pod_name, errors.describe(exc))

    def refresh_settings(self) -> None:
        """Follow a change of the cluster settings (the default runs capacity) within `Settings.settings_period`."""
        self._settings_due = time.monotonic() + self.settings.settings_period
        try:
            shared = shared_settings.read(self._api, self.settings.settings_namespace, self.settings.request_timeout)
        except shared_settings.SettingsUnreadable as exc:
            log.warning("keeping the cluster settings read before: %s", exc)
            return
        self._pod_events.set_default_runs(shared.default_runs_capacity)

    def _check_pod_leaving(self) -> None:
        # SIGTERM from the kubelet may come before the pod watch shows the deletion:
        # one read decides how the Runs stopped now are worded (RuntimePodLost or not).
        try:
            pod = self._core.read_namespaced_pod(self.settings.pod_name, self.settings.pod_namespace,
                                                 _request_timeout=2.0)
        except ApiException as exc:
            if errors.status_code(exc) == 404:
                self.lifecycle.pod_leaving()
            return
        except (OSError, urllib3.exceptions.HTTPError):
            return
        if pod.metadata.uid != self.settings.pod_uid or pod.metadata.deletion_timestamp is not None:
            self.lifecycle.pod_leaving()

    def _tell(self, run: RunRef, reason: str, note: str, warning: bool) -> None:
        self.events.emit(events.run(run.namespace, run.name, run.uid), reason, note,
                         type=events.WARNING if warning else events.NORMAL)

    def stop(self) -> None:
        """Ask `run` to return (from any thread or a signal handler); it cleans up on its own thread."""
        self._stopping.set()
