"""`kruntimes simulate -f FILE.yaml [-f ...] [--now TIME] [--json]`."""

from __future__ import annotations

import argparse
import sys

from kruntimes import bounded_yaml, wire
from kruntimes.cli import output
from kruntimes.cli.output import Column, Listing
from kruntimes.devices import results
from kruntimes.simulate import InputError, load_documents, simulate


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="where would these Runs go? (no cluster needed)",
                       description="Schedule the Pending Runs of YAML files once, in creation order, "
                                   "against the Runtime Pods in the same files.")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="YAML file with v1 Pods, kruntimes.io/v1alpha1 Runs, Runtimes (each expanded into its "
                        "replicas pods with their capacity and devices) and RuntimeDeviceClasses ('-' for stdin); "
                        "repeatable")
    p.add_argument("--now", help="judge runtimed heartbeats at this time: RFC 3339 (no zone means UTC) "
                                 "or an age such as 2h (default: now)")
    output.add_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        now = wire.parse_when(args.now or "now", what="--now")
    except wire.NotATime as exc:
        print(f"kruntimes simulate: {exc}", file=sys.stderr)
        return 2
    try:
        sources = [("<stdin>", bounded_yaml.read_text("<stdin>", sys.stdin.buffer)) if name == "-"
                   else (name, bounded_yaml.read_text(name)) for name in args.filename]
        placements = simulate(load_documents(sources), now)
    except (InputError, bounded_yaml.Unreadable) as exc:
        print(f"kruntimes simulate: {exc}", file=sys.stderr)
        return 2
    if output.structured(args):
        output.print_document(args, [p.as_json() for p in placements])  # a list in input order
        return 0
    with_devices = any(p.devices is not None for p in placements)  # a column only where devices were claimed
    columns = [Column("NAMESPACE"), Column("RUN", name=True), Column("PHASE"), Column("POD", name=True),
               *([Column("DEVICES", wrap=True)] if with_devices else []), Column("REASON", wrap=True)]
    table = Listing(columns, title=f"placements at {now.isoformat()}")
    for p in placements:
        shown = [results.line(p.devices) if p.devices else "-"]
        table.add(p.namespace, p.name, p.phase, p.pod or "-", *(shown if with_devices else []), p.reason or "")
    output.render(table, args)
    return 0

