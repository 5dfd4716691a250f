"""`kruntimes journal index [--follow]`: the history tables' indexer, for schedulers started with
``--journal-history follow`` (``kruntimes.journal.history.indexer``).

Once, it derives what the tables lack and exits. With ``--follow`` it is a long-running
process (a sidecar, or a Deployment of its own): it indexes, sleeps ``--interval`` when
caught up, rides out a database that is away (retrying with a back-off, as the
scheduler's writer does, rather than exiting into a crash loop) and stops cleanly on
SIGTERM or Ctrl-C. ``--http-port`` serves its Prometheus metrics: records indexed, how
far the tables trail, failed rounds.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from kruntimes.cli import journal_args as ja
from kruntimes.journal import errors, redact
from kruntimes.journal.history import indexer
from kruntimes.journal.store import backends

#: The longest pause between attempts while the database is away.
MAX_RETRY_SECONDS = 30.0


class Metrics:
    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Gauge  # only a following indexer serves metrics

        self.indexed = Counter("kruntimes_history_indexed_records", "Records whose history rows the indexer wrote",
                               registry=registry)
        self.lag = Gauge("kruntimes_history_lag_lsns",
                         "LSNs of stored records the history tables do not hold yet (0: caught up)", registry=registry)
        self.failures = Counter("kruntimes_history_index_failures", "Indexing rounds that failed (database away)",
                                registry=registry)


@ja.guarded("kruntimes journal index")
def run_index(args: argparse.Namespace) -> int:
    journal = ja.open_journal(ja.journal_url(args))
    try:
        if not args.follow:
            started = time.monotonic()
            rebuilding = _rebuilding(journal)
            total = journal.index(chunk_size=args.chunk)
            seconds = time.monotonic() - started
            print(f"{rebuilding}indexed {total} records in {seconds:.1f} s; {indexer.describe(journal.history_lag())}")
            return 0
        return _follow(journal, args)
    finally:
        journal.close()


def _rebuilding(journal: backends.Journal) -> str:
    """What this run does besides indexing, said first in the line it prints: what it prints is what it does.

    An older epoch's records stored after a newer epoch's rows cannot be applied after
    them, so ``Journal.index`` rebuilds the tables whole, in epoch order (``Lag.late``).
    """
    if any(lag.late for lag in journal.history_lag()):
        return ("rebuilt the history tables in epoch order (an older epoch's records had arrived after a newer "
                "epoch's rows); ")
    return ""


def _follow(journal: backends.Journal, args: argparse.Namespace) -> int:
    stop = threading.Event()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    if args.http_port is not None:
        start_http_server(args.http_port, addr=args.http_address, registry=registry)
    total, retry = 0, args.interval
    print(f"indexing {ja.shown(ja.journal_url(args))} every {args.interval:g} s once caught up", flush=True)
    try:
        while not stop.is_set():
            try:
                rebuilding = _rebuilding(journal)
                read = journal.index(chunk_size=args.chunk, limit=args.chunk * 50)
                lag = journal.history_lag()
            except errors.JournalUnavailable as exc:
                metrics.failures.inc()
                retry = min(MAX_RETRY_SECONDS, retry * 2)
                why = redact.text(str(exc), ja.journal_url(args))
                print(f"kruntimes journal index: {why}; retrying in {retry:g} s", file=sys.stderr, flush=True)
                stop.wait(retry)
                continue
            retry = args.interval
            total += read
            metrics.indexed.inc(read)
            metrics.lag.set(t.lsns if (t := indexer.trail(lag)) is not None else 0)
            if read:
                print(f"{rebuilding}indexed {read} records; {indexer.describe(lag)}", flush=True)
            if not lag:
                stop.wait(args.interval)
    except KeyboardInterrupt:
        pass
    print(f"stopped after indexing {total} records", flush=True)
    return 0
