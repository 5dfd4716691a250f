"""Where the binaries are not built, a real-server test skips saying how to build them,
except in CI, where it fails: CI builds them first, so a skip there would hide a broken build."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realkube import binaries
from tests.realkube.fixtures import bin_dir_or_skip


@pytest.mark.parametrize("ci, outcome", [
    ("", pytest.skip.Exception), ("false", pytest.skip.Exception), ("true", pytest.fail.Exception),
], ids=["outside CI it skips", "CI=false skips", "in CI it fails"])
def test_a_machine_without_the_binaries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str,
                                        outcome: type[BaseException]) -> None:
    monkeypatch.delenv(binaries.BIN_ENV, raising=False)
    monkeypatch.setenv("KRUNTIMES_TESTBIN_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as raised:
        bin_dir_or_skip()
    assert "testbin/build.sh" in str(raised.value) or "Go is not installed" in str(raised.value)


def test_a_bin_directory_lacking_a_component_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "kubectl").touch()
    monkeypatch.setenv(binaries.BIN_ENV, str(tmp_path))
    with pytest.raises(binaries.BinariesMissing, match="lacks etcd, kube-apiserver"):
        binaries.bin_dir()
