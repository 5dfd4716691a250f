"""The architecture's boundaries, checked so they cannot rot (STYLE §2).

The planner core decides; it must not reach for the Kubernetes client, SQL or the
API layer. runtimed's admission guard and executor, and the Runtime controller's
reconcile step, are pure in the same way: adapters read API objects and write. Replay must work from the journal alone, so it never loads the client.
"""

import subprocess
import sys

import pytest

FORBIDDEN_FOR_CORE = ("kubernetes", "sqlalchemy", "kruntimes.api", "kruntimes.journal", "kruntimes.cli")


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", [
    "kruntimes.scheduler.loop", "kruntimes.scheduler.cache", "kruntimes.scheduler.framework",
    "kruntimes.scheduler.registry", "kruntimes.memory.api",
    "kruntimes.runtimed.admission", "kruntimes.runtimed.outcomes", "kruntimes.runtimed.executor",
    "kruntimes.controller.reconcile", "kruntimes.controller.apply",
], ids=lambda m: f"{m} imports no Kubernetes client, SQL, API layer or journal")
def test_the_planner_core_imports_no_adapter(module: str) -> None:
    loaded = _loaded_after_import(module)
    leaks = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_FOR_CORE))
    assert leaks == []


def test_the_api_layer_parses_quantities_with_the_kubernetes_client() -> None:
    assert "kubernetes.utils.quantity" in _loaded_after_import("kruntimes.api.quantity")
