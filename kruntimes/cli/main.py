"""The `kruntimes` command: one entry point, one sub-command module each.

A command imports only what it uses. The sub-command modules pull in heavy libraries
(the Kubernetes client, SQLAlchemy and Alembic, rich, pydantic), so the entry point
imports none of them up front: `kruntimes --help` lists the commands from the table
below, and a command line imports the one module it names. ``build_parser()`` with no
command still registers every module, for tests that parse deployment manifests.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kruntimes import __version__

# Command name -> (module that registers and runs it, the one line `kruntimes --help` shows).
# tests/unit/test_cli_startup.py fails when a line here and the module's own help differ.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("kruntimes.cli.demo_cmd", "run a generated workload through the whole system (no cluster needed)"),
    "simulate": ("kruntimes.cli.simulate_cmd", "where would these Runs go? (no cluster needed)"),
    "history": ("kruntimes.cli.history_cmd", "placement history from the journal: runs, pods, cycles"),
    "journal": ("kruntimes.cli.journal_cmd",
                "maintain the journal (prune old records, rebuild or index the history tables)"),
    "db": ("kruntimes.cli.db_cmd", "migrate the journal database schema"),
    "crds": ("kruntimes.cli.crds_cmd", "print the Run and Runtime CustomResourceDefinitions"),
    "replay": ("kruntimes.cli.replay_cmd", "re-run recorded cycles from the journal: verify, explain, what-if"),
    "scheduler": ("kruntimes.cli.scheduler_cmd", "run the live scheduler against a Kubernetes API"),
    "controller": ("kruntimes.cli.controller_cmd", "run the Runtime controller against a Kubernetes API"),
    "runtimed": ("kruntimes.cli.runtimed_cmd", "run the agent of one Runtime Pod: admit, execute and end its Runs"),
    "runtime-server": ("kruntimes.cli.runtime_server_cmd",
                       "execute a Runtime Pod's Runs for its runtimed (no API credential)"),
    "release": ("kruntimes.cli.release_cmd",
                "release a function Run (its runtimed stops it and frees its capacity)"),
    "ui": ("kruntimes.cli.ui_cmd", "a read-only web view of the journal: timelines, Runs, replay, what-if"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command`` only that command's module is imported, the others listed."""
    parser = argparse.ArgumentParser(prog="kruntimes", description="Schedule Runs on pools of Runtime Pods.")
    parser.add_argument("--version", action="version", version=f"kruntimes {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, summary) in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The sub-command a command line names: its first word, when that is a known command.

    The top-level options (--help, --version) take no value, so the first word that is
    not an option is the command.
    """
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in COMMANDS else ""


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(command_named(words)).parse_args(words)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
