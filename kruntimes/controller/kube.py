"""The controller's API seam (`apply.ControllerApi`) over the real Kubernetes client (SPEC §4.2).

Each call maps the client's errors onto the two the apply step understands:
`status.Conflict` (the object changed: leave it to the next pass) and
`status.ApiError` (anything else: the Runtime is requeued with backoff), both via the
cluster adapter's own error types so that the client's exception is the cause.
Patches are JSON merge patches, said explicitly: the client would otherwise pick the
first JSON content type it knows, which for custom objects is a JSON Patch.
A pod is created from plain JSON, never through the client's pod model: the model
refuses fields it does not know (a typo, or a pod field newer than the client), where
the API server keeps the fields it knows and drops the others with a warning
(`fieldValidation=Warn`), so the server, not the client, judges a Runtime's template.
A refusal (400, 403, 422) is `errors.Refused`, which the Runtime's status reports.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Mapping

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes.api import models
from kruntimes.cluster import decode, errors
from kruntimes.cluster.sources import RUNS, RUNTIMES
from kruntimes.controller.reconcile import RuntimeSpecView

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
REFUSALS = (400, 403, 422)


class KubernetesControllerApi:
    """Implements `kruntimes.controller.apply.ControllerApi`; thread-safe like the client."""

    def __init__(self, api: kubernetes.client.ApiClient, *, timeout: float = 30.0,
                 fence: Callable[[], bool] = lambda: True) -> None:
        self._core = kubernetes.client.CoreV1Api(api)
        self._plain = PlainJsonPods(api)
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self._timeout = timeout
        self._fence = fence

    def _may_write(self, what: str) -> None:
        # A leader past its renew deadline may still have a pass in flight: its writes stop here.
        if not self._fence():
            raise errors.NotLeader(f"not {what}: this controller does not hold the leader lease")

    def create_pod(self, namespace: str, body: dict[str, Any]) -> str:
        self._may_write("creating a pod")
        pod = _call(f"creating a pod in {namespace}", self._plain.create_namespaced_pod, namespace, body,
                    timeout=self._timeout)
        return str((pod.get("metadata") or {}).get("name") or "")

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._may_write(f"deleting pod {name}")
        options = {"preconditions": {"uid": uid}}
        try:
            _call(f"deleting pod {namespace}/{name}", self._core.delete_namespaced_pod, name, namespace,
                  body=options, _request_timeout=self._timeout)
        except errors.BindConflict:
            pass  # gone already, or the name now belongs to another pod: nothing of ours to delete

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._may_write(f"patching pod {name}")
        _call(f"patching pod {namespace}/{name}", self._core.patch_namespaced_pod, name, namespace, patch,
              _content_type=MERGE_PATCH, _request_timeout=self._timeout)

    def pod_present(self, namespace: str, name: str, uid: str | None) -> bool:
        try:
            pod = _call(f"reading pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace,
                        _request_timeout=self._timeout)
        except errors.BindConflict:  # 404
            return False
        return uid is None or pod.metadata.uid == uid

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = _call(f"reading Run {namespace}/{name}", self._custom.get_namespaced_custom_object,
                             models.GROUP, models.VERSION, namespace, RUNS, name, _request_timeout=self._timeout,
                             _preload_content=False)
        except errors.BindConflict:
            return None
        # Read as the informers read (`decode`): a Run nested too deeply for the client's
        # parser keeps its metadata and status, which is all a RuntimePodLost write needs.
        return dict(decode.response_value(response))

    def write_run_status(self, run: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = run["metadata"]
        self._may_write(f"writing the status of Run {meta['name']}")
        body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Run",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid"),
                             "resourceVersion": meta.get("resourceVersion")},
                "status": status}
        decode.drain(_call(  # the answer is the whole Run, however deep (`decode`): not decoded
            f"writing the status of Run {meta['namespace']}/{meta['name']}",
            self._custom.replace_namespaced_custom_object_status, models.GROUP, models.VERSION,
            meta["namespace"], RUNS, meta["name"], body, _request_timeout=self._timeout, _preload_content=False))

    def write_runtime_status(self, runtime: RuntimeSpecView, status: dict[str, Any]) -> None:
        self._may_write(f"writing the status of Runtime {runtime.name}")
        decode.drain(_call(  # the answer is the whole Runtime, however deep (`decode`): not decoded
            f"writing the status of Runtime {runtime.namespace}/{runtime.name}",
            self._custom.patch_namespaced_custom_object_status, models.GROUP, models.VERSION, runtime.namespace,
            RUNTIMES, runtime.name, {"status": status}, _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            _preload_content=False))


class PlainJsonPods:
    """`CoreV1Api.create_namespaced_pod` with the body sent as it is, for the server to judge."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self._api = api

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """The created pod as a dict; the server's warnings (fields it dropped) are logged."""
        method, url, headers, data, _ = self._api.param_serialize(
            method="POST", resource_path="/api/v1/namespaces/{namespace}/pods", path_params={"namespace": namespace},
            query_params=[("fieldValidation", "Warn")], body=body, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json", "Content-Type": "application/json"})
        response = self._api.call_api(method, url, headers, data, _request_timeout=timeout)
        response.read()
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        for warning in response.headers.getlist("Warning"):
            log.warning("the API server warns about a pod created in %s: %s", namespace, warning)
        return dict(json.loads(response.data))


def _call(what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return method(*args, **kwargs)
    except ApiException as exc:
        code = errors.status_code(exc)
        if code in (404, 409):
            raise errors.BindConflict(f"{what}: {errors.describe(exc)}") from exc
        if code in REFUSALS:
            raise errors.Refused(f"{what} was refused: {errors.describe(exc)}", code) from exc
        raise errors.ApiError(f"{what} failed: {errors.describe(exc)}", code) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.ApiError(f"{what} failed: {errors.describe(exc)}") from exc
