"""Every listing command's -o json and -o yaml: the same document, named fields only."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kruntimes.cli import main as cli
from tests.journal.history_journal import NS, Generated

pytest_plugins = ("tests.journal.history_fixtures",)  # the generated journal's fixtures


def _positional(value: Any, path: str = "") -> list[str]:
    """Where a document holds a list of lists (a positional record) instead of objects."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _positional(v, f"{path}.{k}")]
    if isinstance(value, list):
        here = [path] if any(isinstance(v, list) for v in value) else []
        return here + [p for v in value for p in _positional(v, f"{path}[]")]
    return []


def _commands(generated: Generated) -> list[list[str]]:
    run, pod = sorted(generated.truth.placed.items())[0]
    return [["history", "run", f"{NS}/{run}"], ["history", "pod", f"{NS}/{pod}"], ["history", "cycles"],
            ["replay", "cycle", "--run", f"{NS}/{run}", "--limit", "1"]]


def test_json_and_yaml_listings_carry_the_same_named_document(history_url: str, generated: Generated,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    for argv in _commands(generated):
        assert cli.main([*argv, "--journal", history_url, "-o", "json"]) == 0, argv
        as_json = json.loads(capsys.readouterr().out)
        assert cli.main([*argv, "--journal", history_url, "-o", "yaml"]) == 0, argv
        as_yaml = yaml.safe_load(capsys.readouterr().out)
        assert as_yaml == as_json, argv
        assert _positional(as_json) == [], argv


def test_scores_print_with_their_legend_and_no_headers_drops_it(history_url: str, generated: Generated,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    run = sorted(generated.truth.placed)[0]
    assert cli.main(["history", "run", f"{NS}/{run}", "--journal", history_url]) == 0
    out = capsys.readouterr().out
    assert "(usage+request)/capacity" in out and "Σ" in out
    assert cli.main(["history", "run", f"{NS}/{run}", "--journal", history_url, "--no-headers"]) == 0
    bare = capsys.readouterr().out
    assert "(usage+request)/capacity" not in bare and "RANK" not in bare and "Σ" in bare
