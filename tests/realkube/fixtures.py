"""The real-server fixture: one control plane for the whole test session.

Another test package gets it with, in its ``conftest.py``::

    from tests.realkube.fixtures import real_server  # noqa: F401

- ``real_server``: a started `ControlPlane` (with the controller manager, as a cluster
  has one) shared by every test of the session. Tests create their own namespaces.
- ``team``: a fresh user namespace of ``deployed`` with runtimed's ServiceAccount and
  RoleBinding (``deploy/examples/runtimed-serviceaccount.yaml``), as a `Cluster` seen
  through the admin client; deleted afterwards.
- ``deployed``: the same server with ``deploy/crds`` and the dev overlay applied for
  real, as deploy/README.md tells a user to: the CRDs, the ServiceAccounts and RBAC of
  the scheduler and the controller, runtimed's ClusterRole and both admission policies
  of runtimed, and the scheduler's term fence bound to the Lease
  ``kruntimes-system/kruntimes-scheduler``.

It skips, saying why, where the binaries are not built (no Go, or `testbin/build.sh`
never ran); in CI (``CI=true``) it fails instead, because CI builds them first
(`.ci/realkube`) and a real-server test that skips there has silently stopped testing.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterator

import kubernetes.client
import pytest

from kruntimes.api import models
from tests.emulator import manifests
from tests.integration.cluster import Cluster
from tests.realkube import binaries, controlplane, identities


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def bin_dir_or_skip() -> Path:
    try:
        return binaries.bin_dir()
    except binaries.BinariesMissing as exc:
        if in_ci():
            pytest.fail(f"real-server tests must run in CI: {exc}", pytrace=False)
        pytest.skip(f"real-server test: {exc}")


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    bin_dir = bin_dir_or_skip()
    plane = controlplane.ControlPlane(tmp_path_factory.mktemp("realkube"), with_controller_manager=True,
                                      bin_dir=bin_dir)
    with plane:
        yield plane


DEPLOY = binaries.ROOT / "deploy"


def kubectl(plane: controlplane.ControlPlane, *args: str, stdin: str | None = None) -> str:
    """kubectl's output; it must succeed and the server must answer no warning."""
    done = subprocess.run([*plane.kubectl(), *args], capture_output=True, text=True, timeout=120, input=stdin)
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stderr}"
    assert "Warning:" not in done.stderr, f"kubectl {' '.join(args)}:\n{done.stderr}"
    return done.stdout


def apply(plane: controlplane.ControlPlane, *target: str, dry_run: bool = False) -> str:
    return kubectl(plane, "apply", "--server-side", "--field-manager=kruntimes-tests",
                   *(["--dry-run=server"] if dry_run else []), *target)


@pytest.fixture(scope="session")
def deployed(real_server: controlplane.ControlPlane) -> controlplane.ControlPlane:
    """The CRDs and the dev overlay, applied for real, as deploy/README.md tells a user to."""
    apply(real_server, "-k", str(DEPLOY / "crds"))
    kubectl(real_server, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/runs.kruntimes.io", "crd/runtimes.kruntimes.io")
    apply(real_server, "-k", str(DEPLOY / "overlays/dev"))
    return real_server


@pytest.fixture
def team(deployed: controlplane.ControlPlane) -> Iterator[Cluster]:
    name = f"team-{uuid.uuid4().hex[:6]}"
    with identities.admin(deployed) as api:
        core = kubernetes.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name}})
        try:
            apply(deployed, "-n", name, "-f", str(DEPLOY / "examples" / "runtimed-serviceaccount.yaml"))
            yield Cluster(api, name)
        finally:
            core.delete_namespace(name)


def runtime_pod(team: Cluster, name: str = "python-0", runs: int = 1, discover: str | None = None) -> Any:
    """A Runtime Pod (Ready) running as runtimed's ServiceAccount, as the controller makes them; the V1Pod.

    With `discover`, its runtimed container has it as `KRUNTIMES_DEVICE_DISCOVER`, as the controller
    gives it when the Runtime's devices publisher is Runtimed (SPEC §7.1)."""
    annotations = {models.CAPACITY_ANNOTATION: f'{{"runs":"{runs}"}}'}
    body = manifests.pod(name, {models.RUNTIME_LABEL: "python"}, annotations=annotations)
    body["spec"]["serviceAccountName"] = identities.RUNTIMED
    if discover is not None:
        body["spec"]["containers"].append({"name": "runtimed", "image": "busybox", "env": [
            {"name": "KRUNTIMES_DEVICE_DISCOVER", "value": discover}]})
    team.core.create_namespaced_pod(team.namespace, body)
    team.set_ready(name, True)
    return team.core.read_namespaced_pod(name, team.namespace)
