"""One hostile object never stops an informer (issue 23 item 6).

A Run nested 2,000 levels deep in `spec.mode.function` is valid to Kubernetes (it
takes up to 10,000) but beyond Python's parser: it used to make every list of Runs
fail, so the scheduler, the controller and runtimed never synced. Now the object is
skipped with a bounded reason, a log line and a metric, and everything else arrives,
whether the object comes in a list or a watch. The deep bodies are sent as raw JSON:
the Python client could not encode them either.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import urllib3
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from kruntimes.api import ingest, models
from kruntimes.cluster import decode, sources
from kruntimes.cluster.binder.kube import KubernetesBinder
from kruntimes.cluster.informer import Informer
from kruntimes.cluster.informer_metrics import InformerMetrics
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.controller.runner import ControllerRunner
from kruntimes.runtimed.agent import Agent, Settings
from kruntimes.runtimed.lifecycle import RELEASE_ANNOTATION
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import kubeconfig  # noqa: F401
from tests.integration.recording import HeldNames
from tests.integration.test_runtimed_agent import assign


# Production processes decode at the interpreter's own limit (tests/conftest.py says why).
pytestmark = pytest.mark.usefixtures("default_recursion_limit")

DEPTH = 2000


def create_deep_run(emulator: Emulator, namespace: str, name: str, depth: int = DEPTH) -> None:
    """A Run whose `spec.mode.function` nests `depth` objects, created from raw JSON."""
    nested = '{"a":' * depth + "{}" + "}" * depth
    body = ('{"apiVersion":"kruntimes.io/v1alpha1","kind":"Run","metadata":{"name":"%s"},'
            '"spec":{"runtime":"python","mode":{"function":%s}}}' % (name, nested))
    answer = urllib3.PoolManager().request(
        "POST", f"{emulator.host}/apis/{models.GROUP}/{models.VERSION}/namespaces/{namespace}/runs",
        body=body.encode(), headers={"Content-Type": "application/json"})
    assert answer.status == 201, answer.data[:300]


def make_deep(emulator: Emulator, namespace: str, name: str) -> None:
    """Nest `spec.mode.function` of an existing Run `DEPTH` levels deep (raw: the client cannot send it)."""
    patch_nested(emulator, namespace, "runs", name, '{"spec":{"mode":{"function":%s}}}')


def patch_nested(emulator: Emulator, namespace: str, plural: str, name: str, patch: str) -> None:
    """Merge-patch an object with `patch`, its `%s` an object nested `DEPTH` levels deep."""
    nested = '{"a":' * DEPTH + "{}" + "}" * DEPTH
    answer = urllib3.PoolManager().request(
        "PATCH", f"{emulator.host}/apis/{models.GROUP}/{models.VERSION}/namespaces/{namespace}/{plural}/{name}",
        body=(patch % nested).encode(), headers={"Content-Type": "application/merge-patch+json"})
    assert answer.status == 200, answer.data[:300]


def skipped(registry: CollectorRegistry, kind: str) -> float:
    return registry.get_sample_value("kruntimes_informer_objects_skipped_total",
                                     {"kind": kind, "reason": "nested too deeply"}) or 0.0


@pytest.mark.parametrize("arrives_by", ["list", "watch"])
def test_a_run_nested_2000_levels_deep_is_skipped_and_every_other_run_is_delivered(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster, arrives_by: str,
        caplog: pytest.LogCaptureFixture) -> None:
    registry, handler = CollectorRegistry(), HeldNames()
    informer = Informer(sources.runs(kube_api, cluster_api.namespace), handler,
                        metrics=InformerMetrics(registry))
    if arrives_by == "list":
        cluster_api.add_run("before")
        create_deep_run(emulator, cluster_api.namespace, "deep")
    with caplog.at_level(logging.WARNING, logger="kruntimes.cluster.informer"):
        informer.start()
        try:
            assert informer.wait_synced(60), "the informer never synced"
            if arrives_by == "watch":
                cluster_api.add_run("before")
                create_deep_run(emulator, cluster_api.namespace, "deep")
            cluster_api.add_run("after")
            wait_for(lambda: handler.names == {"before", "after"}, timeout=60, what="the other Runs delivered")
        finally:
            informer.stop()
    assert informer.stats.skipped == 1 and skipped(registry, "Run") == 1
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith(f"Run {cluster_api.namespace}/deep (resourceVersion ")
    assert lines[0].endswith(") skipped: nested too deeply")


def test_the_scheduler_places_runs_beside_a_deeply_nested_one(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=2)
    create_deep_run(emulator, cluster_api.namespace, "deep")
    cluster_api.add_run("a")
    scheduler = start_scheduler()
    create_deep_run(emulator, cluster_api.namespace, "deeper")
    cluster_api.add_run("b")
    # (The client's own list would fail on the deep Runs: each Run is read alone.)
    wait_for(lambda: all(((cluster_api.run(name).get("status") or {}).get("assignment") or {}).get("podName")
                         == "python-0" for name in ("a", "b")), what="a and b placed")
    assert scheduler.informers["Run"].stats.skipped == 2
    assert skipped(scheduler.registry, "Run") == 2


def test_the_controller_keeps_its_runtime_beside_a_deeply_nested_run(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster) -> None:
    create_deep_run(emulator, cluster_api.namespace, "deep")
    registry = CollectorRegistry()
    runner = ControllerRunner(kube_api, cluster_api.namespace, resync_period=0.5,
                              informer_metrics=InformerMetrics(registry)).start(sync_timeout=60)
    try:
        assert all(informer.synced for informer in runner.informers)
        body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
                "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "runtime", "image": "x"}]}},
                         "capacity": {"resources": {"runs": "1"}}}}
        cluster_api.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, cluster_api.namespace,
                                                           "runtimes", body)
        wait_for(lambda: cluster_api.core.list_namespaced_pod(
            cluster_api.namespace, label_selector=f"{models.RUNTIME_LABEL}=python").items, timeout=60,
            what="the Runtime's pod")
    finally:
        runner.stop()
    assert skipped(registry, "Run") == 1


def read_raw(emulator: Emulator, namespace: str, name: str) -> dict[str, Any]:
    """A Run read without the client's parser, which a deep Run defeats."""
    answer = urllib3.PoolManager().request(
        "GET", f"{emulator.host}/apis/{models.GROUP}/{models.VERSION}/namespaces/{namespace}/runs/{name}")
    return dict(decode.loads(answer.data).value)


