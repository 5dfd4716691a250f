"""Objects → projections: malformed input is carried as a problem, never raised."""

import pytest

from kruntimes.api.ingest import MALFORMED_CAPACITY, pod_info, run_info

POD_LABELS = {"kruntimes.io/runtime": "py"}


def _pod(annotations: dict, **meta) -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": "p", "uid": "u", "labels": POD_LABELS, "annotations": annotations, **meta},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def test_capacity_annotations_are_read_in_full() -> None:
    info = pod_info(_pod({"kruntimes.io/capacity.runs": "4", "kruntimes.io/capacity.example.com/gpu": "1"}))
    assert info is not None and info.capacity == (("example.com/gpu", 1), ("runs", 4))
    assert info.capacity_problem is None and info.ready


@pytest.mark.parametrize("value", ["500m", "-1", "abc", "1.5"],
                         ids=lambda v: f"capacity {v!r} makes the pod unschedulable with a bounded reason")
def test_a_malformed_capacity_annotation_is_a_bounded_reason(value: str) -> None:
    info = pod_info(_pod({"kruntimes.io/capacity.runs": value}))
    assert info is not None and info.capacity_problem == MALFORMED_CAPACITY


def test_a_pod_without_the_runtime_label_is_not_a_runtime_pod() -> None:
    assert pod_info({"metadata": {"name": "p"}}) is None


@pytest.mark.parametrize("heartbeat, parsed", [
    ("2026-11-29T12:00:00Z", True), ("not a time", False), ("2026-11-29T12:00:00", False), (None, False),
], ids=["an RFC 3339 heartbeat is read", "an unparsable heartbeat is missing",
        "a heartbeat without a zone is missing", "no heartbeat is missing"])
def test_heartbeat_parsing(heartbeat: str | None, parsed: bool) -> None:
    annotations = {} if heartbeat is None else {"kruntimes.io/runtimed-heartbeat": heartbeat}
    info = pod_info(_pod(annotations))
    assert info is not None and (info.heartbeat is not None) == parsed


def test_deletion_timestamp_marks_a_pod_terminating() -> None:
    info = pod_info(_pod({}, deletionTimestamp="2026-11-29T12:00:00Z"))
    assert info is not None and info.terminating


def test_a_run_without_resources_requests_one_run() -> None:
    info = run_info({"metadata": {"name": "r", "uid": "u"}, "spec": {"runtime": "py"}})
    assert info.requests == (("runs", 1),) and info.problems == ()


@pytest.mark.parametrize("spec, field", [
    ({"runtime": "py", "resources": {"requests": {"runs": "500m"}}}, 'spec.resources.requests["runs"]'),
    ({"runtime": "py", "resources": {"requests": {"bad name!": "1"}}}, "bad name!"),
    ({}, "spec.runtime"),
    ({"runtime": "py", "mode": {"stream": {}}}, "spec.mode"),
], ids=["a fractional request is a problem naming the field", "a bad resource name is a problem",
        "a missing runtime is a problem", "an unknown mode is a problem"])
def test_malformed_runs_carry_an_actionable_problem(spec: dict, field: str) -> None:  # type: ignore[type-arg]
    info = run_info({"metadata": {"name": "r", "uid": "u"}, "spec": spec})
    assert len(info.problems) == 1 and field in info.problems[0]


def test_an_old_active_run_with_a_malformed_entry_counts_only_its_valid_requests_and_runs_default() -> None:
    info = run_info({"metadata": {"name": "r", "uid": "u"},
                     "spec": {"runtime": "py", "resources": {"requests": {"gpu": "0.5", "lic": "2"}}},
                     "status": {"phase": "Running", "assignment": {"podName": "p", "podUID": "pu"}}})
    assert info.active and info.problems
    assert info.requests == (("lic", 2), ("runs", 1))


def test_status_is_read_even_when_the_spec_is_invalid() -> None:
    info = run_info({"metadata": {"name": "r", "uid": "u"}, "spec": {"runtime": 3},
                     "status": {"phase": "Scheduled", "assignment": {"podName": "p"}}})
    assert info.phase == "Scheduled" and info.pod_name == "p" and info.pod_uid is None


def test_the_observed_pending_message_is_read_from_the_scheduled_condition() -> None:
    info = run_info({"metadata": {"name": "r", "uid": "u"}, "spec": {"runtime": "py"},
                     "status": {"phase": "Pending", "conditions": [
                         {"type": "Scheduled", "status": "False", "message": "0/1 runtime pods available"}]}})
    assert info.pending_message == "0/1 runtime pods available"
