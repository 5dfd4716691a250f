"""Replay works from the journal alone: importing it never loads the Kubernetes client (SPEC §6, STYLE §2).

Checked in a fresh interpreter per module, so that nothing imported by another test
can hide a leak. Replay depends on the planner core and the journal only: not on the
API layer (which parses quantities with the Kubernetes client), the in-memory API or
the demo either.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = ("kubernetes", "kruntimes.api", "kruntimes.memory", "kruntimes.demo")
MODULES = ("replay", "replay.source", "replay.rebuild", "replay.engine", "replay.verify", "replay.explain",
           "replay.whatif", "kruntimes.cli.replay_cmd", "kruntimes.cli.verify_report")


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", MODULES, ids=lambda m: f"{m} loads no Kubernetes client, API layer or fake API")
def test_replay_imports_neither_the_kubernetes_client_nor_the_api_layer(module: str) -> None:
    loaded = _loaded_after_import(module)
    assert module in loaded
    assert sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)) == []


def test_the_check_would_see_a_leak() -> None:
    assert "kubernetes" in {m.split(".")[0] for m in _loaded_after_import("kruntimes.api.quantity")}
