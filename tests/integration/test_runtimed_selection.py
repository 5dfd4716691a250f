"""runtimed lists only its own pod's Runs where the server can select them (SPEC §4.1).

The committed Run CRD declares `.status.assignment.podName` in `selectableFields`
(served from Kubernetes 1.31); an API server without it answers such a field selector
with 400 ("field label not supported"), and runtimed then watches the namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import kubernetes.client
import pytest
import yaml

from kruntimes.runtimed.agent import Agent, Settings
from tests.emulator import schema
from tests.emulator.server import Emulator


def _agent(emulator: Emulator, tmp_path: Path, wanted: bool | None = None) -> Agent:
    api = emulator.api_client()
    core = kubernetes.client.CoreV1Api(api)
    if not core.list_namespace(field_selector="metadata.name=ns").items:
        core.create_namespace({"metadata": {"name": "ns"}})
    return Agent(api, Settings(pod_name="p", pod_namespace="ns", pod_uid="u", work_dir=tmp_path,
                               run_field_selector=wanted))


def _without_selectable_fields(tmp_path: Path) -> Path:
    directory = tmp_path / "crds"
    directory.mkdir()
    for source in schema.DEFAULT_CRD_DIR.glob("*.yaml"):
        crd = yaml.safe_load(source.read_text())
        if crd.get("kind") == "CustomResourceDefinition":
            for version in crd["spec"]["versions"]:
                version.pop("selectableFields", None)
        (directory / source.name).write_text(yaml.safe_dump(crd))
    return directory


def test_runtimed_asks_for_its_pods_runs_only_when_the_crd_makes_them_selectable(
        emulator: Emulator, tmp_path: Path) -> None:
    assert _agent(emulator, tmp_path)._select_runs() == {"field_selector": "status.assignment.podName=p"}


def test_runtimed_watches_the_namespace_when_the_server_cannot_select_by_assigned_pod(
        emulator_factory: Callable[..., Emulator], tmp_path: Path) -> None:
    emulator = emulator_factory(crd_dir=_without_selectable_fields(tmp_path))
    assert _agent(emulator, tmp_path)._select_runs() == {}
    with pytest.raises(Exception, match="could not list its Runs"):
        _agent(emulator, tmp_path, wanted=True)._select_runs()
