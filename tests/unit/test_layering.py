"""The architecture's boundaries, checked so they cannot rot (STYLE §2).

The planner core decides; it must not reach for the Kubernetes client, SQL or the
API layer. runtimed's admission guard and executor, and the Runtime controller's
reconcile step, are pure in the same way: adapters read API objects and write. Replay must work from the journal alone, so it never loads the client.
"""

import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN_FOR_CORE = ("kubernetes", "sqlalchemy", "kruntimes.api", "kruntimes.journal", "kruntimes.cli")


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", [
    "kruntimes.scheduler.loop", "kruntimes.scheduler.binding", "kruntimes.scheduler.cache",
    "kruntimes.scheduler.interface", "kruntimes.scheduler.planner", "kruntimes.scheduler.registry", "kruntimes.memory.api",
    "kruntimes.runtimed.admission", "kruntimes.runtimed.outcomes", "kruntimes.runtimed.executor",
    "kruntimes.controller.reconcile", "kruntimes.controller.apply",
], ids=lambda m: f"{m} imports no Kubernetes client, SQL, API layer or journal")
def test_the_planner_core_imports_no_adapter(module: str) -> None:
    loaded = _loaded_after_import(module)
    leaks = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_FOR_CORE))
    assert leaks == []


def test_the_api_layer_parses_quantities_with_the_kubernetes_client() -> None:
    assert "kubernetes.utils.quantity" in _loaded_after_import("kruntimes.api.quantity")


# The console script, as `kruntimes` runs it: the entry point pyproject.toml names, called
# with a command line, then the modules that command line loaded. A command that fails
# on purpose (a journal that is not there) still parsed and dispatched, which is the point.
_AFTER_DISPATCH = """
import sys, tomllib
target = tomllib.load(open("pyproject.toml", "rb"))["project"]["scripts"]["kruntimes"]
module, _, function = target.partition(":")
main = getattr(__import__(module, fromlist=[function]), function)
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""

HEAVY = ("kubernetes", "sqlalchemy", "alembic", "rich", "pydantic", "prometheus_client", "replay")
MISSING_JOURNAL = "sqlite:////nonexistent/kruntimes-layering.db"


def _loaded_by_console_script(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _AFTER_DISPATCH, *argv], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    return set(done.stderr.split())


def _leaks(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden packages (not each of their modules) that ``loaded`` holds."""
    return sorted({f for f in forbidden for m in loaded if m == f or m.startswith(f + ".")})


@pytest.mark.parametrize("argv", [["--help"], ["--version"]], ids=" ".join)
def test_the_command_list_imports_no_library_any_command_uses(argv: list[str]) -> None:
    assert _leaks(_loaded_by_console_script(*argv), HEAVY) == []


@pytest.mark.parametrize("argv", [
    ["replay", "verify", "--journal", MISSING_JOURNAL],
    ["replay", "cycle", "--last", "--journal", MISSING_JOURNAL],
    ["history", "cycles", "--journal", MISSING_JOURNAL],
    ["journal", "prune", "--before", "1d", "--journal", MISSING_JOURNAL],
    ["journal", "index", "--interval", "1m", "--journal", MISSING_JOURNAL],
    ["db", "upgrade", "--help"],
], ids=lambda argv: f"kruntimes {' '.join(argv[:2])}")
def test_the_journal_commands_never_load_the_kubernetes_client(argv: list[str]) -> None:
    loaded = _loaded_by_console_script(*argv)
    assert "kruntimes.cli." + {"db": "db_cmd"}.get(argv[0], argv[0] + "_cmd") in loaded  # it did dispatch
    assert _leaks(loaded, ("kubernetes", "kruntimes.api", "kruntimes.cluster")) == []


@pytest.mark.parametrize("command", ["runtimed", "controller", "release"])
def test_the_commands_without_a_journal_never_load_sql(command: str) -> None:
    loaded = _loaded_by_console_script(command, "--help")
    assert f"kruntimes.cli.{command}_cmd" in loaded
    assert _leaks(loaded, ("sqlalchemy", "alembic")) == []


def test_history_and_journal_commands_do_not_load_alembic() -> None:
    assert _leaks(_loaded_by_console_script("history", "cycles", "--journal", MISSING_JOURNAL), ("alembic",)) == []


def test_the_runtime_server_holds_no_api_client() -> None:
    # It executes the Runs, which are tenants: nothing in its process may speak to the API (SPEC §4.1).
    loaded = _loaded_by_console_script("runtime-server", "--help")
    assert "kruntimes.cli.runtime_server_cmd" in loaded
    assert _leaks(loaded, ("kubernetes", "kruntimes.cluster", "sqlalchemy", "alembic")) == []
