"""`kruntimes history run|pod|cycles|held|waits|decisions|churn|conflicts`: what the scheduler saw and decided.

Each sub-command is one call into the journal's history layer (``kruntimes.journal.history``:
parameterized queries on the history tables, the very functions the web view calls)
printed as tables, or as ``-o json|yaml``; ``history_text`` says how the values read.
Nothing is found → a note on stderr and exit code 1; bad input or an unreachable
journal → one line and exit code 2 (``journal_args.guarded``). While the history tables trail the
records (a ``--journal-history follow`` scheduler), every command says so first, in one
line on stderr: stdout stays what scripts expect.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any

from kruntimes import scores
from kruntimes.cli import history_text as text
from kruntimes.cli import journal_args as ja
from kruntimes.cli import output
from kruntimes.cli.output import Column, Listing
from kruntimes.devices import results
from kruntimes.journal.history import cycles, indexer, pods, runs, stored, waits
from kruntimes.journal.store import backends


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("history", help="placement history from the journal: runs, pods, cycles",
                       description="Read the audit journal: why a Run went where it went, what the scheduler "
                                   "saw of a Runtime Pod, which cycles ran when.")
    leaves = p.add_subparsers(dest="history_command", required=True, metavar="WHAT")
    common = argparse.ArgumentParser(add_help=False)
    ja.add_url_option(common)
    output.add_options(common)

    r = leaves.add_parser("run", parents=[common], help="a Run's cycles, its placement and why, its binds")
    r.add_argument("key", metavar="NS/NAME", help="the Run, as namespace/name")
    r.add_argument("--limit", type=int, default=None, metavar="N", help="only the newest N cycles")
    r.set_defaults(run=run_run)

    q = leaves.add_parser("pod", parents=[common], help="what the scheduler saw of a Runtime Pod, and its placements")
    q.add_argument("key", metavar="NS/NAME", help="the Runtime Pod, as namespace/name")
    q.add_argument("--at", metavar="TIME", help="only the latest observation at or before TIME")
    q.add_argument("--limit", type=int, default=20, metavar="N", help="newest N observations and placements (20)")
    q.set_defaults(run=run_pod)

    c = leaves.add_parser("cycles", parents=[common], help="scheduling cycles in a time window",
                          description="TIME is RFC 3339 (no zone means UTC) or an age such as 30m, 2h, 1d.")
    c.add_argument("--since", metavar="TIME", help="decided at or after TIME")
    c.add_argument("--until", metavar="TIME", help="decided before TIME")
    c.add_argument("--outcome", choices=cycles.OUTCOMES, help="only cycles with this result")
    c.add_argument("--limit", type=int, default=50, metavar="N", help="the newest N matching cycles (50)")
    c.set_defaults(run=run_cycles)

    h = leaves.add_parser("held", parents=[common], help="the Runs a Runtime Pod held at a time")
    h.add_argument("key", metavar="NS/NAME", help="the Runtime Pod, as namespace/name")
    h.add_argument("--at", metavar="TIME", required=True, help="RFC 3339 (no zone means UTC) or an age such as 30m")
    h.set_defaults(run=run_held)

    w = leaves.add_parser("waits", parents=[common], help="the longest waits to placement: in queue and unschedulable, named apart, and why")
    w.add_argument("--limit", type=int, default=10, metavar="N", help="the N longest (10)")
    w.add_argument("--placed-only", action="store_true", help="leave out Runs still waiting")
    w.set_defaults(run=run_waits)

    windowed = argparse.ArgumentParser(add_help=False)
    windowed.add_argument("--until", metavar="TIME", help="before TIME (default: now)")
    d = leaves.add_parser("decisions", parents=[common, windowed], help="every decision of a time window, with its reason",
                          description="TIME is RFC 3339 (no zone means UTC) or an age such as 30m, 2h, 1d.")
    d.add_argument("--since", metavar="TIME", required=True, help="decided at or after TIME")
    d.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N decisions")
    d.set_defaults(run=run_decisions)

    for name, helptext, runner, default in (
            ("churn", "Runs placed elsewhere than the top candidate of their previous cycle", run_churn, 50),
            ("conflicts", "cycles that lost a race and binds that did not land or may have (ambiguous)",
             run_conflicts, 100)):
        q = leaves.add_parser(name, parents=[common, windowed], help=helptext,
                              description="TIME is RFC 3339 (no zone means UTC) or an age such as 30m, 2h, 1d.")
        q.add_argument("--since", metavar="TIME", help="at or after TIME")
        q.add_argument("--limit", type=int, default=default, metavar="N", help=f"the newest N ({default})")
        q.set_defaults(run=runner)


def _open(args: argparse.Namespace) -> backends.Journal:
    """The journal, after one line on stderr if its history tables trail the records.

    Why stderr: the answers are complete only up to where the tables are; the person
    reading them should know, and a script reading stdout must get the same output.
    """
    journal = ja.open_journal(ja.journal_url(args))
    try:
        advice = indexer.advice(journal.history_lag())  # one small query on journal_epochs
    except BaseException:
        journal.close()
        raise
    if advice:
        print(f"note: {advice}", file=sys.stderr)
    return journal


def _limit(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise ja.UsageError(f"--limit must be at least 1, got {value}")
    return value


@ja.guarded("kruntimes history run")
def run_run(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    limit = _limit(args.limit)
    journal = _open(args)
    try:
        found = runs.run_history(journal, namespace, name, limit=limit)
        extent = stored.journal_start(journal) if not found["cycles"] else (None, False)
    finally:
        journal.close()
    if output.structured(args):
        output.print_document(args, scores.with_named_raws(found))
    if not found["cycles"] and not found["placement"]:
        print(f"no cycles recorded for Run {namespace}/{name} in this journal{text.before_start(None, extent)}",
              file=sys.stderr)
        return 1
    if not output.structured(args):
        _print_run(args, found)
    return 0


def _print_run(args: argparse.Namespace, h: dict[str, Any]) -> None:
    placed = h["placement"]
    key = f"{h['namespace']}/{h['run']}"
    if not args.no_headers:
        print(f"Run {key}: runtime {placed['runtime'] or '?'}, placed on {placed['pod']} at "
              f"{ja.when(placed['decided_at'])} (cycle {placed['lsn']}, total score {placed['total']})"
              if placed else f"Run {key}: never placed in this journal")
        if placed and placed.get("devices"):
            print(f"devices: {results.describe({'results': placed['devices']})}")
        ended = h.get("ended")
        if ended:
            print(f"ended {ended['phase']} at {ja.when(ended['recorded_at'])}: " + text.why_ended(ended))
        if h.get("waits"):
            print(text.waits_line(h["waits"]))
    table = Listing([Column("LSN", right=True), Column("DECIDED AT"), Column("RESULT"), Column("POD", name=True),
                     Column("TOTAL", right=True), Column("FEASIBLE", right=True, optional=True),
                     Column("SNAPSHOT", right=True, wide_only=True), Column("REASON", wrap=True)], title="Cycles")
    for c in h["cycles"]:
        table.add(c["lsn"], ja.when(c["decided_at"]), c["result"], c["chosen"] or "-", text.num(c["total"]),
                  f"{c['pods_feasible']}/{c['pods_evaluated']}", text.num(c.get("snapshot_lsn")), c["message"] or "")
    output.render(table, args)
    if placed and h["candidates"]:
        output.render(text.candidates_table(f"Why {placed['pod']}: the recorded candidates of cycle {placed['lsn']}",
                                            h["candidates"]), args)
    if h["binds"]:
        binds = Listing([Column("LSN", right=True), Column("AT"), Column("RESULT"), Column("ERROR", wrap=True)],
                        title="Binds")
        for b in h["binds"]:
            binds.add(b["lsn"], ja.when(b["recorded_at"]), b["result"], b["error"] or "")
        output.render(binds, args)


@ja.guarded("kruntimes history pod")
def run_pod(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    limit = _limit(args.limit)
    at = ja.parse_time(args.at, what="--at") if args.at else None
    journal = _open(args)
    try:
        found = pods.pod_history(journal, namespace, name, at=at, limit=limit)
        start = stored.journal_start(journal) if at and not found["observations"] else None
    finally:
        journal.close()
    if output.structured(args):
        output.print_document(args, {**found, "observations": [{**o, "capacity": text.capacity(o["capacity"])}
                                                               for o in found["observations"]]})
    if not found["observations"] and not found["placements"]:
        when = f" at or before {ja.when(at)}" if at else ""
        print(f"no observations of Runtime Pod {namespace}/{name}{when} in this journal"
              + (text.before_start(at, start) if at else ""), file=sys.stderr)
        return 1
    if not output.structured(args):
        _print_pod(args, found)
    return 0


def _print_pod(args: argparse.Namespace, h: dict[str, Any]) -> None:
    title = (f"What the scheduler saw of {h['namespace']}/{h['pod']} at {ja.when(h['at'])}" if h["at"]
             else f"What the scheduler saw of {h['namespace']}/{h['pod']}")
    seen = Listing([Column("LSN", right=True), Column("RECORDED AT"), Column("EVENT"), Column("RUNTIME"),
                    Column("READY"), Column("TERMINATING", optional=True), Column("HEARTBEAT", optional=True),
                    Column("CAPACITY", wrap=True)], title=title)
    for o in h["observations"]:
        shown = ", ".join(f"{r} {q}" for r, q in text.capacity(o["capacity"]).items()) or "-"
        capacity = shown if not o["capacity_problem"] else f"{shown} ({o['capacity_problem']})"
        seen.add(o["lsn"], ja.when(o["recorded_at"]), o["event"], o["runtime"], text.yes(o["ready"]),
                 text.yes(o["terminating"]), o["heartbeat"] or "-", capacity)
    output.render(seen, args)
    placed = Listing([Column("LSN", right=True), Column("DECIDED AT"), Column("RUN", name=True),
                      Column("RUNTIME", optional=True), Column("TOTAL", right=True), Column("OUTCOME")],
                     title="Cycles that chose it")
    for p in h["placements"]:
        placed.add(p["lsn"], ja.when(p["decided_at"]), p["run"], p["runtime"] or "?", text.num(p["total"]),
                   p["outcome"])
    output.render(placed, args)


@ja.guarded("kruntimes history cycles")
def run_cycles(args: argparse.Namespace) -> int:
    since = ja.parse_time(args.since, what="--since") if args.since else None
    until = ja.parse_time(args.until, what="--until") if args.until else None
    limit = _limit(args.limit)
    journal = _open(args)
    try:
        found = cycles.cycles(journal, since=since, until=until, outcome=args.outcome, limit=limit)
    finally:
        journal.close()
    if output.structured(args):
        output.print_document(args, found)
    if not found:
        print("no cycle matches in this journal", file=sys.stderr)
        return 1
    if output.structured(args):
        return 0
    table = Listing([Column("LSN", right=True), Column("DECIDED AT"), Column("RUN", name=True), Column("RESULT"),
                     Column("POD", name=True), Column("TOTAL", right=True),
                     Column("FEASIBLE", right=True, optional=True), Column("µs", right=True, optional=True),
                     Column("SNAPSHOT", right=True, wide_only=True), Column("REASON", wrap=True)],
                    title=f"{len(found)} cycles (newest {limit} at most)" if limit else f"{len(found)} cycles")
    for c in found:
        table.add(c["lsn"], ja.when(c["decided_at"]), f"{c['namespace']}/{c['run']}", c["result"],
                  c["chosen"] or "-", text.num(c["total"]), f"{c['pods_feasible']}/{c['pods_evaluated']}",
                  text.num(c["duration_us"]), text.num(c.get("snapshot_lsn")), c["message"] or "")
    output.render(table, args)
    return 0


def _read(args: argparse.Namespace, ask: Any) -> Any:
    journal = _open(args)
    try:
        return ask(journal)
    finally:
        journal.close()


def _times(args: argparse.Namespace) -> tuple[Any, Any]:
    since = ja.parse_time(args.since, what="--since") if args.since else None
    until = ja.parse_time(args.until, what="--until") if args.until else None
    return since, until


def _table(title: str, columns: list[Column]) -> Listing:
    return Listing(columns, title=title)


def _listing(args: argparse.Namespace, found: list[dict[str, Any]], empty: str, table: Listing,
             row: Any, *, limit: int | None = None) -> int:
    """Print ``found``; nothing found is a note on stderr and exit code 1 in every format (docs/journal.md),
    and a listing cut at ``limit`` says so on stderr rather than stopping silently."""
    if limit is not None and len(found) >= limit:
        print(f"note: the newest {limit} shown; there may be more (--limit N)", file=sys.stderr)
    if output.structured(args):
        output.print_document(args, found)
    if not found:
        print(empty, file=sys.stderr)
        return 1
    if output.structured(args):
        return 0
    for item in found:
        table.add(*row(item))
    output.render(table, args)
    return 0


@ja.guarded("kruntimes history held")
def run_held(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    at = ja.parse_time(args.at, what="--at")
    held, start = _read(args, lambda j: (pods.pod_held(j, namespace, name, at), stored.journal_start(j)))
    # What each Run charged the pod (``requests``) is the web view's; the command prints what it always has.
    found = [{k: v for k, v in p.items() if k != "requests"} for p in held]
    table = _table(f"What {namespace}/{name} held at {ja.when(at)}",
                   [Column("RUN", name=True), Column("RUNTIME", optional=True), Column("PLACED AT"), Column("CYCLE", right=True), Column("TOTAL", right=True),
                    Column("ENDED AT"), Column("ENDED BY")])
    return _listing(args, found, f"Runtime Pod {namespace}/{name} held no Run at {ja.when(at)} in this journal"
                    + text.before_start(at, start), table,
                    lambda p: (p["run"], p["runtime"] or "?", ja.when(p["placed_at"]), str(p["lsn"]),
                               text.num(p["total"]), ja.when(p["ended_at"]) if p["ended_at"] else "-", p["end_reason"] or "-"))


@ja.guarded("kruntimes history waits")
def run_waits(args: argparse.Namespace) -> int:
    limit = _limit(args.limit) or 10
    found = _read(args, lambda j: waits.longest_waits(j, limit=limit, waiting=not args.placed_only))
    table = Listing([Column("RUN", name=True), Column("WAITED", right=True), Column("IN QUEUE", right=True),
                     Column("UNSCHEDULABLE", right=True), Column("FIRST SEEN"), Column("PLACED AT"),
                     Column("POD", name=True), Column("PENDING CYCLES", right=True, optional=True),
                     Column("FIRST REASON", optional=True, wrap=True), Column("LATEST REASON", wrap=True)],
                    title=f"The {limit} longest waits from first seen to placement",
                    legend=waits.WAITS_LEGEND)
    return _listing(args, found, "no Run in this journal (nothing was seen waiting)", table,
                    lambda w: (f"{w['namespace']}/{w['run']}", text.seconds(w["waited_us"]),
                               text.seconds(w["queued_us"]), text.seconds(w["unschedulable_us"]), ja.when(w["first_seen_at"]),
                               ja.when(w["placed_at"]) if w["placed_at"] else f"(still {w['state']})",
                               w["pod"] or "-", str(w["pending_cycles"]), w["first_reason"] or "",
                               w["last_reason"] or ""))


@ja.guarded("kruntimes history decisions")
def run_decisions(args: argparse.Namespace) -> int:
    since, until = _times(args)
    until = until or _now()
    limit = _limit(args.limit)
    found = _read(args, lambda j: cycles.decisions(j, since=since, until=until, limit=limit))
    table = _table(f"{len(found)} decisions from {ja.when(since)} to {ja.when(until)}",
                   [Column("LSN", right=True), Column("DECIDED AT"), Column("RUN", name=True), Column("RESULT"), Column("POD", name=True), Column("REASON", wrap=True)])
    return _listing(args, found, "no cycle was decided in that window", table,
                    lambda c: (str(c["lsn"]), ja.when(c["decided_at"]), f"{c['namespace']}/{c['run']}", c["result"],
                               c["chosen"] or "-", c["reason"]))


def _now() -> datetime:
    return datetime.now(timezone.utc)


@ja.guarded("kruntimes history churn")
def run_churn(args: argparse.Namespace) -> int:
    since, until = _times(args)
    limit = _limit(args.limit)
    found = _read(args, lambda j: cycles.churn(j, since=since, until=until, limit=limit))
    table = _table("Runs placed elsewhere than their previous cycle's top candidate",
                   [Column("LSN", right=True), Column("DECIDED AT"), Column("RUN", name=True), Column("POD", name=True), Column("PREVIOUS TOP", name=True),
                    Column("PREVIOUS CYCLE", right=True, optional=True), Column("ITS RESULT")])
    return _listing(args, found, "no Run was placed elsewhere than its previous cycle's top candidate", table,
                    lambda c: (str(c["lsn"]), ja.when(c["decided_at"]), f"{c['namespace']}/{c['run']}", c["pod"],
                               c["previous_top"], str(c["previous_lsn"]), c["previous_result"]), limit=limit)


@ja.guarded("kruntimes history conflicts")
def run_conflicts(args: argparse.Namespace) -> int:
    since, until = _times(args)
    limit = _limit(args.limit)
    found = _read(args, lambda j: cycles.conflicts(j, since=since, until=until, limit=limit))
    table = _table("Conflicts and ambiguous binds", [Column("LSN", right=True), Column("AT"), Column("WHAT"), Column("RUN", name=True), Column("POD", name=True),
                                                     Column("DETAIL")])
    return _listing(args, found, "no conflict and no ambiguous bind in that window", table,
                    lambda c: (str(c["lsn"]), ja.when(c["at"]), c["what"],
                               f"{c['namespace']}/{c['run'] or c['run_uid']}", c["pod"] or "-",
                               c["detail"] or text.BIND_DETAIL.get(c["what"], "")), limit=limit)

