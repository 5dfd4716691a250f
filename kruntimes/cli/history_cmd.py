"""`kruntimes history run|pod|cycles|held|waits|decisions|churn|conflicts`: what the scheduler saw and decided.

Each sub-command is one call into ``kruntimes.journal.history`` (parameterized queries on
the history tables) printed as tables, or as ``-o json|yaml``. Nothing is
found → a note on stderr and exit code 1; bad input or an unreachable journal → one
line and exit code 2 (``journal_args.guarded``). While the history tables trail the
records (a ``--journal-history follow`` scheduler), every command says so first, in one
line on stderr: stdout stays what scripts expect.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from kruntimes import scores
from kruntimes.cli import journal_args as ja
from kruntimes.cli import output
from kruntimes.cli.output import Column, Listing
from kruntimes.devices import results
from kruntimes.journal.history import indexer as follow
from kruntimes.journal.history import runs as history
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
    c.add_argument("--outcome", choices=history.OUTCOMES, help="only cycles with this result")
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
        advice = follow.advice(journal.history_lag())  # one small query on journal_epochs
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


def _num(value: Any) -> str:
    return "-" if value is None else str(value)


@ja.guarded("kruntimes history run")
def run_run(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    limit = _limit(args.limit)
    journal = _open(args)
    try:
        found = history.run_history(journal, namespace, name, limit=limit)
        extent = history.journal_start(journal) if not found["cycles"] else (None, False)
    finally:
        journal.close()
    if output.structured(args):
        output.print_document(args, scores.with_named_raws(found))
    if not found["cycles"] and not found["placement"]:
        print(f"no cycles recorded for Run {namespace}/{name} in this journal{_before_start(None, extent)}",
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
            print(f"ended {ended['phase']} at {ja.when(ended['recorded_at'])}: " + _why_ended(ended))
        if h.get("waits"):
            print(waits_line(h["waits"]))
    cycles = Listing([Column("LSN", right=True), Column("DECIDED AT"), Column("RESULT"), Column("POD", name=True),
                      Column("TOTAL", right=True), Column("FEASIBLE", right=True, optional=True),
                      Column("SNAPSHOT", right=True, wide_only=True), Column("REASON", wrap=True)], title="Cycles")
    for c in h["cycles"]:
        cycles.add(c["lsn"], ja.when(c["decided_at"]), c["result"], c["chosen"] or "-", _num(c["total"]),
                   f"{c['pods_feasible']}/{c['pods_evaluated']}", _num(c.get("snapshot_lsn")), c["message"] or "")
    output.render(cycles, args)
    if placed and h["candidates"]:
        output.render(_candidates(f"Why {placed['pod']}: the recorded candidates of cycle {placed['lsn']}",
                                  h["candidates"]), args)
    if h["binds"]:
        binds = Listing([Column("LSN", right=True), Column("AT"), Column("RESULT"), Column("ERROR", wrap=True)],
                        title="Binds")
        for b in h["binds"]:
            binds.add(b["lsn"], ja.when(b["recorded_at"]), b["result"], b["error"] or "")
        output.render(binds, args)


def waits_line(w: dict[str, Any]) -> str:
    """A Run's two waits in one line, named as `history waits` names them."""
    queued = ("not yet evaluated by any cycle" if w["queued_us"] is None
              else f"{_seconds(w['queued_us'])} (first seen {ja.when(w['first_seen_at'])}, first cycle "
                   f"{ja.when(w['first_cycle_at'])})")
    unschedulable = _seconds(w["unschedulable_us"]) + (" so far" if w["still_unschedulable"] else "")
    return f"waited in queue {queued}; unschedulable {unschedulable}"


def _seconds(us: int) -> str:
    """A wait for people: milliseconds under a second, else the ``_duration`` form."""
    return f"{us / 1000:.0f} ms" if us < 1_000_000 else _duration(round(us / 1_000_000))