def test_the_controller_fails_a_run_made_deeply_nested_while_active_when_its_pod_is_gone(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster) -> None:
    # The controller reads such a Run directly before failing it RuntimePodLost (its
    # informer keeps the last version it could take): the read must not choke either.
    ns, custom = cluster_api.namespace, cluster_api.custom
    body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
            "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": "runtime", "image": "x"}]}},
                     "capacity": {"resources": {"runs": "1"}}}}
    custom.create_namespaced_custom_object(models.GROUP, models.VERSION, ns, "runtimes", body)
    pod = cluster_api.add_pod("python-x")
    cluster_api.add_run("a")
    custom.patch_namespaced_custom_object_status(
        models.GROUP, models.VERSION, ns, "runs", "a",
        {"status": {"phase": "Running", "assignment": {"podName": "python-x", "podUID": pod["uid"]}}},
        _content_type="application/merge-patch+json")
    runner = ControllerRunner(kube_api, ns, resync_period=0.2).start(sync_timeout=60)
    try:
        make_deep(emulator, ns, "a")
        wait_for(lambda: runner.informers[2].stats.skipped == 1, timeout=60, what="the deep version skipped")
        cluster_api.core.delete_namespaced_pod("python-x", ns, grace_period_seconds=0)
        wait_for(lambda: (read_raw(emulator, ns, "a").get("status") or {}).get("phase") == "Failed", timeout=60,
                 what="a failed RuntimePodLost")
    finally:
        runner.stop()
    conditions = read_raw(emulator, ns, "a")["status"]["conditions"]
    assert any(c.get("reason") == "RuntimePodLost" for c in conditions)


def test_the_read_that_settles_a_bind_sees_the_status_of_a_deeply_nested_run(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster) -> None:
    ns = cluster_api.namespace
    run = ingest.run_info(cluster_api.add_run("a"))
    cluster_api.custom.patch_namespaced_custom_object_status(
        models.GROUP, models.VERSION, ns, "runs", "a",
        {"status": {"phase": "Scheduled", "assignment": {"podName": "python-0", "podUID": "uid-0"}}},
        _content_type="application/merge-patch+json")
    make_deep(emulator, ns, "a")
    seen = KubernetesBinder(kube_api).observe(run)
    assert seen is not None and (seen.phase, seen.pod_uid, seen.uid) == ("Scheduled", "uid-0", run.uid)


@pytest.mark.parametrize("field_selector", [False, None], ids=["namespace", "probed"])
def test_runtimed_runs_the_runs_of_its_pod_beside_a_deeply_nested_one(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster, tmp_path: Path,
        field_selector: bool | None) -> None:
    ns = cluster_api.namespace
    pod = cluster_api.add_pod("p1", runs=2)
    create_deep_run(emulator, ns, "deep")
    urllib3.PoolManager().request(  # bound to the pod as a scheduler would (raw: the client cannot send it)
        "PATCH", f"{emulator.host}/apis/{models.GROUP}/{models.VERSION}/namespaces/{ns}/runs/deep/status",
        body=('{"status":{"phase":"Scheduled","assignment":{"podName":"p1","podUID":"%s"}}}' % pod["uid"]).encode(),
        headers={"Content-Type": "application/merge-patch+json"})
    assign(cluster_api, "ok", pod, mode={"task": {"args": [sys.executable, "-c", "pass"]}})
    # The namespace's Runs, or (None) the pod's own after a start-up probe of the
    # selectable field, whose one-item answer is the deep Run.
    agent = Agent(kube_api, Settings(pod_name="p1", pod_namespace=ns, pod_uid=pod["uid"], work_dir=tmp_path / "work",
                                     heartbeat_period=0.2, run_field_selector=field_selector))
    with running(agent):
        wait_for(lambda: (read_raw(emulator, ns, "ok").get("status") or {}).get("phase") == "Succeeded",
                 timeout=30, what="ok Succeeded")
    assert agent.run_informer.stats.skipped == 1


