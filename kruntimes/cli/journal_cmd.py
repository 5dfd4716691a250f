"""`kruntimes journal prune --before TIME` (retention), `kruntimes journal reindex` and `kruntimes journal index`
(the history tables: rebuilt whole, or brought up to date after a ``follow`` writer).

The rule (which checkpoint is kept, what may go) lives in ``kruntimes.journal.prune``;
this prints what was deleted, or with ``--dry-run`` what would be. Deleting asks first
on a terminal (showing what would go) and needs ``--yes`` anywhere else.
"""

from __future__ import annotations

import argparse
import sys

from kruntimes.cli import arg_types
from kruntimes.cli import journal_args as ja
from kruntimes.cli.journal_index import run_index
from kruntimes.journal import chain, prune
from kruntimes.journal.history import check as history_check
from kruntimes.journal.history import indexer


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("journal",
                       help="maintain the journal (prune old records, rebuild or index the history tables)")
    actions = p.add_subparsers(dest="journal_command", required=True, metavar="ACTION")
    q = actions.add_parser(
        "prune", help="delete records older than TIME, keeping every later cycle replayable",
        description="Deletes records older than TIME except incarnation records and everything from the "
                    "newest checkpoint the cycles after TIME need to be replayed. TIME is RFC 3339 (no zone means "
                    "UTC) or an age such as 30m, 2h, 7d.")
    q.add_argument("--before", required=True, metavar="TIME", help="delete records recorded before TIME")
    q.add_argument("--dry-run", action="store_true", help="only print what would be deleted")
    q.add_argument("--journal-key-file", metavar="PATH",
                   help=f"the chain's HMAC key (default: ${chain.KEY_FILE_ENV}): the prune record is keyed like "
                        "the journal's records; a keyed journal is not pruned without it")
    ja.add_url_option(q)
    ja.add_yes_option(q)
    q.set_defaults(run=run_prune)
    r = actions.add_parser(
        "reindex", help="rebuild the history tables from the journal's records",
        description="Empties the history tables (history_*) and derives them again from every stored record, "
                    "in one transaction. The writer's batches wait meanwhile. With --check it changes nothing: it "
                    "compares the tables with what the records derive (exit 3 when they differ).")
    r.add_argument("--check", action="store_true",
                   help="only compare the history tables with what the records derive, and say where they differ")
    ja.add_url_option(r)
    r.set_defaults(run=run_reindex)
    i = actions.add_parser(
        "index", help="bring the history tables up to date with the records (after a --journal-history follow writer)",
        description="Derives the history rows of the records the tables lack - those a scheduler stored with "
                    "--journal-history follow - in LSN order, one transaction per chunk, and exits when the tables "
                    "hold every stored record. With --follow it keeps going, as a sidecar or a Deployment of its "
                    "own, until SIGTERM or Ctrl-C.")
    ja.add_url_option(i)
    i.add_argument("--follow", action="store_true", help="keep indexing new records as they are stored")
    i.add_argument("--interval", type=arg_types.positive(arg_types.seconds(float)), default=1.0, metavar="DURATION",
                   help="with --follow: the pause when the tables have caught up (default 1s)")
    i.add_argument("--chunk", type=arg_types.positive(int), default=2_000, metavar="N",
                   help="records per transaction (default 2000): a writer on SQLite waits at most one chunk")
    i.add_argument("--http-address", default="0.0.0.0", metavar="ADDRESS",
                   help="with --follow and --http-port: the address of /metrics (default 0.0.0.0)")
    i.add_argument("--http-port", type=int, default=None, metavar="PORT",
                   help="with --follow: serve Prometheus metrics on this port (default: none)")
    i.set_defaults(run=run_index)


@ja.guarded("kruntimes journal reindex")
def run_reindex(args: argparse.Namespace) -> int:
    journal = ja.open_journal(ja.journal_url(args))
    try:
        if args.check:
            return _report_check(history_check.check(journal))
        read = journal.reindex()
    finally:
        journal.close()
    print(f"rebuilt the history tables from {read} records")
    return 0


