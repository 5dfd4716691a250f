"""The Binder over the real API: a Run's whole status, replaced at the version the scheduler read.

`replace_namespaced_custom_object_status` with the Run's observed resourceVersion
(and UID) in the body is an optimistic lock: if anyone changed the Run since the
informer delivered it, the server answers 409 and the loop re-plans on the newer
version. A 404 (the Run is gone) is the same kind of news. Anything else is an
`ApiError`, which the loop retries with backoff.

The fence: before every write the binder asks whether this instance still holds the
lease. A leader past its renew deadline may still have a cycle in flight; the fence
turns its write into a local `NotLeader` instead of a write the next leader does not
know about. The request timeout keeps a write that did go out within the time the
lease still protects it (`LeaseSettings.fence_margin`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes.api import models
from kruntimes.cluster import errors
from kruntimes.cluster.sources import RUNS
from kruntimes.scheduler.projection import RunInfo


class KubernetesBinder:
    """Implements `kruntimes.scheduler.loop.Binder`; thread-safe (workers bind in parallel)."""

    def __init__(self, api: kubernetes.client.ApiClient, *, fence: Callable[[], bool] = lambda: True,
                 timeout: float = 30.0) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self._fence = fence
        self.timeout = timeout
        self._lock = threading.Lock()
        # Outcome counts and time spent in the client: for tests ("the standby writes
        # nothing") and the benchmark (client vs planner).
        self.writes = self.conflicts = self.failures = self.refused = 0
        self.seconds = 0.0

    def update_status(self, run: RunInfo, status: dict[str, Any]) -> None:
        if not self._fence():
            self._count("refused")
            raise errors.NotLeader(f"not writing the status of Run {run.namespace}/{run.name}: "
                                   "this scheduler does not hold the leader lease")
        if not run.resource_version:
            self._count("failures")
            raise errors.ApiError(f"Run {run.namespace}/{run.name} has no observed resourceVersion to guard a write")
        body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Run",
                "metadata": {"name": run.name, "namespace": run.namespace, "uid": run.uid,
                             "resourceVersion": run.resource_version},
                "status": status}
        started = time.perf_counter()
        try:
            self._custom.replace_namespaced_custom_object_status(
                models.GROUP, models.VERSION, run.namespace, RUNS, run.name, body, _request_timeout=self.timeout)
        except ApiException as exc:
            code = errors.status_code(exc)
            if code in (404, 409):
                self._count("conflicts", started)
                raise errors.BindConflict(f"Run {run.namespace}/{run.name} changed or vanished since "
                                          f"resourceVersion {run.resource_version}: {errors.describe(exc)}") from exc
            self._count("failures", started)
            raise errors.ApiError(f"status write of Run {run.namespace}/{run.name} failed: "
                                  f"{errors.describe(exc)}", code) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._count("failures", started)
            raise errors.ApiError(f"status write of Run {run.namespace}/{run.name} failed: "
                                  f"{errors.describe(exc)}") from exc
        self._count("writes", started)

    def _count(self, outcome: str, started: float | None = None) -> None:
        with self._lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
            if started is not None:
                self.seconds += time.perf_counter() - started
