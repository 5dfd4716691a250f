"""A Runtime Pod's two sides: runtimed with the API token, the runtime container with the Runs (SPEC §4.1, §4.2).

Amended 2026-12-04 ("Runs are tenants, not runtimed"): a Run's process must hold no
API credential and must not reach runtimed. So every Runtime Pod the controller makes:

- mounts no token automatically (`automountServiceAccountToken: false`); runtimed's
  container alone mounts a projected one (the same token, CA and namespace the kubelet
  would mount, at the path the client looks in; still bound to the pod, so the
  admission policies' pod-name claim is there);
- has a `runtime` container (the template's own, or one added with runtimed's image,
  which then must hold what the Runs execute) running `kruntimes runtime-server`, the
  Runs' working directories on `kruntimes-work`, and no token;
- shares the Runtime Server's socket between the two on `kruntimes-runtime-server`;
- never shares one process namespace (`shareProcessNamespace: false`), so no Run sees
  runtimed's processes, let alone signals them.

Pure: a pod spec in, a pod spec out (the caller's copy is changed in place and returned).
"""

from __future__ import annotations

from typing import Any

RUNTIME_CONTAINER = "runtime"
SERVER_VOLUME = "kruntimes-runtime-server"
SERVER_DIR = "/var/run/kruntimes"
SERVER_SOCKET = f"{SERVER_DIR}/runtime.sock"
SERVER_ENV = "KRUNTIMES_RUNTIME_SERVER"
TOKEN_VOLUME = "kruntimes-api-token"
#: Where the Kubernetes client's in-cluster configuration reads the token, CA and namespace.
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 3607  # what the kubelet's own projection asks for; it renews the token at 80 %


def token_volume() -> dict[str, Any]:
    """The projected token the kubelet would mount into every container, for runtimed's alone."""
    return {"name": TOKEN_VOLUME, "projected": {"defaultMode": 0o444, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}


def split(spec: dict[str, Any], *, runtimed: str, work_volume: str, work_dir: str) -> dict[str, Any]:
    """Put runtimed and the Runtime Server in their containers; the token in runtimed's only."""
    spec["automountServiceAccountToken"] = False
    spec["shareProcessNamespace"] = False
    containers = spec["containers"]
    agent = next(c for c in containers if c.get("name") == runtimed)
    runtime = next((c for c in containers if c.get("name") == RUNTIME_CONTAINER), None)
    if runtime is None:
        runtime = {"name": RUNTIME_CONTAINER, "image": agent.get("image")}
        containers.append(runtime)
    runtime.setdefault("command", ["kruntimes", "runtime-server"])
    ours = {work_volume, SERVER_VOLUME, TOKEN_VOLUME}
    init = spec.get("initContainers")
    for container in containers + (init if isinstance(init, list) else []):
        # No container but runtimed's may mount the token, or anything at its path. Init containers are
        # not judged by `template.problem`: a shape this cannot read is left for the API server to refuse.
        mounts = container.get("volumeMounts") if isinstance(container, dict) else None
        if isinstance(mounts, list):
            container["volumeMounts"] = [m for m in mounts if not isinstance(m, dict) or
                                         (m.get("name") != TOKEN_VOLUME and m.get("mountPath") != TOKEN_DIR)]
    _set_env(runtime, {SERVER_ENV: SERVER_SOCKET, "KRUNTIMES_WORK_DIR": work_dir})
    runtime["volumeMounts"] = [m for m in runtime.get("volumeMounts") or [] if m.get("name") not in ours] + [
        {"name": work_volume, "mountPath": work_dir}, {"name": SERVER_VOLUME, "mountPath": SERVER_DIR}]
    # runtimed no longer executes anything: the Runs' directories are the runtime container's alone.
    agent["env"] = [e for e in agent.get("env") or [] if e.get("name") != "KRUNTIMES_WORK_DIR"]
    _set_env(agent, {SERVER_ENV: SERVER_SOCKET})
    agent["volumeMounts"] = [m for m in agent.get("volumeMounts") or [] if m.get("name") not in ours] + [
        {"name": SERVER_VOLUME, "mountPath": SERVER_DIR},
        {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}]
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") not in (SERVER_VOLUME, TOKEN_VOLUME)]
    spec["volumes"] = volumes + [{"name": SERVER_VOLUME, "emptyDir": {}}, token_volume()]
    return spec


def _set_env(container: dict[str, Any], values: dict[str, str]) -> None:
    env = [e for e in container.get("env") or [] if e.get("name") not in values]
    container["env"] = env + [{"name": name, "value": value} for name, value in values.items()]
