"""The Binder over the real API: a Run's whole status, replaced at the version the scheduler read.

`replace_namespaced_custom_object_status` with the Run's observed resourceVersion
(and UID) in the body is an optimistic lock: if anyone changed the Run since the
informer delivered it, the server answers 409 and the loop re-plans on the newer
version. A 404 (the Run is gone) is the same kind of news. A write that was sent and
not answered (a read timeout, a connection lost, a 504) is `BindAmbiguous`: it may
have landed or may still land, and only a later observation of the Run (the watch,
or `observe`, a GET) can tell (SPEC §3.2 step 6). The client never re-sends it
(`client`); a write that never left (no connection) or that the server refused
(429, other codes) is an `ApiError`, which the loop retries with backoff.

The fence: immediately before every write it is checked that this instance still
holds the lease, and the write may take `timeout` at most. In the scheduler the check
is the write's deadline, taken from the elector when the loop handed the write over
and compared with the clock by the binder process that sends it (`processes`); `fence`
here is the same check for a binder used directly. Why that is enough - a write that
passes the fence lands, if it ever does, before another scheduler can lead:

- the fence is open at time `t` only while `t < renewed + renew_deadline`, where
  `renewed` is when the last successful renewal was SENT (`leader.is_leader`; a
  write's deadline is `renewed + renew_deadline` as known when it was handed over,
  never later than the fence at sending time, `leader.fence_deadline`);
- a standby takes over only `duration` after it first saw that renewal, timed from
  the answer of the read that showed it (`leader`), which cannot come before the
  renewal was sent: not before `renewed + duration`;
- the write is over (answered, or abandoned by the client) by `t + d + timeout`,
  where `d` is the local delay between the fence check and the request going out.
  The client re-sends nothing, so `timeout` is the whole of it;
- hence `t + d + timeout < renewed + duration` whenever `d + timeout <= fence_margin
  = duration - renew_deadline`. `LeaseSettings.write_timeout` is half the margin: the
  other half is for `d` (a loaded process, the GIL) and for the two machines' clocks
  running at slightly different rates over one lease duration.

The argument needs one thing from the server: a write the client abandoned is not
applied long after it. The API server cancels a request whose client went away; a
write already committing completes within moments. Where that fails (a write held in
a proxy or a slow apiserver past the next leader's first bind: found by probing), the
server's own fence refuses it (SPEC §3.6): every assignment carries its writer's term,
and the ValidatingAdmissionPolicy `FENCE_POLICY` (deploy/base/scheduler-fence-policy.yaml)
refuses one whose term is not the scheduler Lease's current `leaseTransitions`. That
refusal is a conflict like a 409: the assumption is released and the Run re-planned.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes.api import models
from kruntimes.cluster import decode, direct, errors
from kruntimes.cluster.sources import RUNS
from kruntimes.cluster.throttling import Throttling
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo

#: Answers that say the server may still be processing the request.
AMBIGUOUS_CODES = (504,)
#: The admission policy that refuses an assignment from a term other than the Lease's.
FENCE_POLICY = "kruntimes-scheduler-fence"


def refused_by_fence(exc: ApiException) -> bool:
    """Whether the server refused the write by the term fence (a 403 naming `FENCE_POLICY`)."""
    return errors.status_code(exc) in (403, 422) and f"'{FENCE_POLICY}'" in errors.describe(exc)


class KubernetesBinder:
    """Implements `kruntimes.scheduler.writes.Binder`; thread-safe (a binder process's threads send in parallel)."""

    def __init__(self, api: kubernetes.client.ApiClient, *, fence: Callable[[], bool] = lambda: True,
                 timeout: float = 30.0, read_timeout: float | None = None,
                 throttling: Throttling | None = None, sender: direct.Direct | None = None) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self._direct = sender  # the writes' lean path (`direct`), when the configuration allows it
        self._fence = fence
        self.timeout = timeout
        self.read_timeout = read_timeout if read_timeout is not None else timeout
        self.throttling = throttling if throttling is not None else Throttling()
        self._lock = threading.Lock()
        # Outcome counts and time spent in the client: for tests ("the standby writes
        # nothing", "a write with no answer is never re-sent") and the benchmark.
        self.writes = self.conflicts = self.failures = self.refused = self.ambiguous = self.reads = 0
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
        what = f"status write of Run {run.namespace}/{run.name} at resourceVersion {run.resource_version}"
        started = time.perf_counter()
        try:
            # The answer is the whole Run, never decoded: a spec made deeply nested since it
            # was observed must not turn a landed write into an error (`decode`).
            if self._direct is not None:
                self._replace_directly(run, body)
            else:
                decode.drain(self._custom.replace_namespaced_custom_object_status(
                    models.GROUP, models.VERSION, run.namespace, RUNS, run.name, body,
                    _request_timeout=self.timeout, _preload_content=False))
        except ApiException as exc:
            code = errors.status_code(exc)
            if code in (404, 409):
                self._count("conflicts", started)
                raise errors.BindConflict(f"Run {run.namespace}/{run.name} changed or vanished since "
                                          f"resourceVersion {run.resource_version}: {errors.describe(exc)}") from exc
            if refused_by_fence(exc):
                self._count("conflicts", started)
                raise errors.BindConflict(f"{what} was sent in an earlier leadership term: "
                                          f"{errors.describe(exc)}") from exc
            if code in AMBIGUOUS_CODES:
                self._count("ambiguous", started)
                raise errors.BindAmbiguous(f"{what}: outcome unknown ({errors.describe(exc)})", code) from exc
            wait = self.throttling.note("status_write", exc) if code == 429 else None
            self._count("failures", started)
            raise errors.ApiError(f"{what} failed: {errors.describe(exc)}", code, wait) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if sent(exc):
                self._count("ambiguous", started)
                raise errors.BindAmbiguous(f"{what}: outcome unknown ({errors.describe(exc)})") from exc
            self._count("failures", started)
            raise errors.ApiError(f"{what} failed before it was sent: {errors.describe(exc)}") from exc
        self._count("writes", started)

    def _replace_directly(self, run: RunInfo, body: dict[str, Any]) -> None:
        assert self._direct is not None
        target = direct.path("apis", models.GROUP, models.VERSION, "namespaces", run.namespace, RUNS, run.name,
                             "status")
        self._direct.call("PUT", target, body, self.timeout)

    def observe(self, run: RunInfo) -> st.Observed | None:
        """Read the Run (a GET, never a write): None when it is gone. Raises `ApiError`."""
        self._count("reads")
        try:
            response = self._custom.get_namespaced_custom_object(
                models.GROUP, models.VERSION, run.namespace, RUNS, run.name, _request_timeout=self.read_timeout,
                _preload_content=False)
            obj = decode.response_value(response)  # a deeply nested spec never hides the status
        except ApiException as exc:
            if errors.status_code(exc) == 404:
                return None
            wait = self.throttling.note("run_read", exc) if errors.status_code(exc) == 429 else None
            raise errors.ApiError(f"reading Run {run.namespace}/{run.name} failed: {errors.describe(exc)}",
                                  errors.status_code(exc), wait) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.ApiError(f"reading Run {run.namespace}/{run.name} failed: {errors.describe(exc)}") from exc
        metadata = obj.get("metadata") or {}
        status = obj.get("status") or {}
        assignment = status.get("assignment") or {}
        return st.Observed(uid=str(metadata.get("uid") or ""), resource_version=str(metadata.get("resourceVersion")),
                           phase=str(status.get("phase") or "Pending"),
                           pod_uid=assignment.get("podUID") if isinstance(assignment, dict) else None)

    def _count(self, outcome: str, started: float | None = None) -> None:
        with self._lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
            if started is not None:
                self.seconds += time.perf_counter() - started


def sent(exc: BaseException) -> bool:
    """Whether a failed request may have reached the server (False only when it surely did not)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    # No connection was made: a refused connection or one that timed out connecting.
    # (NewConnectionError is a ConnectTimeoutError in urllib3 2.)
    return not isinstance(exc, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NewConnectionError,
                                ConnectionRefusedError, direct.NotSent))
