"""The `kruntimes` command: one entry point, one sub-command module each."""

from __future__ import annotations

import argparse
import sys

from kruntimes import __version__
from kruntimes.cli import crds_cmd, db_cmd, demo_cmd, history_cmd, journal_cmd, replay_cmd, simulate_cmd
from kruntimes.cli import controller_cmd, release_cmd, runtimed_cmd, scheduler_cmd, ui_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kruntimes", description="Schedule Runs on pools of Runtime Pods.")
    parser.add_argument("--version", action="version", version=f"kruntimes {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_cmd.register(sub)
    simulate_cmd.register(sub)
    history_cmd.register(sub)
    journal_cmd.register(sub)
    db_cmd.register(sub)
    crds_cmd.register(sub)
    replay_cmd.register(sub)
    scheduler_cmd.register(sub)
    controller_cmd.register(sub)
    runtimed_cmd.register(sub)
    release_cmd.register(sub)
    ui_cmd.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