def _why_ended(ended: dict[str, Any]) -> str:
    """``Reason: message`` of a Run's end, or what the journal cannot say."""
    if ended["end_reason"] is None:
        return "no reason recorded (a journal written before kruntimes recorded why Runs end)"
    return f"{ended['end_reason']}: {ended['end_message']}" if ended["end_message"] else ended["end_reason"]


def _candidates(title: str, candidates: list[dict[str, Any]]) -> Listing:
    """The ranked candidates; equal totals are ranked by pod name, and the table says so."""
    plugins = sorted({s["plugin"] for c in candidates for s in c["scores"]})
    ties = len(candidates) > 1 and candidates[0]["total"] == candidates[1]["total"]
    if ties:
        tied = sum(1 for c in candidates if c["total"] == candidates[0]["total"])
        title += f" ({tied} share the top total {candidates[0]['total']}: the tie goes to the first pod by name)"
    table = Listing([Column("RANK", right=True), Column("POD", name=True), Column("TOTAL", right=True),
                     *[Column(p, optional=True) for p in plugins], Column("CHOSEN")],
                    title=title, legend=scores.LEGEND)
    for c in candidates:
        by_plugin = {s["plugin"]: scores.text(s["plugin"], s["normalized"], s["raw"]) for s in c["scores"]}
        table.add(c["rank"], c["pod"], c["total"], *[by_plugin.get(p, "-") for p in plugins],
                  "yes" if c["chosen"] else "")
    return table


@ja.guarded("kruntimes history pod")
def run_pod(args: argparse.Namespace) -> int:
    namespace, name = ja.parse_key(args.key)
    limit = _limit(args.limit)
    at = ja.parse_time(args.at, what="--at") if args.at else None
    journal = _open(args)
    try:
        found = history.pod_history(journal, namespace, name, at=at, limit=limit)
        start = history.journal_start(journal) if at and not found["observations"] else None
    finally:
        journal.close()
    if output.structured(args):
        output.print_document(args, {**found, "observations": [{**o, "capacity": _capacity(o["capacity"])}
                                                               for o in found["observations"]]})
    if not found["observations"] and not found["placements"]:
        when = f" at or before {ja.when(at)}" if at else ""
        print(f"no observations of Runtime Pod {namespace}/{name}{when} in this journal"
              + (_before_start(at, start) if at else ""), file=sys.stderr)
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
        shown = ", ".join(f"{r} {q}" for r, q in _capacity(o["capacity"]).items()) or "-"
        capacity = shown if not o["capacity_problem"] else f"{shown} ({o['capacity_problem']})"
        seen.add(o["lsn"], ja.when(o["recorded_at"]), o["event"], o["runtime"], _yes(o["ready"]),
                 _yes(o["terminating"]), o["heartbeat"] or "-", capacity)
    output.render(seen, args)
    placed = Listing([Column("LSN", right=True), Column("DECIDED AT"), Column("RUN", name=True),
                      Column("RUNTIME", optional=True), Column("TOTAL", right=True), Column("OUTCOME")],
                     title="Cycles that chose it")
    for p in h["placements"]:
        placed.add(p["lsn"], ja.when(p["decided_at"]), p["run"], p["runtime"] or "?", _num(p["total"]), p["outcome"])
    output.render(placed, args)


def _capacity(recorded: Any) -> dict[str, Any]:
    """A recorded capacity (JSON text of [resource, amount] pairs) as a mapping by resource."""
    try:
        pairs = json.loads(recorded) if isinstance(recorded, str) else recorded
        return {str(r): q for r, q in pairs or []}
    except (ValueError, TypeError):
        return {"(unreadable)": recorded}


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


