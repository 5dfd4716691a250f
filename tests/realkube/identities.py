"""Each component with its own identity: ServiceAccount tokens from TokenRequest, and clients that use them.

On a cluster the scheduler and the Runtime controller run as the ServiceAccounts of
``deploy/base`` and every runtimed as ``kruntimes-runtimed`` of its namespace, with a
token bound to its pod. The real-server tests do the same instead of using the admin
credential: they ask the API server for a token (TokenRequest, as the kubelet does for
a projected volume), optionally bound to a pod (the server then puts the pod's name
and UID into the request's user extra, which runtimed's admission policies read), and
build a kubeconfig and a client from it. What RBAC and the policies refuse, the server
refuses here too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config

from tests.realkube.controlplane import ControlPlane

SYSTEM_NAMESPACE = "kruntimes-system"
SCHEDULER = (SYSTEM_NAMESPACE, "kruntimes-scheduler")
CONTROLLER = (SYSTEM_NAMESPACE, "kruntimes-controller")
RUNTIMED = "kruntimes-runtimed"  # in each namespace with Runtimes (deploy/examples)
TOKEN_SECONDS = 3600


def admin(plane: ControlPlane) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))


def token(plane: ControlPlane, namespace: str, service_account: str, *, pod: Any = None) -> str:
    """A token of ``namespace/service_account`` from TokenRequest; bound to ``pod`` (a V1Pod) when given."""
    bound = None
    if pod is not None:
        bound = kubernetes.client.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod.metadata.name,
                                                         uid=pod.metadata.uid)
    request = kubernetes.client.AuthenticationV1TokenRequest(spec=kubernetes.client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=TOKEN_SECONDS, bound_object_ref=bound))
    with admin(plane) as api:
        answer = kubernetes.client.CoreV1Api(api).create_namespaced_service_account_token(
            service_account, namespace, request)
    return str(answer.status.token)


def kubeconfig(plane: ControlPlane, path: Path, bearer: str, *, server: str | None = None) -> Path:
    """A kubeconfig for ``bearer`` (to ``server``, default the API server itself), as a component reads one."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "component",
        "clusters": [{"name": "realkube", "cluster": {
            "server": server or plane.server,
            "certificate-authority": str(plane.directory / "certs" / "apiserver.crt")}}],
        "users": [{"name": "component", "user": {"token": bearer}}],
        "contexts": [{"name": "component", "context": {"cluster": "realkube", "user": "component"}}],
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def client(path: Path) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(path))


def component(plane: ControlPlane, directory: Path, name: str, namespace: str, account: str, *,
              pod: Any = None, server: str | None = None) -> kubernetes.client.ApiClient:
    """A client of ``namespace/account`` (its token bound to ``pod`` if given), via ``directory/name.kubeconfig``."""
    bearer = token(plane, namespace, account, pod=pod)
    return client(kubeconfig(plane, directory / f"{name}.kubeconfig", bearer, server=server))


def whoami(api: kubernetes.client.ApiClient) -> dict[str, Any]:
    """The user the server sees behind ``api``'s credential (SelfSubjectReview): name, groups, extra."""
    review = kubernetes.client.AuthenticationV1Api(api).create_self_subject_review(
        kubernetes.client.V1SelfSubjectReview())
    info = review.status.user_info
    return {"username": info.username, "groups": list(info.groups or []), "extra": dict(info.extra or {})}
