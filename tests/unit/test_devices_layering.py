"""The device-claim core stays pure: no Kubernetes client, SQL, API layer or journal (STYLE §2).

The planner and replay evaluate selectors and allocate devices; both must run without
the Kubernetes client, so `kruntimes.devices` parses quantities itself (and
tests/unit/test_devices_inventory.py checks it agrees with the API layer's parser).
"""

import subprocess
import sys

import pytest

FORBIDDEN = ("kubernetes", "sqlalchemy", "kruntimes.api", "kruntimes.journal", "kruntimes.cli", "kruntimes.scheduler")


@pytest.mark.parametrize("module", [
    "kruntimes.devices.allocation", "kruntimes.devices.cel_engine", "kruntimes.devices.cel_rules",
    "kruntimes.devices.claims", "kruntimes.devices.inventory_codec", "kruntimes.devices.runtime_spec", "kruntimes.devices.usage", "kruntimes.devices.results", "kruntimes.devices.admission",
], ids=lambda m: f"{m} imports no adapter")
def test_the_device_core_imports_no_adapter(module: str) -> None:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)) == []
