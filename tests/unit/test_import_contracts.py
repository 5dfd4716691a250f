"""The architecture's import contracts hold (pyproject.toml's [tool.importlinter]; STYLE §2).

As kopf does: layers from the command line down to the ground floor (`kruntimes.wire`),
no import circles among the modules of any package, replay, the journal, the planner and
the web view never import the Kubernetes client, and the web view never imports the CLI.
`test_layering.py` checks which libraries a command loads; this checks which way imports go.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = ("from importlinter.cli import lint_imports; "
        "raise SystemExit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def test_every_import_contract_is_kept() -> None:
    done = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
