"""`kruntimes replay verify|cycle|what-if`: re-run recorded cycles from the journal alone.

Exit codes: 0 every replayed decision is identical and (verify) every epoch is whole
(what-if: the report was made); 1 a decision diverged; 2 a usage mistake or an
unreachable journal (one line, as every journal command); 3 the journal is damaged
or cannot be proven - a missing start, gap, end or tail, a broken link, a head
behind a published one, a key mismatch, a checkpoint that disagrees with the
records before it, an unknown schema version - named by epoch and LSN, because
trusting or replaying past it would be silently wrong.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from kruntimes import scores
from kruntimes.cli import journal_args as ja
from kruntimes.cli import output, verify_report
from kruntimes.cli.output import Column, Listing
from kruntimes.journal import chain
from kruntimes.scheduler.config import ConfigError
from replay import engine, errors, explain, integrity, parallel, source, verify, whatif

EXIT_DIVERGED = 1
EXIT_USAGE = 2
EXIT_DAMAGED = 3


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="re-run recorded cycles from the journal: verify, explain, what-if",
                       description="Rebuild what the scheduler saw in recorded cycles from the journal alone and "
                                   "run this installation's planner on it. No cluster needed.")
    actions = p.add_subparsers(dest="replay_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    ja.add_url_option(common)
    output.add_options(common)
    window = argparse.ArgumentParser(add_help=False)
    window.add_argument("--since", metavar="TIME", help="cycles decided at or after TIME (RFC 3339 or an age: 2h)")
    window.add_argument("--until", metavar="TIME", help="cycles decided before TIME")
    window.add_argument("--incarnation", metavar="ID", help="only this scheduler incarnation (ID or unique prefix)")

    v = actions.add_parser("verify", parents=[common, window], help="replay every cycle in range; exit 1 on divergence",
                           description="Replays every recorded cycle in range with this planner and requires the "
                                       "same decision, every recorded field and the digest of the full outcome.")
    v.add_argument("--show", type=int, default=3, metavar="N", help="divergent cycles shown in detail (3)")
    v.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes that replay at once (default: the CPUs available; 1 replays in this process)")
    v.add_argument("--journal-key-file", metavar="PATH",
                   help=f"the chain's HMAC key (default: ${chain.KEY_FILE_ENV}); without it keyed epochs' links "
                        "are not checked")
    v.add_argument("--head", action="append", default=[], metavar="EPOCH:LSN:HASH",
                   help="a head the scheduler published (`journal head` log line); the stored head must not be "
                        "behind it (repeatable)")
    v.set_defaults(run=run_verify)

    c = actions.add_parser("cycle", parents=[common], help="explain one cycle: every pod's verdict and scores",
                           description="Rebuilds one cycle's snapshot and prints every pod with its verdict, reason, "
                                       "scores and usage, the winner, and what the assumed cache held.")
    c.add_argument("lsn", nargs="?", metavar="[EPOCH:]LSN",
                   help="the cycle's LSN (`kruntimes history cycles`); EPOCH:LSN (a unique prefix of the epoch) "
                        "when several epochs have a cycle at that LSN")
    c.add_argument("--last", action="store_true", help="explain the newest cycle in the journal")
    c.add_argument("--run", dest="run_key", metavar="NS/NAME", help="explain this Run's cycles instead")
    c.add_argument("--limit", type=int, default=3, metavar="N", help="with --run: its newest N cycles (3)")
    c.set_defaults(run=run_cycle)

    w = actions.add_parser("what-if", parents=[common, window],
                           help="replay cycles with other weights or plugins; which decisions change",
                           description="Each cycle is replayed against the RECORDED history, not against the "
                                       "consequences of earlier changed decisions (see docs/replay.md).")
    w.add_argument("--cycle", metavar="[EPOCH:]LSN", help="only this cycle")
    w.add_argument("--run", dest="run_key", metavar="NS/NAME", help="only this Run's cycles")
    w.add_argument("--weights", metavar="PLUGIN=W,...", help="score weights, e.g. LeastLoaded=3,PreferredRunAffinity=1")
    w.add_argument("--disable-plugin", action="append", default=[], metavar="NAME",
                   help="run without this Filter or Score plugin (repeatable)")
    w.add_argument("--default-runs-capacity", type=int, metavar="N",
                   help="the `runs` capacity of pods that declare none")
    w.add_argument("--show", type=int, default=20, metavar="N", help="changed decisions listed (20)")
    w.set_defaults(run=run_what_if)


def guarded(prog: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """`journal_args.guarded` plus replay's own failures: not found (2) and damage (3)."""

    def wrap(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        inner = ja.guarded(prog)(command)

        @functools.wraps(command)
        def run(args: argparse.Namespace) -> int:
            try:
                return inner(args)
            except errors.JournalDamage as exc:
                print(f"{prog}: {exc}\n{prog}: the journal cannot be replayed past LSN {exc.lsn}; nothing after it "
                      "was judged", file=sys.stderr)
                return EXIT_DAMAGED
            except errors.ReplayError as exc:
                print(f"{prog}: {exc}", file=sys.stderr)
                return EXIT_USAGE

        return run

    return wrap


def _console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=160)


