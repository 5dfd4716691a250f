"""The in-memory stores `kruntimes demo` runs the whole system against: whole Runs and Runtime Pods."""

from __future__ import annotations

from typing import Any

from kruntimes.memory.api import MemoryApi
from kruntimes.memory.pods import MemoryPods
from kruntimes.scheduler import status as st
from tests.builders import NOW, run

OBJ = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "r", "namespace": "ns"},
       "spec": {"runtime": "rt", "mode": {"task": {"args": ["true"]}}}}


def test_a_run_created_whole_is_read_back_with_its_current_version_and_status() -> None:
    api = MemoryApi()
    seen: list[dict[str, Any]] = []
    api.object_watchers.append(seen.append)
    created = api.create(run("r"), OBJ)
    api.update_status(created, st.scheduled_status(None, "p", "pu", NOW))
    current = api.read_run("ns", "r")
    assert current is not None and current["spec"] == OBJ["spec"]
    assert current["metadata"]["resourceVersion"] == api.get(("ns", "r")).resource_version
    assert current["status"]["phase"] == "Scheduled"
    assert [(o["metadata"]["resourceVersion"], (o.get("status") or {}).get("phase")) for o in seen] == [
        (created.resource_version, None), (current["metadata"]["resourceVersion"], "Scheduled")]


def test_an_annotation_is_a_new_version_delivered_whole() -> None:
    api = MemoryApi()
    seen: list[dict[str, Any]] = []
    api.object_watchers.append(seen.append)
    api.create(run("r"), OBJ)
    api.annotate(("ns", "r"), {"kruntimes.io/release": "true"})
    assert seen[-1]["metadata"]["annotations"] == {"kruntimes.io/release": "true"}
    assert seen[-1]["metadata"]["resourceVersion"] != seen[0]["metadata"]["resourceVersion"]


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        self.seen.append((event, obj["metadata"]["name"]))

    def delete(self, namespace: str, name: str) -> None:
        self.seen.append(("DELETED", name))


def test_pods_get_generated_names_and_every_change_is_delivered_in_order() -> None:
    pods, events = MemoryPods(), Events()
    pods.handlers.append(events)
    a = pods.create("ns", {"metadata": {"generateName": "python-"}})
    b = pods.create("ns", {"metadata": {"generateName": "python-"}})
    assert a["metadata"]["name"] != b["metadata"]["name"] and a["metadata"]["name"].startswith("python-")
    pods.set_ready("ns", a["metadata"]["name"], True)
    pods.patch_annotations("ns", a["metadata"]["name"], {"k": "v"})
    assert pods.get("ns", a["metadata"]["name"])["metadata"]["annotations"] == {"k": "v"}
    assert pods.delete("ns", a["metadata"]["name"])
    assert [e for e, _ in events.seen] == ["ADDED", "ADDED", "MODIFIED", "MODIFIED", "DELETED"]


def test_a_pod_is_deleted_only_under_the_uid_given() -> None:
    pods = MemoryPods()
    pod = pods.create("ns", {"metadata": {"name": "p"}})
    assert not pods.delete("ns", "p", uid="another")
    assert pods.get("ns", "p") is not None
    assert pods.delete("ns", "p", uid=pod["metadata"]["uid"]) and pods.get("ns", "p") is None