@ja.guarded("kruntimes history cycles")
def run_cycles(args: argparse.Namespace) -> int:
    since = ja.parse_time(args.since, what="--since") if args.since else None
    until = ja.parse_time(args.until, what="--until") if args.until else None
    limit = _limit(args.limit)
    journal = _open(args)
    try:
        found = history.cycles(journal, since=since, until=until, outcome=args.outcome, limit=limit)
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
                  c["chosen"] or "-", _num(c["total"]), f"{c['pods_feasible']}/{c['pods_evaluated']}",
                  _num(c["duration_us"]), _num(c.get("snapshot_lsn")), c["message"] or "")
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
    found, start = _read(args, lambda j: (history.pod_held(j, namespace, name, at), history.journal_start(j)))
    table = _table(f"What {namespace}/{name} held at {ja.when(at)}",
                   [Column("RUN", name=True), Column("RUNTIME", optional=True), Column("PLACED AT"), Column("CYCLE", right=True), Column("TOTAL", right=True),
                    Column("ENDED AT"), Column("ENDED BY")])
    return _listing(args, found, f"Runtime Pod {namespace}/{name} held no Run at {ja.when(at)} in this journal"
                    + _before_start(at, start), table,
                    lambda p: (p["run"], p["runtime"] or "?", ja.when(p["placed_at"]), str(p["lsn"]), _num(p["total"]),
                               ja.when(p["ended_at"]) if p["ended_at"] else "-", p["end_reason"] or "-"))


def _before_start(at: datetime | None, extent: tuple[datetime | None, bool]) -> str:
    """What "nothing found" should add: that the journal starts after ``at`` (an answer about a time it does not
    cover is not "nothing then"), or, with no time asked, that a prune removed its older records."""
    start, pruned = extent
    if start is None or (at is not None and at >= start) or (at is None and not pruned):
        return ""
    first = start.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if at is None:
        return f" (it was pruned and starts at {first}: older records are gone, see `kruntimes journal prune`)"
    return f": the journal starts at {first}, after that time (ask with --at {first} or later)"


@ja.guarded("kruntimes history waits")
def run_waits(args: argparse.Namespace) -> int:
    limit = _limit(args.limit) or 10
    found = _read(args, lambda j: history.longest_waits(j, limit=limit, waiting=not args.placed_only))
    table = Listing([Column("RUN", name=True), Column("WAITED", right=True), Column("IN QUEUE", right=True),
                     Column("UNSCHEDULABLE", right=True), Column("FIRST SEEN"), Column("PLACED AT"),
                     Column("POD", name=True), Column("PENDING CYCLES", right=True, optional=True),
                     Column("FIRST REASON", optional=True, wrap=True), Column("LATEST REASON", wrap=True)],
                    title=f"The {limit} longest waits from first seen to placement",
                    legend=history.WAITS_LEGEND)
    return _listing(args, found, "no Run in this journal (nothing was seen waiting)", table,
                    lambda w: (f"{w['namespace']}/{w['run']}", _seconds(w["waited_us"]), _seconds(w["queued_us"]),
                               _seconds(w["unschedulable_us"]), ja.when(w["first_seen_at"]),
                               ja.when(w["placed_at"]) if w["placed_at"] else f"(still {w['state']})",
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
    found = _read(args, lambda j: history.churn(j, since=since, until=until, limit=limit))
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
    found = _read(args, lambda j: history.conflicts(j, since=since, until=until, limit=limit))
    table = _table("Conflicts and ambiguous binds", [Column("LSN", right=True), Column("AT"), Column("WHAT"), Column("RUN", name=True), Column("POD", name=True),
                                                     Column("DETAIL")])
    return _listing(args, found, "no conflict and no ambiguous bind in that window", table,
                    lambda c: (str(c["lsn"]), ja.when(c["at"]), c["what"], f"{c['namespace']}/{c['run'] or c['run_uid']}",
                               c["pod"] or "-", c["detail"] or _BIND_DETAIL.get(c["what"], "")), limit=limit)


#: What a bind row means when its record says no more (a 409 and an unknown outcome carry no error text).
_BIND_DETAIL = {"bind conflict": "the Run changed since it was read (409): assumption released, Run requeued",
                "bind unknown": "the write may have landed: assumption kept until the Run is seen again"}
