"""`kruntimes scheduler --journal-history` (env KRUNTIMES_JOURNAL_HISTORY) reaches the scheduler's
settings, inline unless asked; a value that is neither inline nor follow stops the scheduler at start."""

from __future__ import annotations

import pytest

from kruntimes.cli import main as cli_main
from kruntimes.cli import scheduler_cmd
from kruntimes.cluster.settings import ClusterSettings
from kruntimes.scheduler.config import ConfigError

ENV = "KRUNTIMES_JOURNAL_HISTORY"


def journal_history(argv: list[str]) -> str:
    """The setting the scheduler runs with, parsed as the process parses its args and env."""
    args = cli_main.build_parser().parse_args(["scheduler", *argv])
    return scheduler_cmd.settings_from(args).journal_history


@pytest.mark.parametrize(("env", "argv", "expected"), [
    (None, [], "inline"),
    ("", [], "inline"),  # an empty variable is an unset one
    (None, ["--journal-history", "follow"], "follow"),
    ("follow", [], "follow"),
    ("follow", ["--journal-history", "inline"], "inline"),  # the flag wins
])
def test_the_history_mode_comes_from_the_flag_then_the_environment_and_is_inline_by_default(
        env: str | None, argv: list[str], expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    assert journal_history(argv) == expected


def test_an_unknown_flag_value_is_refused_naming_the_flag_and_the_choices(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        journal_history(["--journal-history", "later"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--journal-history: invalid choice: 'later'" in err and "'inline', 'follow'" in err


def test_an_unknown_environment_value_is_one_line_and_exit_code_2_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # argparse checks a flag against its choices, never a default taken from the environment:
    # the settings refuse it.
    monkeypatch.setenv(ENV, "Follow")
    assert cli_main.main(["scheduler", "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kruntimes scheduler: journal history must be inline or follow (got 'Follow')"]


def test_the_settings_refuse_an_unknown_mode_and_default_to_inline() -> None:
    assert ClusterSettings().journal_history == "inline"
    assert ClusterSettings(journal_history="follow").journal_history == "follow"
    with pytest.raises(ConfigError, match=r"journal history must be inline or follow \(got 'later'\)"):
        ClusterSettings(journal_history="later")
