"""Where the control plane's binaries are: built by `testbin/build.sh`, found without building.

A cold build compiles a large part of Kubernetes (many minutes on two cores), so the tests
never start one by surprise: they ask the build script whether the binaries are there
(``--print``), and CI builds them first (`.ci/realkube`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "testbin" / "build.sh"
# A bin directory of binaries built elsewhere, used as it is.
BIN_ENV = "KRUNTIMES_TESTBIN"
NO_GO = 3  # build.sh's exit status when Go is missing
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BinariesMissing(Exception):
    """The control plane is not built on this machine; the message says how to build it."""


def bin_dir() -> Path:
    """The directory holding every component, or `BinariesMissing` saying what to do."""
    given = os.environ.get(BIN_ENV)
    if given:
        path = Path(given)
        missing = [c for c in COMPONENTS if not (path / c).exists()]
        if missing:
            raise BinariesMissing(f"{BIN_ENV}={given} lacks {', '.join(missing)}")
        return path
    found = subprocess.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True, text=True)
    if found.returncode == NO_GO:
        raise BinariesMissing("Go is not installed, so the control plane cannot be built "
                              "(testbin/build.sh needs Go 1.26 and the Go module proxy)")
    if found.returncode != 0:
        raise BinariesMissing("the control plane is not built on this machine: run testbin/build.sh "
                              "once (it compiles Kubernetes from source; see docs/real-server.md)")
    return Path(found.stdout.strip())
