"""The web view reads the journal and replays it; it never loads the Kubernetes client (STYLE §2).

Checked in a fresh interpreter per module, as for replay (tests/replay/test_layering.py):
the view may use the journal, replay and the planner core, never the cluster adapter,
the API layer, the in-memory API or the demo.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = ("kubernetes", "kruntimes.api", "kruntimes.cluster", "kruntimes.memory", "kruntimes.demo")
MODULES = ("kruntimes.ui.server", "kruntimes.ui.queries", "kruntimes.cli.ui_cmd")


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", MODULES, ids=lambda m: f"{m} loads no Kubernetes client or cluster adapter")
def test_the_view_imports_no_kubernetes_client(module: str) -> None:
    loaded = _loaded_after_import(module)
    assert module in loaded
    assert sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)) == []