@contextlib.contextmanager
def running(agent: Agent) -> Iterator[Agent]:
    """`agent` running on a thread of its own; the test fails if it stopped by itself (it raised)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            agent.run(sync_timeout=60)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    thread = threading.Thread(target=run, name="runtimed-test", daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.stop()
        thread.join(10)
        assert failed == [], f"runtimed stopped by itself: {failed!r}"


def test_runtimed_writes_the_end_of_a_run_made_deeply_nested_while_it_runs(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster, tmp_path: Path) -> None:
    # runtimed's informer keeps the last version it could take, so the end is first
    # written at a stale resourceVersion; the read that settles the conflict, and the
    # write's answer, hold the deep spec and must not choke.
    ns = cluster_api.namespace
    pod = cluster_api.add_pod("p1", runs=1)
    go = tmp_path / "go"
    assign(cluster_api, "a", pod, mode={"task": {"args": [
        sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"]}})
    agent = Agent(kube_api, Settings(pod_name="p1", pod_namespace=ns, pod_uid=pod["uid"], work_dir=tmp_path / "work",
                                     heartbeat_period=0.2))
    with running(agent):
        wait_for(lambda: (cluster_api.run("a").get("status") or {}).get("phase") == "Running", timeout=30,
                 what="a Running")
        make_deep(emulator, ns, "a")
        wait_for(lambda: agent.run_informer.stats.skipped == 1, timeout=60, what="the deep version skipped")
        go.touch()
        wait_for(lambda: (read_raw(emulator, ns, "a").get("status") or {}).get("phase") == "Succeeded",
                 timeout=60, what="a's end written")
        wait_for(lambda: agent.lifecycle.guard.usage() == {}, timeout=30, what="a's capacity freed")


def test_kruntimes_release_releases_a_deeply_nested_function_run(
        emulator: Emulator, cluster_api: Cluster, kubeconfig: str) -> None:
    ns = cluster_api.namespace
    create_deep_run(emulator, ns, "deep")
    released = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", "release", f"{ns}/deep",
                               "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=60)
    assert released.returncode == 0, released.stderr[-2000:]
    annotations = read_raw(emulator, ns, "deep")["metadata"].get("annotations") or {}
    assert annotations.get(RELEASE_ANNOTATION) == "true"


def test_the_controller_writes_the_status_of_a_runtime_made_deeply_nested_and_keeps_reconciling_the_others(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    # The Runtime's status patch is answered with the whole Runtime, however deep: the
    # controller reads that answer without the client's parser, so its pass ends well.
    def runtime(name: str, replicas: int) -> dict[str, Any]:
        return {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": name},
                "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "runtime", "image": "x"}]}},
                         "capacity": {"resources": {"runs": "1"}}}}

    def pods(name: str) -> list[Any]:
        return list(cluster_api.core.list_namespaced_pod(
            cluster_api.namespace, label_selector=f"{models.RUNTIME_LABEL}={name}").items)

    ns = cluster_api.namespace
    cluster_api.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, ns, "runtimes",
                                                       runtime("deep", 1))
    runner = ControllerRunner(kube_api, ns, resync_period=0.5).start(sync_timeout=60)
    try:
        wait_for(lambda: pods("deep"), timeout=60, what="the first Runtime's pod")
        patch_nested(emulator, ns, "runtimes", "deep", '{"spec":{"template":{"deep":%s}}}')  # an unknown field
        (first,) = pods("deep")
        cluster_api.core.delete_namespaced_pod(first.metadata.name, ns)  # its status changes, and is patched
        wait_for(lambda: [p.metadata.uid for p in pods("deep")] not in ([], [first.metadata.uid]), timeout=60,
                 what="the deep Runtime's pod replaced")
        cluster_api.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, ns, "runtimes",
                                                           runtime("python", 2))
        wait_for(lambda: len(pods("python")) == 2, timeout=60, what="the other Runtime's pods")
    finally:
        runner.stop()
    failed = [r.getMessage() for r in caplog.records if r.name.startswith("kruntimes.controller") and r.levelno >= 40]
    assert failed == []
