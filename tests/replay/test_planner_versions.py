"""A journal an older planner wrote still replays identically; one a newer planner wrote is named as such.

Planner version 2 (issue 27) names the short resources in Pending messages. A journal
written before it (version 1, its configuration record says so) must still verify:
the planner keeps version 1's messages for a configuration of version 1. A version
this kruntimes does not know is a planner-version difference, never reported as damage.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kruntimes.cli import replay_cmd
from kruntimes.scheduler.config import PLANNER_VERSION, SchedulerConfig
from tests.replay import journals


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kruntimes")
    replay_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *argv])
    return int(args.run(args))


def _unschedulable(url: str) -> list[dict[str, object]]:
    cycles = [journals.payload_of(url, lsn) for lsn in journals.lsns_of(url, "cycle")]
    return [c for c in cycles if c["status"] == "unschedulable"]


@pytest.mark.parametrize("version", ["1", PLANNER_VERSION])
def test_a_journal_of_each_known_planner_version_replays_identically(
        version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path, checkpoint_every=10,
                                config=SchedulerConfig(planner_version=version))
    pending = _unschedulable(written.url)
    assert pending and all(c["planner_version"] == version for c in pending)
    named = any("(" in str(c["message"]) for c in pending)
    assert named is (version != "1")  # version 1 only counted the reasons
    assert _run("verify", "--journal", written.url) == 0
    assert f"{written.cycles} identical, 0 diverged" in capsys.readouterr().out


def test_a_journal_of_a_planner_version_this_kruntimes_does_not_know_is_not_called_damage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path, checkpoint_every=10)
    incarnation = journals.lsns_of(written.url, "incarnation")[0]

    def newer(payload: dict[str, object]) -> None:
        config = dict(payload["config"])  # type: ignore[call-overload]
        config["planner_version"] = "9"
        payload["config"], payload["planner_version"] = config, "9"
        payload["config_hash"] = SchedulerConfig.from_dict(config).digest()

    journals.rewrite(written.url, incarnation, newer)
    code = _run("verify", "--journal", written.url)
    out, err = capsys.readouterr()
    assert "planner version '9' is not one this kruntimes knows" in out + err
    assert code != 3 and "corrupt" not in (out + err).lower()