def _selection(args: argparse.Namespace, journal: Any, **extra: Any) -> source.Selection:
    since = ja.parse_time(args.since, what="--since") if getattr(args, "since", None) else None
    until = ja.parse_time(args.until, what="--until") if getattr(args, "until", None) else None
    incarnation = source.resolve_incarnation(journal, args.incarnation) if getattr(args, "incarnation", None) else None
    return source.Selection(since=since, until=until, incarnation=incarnation, **extra)


# -- verify ------------------------------------------------------------------------------------

@guarded("kruntimes replay verify")
def run_verify(args: argparse.Namespace) -> int:
    workers = parallel.default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise ja.UsageError(f"--workers must be at least 1, got {workers}")
    try:
        published = [integrity.PublishedHead.parse(text) for text in args.head]
        key = chain.load_key(args.journal_key_file)
    except (ValueError, chain.ChainKeyError) as exc:
        raise ja.UsageError(str(exc)) from exc
    journal = ja.open_journal(ja.journal_url(args))
    progress = verify_report.VerifyProgress(enabled=not output.structured(args))
    try:
        report = verify.verify(journal, _selection(args, journal), progress, workers=workers, key=key,
                               published=published)
    finally:
        progress.close()
        journal.close()
    if output.structured(args):
        output.print_document(args, scores.with_named_raws(verify_report.verify_json(report)))
    else:
        verify_report.print_verify(_console(), report, max(0, args.show), args)
    if report.selected == 0:
        print("kruntimes replay verify: no cycle in range", file=sys.stderr)
    if report.problems:
        return EXIT_DAMAGED
    return 0 if report.ok else EXIT_DIVERGED


# -- cycle -------------------------------------------------------------------------------------

def cycle_selection(journal: Any, text: str) -> source.Selection:
    """One cycle, from `LSN` (unique across epochs) or `EPOCH:LSN` (a unique prefix of the epoch).

    LSNs are gap-free within an epoch and unique across epochs in practice, not by
    construction (SPEC §5): a plain LSN that names cycles of several epochs is refused,
    listing them.
    """
    epoch, sep, number = text.strip().rpartition(":")
    if not number.isdigit() or (sep and not epoch):
        raise ja.UsageError(f"expected a cycle as LSN or EPOCH:LSN, got {text!r}")
    lsn = int(number)
    if sep:
        return source.Selection(lsns=(lsn,), incarnation=integrity.resolve(integrity.epochs(journal), epoch))
    epochs = sorted({ref.incarnation for ref in engine.select(journal, source.Selection(lsns=(lsn,)))})
    if len(epochs) > 1:
        raise errors.CycleNotFound(f"LSN {lsn} is a cycle in {len(epochs)} epochs; give one of "
                                   f"{', '.join(f'{e[:12]}:{lsn}' for e in epochs)}")
    return source.Selection(lsns=(lsn,), incarnation=epochs[0] if epochs else None)


@guarded("kruntimes replay cycle")
def run_cycle(args: argparse.Namespace) -> int:
    if sum((args.lsn is not None, args.run_key is not None, args.last)) != 1:
        raise ja.UsageError("give a cycle LSN, --last or --run NS/NAME (one of them)")
    if args.limit < 1:
        raise ja.UsageError(f"--limit must be at least 1, got {args.limit}")
    journal = ja.open_journal(ja.journal_url(args))
    try:
        if args.run_key is not None:
            run_key = ja.parse_key(args.run_key)
            # By (epoch, LSN): another epoch may hold another Run's cycle at the same LSN.
            keys = [(ref.incarnation, ref.lsn) for ref in engine.select(journal, source.Selection(run=run_key))]
            if not keys:
                raise errors.CycleNotFound(f"no cycle of Run {args.run_key} in the journal")
            found = explain.explain(journal, source.Selection(keys=tuple(keys[-args.limit:])))
        else:
            if args.last:
                last = source.last_cycle(journal)
                if last is None:
                    raise errors.CycleNotFound("the journal holds no cycle yet")
                selection = source.Selection(lsns=(last[1],), incarnation=last[0])
            else:
                selection = cycle_selection(journal, args.lsn)
            found = explain.explain(journal, selection)
    finally:
        journal.close()
    if output.structured(args):
        document = [e.as_json() for e in found] if args.run_key is not None else found[0].as_json()
        output.print_document(args, scores.with_named_raws(document))
    else:
        console = _console()
        for e in found:
            _print_explanation(console, e, args)
    return 0 if all(e.result.identical for e in found) else EXIT_DIVERGED


