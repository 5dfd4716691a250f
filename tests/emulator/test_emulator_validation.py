"""What the API server refuses before it stores anything, pinned against its validation rules.

- OpenAPI ``format: date-time`` in a CRD schema: a malformed timestamp is 422.
- The status subresource: a status write is judged on the status it writes (the rest
  is the stored object; validation ratcheting), a main-resource write on the rest.
- Custom resources do not allow unconditional updates: a PUT without
  ``metadata.resourceVersion`` is 422 "must be specified for an update".
- Leases (``ValidateLeaseSpec`` and the typed decoder): ``leaseDurationSeconds`` greater
  than 0 (422), integers where integers belong and MicroTimes (RFC 3339, six fractional
  digits) for ``acquireTime``/``renewTime`` - a body that does not decode is 400.
- Annotation keys are qualified names (``ValidateAnnotations``): at most one ``/``, a name
  part of at most 63 characters; ``kruntimes.io/capacity.example.com/gpu`` is 422.
- A namespaced create in a namespace that does not exist: 404 NotFound for the namespace.
- A client that leaves before its error answer is sent: recorded, never raised.
- JSON as Go decodes it: nested up to 10,000 levels; invalid UTF-8 and lone
  surrogates become U+FFFD. Annotations: 256 KiB in total (keys and values, bytes).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import ApiClient

from tests.emulator.manifests import GROUP, VERSION, lease, namespace, pod, run
from tests.emulator.server import Emulator
from tests.emulator.test_emulator import expect_api_error

ARGS = (GROUP, VERSION)


@pytest.mark.parametrize("value, accepted", [
    ("2026-12-01T15:04:05Z", True), ("2026-12-01T15:04:05.123456+01:00", True),
    ("yesterday", False), ("2026-12-01 15:04:05", False), ("2026-13-01T15:04:05Z", False),
    ("2026-12-01T15:04:60Z", False),
], ids=["utc", "fraction and offset", "words", "no T", "month 13", "second 60"])
def test_a_malformed_date_time_in_a_status_is_422(custom: client.CustomObjectsApi, kube_namespace: str,
                                                  value: str, accepted: bool) -> None:
    custom.create_namespaced_custom_object(*ARGS, kube_namespace, "runs", run("r"))
    patch = {"status": {"phase": "Succeeded", "completionTime": value}}
    if accepted:
        custom.patch_namespaced_custom_object_status(*ARGS, kube_namespace, "runs", "r", patch)
    else:
        status = expect_api_error(422, custom.patch_namespaced_custom_object_status, *ARGS, kube_namespace,
                                  "runs", "r", patch)
        assert "status.completionTime" in status["message"]


def test_a_status_write_is_judged_on_the_status_only(emulator: Emulator, kube_namespace: str) -> None:
    custom = client.CustomObjectsApi(emulator.api_client())
    custom.create_namespaced_custom_object(*ARGS, kube_namespace, "runs", run("r"))
    with emulator.store.lock:  # as if admitted under an older, looser CRD
        stored = emulator.store._objects[("runs.kruntimes.io", kube_namespace, "r")]
        stored["spec"]["affinity"] = {"runAffinity": {"preferred": [
            {"weight": 101, "term": {"topologyKey": "kruntimes.io/runtime-pod"}}]}}
    written = custom.patch_namespaced_custom_object_status(*ARGS, kube_namespace, "runs", "r",
                                                           {"status": {"phase": "Pending"}})
    assert written["status"]["phase"] == "Pending"
    status = expect_api_error(422, custom.patch_namespaced_custom_object, *ARGS, kube_namespace, "runs", "r",
                              {"spec": {"workspace": "w"}})
    assert "spec.affinity" in status["message"]


@pytest.mark.parametrize("key, accepted", [
    ("kruntimes.io/capacity.runs", True),
    ("kruntimes.io/capacity", True),
    ("kruntimes.io/capacity.example.com/gpu", False),
    ("kruntimes.io/" + "a" * 64, False),
    ("Kruntimes.IO/Capacity", True),
], ids=["a per-resource key without a prefix", "the json key", "a per-resource key with a prefix",
        "a name part of 64 characters", "upper case, checked lowercased"])
def test_an_annotation_key_that_is_not_a_qualified_name_is_422_on_create_and_on_patch(
        core: client.CoreV1Api, kube_namespace: str, key: str, accepted: bool) -> None:
    with_key = pod("with-key")
    with_key["metadata"]["annotations"] = {key: "1"}
    core.create_namespaced_pod(kube_namespace, pod("patched"))
    patch = {"metadata": {"annotations": {key: "1"}}}
    if accepted:
        core.create_namespaced_pod(kube_namespace, with_key)
        core.patch_namespaced_pod("patched", kube_namespace, patch)
    else:
        for call, args in ((core.create_namespaced_pod, (kube_namespace, with_key)),
                           (core.patch_namespaced_pod, ("patched", kube_namespace, patch))):
            status = expect_api_error(422, call, *args)
            assert "metadata.annotations" in status["message"]


@pytest.mark.parametrize("subresource", [False, True], ids=["object", "status"])
def test_a_custom_resource_update_without_a_resource_version_is_422(
        custom: client.CustomObjectsApi, kube_namespace: str, subresource: bool) -> None:
    created = custom.create_namespaced_custom_object(*ARGS, kube_namespace, "runs", run("r"))
    body = {**created, "metadata": {"name": "r"}, "status": {"phase": "Pending"}}
    replace = custom.replace_namespaced_custom_object_status if subresource else \
        custom.replace_namespaced_custom_object
    status = expect_api_error(422, replace, *ARGS, kube_namespace, "runs", "r", body)
    assert "metadata.resourceVersion: Invalid value: 0: must be specified for an update" in status["message"]


@pytest.mark.parametrize("spec", [{"leaseDurationSeconds": 0}, {"leaseTransitions": -1}],
                         ids=["zero duration", "negative transitions"])
def test_a_lease_with_an_out_of_range_field_is_422(kube_api: ApiClient, kube_namespace: str,
                                                   spec: dict[str, Any]) -> None:
    body = lease("l", "me")
    body["spec"].update(spec)
    expect_api_error(422, client.CoordinationV1Api(kube_api).create_namespaced_lease, kube_namespace, body)


@pytest.mark.parametrize("spec", [
    {"leaseDurationSeconds": "15"}, {"renewTime": "2026-12-01T15:04:05Z"}, {"acquireTime": "soon"},
], ids=["a string duration", "a time without microseconds", "words"])
def test_a_lease_that_does_not_decode_is_400(emulator: Emulator, spec: dict[str, Any]) -> None:
    # Sent raw: the typed client refuses some of these bodies before they leave.
    client.CoreV1Api(emulator.api_client()).create_namespace(namespace("ns"))
    body = lease("l", "me")
    body["spec"].update(spec)
    answer = urllib3.PoolManager().request("POST", f"{emulator.host}/apis/coordination.k8s.io/v1/namespaces/ns/leases",
                                           body=json.dumps(body), headers={"Content-Type": "application/json"})
    assert answer.status == 400 and json.loads(answer.data)["reason"] == "BadRequest"


def test_a_lease_with_micro_times_is_accepted(kube_api: ApiClient, kube_namespace: str) -> None:
    body = lease("l", "me")
    # Whole seconds are avoided on purpose: the client re-serialises a time it parsed, and
    # drops a zero fraction ("...:05+00:00"), which a real server cannot parse either.
    body["spec"].update({"acquireTime": "2026-12-01T15:04:05.000001Z", "renewTime": "2026-12-01T15:04:06.123456Z"})
    client.CoordinationV1Api(kube_api).create_namespaced_lease(kube_namespace, body)


def test_a_create_in_a_missing_namespace_is_404_for_the_namespace(kube_api: ApiClient) -> None:
    status = expect_api_error(404, client.CoreV1Api(kube_api).create_namespaced_pod, "kr-test-missing", pod("a"))
    assert (status["details"]["name"], status["details"]["kind"]) == ("kr-test-missing", "namespaces")


def test_an_error_answer_to_a_client_that_left_is_recorded_not_raised(emulator: Emulator) -> None:
    client.CoreV1Api(emulator.api_client()).create_namespace(namespace("ns"))
    emulator.set_latency(0.3)  # the client is gone before the 404 goes out
    host, port = emulator.host.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(b"GET /api/v1/namespaces/ns/pods/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    deadline = time.monotonic() + 5
    while not emulator.unanswered and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emulator.unanswered == [("GET", "/api/v1/namespaces/ns/pods/nope", 404)]


STATUS_BODIES: list[Any] = [
    {"phase": "Scheduled", "assignment": {"podName": "p", "podUID": "u"}},
    {"phase": "Sleeping", "assignment": {"podUID": "u"}, "unknown": 1},
    {"conditions": [{"type": "Scheduled", "status": "Maybe", "lastTransitionTime": "yesterday", "extra": True},
                    {"status": "True"}], "completionTime": "2026-12-01T00:00:00Z", "released": "yes"},
    {"phase": None, "assignment": None},
    None,
    "not an object",
    [],
]


@pytest.mark.parametrize("status", STATUS_BODIES, ids=range(len(STATUS_BODIES)))
def test_a_status_write_is_judged_exactly_as_the_whole_object_would_be_on_its_status_part(status: Any) -> None:
    # The emulator admits only the status part of a /status write (the rest is the stored
    # object); what it prunes, defaults and refuses must be what the whole-object
    # admission says about that part.
    from copy import deepcopy

    from tests.emulator import schema

    runs = schema.load()[(GROUP, "runs")]
    stored = {**run("r"), "status": {"phase": "Pending"}}
    runs.admit(stored, None)  # as stored: admitted when it was written
    whole, part = {**deepcopy(stored), "status": deepcopy(status)}, {**deepcopy(stored), "status": deepcopy(status)}
    pruned, problems = runs.admit(whole, stored)
    pruned_part, problems_part = runs.admit_part(part, stored, "status")
    assert part == whole
    assert [p for p in pruned if p.startswith("status")] == pruned_part
    assert [p for p in problems if p.startswith("status")] == problems_part


@pytest.mark.parametrize("depth, status", [
    (2_000, 201), (10_000 - 4, 201), (10_001, 400),
], ids=["2,000 levels is stored", "10,000 levels in all is stored", "10,001 levels is 400, as Go's decoder says"])
def test_a_body_is_taken_as_deep_as_kubernetes_takes_it(emulator: Emulator, depth: int, status: int) -> None:
    # Kubernetes decodes JSON nested up to 10,000 levels (issue 23 item 6); the Run
    # itself adds 4 levels (the body, spec, mode and the innermost {}).
    client.CoreV1Api(emulator.api_client()).create_namespace(namespace("ns"))
    nested = '{"a":' * depth + "{}" + "}" * depth
    body = ('{"apiVersion":"%s/%s","kind":"Run","metadata":{"name":"deep"},'
            '"spec":{"runtime":"python","mode":{"function":%s}}}' % (GROUP, VERSION, nested))
    http, runs = urllib3.PoolManager(), f"{emulator.host}/apis/{GROUP}/{VERSION}/namespaces/ns/runs"
    answer = http.request("POST", runs, body=body.encode(), headers={"Content-Type": "application/json"})
    assert answer.status == status, answer.data[:200]
    if status == 201:
        for url in (runs, f"{runs}/deep"):  # served back whole, in a list and alone
            served = http.request("GET", url).data
            assert served.count(b'{"a": ') == depth and served.endswith(b"}" * depth + b"}}}" + (b"]}" if url == runs else b""))
    else:
        assert b"exceeded max depth" in answer.data
    assert emulator.errors == []


@pytest.mark.parametrize("extra, status", [(0, 201), (1, 422)],
                         ids=["256 KiB of annotations is stored", "one byte more is 422"])
def test_annotations_are_capped_at_256_kib_in_total_like_the_api_server(
        emulator: Emulator, extra: int, status: int) -> None:
    # Keys and values together, in bytes (apimachinery's TotalAnnotationSizeLimitB), on
    # a create and on a patch alike (issue 23 item 11).
    core = client.CoreV1Api(emulator.api_client())
    core.create_namespace(namespace("ns"))
    values = {"a": "x" * (128 * 1024 - 1), "b": "é" * (64 * 1024 - 1) + "z"}  # 1 + 131071 + 1 + 131071 bytes
    values["b"] += "y" * extra
    http, pods = urllib3.PoolManager(), f"{emulator.host}/api/v1/namespaces/ns/pods"
    answer = http.request("POST", pods, body=json.dumps(pod("p", annotations=values)),
                          headers={"Content-Type": "application/json"})
    assert answer.status == status
    if status == 422:
        assert json.loads(answer.data)["message"].endswith(
            "metadata.annotations: Too long: may not be more than 262144 bytes")
        core.create_namespaced_pod("ns", pod("p"))
        patched = http.request("PATCH", f"{pods}/p", body=json.dumps({"metadata": {"annotations": values}}),
                               headers={"Content-Type": "application/merge-patch+json"})
        assert patched.status == 422


def test_lone_surrogates_and_invalid_utf8_become_u_fffd_as_go_decodes_them(emulator: Emulator) -> None:
    client.CoreV1Api(emulator.api_client()).create_namespace(namespace("ns"))
    # Sent raw: a lone "\ud800" escape, a valid pair (an emoji) and a byte that is not UTF-8.
    body = (b'{"metadata":{"name":"p","annotations":{"lone":"a\\ud800b","pair":"\\ud83d\\ude00",'
            b'"bytes":"c\xffd"}},"spec":{"containers":[{"name":"c","image":"i"}]}}')
    http, pods = urllib3.PoolManager(), f"{emulator.host}/api/v1/namespaces/ns/pods"
    answer = http.request("POST", pods, body=body, headers={"Content-Type": "application/json"})
    assert answer.status == 201, answer.data
    stored = json.loads(http.request("GET", f"{pods}/p").data)["metadata"]["annotations"]
    assert stored == {"lone": "a\ufffdb", "pair": "\U0001f600", "bytes": "c\ufffdd"}
