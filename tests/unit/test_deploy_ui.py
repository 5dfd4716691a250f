"""deploy/ui: `kruntimes ui` in a cluster, valid for the API server, reachable only through port-forward."""

from __future__ import annotations

import re

import pytest

from kruntimes.cli import main as cli
from kruntimes.ui import server
from tests.unit.manifests import K8S_VERSION, ROOT, assemble, container, env, find

OBJECTS = assemble(ROOT / "deploy" / "ui")


def test_every_manifest_passes_the_kubernetes_schema_strictly() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for obj in OBJECTS:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_view_runs_the_ui_command_on_loopback_with_the_read_only_url_from_a_secret() -> None:
    pod = find(OBJECTS, "Deployment", "kruntimes-ui")["spec"]["template"]["spec"]
    ui = container(pod, "ui")
    assert ui["command"] == ["kruntimes", "ui"] and not ui.get("args")  # the default --listen: 127.0.0.1
    assert cli.build_parser().parse_args(["ui"]).listen.startswith("127.0.0.1:")
    assert env(ui)["KRUNTIMES_JOURNAL_URL"]["secretKeyRef"] == {
        "name": "kruntimes-journal-readonly", "key": "url"}


def test_nothing_in_the_cluster_can_reach_it_and_it_holds_no_api_token() -> None:
    assert {o["kind"] for o in OBJECTS} == {"Deployment", "ServiceAccount"}  # no Service, no Ingress
    pod = find(OBJECTS, "Deployment", "kruntimes-ui")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert find(OBJECTS, "ServiceAccount", "kruntimes-ui")["automountServiceAccountToken"] is False
    assert container(pod, "ui")["securityContext"]["readOnlyRootFilesystem"] is True


def test_its_probes_ask_the_health_paths_the_view_answers_on_the_address_it_listens_on() -> None:
    pod = find(OBJECTS, "Deployment", "kruntimes-ui")["spec"]["template"]["spec"]
    ui = container(pod, "ui")
    listen = cli.build_parser().parse_args(ui["command"][1:]).listen
    asked = {}
    for probe in ("livenessProbe", "readinessProbe"):
        command = ui[probe]["exec"]["command"]
        assert command[:2] == ["python", "-c"]  # the image's interpreter: no curl in a slim image
        compile(command[2], probe, "exec")
        (url,) = re.findall(r"'(http://[^']+)'", command[2])
        assert url.startswith(f"http://{listen}/")  # loopback: the kubelet's httpGet could not reach it
        asked[probe] = url.removeprefix(f"http://{listen}")
    assert asked == {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    assert set(asked.values()) == set(server.HEALTH)
