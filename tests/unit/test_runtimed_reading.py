"""runtimed reads requests and capacity exactly as the scheduler does (SPEC §2.1-§2.3, §4.1)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from kruntimes.runtimed.admission import Capacity
from kruntimes.runtimed.reading import NOT_A_RUNTIME_POD, assigned_run, execution_mode, pod_capacity


def pod(annotations: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p",
                         "labels": {"kruntimes.io/runtime": "rt"} if labels is None else labels,
                         "annotations": annotations}}


def test_a_pod_without_a_runs_annotation_gets_the_default_runs_capacity() -> None:
    assert pod_capacity(pod({"kruntimes.io/capacity.example.com/gpu": "1"}), 2) == \
        Capacity((("example.com/gpu", 1), ("runs", 2)))


def test_a_declared_zero_capacity_is_kept_so_it_admits_nothing() -> None:
    assert pod_capacity(pod({"kruntimes.io/capacity.runs": "0"})) == Capacity((("runs", 0),))


def test_a_malformed_capacity_annotation_is_a_problem_not_a_guess() -> None:
    capacity = pod_capacity(pod({"kruntimes.io/capacity.runs": "1.5"}))
    assert capacity.amounts == () and capacity.problem


def test_a_pod_without_the_runtime_label_declares_no_capacity() -> None:
    assert pod_capacity(pod({"kruntimes.io/capacity.runs": "4"}, labels={})) == Capacity(problem=NOT_A_RUNTIME_POD)


def test_a_run_is_read_with_its_default_runs_request_assignment_and_assignment_time() -> None:
    obj = {"metadata": {"name": "r", "namespace": "ns", "uid": "uid-r", "resourceVersion": "7"},
           "spec": {"runtime": "rt", "resources": {"requests": {"example.com/gpu": "1"}}},
           "status": {"phase": "Scheduled", "assignment": {"podName": "p", "podUID": "uid-p"},
                      "conditions": [{"type": "Scheduled", "status": "True",
                                      "lastTransitionTime": "2026-12-01T10:00:00Z"}]}}
    run, info = assigned_run(obj)
    assert run.requests == (("example.com/gpu", 1), ("runs", 1))
    assert (run.pod_name, run.pod_uid, run.resource_version) == ("p", "uid-p", "7")
    assert run.assigned_at == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert info.phase == "Scheduled" and info.problems == ()


def test_a_run_with_a_malformed_request_still_counts_its_runs_default_and_carries_the_problem() -> None:
    obj = {"metadata": {"name": "r", "namespace": "ns", "uid": "uid-r"},
           "spec": {"runtime": "rt", "resources": {"requests": {"example.com/gpu": "0.5"}}},
           "status": {"phase": "Scheduled", "assignment": {"podName": "p"}}}
    run, info = assigned_run(obj)
    assert run.requests == (("runs", 1),) and run.assigned_at is None and run.pod_uid is None
    assert info.problems


def test_the_execution_mode_is_a_task_argv_or_a_function_with_optional_args() -> None:
    def spec(mode: Any) -> dict[str, Any]:
        return {"metadata": {"name": "r"}, "spec": {"runtime": "rt", "mode": mode}}

    assert execution_mode(spec({"task": {"args": ["python", "train.py"]}})) == ("task", ["python", "train.py"])
    assert execution_mode(spec({"function": {"args": ["serve"]}})) == ("function", ["serve"])
    assert execution_mode(spec({"function": {}})) == ("function", None)
    assert execution_mode(spec(None)) is None
    assert execution_mode(spec({"task": {"args": []}})) is None
