"""The resources the scheduler watches, and the client call that lists or watches each.

Runs and Runtimes are custom objects (`CustomObjectsApi`); Runtime Pods are core v1
pods carrying the `kruntimes.io/runtime` label (`CoreV1Api`, label selector on the
server, so the scheduler never sees other pods). Each source is watched in one
namespace or in all of them; RuntimeDeviceClasses (SPEC §7.2) are cluster-scoped. Every call is made with `_preload_content=False`: the
informer reads the JSON itself, as plain dicts (what `api.ingest` takes), instead of
letting the client build model objects it would only turn back into dicts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import kubernetes.client

from kruntimes.api import models

RUNS, RUNTIMES = "runs", "runtimes"
DEVICE_CLASSES = "runtimedeviceclasses"  # cluster-scoped (SPEC §7.2)


@dataclass(frozen=True)
class Source:
    """One watched resource: its kind and the list call (which watches with `watch=True`)."""

    kind: str  # "Run", "Runtime" or "Pod"
    call: Callable[..., Any]

    def request(self, **kwargs: Any) -> Any:
        """The raw `urllib3` response of a list or watch request."""
        return self.call(_preload_content=False, **kwargs)


def runs(api: kubernetes.client.ApiClient, namespace: str | None) -> Source:
    return Source("Run", _custom(api, namespace, RUNS))


def runtimes(api: kubernetes.client.ApiClient, namespace: str | None) -> Source:
    return Source("Runtime", _custom(api, namespace, RUNTIMES))


def runtime_pods(api: kubernetes.client.ApiClient, namespace: str | None) -> Source:
    core = kubernetes.client.CoreV1Api(api)
    if namespace is None:
        call = functools.partial(core.list_pod_for_all_namespaces, label_selector=models.RUNTIME_LABEL)
    else:
        call = functools.partial(core.list_namespaced_pod, namespace, label_selector=models.RUNTIME_LABEL)
    return Source("Pod", call)


def device_classes(api: kubernetes.client.ApiClient) -> Source:
    """RuntimeDeviceClasses are cluster-scoped: listed and watched cluster-wide, whatever the namespace setting."""
    custom = kubernetes.client.CustomObjectsApi(api)
    return Source("RuntimeDeviceClass",
                  functools.partial(custom.list_cluster_custom_object, models.GROUP, models.VERSION, DEVICE_CLASSES))


def _custom(api: kubernetes.client.ApiClient, namespace: str | None, plural: str) -> Callable[..., Any]:
    custom = kubernetes.client.CustomObjectsApi(api)
    if namespace is None:
        return functools.partial(custom.list_cluster_custom_object, models.GROUP, models.VERSION, plural)
    return functools.partial(custom.list_namespaced_custom_object, models.GROUP, models.VERSION, namespace, plural)
