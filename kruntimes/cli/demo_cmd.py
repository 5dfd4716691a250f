"""`kruntimes demo`: run a generated workload through the whole system and print what happened."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections import Counter
from datetime import timedelta, timezone

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import exc as sa_exc

from kruntimes import demo, demo_watch, gctuning, scores
from kruntimes.cli import demo_journal, journal_args
from kruntimes.journal import chain, errors, redact
from kruntimes.journal.store.engines import DEFAULT_URL


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run a generated workload through the whole system (no cluster needed)",
                       description="Creates Runtimes; the Runtime controller creates their pods, the scheduler "
                                   "places the Runs, one runtimed per pod admits and executes them as processes, "
                                   "against an in-memory API server; then summarises.")
    p.add_argument("--workers", type=int, default=4, help="scheduler workers (default 4)")
    p.add_argument("--conflict-rate", type=float, default=0.02,
                   help="fraction of status writes answered with a 409 conflict (default 0.02)")
    p.add_argument("--seed", type=int, default=7, help="workload seed (default 7)")
    p.add_argument("--journal", metavar="URL",
                   help=f"journal every event and decision here (default {DEFAULT_URL}, or the next free "
                        "kruntimes-journal-N.db when that holds an earlier run; env KRUNTIMES_JOURNAL_URL; "
                        "postgresql+psycopg://... for PostgreSQL)")
    p.add_argument("--append", action="store_true",
                   help="add this run to a named journal that already holds records (refused otherwise)")
    p.add_argument("--no-journal", action="store_true", help="do not journal")
    p.add_argument("--journal-key-file", default=os.environ.get(chain.KEY_FILE_ENV) or None, metavar="PATH",
                   help="file holding the HMAC key of the journal's hash chain (at least 32 bytes; env "
                        f"{chain.KEY_FILE_ENV}); without it the chain is plain SHA-256")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.workers < 1 or not 0 <= args.conflict_rate < 1:
        print("kruntimes demo: --workers must be >= 1 and --conflict-rate in [0, 1)", file=sys.stderr)
        return 2
    from_env = not args.journal and bool(os.environ.get(journal_args.URL_ENV))
    named = args.journal or os.environ.get(journal_args.URL_ENV) or None
    note = None
    if not args.no_journal:
        try:
            journal_args.checked_url(named or DEFAULT_URL, must_exist=False)
            choice = demo_journal.choose(named, append=args.append)
        except journal_args.UsageError as exc:
            print(f"kruntimes demo: {exc}", file=sys.stderr)
            return 2
        except demo_journal.JournalInUse as exc:
            print(f"kruntimes demo: the journal at {journal_args.shown(named or DEFAULT_URL)}: {exc}", file=sys.stderr)
            return 2
        except (errors.JournalError, sa_exc.DBAPIError) as exc:
            cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
            print(f"kruntimes demo: cannot use the journal at {journal_args.shown(named or DEFAULT_URL)}: "
                  f"{redact.text(journal_args.first_line(cause), named or DEFAULT_URL)}"
                  " (is the database up and the URL right? --no-journal runs without one)", file=sys.stderr)
            return 2
        args.journal, note = choice.url, choice.note
        try:
            chain.load_key(args.journal_key_file) if args.journal_key_file else None
        except chain.ChainKeyError as exc:
            print(f"kruntimes demo: --journal-key-file: {exc}", file=sys.stderr)
            return 2
    gctuning.tune()
    console = Console()
    if not args.no_journal:
        console.print(f"journal: {journal_args.shown(args.journal)}" + (f" ({note})" if note else ""),
                      markup=False, soft_wrap=True)
    with Progress(TextColumn("Runs ended"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task("", total=None)

        def progress(phases: Counter[str], total: int) -> None:
            now = ", ".join(f"{phases.get(p, 0)} {p.lower()}" for p in ("Pending", "Scheduled", "Running"))
            bar.update(task, completed=phases["Succeeded"] + phases["Failed"], total=total, description=now)

        try:
            report = demo.run(workers=args.workers, conflict_rate=args.conflict_rate, seed=args.seed,
                              journal=None if args.no_journal else args.journal, progress=progress,
                              journal_key_file=args.journal_key_file)
        except (errors.JournalError, sa_exc.DBAPIError) as exc:
            cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
            bar.stop()
            print(f"kruntimes demo: cannot use the journal at {journal_args.shown(args.journal)}: "
                  f"{redact.text(journal_args.first_line(cause), args.journal)}"
                  " (is the database up and the URL right? --no-journal runs without one)", file=sys.stderr)
            return 2
    _print(console, report, from_env=from_env, note=note)
    return 0


def _print(console: Console, r: demo.Report, *, from_env: bool = False, note: str | None = None) -> None:
    console.print(f"\n[bold]{r.runs} Runs on {r.pods} Runtime Pods[/bold] (created by the Runtime controller, "
                  f"each with its runtimed): {r.phases.get('Succeeded', 0)} succeeded, "
                  f"{r.phases.get('Failed', 0)} failed, {_still_pending(r)}; "
                  f"{r.processes} executed by runtimed in {r.seconds:.1f}s")
    console.print(_timeline(r.timeline))
    console.print(_pending(r))
    failed = Counter({f"{reason}: {message}": n for (reason, message), n in r.failed_reasons.items()})
    console.print(_reasons("Failed Runs by reason", failed))
    util = Table(title="Peak use of ready Runtime Pods by Running Runs")
    for column in ("Runtime", "Resource", "Peak", "Capacity", "Utilisation"):
        util.add_column(column, justify="left" if column in ("Runtime", "Resource") else "right")
    for runtime in sorted(r.peak_utilisation):
        for resource, (used, cap) in sorted(r.peak_utilisation[runtime].items()):
            util.add_row(runtime, resource, str(used), str(cap), f"{100 * used / cap:.0f}%" if cap else "-")
    console.print(util)
    console.print(f"runtimed never exceeded a pod's capacity: {r.overcommitted} over-committed pod samples; "
                  f"deleted mid-run: pod {r.pod_lost} (its Runs ended RuntimePodLost, the controller replaced it)")
    if r.pod_log:
        console.print("pod log, as runtimed writes it: " + " | ".join(r.pod_log[-2:]), markup=False)
    results = ", ".join(f"{k} {v}" for k, v in sorted(r.results.items()))
    console.print(f"{r.cycles} scheduling cycles ({results}); {r.injected_conflicts} injected 409 conflicts; "
                  f"wake-ups: {', '.join(f'{k} {v}' for k, v in sorted(r.wakeups.items())) or 'none'}")
    console.print(f"seed {r.seed}: summary {r.summary_digest()} (the same seed gives the same summary: Runs, "
                  "pods and every Failed and Pending reason; the timing decides the rest)", markup=False)
    if r.journal:
        option, password = _journal_option(r.journal, from_env=from_env)
        about = f" ({note})" if note else ""
        console.print(f"journal: {r.records} records written to {r.journal}{about}; check every cycle with "
                      f"`kruntimes replay verify{option}`" + (f" {password}" if password else ""), markup=False)
        for question, rows in r.history:
            if question.startswith("Why was "):
                console.print(_why_placed(question, rows))
            else:
                _journal_agrees(console, r, rows)
        _follow_ups(console, r, option)


def _queued(r: demo.Report) -> int:
    """Pending Runs no cycle has evaluated yet: waiting in queue, not unschedulable."""
    return sum(n for (_, reason), n in r.pending_reasons.items() if reason == demo.NOT_YET_EVALUATED)


def _still_pending(r: demo.Report) -> str:
    """The Pending count, split as history and the UI split it: unschedulable apart from waiting in queue."""
    pending = r.phases.get("Pending", 0)
    return (f"{pending} still pending ({pending - _queued(r)} unschedulable, {_queued(r)} waiting in queue)"
            if pending else "none still pending")


def _pending(r: demo.Report) -> Table:
    """Pending Runs by runtime and reason, printed once (the journal's answer is checked against it)."""
    table = Table(title="Pending Runs at the end, by runtime and reason")
    table.add_column("Runs", justify="right")
    table.add_column("Runtime", no_wrap=True)
    table.add_column("Reason")
    for (runtime, reason), n in sorted(r.pending_reasons.items(), key=lambda item: (-item[1], item[0])):
        table.add_row(str(n), runtime, reason)
    return table


def _why_placed(question: str, rows: list[dict[str, object]]) -> Table:
    """The recorded candidates, saying when the top totals tie that the first pod by name won."""
    plugins = [k for k in (rows[0] if rows else {}) if k not in ("rank", "pod", "total")]
    tied = [row for row in rows if row["total"] == rows[0]["total"]] if rows else []
    caption = scores.LEGEND
    if len(tied) > 1:
        caption = (f"{len(tied)} pods tie at total {rows[0]['total']}; ties go to the smallest pod name, so "
                   f"{rows[0]['pod']} (before {tied[1]['pod']}) won.\n" + caption)
    table = Table(title=question, caption=caption, caption_justify="left")
    for column in ("rank", "pod", "total", *plugins):
        table.add_column(column, no_wrap=column == "pod", justify="right" if column in ("rank", "total") else "left")
    for row in rows:
        cells = [_score_cell(plugin, str(row.get(plugin, "-"))) for plugin in plugins]
        table.add_row(str(row["rank"]), str(row["pod"]), str(row["total"]), *cells)
    return table


def _score_cell(plugin: str, text: str) -> str:
    """The history view's ``normalised (raw R)`` in the one form every command prints."""
    normalized, _, raw = text.partition(" (raw ")
    return scores.text(plugin, normalized, raw.rstrip(")")) if raw else text


def _journal_agrees(console: Console, r: demo.Report, rows: list[dict[str, object]]) -> None:
    from_journal = sum(int(str(row.get("runs", 0))) for row in rows)
    unschedulable = sum(r.pending_reasons.values()) - _queued(r)
    verdict = "agrees" if from_journal == unschedulable else f"DISAGREES ({from_journal} by the journal)"
    console.print(f"the journal {verdict}: {unschedulable} Runs unschedulable at the end, as of each Run's latest "
                  f"cycle, and {_queued(r)} waiting in queue (`kruntimes history waits` names the two waits apart)",
                  markup=False)


def _journal_option(shown: str, *, from_env: bool) -> tuple[str, str | None]:
    """The ``--journal`` option the printed commands need, and a note when its URL lacks the password.

    ``shown`` is the report's URL, already masked (``redact.url``): the demo never holds the
    password where it prints. A journal named by the environment needs no option at all.
    """
    if shown == DEFAULT_URL or from_env:
        return "", None
    note = None
    if redact.MASK in shown:
        note = (f"({redact.MASK} stands for the password, which kruntimes never prints; "
                f"or set {journal_args.URL_ENV} and leave --journal out)")
    return f" --journal {shlex.quote(shown)}", note


def _follow_ups(console: Console, r: demo.Report, journal: str) -> None:
    """Commands that answer on this journal: a Run, a pod at a time it was seen, a cycle that exists."""
    placed = r.latest_placement
    lines = ["Ask the journal more:"]
    if placed is not None:
        decided = placed["decided_at"]
        decided = decided.replace(tzinfo=timezone.utc) if decided.tzinfo is None else decided
        # The next whole second: at or after the decision, so the pod's observations are in.
        at = (decided.astimezone(timezone.utc) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines += [f"  kruntimes history run {placed['namespace']}/{placed['run']}{journal}",
                  f"  kruntimes history pod {placed['namespace']}/{placed['pod']} --at {at}{journal}",
                  f"  kruntimes replay cycle {placed['lsn']}{journal}"]
    lines += [f"  kruntimes replay cycle --last{journal}",
              f"  kruntimes history cycles --outcome unschedulable{journal}",
              f"  kruntimes history waits{journal}   (in queue apart from unschedulable)",
              "  or plain SQL over the views in docs/journal.md",
              "See it in a browser (read-only; Timeline, Waits, each Run's story, replay, what-if, integrity):",
              f"  kruntimes ui{journal}   then open http://127.0.0.1:8080/"]
    console.print("\n".join(lines), markup=False, soft_wrap=True)


def _timeline(timeline: list[tuple[float, Counter[str]]]) -> Table:
    table = Table(title="Runs by phase over time", caption_justify="left",
                  caption="Pending counts both waits: Runs waiting in queue (no cycle has evaluated them yet) and "
                          "unschedulable ones (a cycle found no pod); `kruntimes history waits` names them apart")
    table.add_column("at", justify="right")
    for phase in demo_watch.PHASES:
        table.add_column(phase, justify="right")
    for at, phases in demo_watch.rows(timeline):
        table.add_row(f"{at:.1f}s", *(str(phases.get(p, 0)) for p in demo_watch.PHASES))
    table.add_section()
    table.add_row("", *(demo_watch.sparkline([c.get(p, 0) for _, c in timeline], width=9)
                        for p in demo_watch.PHASES))
    return table


def _reasons(title: str, counts: Counter[str]) -> Table:
    table = Table(title=title)
    table.add_column("Runs", justify="right")
    table.add_column("Reason")
    for reason, n in counts.most_common():
        table.add_row(str(n), reason)
    return table
