"""What the integration tests do to a cluster: Runtime Pods, Runs, status writes, and waiting.

Everything goes through the real client, so it holds on the emulator and on a real
cluster alike: pods name a scheduler nobody serves (no kubelet touches them), and
their Ready condition and the Runs' terminal status are written as runtimed would.
"""

from __future__ import annotations

import json

import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from kubernetes import client
from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.cluster.settings import ClusterSettings, LeaseSettings
from kruntimes.scheduler import status as st
from tests.emulator import manifests

RUNTIME = "python"
# Tiny leases keep failover tests short: a standby waits `LEASE_DURATION` after it last
# saw the lease change before it takes an unreleased lease over.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 2, 1.0, 0.1


def settings(namespace: str, **overrides: Any) -> ClusterSettings:
    lease = LeaseSettings(name="kruntimes-scheduler", namespace=namespace,
                          identity=overrides.pop("identity", "scheduler-a"),
                          duration=overrides.pop("lease_duration", LEASE_DURATION),
                          renew_deadline=overrides.pop("renew_deadline", RENEW_DEADLINE),
                          retry_period=overrides.pop("retry_period", RETRY_PERIOD))
    defaults: dict[str, Any] = {"namespace": namespace, "bind_concurrency": 4, "lease": lease, "watch_timeout": 30,
                                "request_timeout": 5.0, "backoff_initial": 0.05, "backoff_max": 0.5,
                                "shutdown_timeout": 5.0}
    return ClusterSettings(**{**defaults, **overrides})


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll until ``predicate`` holds; ``timeout`` only bounds a test that fails (generous: CI is a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Cluster:
    """The test's namespace, through the real client."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # -- Runtime Pods ---------------------------------------------------------------------
    def add_pod(self, name: str, *, runs: int | None = 1, ready: bool = True, runtime: str = RUNTIME,
                capacity: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
        """A Runtime Pod; with ``node``, bound to that node, so that deleting it is graceful."""
        annotations = {models.HEARTBEAT_ANNOTATION: _rfc3339(datetime.now(timezone.utc) + timedelta(hours=1))}
        if runs is not None:
            annotations[models.CAPACITY_ANNOTATION_PREFIX + "runs"] = str(runs)
        if capacity:
            # The one JSON annotation (SPEC §2.1): a real server refuses a per-resource key for
            # a prefixed name such as example.com/gpu.
            annotations[models.CAPACITY_ANNOTATION] = json.dumps(capacity, sort_keys=True, separators=(",", ":"))
        body = manifests.pod(name, {models.RUNTIME_LABEL: runtime}, annotations=annotations)
        if node is not None:
            body["spec"]["nodeName"] = node
        pod = self.core.create_namespaced_pod(self.namespace, body)
        if ready:
            self.set_ready(name, True)
        return {"name": name, "uid": pod.metadata.uid}

    def set_ready(self, name: str, ready: bool) -> None:
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": {"conditions": [condition]}})

    def set_capacity(self, name: str, runs: int) -> None:
        self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"annotations": {
            models.CAPACITY_ANNOTATION_PREFIX + "runs": str(runs)}}})

    # -- Runs ----------------------------------------------------------------------------
    def add_run(self, name: str, **spec: Any) -> dict[str, Any]:
        return dict(self.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, self.namespace, "runs",
                                                                manifests.run(name, **spec)))

    def run(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(models.GROUP, models.VERSION, self.namespace,
                                                             "runs", name))

    def runs(self) -> dict[str, dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(models.GROUP, models.VERSION, self.namespace, "runs")
        return {item["metadata"]["name"]: item for item in listed["items"]}

    def label_run(self, name: str, **labels: str) -> None:
        self.custom.patch_namespaced_custom_object(models.GROUP, models.VERSION, self.namespace, "runs", name,
                                                   {"metadata": {"labels": labels}})

    def finish(self, name: str, phase: str = "Succeeded") -> None:
        """What runtimed does when a task ends: the terminal helper, written at the observed version."""
        current = self.run(name)
        body = {**current, "status": st.terminal_status(current.get("status"), phase, "Completed", "run finished",
                                                        datetime.now(timezone.utc))}
        self.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, self.namespace, "runs",
                                                            name, body)

    def delete_run(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(models.GROUP, models.VERSION, self.namespace, "runs", name)

    # -- reading outcomes ----------------------------------------------------------------
    def phases(self) -> dict[str, str]:
        return {name: (run.get("status") or {}).get("phase", "") for name, run in self.runs().items()}

    def placements(self) -> dict[str, str]:
        """Run name -> pod name, for active Runs."""
        return {name: run["status"]["assignment"]["podName"] for name, run in self.runs().items()
                if (run.get("status") or {}).get("phase") in ("Scheduled", "Running")}

    def pending_message(self, name: str) -> str | None:
        for condition in (self.run(name).get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Scheduled" and condition.get("status") == "False":
                return str(condition.get("message"))
        return None

    def overcommit(self) -> int:
        """Active Runs beyond their Runtime Pod's `runs` capacity, summed over the pods that exist.

        Counted from the API (not the scheduler's cache): Runs per assigned pod UID against
        the capacity annotation. A Run assigned to a pod UID that no longer exists is
        `bound_to_missing_pods`, not counted here.
        """
        capacity = {pod.metadata.uid: int((pod.metadata.annotations or {}).get(
            models.CAPACITY_ANNOTATION_PREFIX + "runs", "1"))
            for pod in self.core.list_namespaced_pod(self.namespace).items}
        active = Counter(run["status"]["assignment"]["podUID"] for run in self.runs().values()
                         if (run.get("status") or {}).get("phase") in ("Scheduled", "Running"))
        return sum(max(0, n - capacity[uid]) for uid, n in active.items() if uid in capacity)

    def bound_to_missing_pods(self) -> list[str]:
        """Active Runs whose assigned pod UID is not a pod of the namespace (deleted or replaced)."""
        uids = {pod.metadata.uid for pod in self.core.list_namespaced_pod(self.namespace).items}
        return sorted(name for name, run in self.runs().items()
                      if (run.get("status") or {}).get("phase") in ("Scheduled", "Running")
                      and run["status"]["assignment"]["podUID"] not in uids)

    def all_placed(self, names: list[str]) -> bool:
        phases = self.phases()
        return all(phases.get(n) == "Scheduled" for n in names)


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")
