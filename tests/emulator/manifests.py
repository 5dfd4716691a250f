"""Minimal request bodies for the resources the emulator serves, shared by tests.

Valid on a real cluster too: pods name a ``schedulerName`` that no scheduler serves, so
no kubelet ever runs them or overwrites the status a test writes.
"""

from __future__ import annotations

from typing import Any

GROUP, VERSION = "kruntimes.io", "v1alpha1"
UNSERVED_SCHEDULER = "kruntimes-test-none"


def namespace(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


def pod(name: str, labels: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}, **metadata},
            "spec": {"schedulerName": UNSERVED_SCHEDULER,
                     "containers": [{"name": "runtime", "image": "busybox"}]}}


def bound_pod(name: str, node: str = "node-1", **metadata: Any) -> dict[str, Any]:
    """A pod already bound to ``node``: the API server deletes it gracefully (a kubelet would stop it)."""
    body = pod(name, **metadata)
    body["spec"]["nodeName"] = node
    return body


def run(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": {"name": name},
            "spec": {"runtime": "python", **spec}}


def lease(name: str, holder: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}
