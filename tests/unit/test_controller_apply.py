"""Carrying out the controller's plan: guarded deletes, confirmed pod loss, status only on change (SPEC §4.2)."""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timezone
from typing import Any, Mapping

from kruntimes.controller.apply import apply
from kruntimes.controller.reconcile import ActiveRun, RuntimePod, RuntimeSpecView, reconcile
from kruntimes.scheduler import status as st

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
RUNTIME = RuntimeSpecView(namespace="team", name="python", uid="uid-rt", generation=1, replicas=1,
                          template={"spec": {"containers": []}}, capacity={"runs": 2})


class FakeApi:
    def __init__(self) -> None:
        self.pods: dict[str, str] = {}      # name -> uid
        self.runs: dict[str, dict[str, Any]] = {}
        self.runtime_statuses: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.failing: set[str] = set()
        self.refuse_with: str | None = None  # the message a create is refused with (422), or None
        self.serial = 0

    def _call(self, what: str) -> None:
        self.calls.append(what)
        if what.split()[0] in self.failing:
            raise st.ApiError(f"{what} refused")

    def create_pod(self, namespace: str, body: dict[str, Any]) -> str:
        self._call("create")
        if self.refuse_with is not None:
            raise st.Refused(self.refuse_with)
        self.serial += 1
        name = body["metadata"]["generateName"] + f"{self.serial:05d}"
        self.pods[name] = f"uid-{name}"
        return name

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._call(f"delete {name}")
        if self.pods.get(name) == uid:
            del self.pods[name]

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._call(f"patch {name}")

    def pod_present(self, namespace: str, name: str, uid: str | None) -> bool:
        return name in self.pods and (uid is None or self.pods[name] == uid)

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.runs.get(name))

    def write_run_status(self, run: Mapping[str, Any], status: dict[str, Any]) -> None:
        name = run["metadata"]["name"]
        if run["metadata"]["resourceVersion"] != self.runs[name]["metadata"]["resourceVersion"]:
            raise st.Conflict(name)
        self.runs[name]["status"] = status

    def write_runtime_status(self, runtime: RuntimeSpecView, status: dict[str, Any]) -> None:
        self._call("status")
        self.runtime_statuses.append(status)

    def add_run(self, name: str, pod: str, pod_uid: str, phase: str = "Running") -> ActiveRun:
        self.runs[name] = {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                                        "resourceVersion": "5"},
                           "status": {"phase": phase, "assignment": {"podName": pod, "podUID": pod_uid}}}
        return ActiveRun("team", name, f"uid-{name}", pod, pod_uid, "5")


def test_a_new_runtime_gets_its_pods_and_its_status_written_once() -> None:
    api = FakeApi()
    done = apply(reconcile(RUNTIME, [], [], NOW), RUNTIME, None, api, NOW)
    assert done.created == ["python-00001"] and done.status_written and done.errors == []
    status = api.runtime_statuses[-1]
    again = apply(reconcile(RUNTIME, [RuntimePod("python-00001", "uid-python-00001")], [], NOW), RUNTIME,
                  status | {"replicas": 0}, api, NOW)
    assert again.created == [] and again.status_written  # replicas changed 0 -> 1
    third = apply(reconcile(RUNTIME, [RuntimePod("python-00001", "uid-python-00001")], [], NOW), RUNTIME,
                  api.runtime_statuses[-1], api, NOW)
    assert not third.status_written


def test_a_pod_is_deleted_only_while_it_still_has_the_uid_the_plan_saw() -> None:
    api = FakeApi()
    api.pods = {"python-a": "uid-new-python-a"}  # replaced under the same name since the cache saw it
    plan = reconcile(RUNTIME, [RuntimePod("python-a", "uid-python-a", phase="Failed")], [], NOW)
    apply(plan, RUNTIME, None, api, NOW)
    assert api.pods == {"python-a": "uid-new-python-a", "python-00001": "uid-python-00001"}


