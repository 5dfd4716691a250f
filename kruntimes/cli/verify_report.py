"""How `kruntimes replay verify` shows its report: on a terminal, as JSON, and its progress.

The report on a terminal: what a prune removed, the epochs table, each problem and
warning, the divergent cycles with their replayed outcome, and one summary line that
says OK, DIVERGED or DAMAGED. The per-pod outcome table drawn for a divergent cycle
is the one `replay cycle` draws too (`outcome_table`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kruntimes import scores
from kruntimes.cli import output
from kruntimes.cli.output import Column, Listing
from replay import compare, ends, reproduce, verify


class VerifyProgress:
    """A progress bar on a terminal; otherwise a line on stderr every few seconds."""

    def __init__(self, enabled: bool, every: float = 2.0) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.every = every
        self._last = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int, diverged: int) -> None:
        if not self.enabled:
            return
        if self.tty:
            if self._bar is None:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                self._bar = Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[diverged]} diverged"), TimeRemainingColumn(),
                                     console=Console(stderr=True), transient=True)
                self._bar.start()
                self._task = self._bar.add_task("verify", total=total, diverged=0)
            self._bar.update(self._task, completed=done, diverged=diverged)
            return
        now = time.monotonic()
        if done == total or now - self._last >= self.every:
            self._last = now
            print(f"kruntimes replay verify: {done}/{total} cycles replayed, {diverged} diverged", file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def verify_json(report: verify.VerifyReport) -> dict[str, Any]:
    """The report as `--json` prints it."""
    return {"ok": report.ok, "selected": report.selected, "replayed": report.replayed,
            "identical": report.identical, "diverged": [r.as_json() for r in report.diverged],
            "incarnations": report.stats.incarnations, "records_applied": report.stats.records,
            "checkpoints_compared": report.stats.checkpoints_compared, "warnings": report.stats.warnings,
            "seconds": round(report.seconds, 3), "workers": report.workers,
            "epochs": [e.as_json() for e in report.epochs.values()],
            "problems": [{"epoch": p.epoch, "lsn": p.lsn, "problem": p.what, "detail": p.detail}
                         for p in report.problems],
            "pruned": None if report.pruned is None else {**dataclasses.asdict(report.pruned),
                                                          "skipped_cycles": report.skipped},
            "history_tables": {"checked": False, "check_with": HISTORY_CHECK}}


def _pruned_note(report: verify.VerifyReport) -> str | None:
    """What a prune removed and where verification starts, in one line (None if never pruned)."""
    p = report.pruned
    if p is None:
        return None
    n = report.skipped
    skipped = f"; {n} cycle{'s' if n != 1 else ''} that read a pruned state skipped" if n else ""
    parts = []
    if p.checkpoint_lsn is not None:
        parts.append(f"records before LSN {p.checkpoint_lsn} were pruned")
    if p.removed_epochs:
        parts.append(f"{len(p.removed_epochs)} older epoch{'s' if len(p.removed_epochs) != 1 else ''} removed whole")
    start = f"; verifying from the checkpoint at {p.checkpoint_lsn}" if p.checkpoint_lsn is not None else ""
    return f"{' and '.join(parts)} (on {p.pruned_at} by {p.by}, cut-off {p.before}){start}{skipped}"


def _epochs_table(report: verify.VerifyReport) -> Table:
    """Per epoch: what was checked and what was found."""
    table = Table(title="epochs (oldest first)", title_justify="left")
    for column in ("EPOCH", "LSNS", "STATE", "RECORDS", "LINKS", "CYCLES", "PROBLEMS"):
        table.add_column(column, justify="right" if column in ("RECORDS", "LINKS", "PROBLEMS") else "left",
                         no_wrap=True)
    for e in report.epochs.values():
        lsns = f"{e.first_lsn}..{e.head_lsn}" if e.head_lsn is not None else f"{e.first_lsn}.."
        if e.pruned_until is not None:
            lsns += f" (pruned below {e.pruned_until})"
        state = ends.describe(e)
        links = f"{e.links:,}" if e.algorithm is None or e.links else f"- ({e.algorithm})"
        cycles = f"{e.identical:,} identical" + (f", {e.diverged:,} diverged" if e.diverged else "")
        problems = len(e.problems) + e.more_problems
        table.add_row(e.epoch[:12], lsns, state, f"{e.records:,}", links, cycles,
                      f"[red]{problems}[/red]" if problems else "0")
    return table


def print_verify(console: Console, report: verify.VerifyReport, show: int, args: argparse.Namespace) -> None:
    """The report on a terminal, with the first ``show`` divergent cycles in detail."""
    note = _pruned_note(report)
    if note is not None:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    if report.epochs:
        console.print(_epochs_table(report))
    for e in report.epochs.values():  # named, not damage: handed over, never acknowledged, lost in a crash
        if e.lost_in_crash is not None:
            first, last = e.lost_in_crash
            console.print(f"records lost in a crash: epoch {e.epoch}, LSNs {first}..{last} (handed to its writer, "
                          "never acknowledged)", markup=False, highlight=False, soft_wrap=True)
    for problem in report.problems:
        console.print(Text.assemble(("problem ", "bold red"), str(problem)), highlight=False, soft_wrap=True)
    for e in report.epochs.values():
        if e.more_problems:
            console.print(f"[red]... and {e.more_problems} more problems in epoch {e.epoch}[/red] (--json lists "
                          "the first ones only)")
    for warning in report.stats.warnings:
        console.print(f"[yellow]warning[/yellow]: {warning}")
    for result in report.diverged[:show]:
        _print_divergence(console, result, args)
    n = len(report.stats.incarnations)
    by = f" by {report.workers} processes" if report.workers > 1 else ""
    checked = ""
    if report.epochs:
        e = len(report.epochs)
        checked = (f"; {sum(x.records for x in report.epochs.values())} records of {e} epoch{'s' if e != 1 else ''} "
                   f"checked ({sum(x.links for x in report.epochs.values())} links)")
    summary = (f"{report.replayed} cycles of {n} epoch{'s' if n != 1 else ''} replayed{by} in "
               f"{report.seconds:.2f}s ({report.rate:.0f}/s; {report.stats.records} records applied, "
               f"{report.stats.checkpoints_compared} checkpoints proven): {report.identical} identical, "
               f"{len(report.diverged)} diverged{checked}")
    console.print(HISTORY_NOTE, markup=False, highlight=False, soft_wrap=True)  # the verdict stays the last line
    problems = len(report.problems) + sum(e.more_problems for e in report.epochs.values())
    if problems:
        damaged = sum(1 for e in report.epochs.values() if e.problems) or 1
        console.print(f"[bold red]DAMAGED[/bold red] {problems} problem{'s' if problems != 1 else ''} in {damaged} "
                      f"epoch{'s' if damaged != 1 else ''}; {summary}", soft_wrap=True)
    elif report.diverged:
        first = report.diverged[0]
        fields = sorted({d.field.split("[")[0].split(".")[0] for r in report.diverged for d in r.differences})
        console.print(f"[bold red]DIVERGED[/bold red] {summary}; first at LSN {first.lsn} ({first.key}); "
                      f"fields that differ: {', '.join(fields)}", soft_wrap=True)
    else:
        console.print(f"[bold green]OK[/bold green] {summary}", soft_wrap=True)


#: verify proves the records; the tables derived from them are checked by another command (SPEC §5).
HISTORY_CHECK = "kruntimes journal reindex --check"
HISTORY_NOTE = (f"the history tables (what `kruntimes history` and the UI read) are not checked here: "
                f"`{HISTORY_CHECK}` compares them with what these records derive")


def _print_divergence(console: Console, result: reproduce.CycleResult, args: argparse.Namespace) -> None:
    console.print(f"[bold]cycle LSN {result.lsn}[/bold] Run {result.key} (epoch {result.incarnation[:12]}): "
                  f"[red]not identical[/red]")
    for d in result.differences:
        console.print(f"  {d}")
    if result.outcome is not None:
        outcome = compare.per_pod_outcome(result.outcome)
        output.render(outcome_table(f"replayed outcome of cycle {result.lsn}", outcome), args)


def outcome_table(title: str, outcome: dict[str, Any], usage: bool = False) -> Listing:
    """Every pod of a cycle's outcome: verdict, scores, total (and with ``usage``, what it held)."""
    plugins = sorted({p for row in outcome["pods"] for p in row.get("scores", {})})
    columns = [Column("POD", name=True), Column("VERDICT", wrap=True), *[Column(p, optional=True) for p in plugins],
               Column("TOTAL", right=True)]
    if usage:
        columns += [Column("USED/CAPACITY", optional=True, wrap=True), Column("ASSUMED", optional=True, wrap=True)]
    title = f"{title}: {outcome['status']}" + (f", chosen {outcome['chosen']}" if outcome["chosen"]
                                               else f" - {outcome['message']}")
    table = Listing(columns, title=title, legend=scores.LEGEND + "; ★ the winner")
    for row in outcome["pods"]:
        found = row.get("scores", {})
        cells = [("★ " if row["winner"] else "") + row["pod"], row["verdict"],
                 *[_score(p, found.get(p)) for p in plugins], "-" if row["total"] is None else str(row["total"])]
        if usage:
            cells += [_usage(row), amounts(row.get("assumed") or {})]
        table.add(*cells)
    return table


def _score(plugin: str, s: dict[str, Any] | None) -> str:
    return "-" if s is None else scores.text(plugin, s["normalized"], s["raw"], s["weight"])


def _usage(row: dict[str, Any]) -> str:
    capacity, used = row.get("capacity") or {}, row.get("used") or {}
    return ", ".join(f"{r} {used.get(r, 0)}/{c}" for r, c in sorted(capacity.items())) or "-"


def amounts(amounts: dict[str, int]) -> str:
    """Resource amounts in one line, by name (``-`` for none)."""
    return ", ".join(f"{r} {q}" for r, q in sorted(amounts.items())) or "-"