#: Exit codes of `journal reindex --check`: as `replay verify`'s (0 same, 2 cannot tell, 3 damaged).
EXIT_DIFFERS, EXIT_CANNOT_CHECK = 3, 2


def _report_check(found: history_check.HistoryCheck) -> int:
    """What `reindex --check` found, one line per difference, then a summary line."""
    if found.trailing:
        print(f"not checked: {indexer.describe(list(found.trailing))}; run \"{indexer.CATCH_UP}\" first",
              file=sys.stderr)
        return EXIT_CANNOT_CHECK
    for d in found.differences:
        why = ("a prune leaves counts and pending episodes unlike a rebuild until `kruntimes journal reindex`"
               if d.after_prune
               else "changed outside the writer, or derived by another kruntimes")
        print(f"{'note' if d.after_prune else 'differs'} {d.table}: {d.stored} rows stored, {d.derived} derived "
              f"from the records; first difference at key {d.near} ({why})")
    damaged = [d for d in found.differences if not d.after_prune]
    verdict = f"DIFFERS in {len(damaged)} table{'s' if len(damaged) != 1 else ''}" if damaged else "OK"
    print(f"{verdict}: {found.tables} history tables compared with what {found.records} records derive in "
          f"{found.seconds:.1f} s (nothing changed)")
    return EXIT_DIFFERS if damaged else 0


@ja.guarded("kruntimes journal prune")
def run_prune(args: argparse.Namespace) -> int:
    before = ja.parse_time(args.before, what="--before")
    try:
        key = chain.load_key(args.journal_key_file)
    except chain.ChainKeyError as exc:
        raise ja.UsageError(str(exc)) from exc
    journal = ja.open_journal(ja.journal_url(args))
    try:
        if args.dry_run or args.yes:
            report = prune.prune(journal, before, dry_run=args.dry_run, key=key)
        else:
            # Show what would go, then ask: the question names the count the person agrees to.
            report = prune.prune(journal, before, dry_run=True, key=key)
            if report.deleted:
                print(describe(report))
                ja.confirm(args, f"delete these {report.total} records from {ja.shown(ja.journal_url(args))}?")
                report = prune.prune(journal, before, key=key)
    finally:
        journal.close()
    print(describe(report))
    return 0


def describe(r: prune.PruneReport) -> str:
    """What a prune did (or, dry, would do): the records deleted, the epochs removed whole, the checkpoint
    kept and why - so that what it prints is what it does."""
    cutoff = ja.when(r.before)
    if r.checkpoint_lsn is None:
        why = (f"no checkpoint of epoch {r.epoch} at or before LSN {r.needed_lsn} was recorded before {cutoff}"
               if r.needed_lsn is not None else "the journal is empty")
        kept = f"epoch {r.epoch} is not cut: {why}"
    else:
        if r.first_cycle_lsn is not None:
            need = (f"cycle {r.first_cycle_lsn} read the oldest snapshot of any cycle after {cutoff}, "
                    f"at LSN {r.needed_lsn}")
        else:
            need = f"no cycle after {cutoff}; cycles to come start from the newest checkpoint"
        kept = (f"kept checkpoint LSN {r.checkpoint_lsn} of epoch {r.epoch} and every record after it ({need}); "
                "incarnation records kept")
    if not r.deleted:
        if r.checkpoint_lsn is None:
            return f"nothing to prune before {cutoff}: {why}, and no older epoch is wholly before it"
        return f"nothing to prune before {cutoff}\n{kept}"
    verb = "would delete" if r.dry_run else "deleted"
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(r.deleted.items()))
    spans = ", ".join(f"{low}..{high} of epoch {epoch}" for epoch, (low, high) in r.deleted_lsns.items())
    lines = [f"{verb} {r.total} records older than {cutoff} (LSNs {spans}): {kinds}"]
    if r.removed_epochs:
        n = len(r.removed_epochs)
        lines.append(f"{verb} {n} older epoch{'s' if n != 1 else ''} whole: {', '.join(r.removed_epochs)} "
                     f"(every record older than {cutoff})")
    recorded = "" if r.dry_run else "; recorded at LSN 0 (`replay verify` accounts for it from there)"
    lines.append(kept + recorded)
    return "\n".join(lines)
