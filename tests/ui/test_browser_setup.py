"""Without Chromium the browser tests skip and say why; under CI=true they fail instead."""

from __future__ import annotations

import pytest

from tests.ui import browser


def _without_chromium(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)


def test_a_missing_chromium_skips_with_the_command_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_chromium(monkeypatch)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium chromium-driver"):
        next(browser.chrome())


def test_a_missing_chromium_fails_the_tests_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_chromium(monkeypatch)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        next(browser.chrome())
