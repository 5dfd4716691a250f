"""`kruntimes runtimed` reads its settings from the pod's environment; a bad value is a usage error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("variable, value, flag", [
    ("KRUNTIMES_HEARTBEAT_PERIOD", "ten", "--heartbeat-period"),
])
def test_a_malformed_environment_setting_is_a_usage_error_naming_its_flag_not_a_traceback(
        variable: str, value: str, flag: str) -> None:
    env = {**os.environ, variable: value}
    done = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", "runtimed", "--pod-name", "p"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"argument {flag}: invalid" in done.stderr and repr(value) in done.stderr


@pytest.mark.parametrize("command", ["runtimed", "scheduler"])
def test_the_old_per_component_default_runs_capacity_is_refused_saying_where_it_went(command: str) -> None:
    # SPEC §2.3 (amended 2026-12-04): one cluster setting, the ConfigMap kruntimes-settings.
    env = {**os.environ, "KRUNTIMES_DEFAULT_RUNS_CAPACITY": "2"}
    done = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", command], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "ConfigMap kruntimes-settings" in done.stderr