def _print_explanation(console: Console, e: explain.Explanation, args: argparse.Namespace) -> None:
    data = e.as_json()
    run = data["run"]
    requests = verify_report.amounts(run["requests"])
    console.print(f"[bold]cycle LSN {data['lsn']}[/bold]: Run {run['namespace']}/{run['name']} (runtime "
                  f"{run['runtime']}, requests {requests}) planned at now={data['now']} on the state at LSN "
                  f"{data['snapshot_lsn']} (incarnation {data['incarnation'][:12]})")
    for warning in e.warnings:
        console.print(f"[yellow]warning[/yellow]: {warning}")
    output.render(verify_report.outcome_table("every pod as replay computes it",
                                              {**data["replayed"], "pods": data["pods"]}, usage=True), args)
    if data["assumed"]:
        table = Listing([Column("RUN", name=True), Column("POD", name=True), Column("REQUESTS", wrap=True)],
                        title="the assumed cache (reserved, bind not yet observed) in this namespace")
        for a in data["assumed"]:
            table.add(a["run"], a["pod"], verify_report.amounts(a["requests"]))
        output.render(table, args)
    else:
        console.print("the assumed cache held nothing in this namespace")
    if data["assumed_in_other_namespaces"]:
        console.print(f"(and {data['assumed_in_other_namespaces']} assumptions in other namespaces)")
    recorded = data["recorded"]
    if e.result.identical:
        console.print(f"[green]identical[/green] to the record: {recorded['status']}"
                      + (f" on {recorded['chosen']} (total {recorded['total']})" if recorded.get("chosen") else
                         f" - {recorded.get('message')}") + f"; result {recorded.get('result')}")
    else:
        console.print("[red]NOT identical[/red] to the record:")
        for d in e.result.differences:
            console.print(f"  {d}")


# -- what-if -----------------------------------------------------------------------------------

def parse_weights(text: str | None) -> tuple[tuple[str, int], ...]:
    if not text:
        return ()
    found: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ja.UsageError(f"--weights expects PLUGIN=WEIGHT,... with positive integer weights, got {part!r}")
        found[name.strip()] = int(value)
    return tuple(sorted(found.items()))


@guarded("kruntimes replay what-if")
def run_what_if(args: argparse.Namespace) -> int:
    alternative = whatif.Alternative(weights=parse_weights(args.weights), disabled=frozenset(args.disable_plugin),
                                     default_runs_capacity=args.default_runs_capacity)
    if alternative == whatif.Alternative():
        raise ja.UsageError("nothing to try: give --weights, --disable-plugin or --default-runs-capacity")
    if args.default_runs_capacity is not None and args.default_runs_capacity < 0:
        raise ja.UsageError("--default-runs-capacity must be >= 0")
    journal = ja.open_journal(ja.journal_url(args))
    try:
        extra: dict[str, Any] = {}
        if args.cycle is not None:
            one = cycle_selection(journal, args.cycle)
            extra["lsns"] = one.lsns
            if one.incarnation is not None:
                if args.incarnation:
                    raise ja.UsageError("give the epoch in --cycle EPOCH:LSN or --incarnation, not both")
                args.incarnation = one.incarnation
        if args.run_key is not None:
            extra["run"] = ja.parse_key(args.run_key)
        selection = _selection(args, journal, **extra)
        try:
            report = whatif.what_if(journal, selection, alternative)
        except ConfigError as exc:
            raise ja.UsageError(f"the alternative does not apply: {exc}") from exc
    finally:
        journal.close()
    if args.cycle is not None and report.cycles == 0:
        if report.skipped:
            raise errors.CycleNotFound(f"cycle {args.cycle} read a state a prune removed: it cannot be replayed")
        raise errors.CycleNotFound(f"LSN {args.cycle} is not a cycle in the journal")
    if output.structured(args):
        output.print_document(args, scores.with_named_raws(report.as_json()))
    else:
        _print_what_if(_console(), report, max(0, args.show), args)
    return 0


def _print_what_if(console: Console, report: whatif.WhatIfReport, show: int, args: argparse.Namespace) -> None:
    console.print(f"what if: {report.alternative.describe()} - {report.cycles} cycles replayed, "
                  f"[bold]{len(report.changed)}[/bold] decisions would change")
    console.print("(each cycle against the RECORDED history; later cycles do not see the changed decisions)")
    if report.skipped:
        console.print(f"{report.skipped} cycle{'s' if report.skipped != 1 else ''} that read a state a prune removed "
                      "skipped")
    if report.not_reproduced:
        console.print(f"[yellow]{len(report.not_reproduced)} cycles do not reproduce even with the recorded "
                      f"configuration (run `kruntimes replay verify`); left out, first LSN "
                      f"{report.not_reproduced[0]}[/yellow]")
    if report.changed:
        table = Listing([Column("LSN", right=True), Column("RUN", name=True), Column("RECORDED", name=True),
                         Column("WHAT IF", name=True)], title="changed decisions")
        for c in report.changed[:show]:
            table.add(c.lsn, f"{c.namespace}/{c.run}", c.before, c.after)
        output.render(table, args)
        if len(report.changed) > show:
            console.print(f"... and {len(report.changed) - show} more (--show N, or --json)")
    shift = report.shift()
    if shift:
        table = Listing([Column("POD", name=True), Column("RECORDED", right=True), Column("WHAT IF", right=True),
                         Column("Δ", right=True)], title="placement shift (decisions per pod)")
        for pod, before, after in shift:
            table.add(pod, before, after, f"{after - before:+d}")
        output.render(table, args)