def test_a_run_on_a_pod_the_cache_has_not_seen_yet_is_not_failed() -> None:
    api = FakeApi()
    api.pods = {"python-new": "uid-python-new"}
    run = api.add_run("r", "python-new", "uid-python-new")
    done = apply(reconcile(RUNTIME, [], [run], NOW), RUNTIME, None, api, NOW)
    assert done.failed_runs == [] and api.runs["r"]["status"]["phase"] == "Running"


def test_a_run_whose_pod_is_really_gone_ends_failed_runtime_pod_lost_through_the_shared_helper() -> None:
    api = FakeApi()
    run = api.add_run("r", "python-gone", "uid-python-gone")
    done = apply(reconcile(RUNTIME, [], [run], NOW), RUNTIME, None, api, NOW)
    assert done.failed_runs == ["team/r"]
    status = api.runs["r"]["status"]
    assert status["phase"] == "Failed" and status["completionTime"] == "2026-12-01T12:00:00Z"
    completed = next(c for c in status["conditions"] if c["type"] == "Completed")
    assert completed["reason"] == "RuntimePodLost" and "python-gone is gone" in completed["message"]


def test_a_lost_run_that_ended_or_moved_meanwhile_is_left_alone() -> None:
    api = FakeApi()
    ended = api.add_run("ended", "python-gone", "uid-python-gone")
    api.runs["ended"]["status"]["phase"] = "Succeeded"
    moved = api.add_run("moved", "python-gone", "uid-python-gone")
    api.runs["moved"]["status"]["assignment"] = {"podName": "python-b", "podUID": "uid-python-b"}
    done = apply(reconcile(RUNTIME, [], [ended, moved], NOW), RUNTIME, None, api, NOW)
    assert done.failed_runs == []
    assert api.runs["ended"]["status"]["phase"] == "Succeeded"


def test_one_failed_write_does_not_stop_the_others_and_is_reported() -> None:
    api = FakeApi()
    api.failing = {"create"}
    pods = [RuntimePod("python-a", "uid-python-a", annotations={}), RuntimePod("python-b", "uid-python-b",
                                                                              phase="Failed")]
    api.pods = {"python-a": "uid-python-a", "python-b": "uid-python-b"}
    two = dataclasses.replace(RUNTIME, replicas=2)
    done = apply(reconcile(two, pods, [], NOW), two, None, api, NOW)
    assert done.deleted == ["python-b"] and done.patched == ["python-a"] and done.status_written
    assert [e.split(":")[0] for e in done.errors] == ["creating a pod"]


def test_a_refused_template_clears_once_the_wanted_pods_exist_even_if_the_status_write_after_the_create_was_lost(
) -> None:
    api = FakeApi()
    api.refuse_with = "admission webhook said no"
    done = apply(reconcile(RUNTIME, [], [], NOW), RUNTIME, None, api, NOW)
    refused_status = done.status
    assert _template(refused_status)["status"] == "False"
    api.refuse_with, api.failing = None, {"status"}  # the server takes the pod; the status write after it is lost
    created = apply(reconcile(dataclasses.replace(RUNTIME, conditions=refused_status["conditions"]), [], [], NOW),
                    RUNTIME, refused_status, api, NOW)
    assert created.created and not created.status_written
    api.failing = set()
    pod = RuntimePod(created.created[0], api.pods[created.created[0]])
    later = apply(reconcile(dataclasses.replace(RUNTIME, conditions=refused_status["conditions"]), [pod], [], NOW),
                  RUNTIME, refused_status, api, NOW)
    assert later.status_written and _template(api.runtime_statuses[-1])["status"] == "True"
    # while pods are still missing, the refusal stands until a create is taken
    two = dataclasses.replace(RUNTIME, replicas=2, conditions=refused_status["conditions"])
    assert _template(reconcile(two, [pod], [], NOW).status)["status"] == "False"


def _template(status: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "TemplateValid")
