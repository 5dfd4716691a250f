"""The Runtime Pod the controller makes from the example, judged by a real kube-apiserver (SPEC §4.1, §4.2).

Its shape carries the Runtime Server split: no token mounted automatically, the
projected pod-bound token in runtimed's container only, the Runs' runtime container
beside it and the socket volume both share. The schema checks of tests/unit read it
against the client's models; here the server itself (with its ServiceAccount admission
plugin) takes it, as a dry run: nothing runs without a kubelet.
"""

from __future__ import annotations

import json
import uuid

from kruntimes.controller import reconcile, tenancy
from kruntimes.controller.reading import runtime_view
from tests.realkube.controlplane import ControlPlane
from tests.realkube.test_deploy_apply import DEPLOY, apply, kubectl
from tests.unit.manifests import examples


def test_the_pod_the_controller_makes_from_the_example_is_accepted_by_the_server(real_server: ControlPlane) -> None:
    namespace = f"team-{uuid.uuid4().hex[:6]}"
    kubectl(real_server, "create", "namespace", namespace)
    apply(real_server, "-n", namespace, "-f", str(DEPLOY / "examples" / "runtimed-serviceaccount.yaml"))
    [runtime] = [e for e in examples() if e["kind"] == "Runtime"]
    view = runtime_view({**runtime, "metadata": {**runtime["metadata"], "namespace": namespace, "uid": "rt-1"}})
    assert view.capacity is not None
    body = reconcile.pod_body(view, view.capacity, reconcile.PodDefaults())
    body["metadata"].pop("ownerReferences")  # its Runtime does not exist here
    stored = json.loads(kubectl(real_server, "create", "--dry-run=server", "-o", "json", "-f", "-",
                                stdin=json.dumps(body)))
    spec = stored["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["shareProcessNamespace"] is False
    mounting = {c["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])
                if m["mountPath"] == tenancy.TOKEN_DIR}
    assert mounting == {reconcile.RUNTIMED_CONTAINER}  # the ServiceAccount plugin added none elsewhere
