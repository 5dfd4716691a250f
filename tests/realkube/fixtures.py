"""The real-server fixture: one control plane for the whole test session.

Another test package gets it with, in its ``conftest.py``::

    from tests.realkube.fixtures import real_server  # noqa: F401

- ``real_server``: a started `ControlPlane` (with the controller manager, as a cluster
  has one) shared by every test of the session. Tests create their own namespaces.

It skips, saying why, where the binaries are not built (no Go, or `testbin/build.sh`
never ran); in CI (``CI=true``) it fails instead, because CI builds them first
(`.ci/realkube`) and a real-server test that skips there has silently stopped testing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.realkube import binaries, controlplane


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def bin_dir_or_skip() -> Path:
    try:
        return binaries.bin_dir()
    except binaries.BinariesMissing as exc:
        if in_ci():
            pytest.fail(f"real-server tests must run in CI: {exc}", pytrace=False)
        pytest.skip(f"real-server test: {exc}")


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    bin_dir = bin_dir_or_skip()
    plane = controlplane.ControlPlane(tmp_path_factory.mktemp("realkube"), with_controller_manager=True,
                                      bin_dir=bin_dir)
    with plane:
        yield plane
