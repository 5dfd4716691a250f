"""The entry point lists commands without importing them; the list must say what each module says."""

import argparse

from kruntimes.cli import main


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: str(choice.help) for choice in sub._choices_actions}


def test_the_command_list_says_what_each_command_module_registers() -> None:
    assert _summaries(main.build_parser("")) == _summaries(main.build_parser())


def test_a_command_line_builds_only_the_command_it_names() -> None:
    assert main.command_named(["replay", "verify", "--journal", "x"]) == "replay"
    assert main.command_named(["--help"]) == ""
    assert main.command_named(["no-such-command"]) == ""


def test_every_command_module_is_in_the_command_table() -> None:
    from pathlib import Path

    modules = {f"kruntimes.cli.{p.stem}" for p in (Path(main.__file__).parent).glob("*_cmd.py")}
    assert modules == {module for module, _ in main.COMMANDS.values()}
