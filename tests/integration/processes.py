"""What the process tests of runtimed and the controller share: a kubeconfig for the emulator (or the cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.emulator.fixtures import real_cluster_kubeconfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kubeconfig(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The real cluster's kubeconfig, or one pointing at the emulator."""
    path = real_cluster_kubeconfig()
    if path is not None:
        return path
    host = request.getfixturevalue("emulator").host
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": host}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "test"}}]}))
    return str(config)
