"""`kruntimes simulate -f FILE.yaml [-f ...] [--now TIME] [--json]`."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kruntimes import bounded_yaml
from kruntimes.cli import times
from kruntimes.simulate import InputError, load_documents, simulate


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="where would these Runs go? (no cluster needed)",
                       description="Schedule the Pending Runs of YAML files once, in creation order, "
                                   "against the Runtime Pods in the same files.")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="YAML file with v1 Pods and kruntimes.io/v1alpha1 Runs ('-' for stdin); repeatable")
    p.add_argument("--now", help="judge runtimed heartbeats at this time: RFC 3339 (no zone means UTC) "
                                 "or an age such as 2h (default: now)")
    p.add_argument("--json", action="store_true", help="print a JSON list in input order")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        now = times.parse(args.now or "now", what="--now")
    except times.NotATime as exc:
        print(f"kruntimes simulate: {exc}", file=sys.stderr)
        return 2
    try:
        sources = [("<stdin>", bounded_yaml.read_text("<stdin>", sys.stdin.buffer)) if name == "-"
                   else (name, bounded_yaml.read_text(name)) for name in args.filename]
        placements = simulate(load_documents(sources), now)
    except (InputError, bounded_yaml.Unreadable) as exc:
        print(f"kruntimes simulate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([p.as_json() for p in placements], indent=2))
        return 0
    table = Table(title=f"placements at {now.isoformat()}")
    for column in ("NAMESPACE", "RUN", "PHASE", "POD", "REASON"):
        table.add_column(column)
    for p in placements:
        # Text, not markup: names and reasons are the user's, and "[/b]" in them is not a style.
        table.add_row(*(Text(cell) for cell in (p.namespace, p.name, p.phase, p.pod or "-", p.reason or "")))
    Console().print(table)
    return 0

