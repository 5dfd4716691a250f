"""`kruntimes.wire`, the ground floor: every layer may import it, and it imports no layer.

Label, annotation and other `kruntimes.io/` names used to be spelled in two places with
nothing checking they agreed (`api.fields`, `controller.reconcile`); the terminal phases
in five. Now a module that names one defines it here, and these tests keep it so.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from kruntimes import wire

ROOT = Path(__file__).resolve().parents[2]


def test_the_ground_floor_loads_no_part_of_kruntimes_and_no_library() -> None:
    code = "import sys; before = set(sys.modules); import kruntimes.wire; print('\\n'.join(set(sys.modules) - before))"
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    assert sorted(m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names) == ["kruntimes", "kruntimes.wire"]


def _names_defined(path: Path) -> set[str]:
    """The `kruntimes.io/...` strings a module assigns to a module-level name."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) and node.value.value.startswith("kruntimes.io/"):
            found.add(node.value.value)
    return found


def test_every_kruntimes_io_name_is_defined_on_the_ground_floor_only() -> None:
    elsewhere = {}
    for path in sorted([*ROOT.glob("kruntimes/**/*.py"), *ROOT.glob("replay/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        names = _names_defined(path)
        if names and rel != "kruntimes/wire.py":
            elsewhere[rel] = sorted(names)
    assert elsewhere == {}


def test_the_phases_split_into_pending_active_and_terminal() -> None:
    assert set(wire.PHASES) == {wire.PENDING} | wire.ACTIVE_PHASES | set(wire.TERMINAL_PHASES)
    assert wire.ACTIVE_PHASES.isdisjoint(wire.TERMINAL_PHASES)


def test_an_object_time_is_written_as_rfc_3339_in_utc_and_read_back_strictly() -> None:
    when = wire.parse_rfc3339("2026-12-05T10:00:00.25Z")
    assert when is not None and wire.rfc3339(when) == "2026-12-05T10:00:00.250000Z"
    assert wire.parse_rfc3339("2026-12-05T10:00Z") is None  # a form the API server never writes
    assert wire.parse_rfc3339("2026-12-05T10:00:00") is None  # no zone
