"""`kruntimes history run|pod|cycles|held|waits|decisions|churn|conflicts`: what the scheduler saw and decided.

Each sub-command is one call into ``kruntimes.journal.history`` (parameterized queries on
the history views) printed as `rich` tables, or as JSON with ``--json``. Nothing is
found → a note on stderr and exit code 1; bad input or an unreachable journal → one
line and exit code 2 (``journal_args.guarded``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from kruntimes.cli import journal_args as ja
from kruntimes.journal import history


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("history", help="placement history from the journal: runs, pods, cycles",
                       description="Read the audit journal: why a Run went where it went, what the scheduler "
                                   "saw of a Runtime Pod, which cycles ran when.")
    leaves = p.add_subparsers(dest="history_command", required=True, metavar="WHAT")
    common = argparse.ArgumentParser(add_help=False)
    ja.add_url_option(common)
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")

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
    c.add_argument("--outcome", choices=history.OUTCOMES, help="only cycles with this result")
    c.add_argument("--limit", type=int, default=50, metavar="N", help="the newest N matching cycles (50)")
    c.set_defaults(run=run_cycles)

    h = leaves.add_parser("held", parents=[common], help="the Runs a Runtime Pod held at a time")
    h.add_argument("key", metavar="NS/NAME", help="the Runtime Pod, as namespace/name")
    h.add_argument("--at", metavar="TIME", required=True, help="RFC 3339 (no zone means UTC) or an age such as 30m")
    h.set_defaults(run=run_held)

    w = leaves.add_parser("waits", parents=[common], help="the longest waits from first Pending to placement, and why")
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


def _limit(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise ja.UsageError(f"--limit must be at least 1, got {value}")
    return value


def _console() -> Console:
    # Piped output has no terminal width; 80 columns would squeeze every table to ellipses.
    return Console() if sys.stdout.isatty() else Console(width=160)


def _table(title: str, columns: tuple[str, ...], right: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        # Numbers stay whole; text columns wrap in a narrow terminal.
        table.add_column(column, justify="right" if column in right else "left", no_wrap=column in right)
    return table


def _num(value: Any) -> str:
    return "-" if value is None else str(value)


@ja.guarded("kruntimes history run")
def run_run(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    limit = _limit(args.limit)
    journal = ja.open_journal(ja.journal_url(args))
    try:
        found = history.run_history(journal, namespace, name, limit=limit)
    finally:
        journal.close()
    if args.json:
        ja.print_json(found)
    if not found["cycles"] and not found["placement"]:
        print(f"no cycles recorded for Run {namespace}/{name} in this journal", file=sys.stderr)
        return 1
    if not args.json:
        _print_run(_console(), found)
    return 0


def _print_run(console: Console, h: dict[str, Any]) -> None:
    placed = h["placement"]
    key = f"{h['namespace']}/{h['run']}"
    if placed:
        console.print(f"[bold]Run {key}[/bold]: runtime {placed['runtime'] or '?'}, placed on "
                      f"[bold]{placed['pod']}[/bold] at {ja.when(placed['decided_at'])} "
                      f"(cycle {placed['lsn']}, total score {placed['total']})")
    else:
        console.print(f"[bold]Run {key}[/bold]: never placed in this journal")
    cycles = _table("Cycles", ("LSN", "DECIDED AT", "RESULT", "POD", "TOTAL", "FEASIBLE", "REASON"),
                    right=("LSN", "TOTAL", "FEASIBLE"))
    for c in h["cycles"]:
        cycles.add_row(str(c["lsn"]), ja.when(c["decided_at"]), c["result"], c["chosen"] or "-", _num(c["total"]),
                       f"{c['pods_feasible']}/{c['pods_evaluated']}", c["message"] or "")
    console.print(cycles)
    if placed and h["candidates"]:
        console.print(_candidates(f"Why {placed['pod']}: the recorded candidates of cycle {placed['lsn']}",
                                  h["candidates"]))
    if h["binds"]:
        binds = _table("Binds", ("LSN", "AT", "RESULT", "ERROR"), right=("LSN",))
        for b in h["binds"]:
            binds.add_row(str(b["lsn"]), ja.when(b["recorded_at"]), b["result"], b["error"] or "")
        console.print(binds)


def _candidates(title: str, candidates: list[dict[str, Any]]) -> Table:
    plugins = sorted({s["plugin"] for c in candidates for s in c["scores"]})
    table = _table(title, ("RANK", "POD", "TOTAL", *[f"{p} (raw)" for p in plugins], "CHOSEN"),
                   right=("RANK", "TOTAL"))
    for c in candidates:
        by_plugin = {s["plugin"]: f"{s['normalized']} ({s['raw']})" for s in c["scores"]}
        table.add_row(str(c["rank"]), c["pod"], str(c["total"]), *[by_plugin.get(p, "-") for p in plugins],
                      "✓" if c["chosen"] else "")
    return table


@ja.guarded("kruntimes history pod")
def run_pod(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    limit = _limit(args.limit)
    at = ja.parse_time(args.at, what="--at") if args.at else None
    journal = ja.open_journal(ja.journal_url(args))
    try:
        found = history.pod_history(journal, namespace, name, at=at, limit=limit)
    finally:
        journal.close()
    if args.json:
        ja.print_json(found)
    if not found["observations"] and not found["placements"]:
        when = f" at or before {ja.when(at)}" if at else ""
        print(f"no observations of Runtime Pod {namespace}/{name}{when} in this journal", file=sys.stderr)
        return 1
    if not args.json:
        _print_pod(_console(), found)
    return 0


def _print_pod(console: Console, h: dict[str, Any]) -> None:
    title = (f"What the scheduler saw of {h['namespace']}/{h['pod']} at {ja.when(h['at'])}" if h["at"]
             else f"What the scheduler saw of {h['namespace']}/{h['pod']}")
    seen = _table(title, ("LSN", "RECORDED AT", "EVENT", "RUNTIME", "READY", "TERMINATING", "HEARTBEAT",
                          "CAPACITY"), right=("LSN",))
    for o in h["observations"]:
        capacity = o["capacity"] if not o["capacity_problem"] else f"{o['capacity']} ({o['capacity_problem']})"
        seen.add_row(str(o["lsn"]), ja.when(o["recorded_at"]), o["event"], o["runtime"], _yes(o["ready"]),
                     _yes(o["terminating"]), o["heartbeat"] or "-", capacity)
    console.print(seen)
    placed = _table("Cycles that chose it", ("LSN", "DECIDED AT", "RUN", "RUNTIME", "TOTAL", "OUTCOME"),
                    right=("LSN", "TOTAL"))
    for p in h["placements"]:
        placed.add_row(str(p["lsn"]), ja.when(p["decided_at"]), p["run"], p["runtime"] or "?", _num(p["total"]),
                       p["outcome"])
    console.print(placed)


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


@ja.guarded("kruntimes history cycles")
def run_cycles(args: argparse.Namespace) -> int:
    since = ja.parse_time(args.since, what="--since") if args.since else None
    until = ja.parse_time(args.until, what="--until") if args.until else None
    limit = _limit(args.limit)
    journal = ja.open_journal(ja.journal_url(args))
    try:
        found = history.cycles(journal, since=since, until=until, outcome=args.outcome, limit=limit)
    finally:
        journal.close()
    if args.json:
        ja.print_json(found)
        return 0
    table = _table(f"{len(found)} cycles (newest {limit} at most)" if limit else f"{len(found)} cycles",
                   ("LSN", "DECIDED AT", "RUN", "RESULT", "POD", "TOTAL", "FEASIBLE", "µs", "REASON"),
                   right=("LSN", "TOTAL", "FEASIBLE", "µs"))
    for c in found:
        table.add_row(str(c["lsn"]), ja.when(c["decided_at"]), f"{c['namespace']}/{c['run']}", c["result"],
                      c["chosen"] or "-", _num(c["total"]), f"{c['pods_feasible']}/{c['pods_evaluated']}",
                      _num(c["duration_us"]), c["message"] or "")
    _console().print(table)
    return 0


def _read(args: argparse.Namespace, ask: Any) -> Any:
    journal = ja.open_journal(ja.journal_url(args))
    try:
        return ask(journal)
    finally:
        journal.close()


def _times(args: argparse.Namespace) -> tuple[Any, Any]:
    since = ja.parse_time(args.since, what="--since") if args.since else None
    until = ja.parse_time(args.until, what="--until") if args.until else None
    return since, until


def _listing(args: argparse.Namespace, found: list[dict[str, Any]], empty: str, table: Table,
             row: Any) -> int:
    if args.json:
        ja.print_json(found)
        return 0
    if not found:
        print(empty, file=sys.stderr)
        return 1
    for item in found:
        table.add_row(*row(item))
    _console().print(table)
    return 0


@ja.guarded("kruntimes history held")
def run_held(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    at = ja.parse_time(args.at, what="--at")
    found = _read(args, lambda j: history.pod_held(j, namespace, name, at))
    table = _table(f"What {namespace}/{name} held at {ja.when(at)}",
                   ("RUN", "RUNTIME", "PLACED AT", "CYCLE", "TOTAL", "ENDED AT", "ENDED BY"), right=("CYCLE", "TOTAL"))
    return _listing(args, found, f"Runtime Pod {namespace}/{name} held no Run at {ja.when(at)} in this journal", table,
                    lambda p: (p["run"], p["runtime"] or "?", ja.when(p["placed_at"]), str(p["lsn"]), _num(p["total"]),
                               ja.when(p["ended_at"]) if p["ended_at"] else "-", p["end_reason"] or "-"))


@ja.guarded("kruntimes history waits")
def run_waits(args: argparse.Namespace) -> int:
    limit = _limit(args.limit) or 10
    found = _read(args, lambda j: history.longest_waits(j, limit=limit, waiting=not args.placed_only))
    table = _table(f"The {limit} longest waits from first Pending to placement",
                   ("RUN", "WAITED", "FIRST PENDING", "PLACED AT", "POD", "PENDING CYCLES", "FIRST REASON",
                    "LATEST REASON"), right=("WAITED", "PENDING CYCLES"))
    return _listing(args, found, "no Run waited in this journal (every Run was placed on its first cycle)", table,
                    lambda w: (f"{w['namespace']}/{w['run']}", _duration(w["waited_s"]), ja.when(w["first_pending_at"]),
                               ja.when(w["placed_at"]) if w["placed_at"] else f"({w['outcome'] or 'still waiting'})",
                               w["pod"] or "-", str(w["pending_cycles"]), w["first_reason"] or "",
                               w["last_reason"] or ""))


def _duration(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@ja.guarded("kruntimes history decisions")
def run_decisions(args: argparse.Namespace) -> int:
    since, until = _times(args)
    until = until or _now()
    limit = _limit(args.limit)
    found = _read(args, lambda j: history.decisions(j, since=since, until=until, limit=limit))
    table = _table(f"{len(found)} decisions from {ja.when(since)} to {ja.when(until)}",
                   ("LSN", "DECIDED AT", "RUN", "RESULT", "POD", "REASON"), right=("LSN",))
    return _listing(args, found, "no cycle was decided in that window", table,
                    lambda c: (str(c["lsn"]), ja.when(c["decided_at"]), f"{c['namespace']}/{c['run']}", c["result"],
                               c["chosen"] or "-", c["reason"]))


def _now() -> datetime:
    return datetime.now(timezone.utc)


@ja.guarded("kruntimes history churn")
def run_churn(args: argparse.Namespace) -> int:
    since, until = _times(args)
    found = _read(args, lambda j: history.churn(j, since=since, until=until, limit=_limit(args.limit)))
    table = _table("Runs placed elsewhere than their previous cycle's top candidate",
                   ("LSN", "DECIDED AT", "RUN", "POD", "PREVIOUS TOP", "PREVIOUS CYCLE", "ITS RESULT"),
                   right=("LSN", "PREVIOUS CYCLE"))
    return _listing(args, found, "no Run was placed elsewhere than its previous cycle's top candidate", table,
                    lambda c: (str(c["lsn"]), ja.when(c["decided_at"]), f"{c['namespace']}/{c['run']}", c["pod"],
                               c["previous_top"], str(c["previous_lsn"]), c["previous_result"]))


@ja.guarded("kruntimes history conflicts")
def run_conflicts(args: argparse.Namespace) -> int:
    since, until = _times(args)
    found = _read(args, lambda j: history.conflicts(j, since=since, until=until, limit=_limit(args.limit)))
    table = _table("Conflicts and ambiguous binds", ("LSN", "AT", "WHAT", "RUN", "POD", "DETAIL"), right=("LSN",))
    return _listing(args, found, "no conflict and no ambiguous bind in that window", table,
                    lambda c: (str(c["lsn"]), ja.when(c["at"]), c["what"],
                               f"{c['namespace']}/{c['run'] or c['run_uid']}", c["pod"] or "-", c["detail"] or ""))
