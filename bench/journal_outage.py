"""How long after a database outage the journal's spool is empty again (issue 14; not a test).

The scheduler's journal writer (``ProcessJournalWriter``, its own process) appends
cycle-sized records (~800 bytes, bench/journal_append.py) at a steady rate - by
default the demo's, ~1,100 records/s (`kruntimes demo` journals ~42,000 records in
~38 s here) - into PostgreSQL through a TCP proxy (tests/integration/db_proxy.py).
After a warm-up the proxy cuts the database for ``--outage`` seconds (``reset``:
connections refused and reset, as when the server restarts; ``blackhole``: packets
dropped, as in a partition), the records spill to the spool, then the database
returns and the clock runs until the spool is empty, the producer appending all
along, as a live scheduler would. "held in memory" counts records appended but not
yet durable when the database returned: in a blackhole the writer's open
connection hangs (the proxy's kernel still acknowledges what is sent, as a hung
server's would), and records wait in its buffer meanwhile.

Side by side in one run: the writer's own retry back-off (doubling to 30 s) and the
2 s cap the scheduler gives it (``kruntimes.cluster.runner.JOURNAL_MAX_RETRY_SECONDS``).

    python bench/journal_outage.py [--rate N] [--outage SECONDS] [--modes reset,blackhole] [--postgres URL]

PostgreSQL URL: --postgres, $KRUNTIMES_BENCH_POSTGRES_URL, $KRUNTIMES_TEST_POSTGRES_URL, or
postgresql+psycopg://postgres@127.0.0.1:5432/test (each run uses a fresh schema).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.integration, when run as a script

from bench.journal_append import cycle_payload, fresh_postgres  # noqa: E402
from kruntimes.cluster.runner import JOURNAL_MAX_RETRY_SECONDS  # noqa: E402
from kruntimes.journal import records
from kruntimes.journal.store import migrate  # noqa: E402
from kruntimes.journal.write import settings  # noqa: E402
from kruntimes.journal.write.process import ProcessJournalWriter  # noqa: E402
from tests.integration.db_proxy import DatabaseProxy  # noqa: E402

DEMO_RATE = 1_100  # records/s: `kruntimes demo`'s journal, 42,186 records over 37.8 s of recorded_at
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WARM_UP = 3.0
TICK = 0.01


class Outcome(NamedTuple):
    spooled: int  # records in the spool when the database returned
    held: int  # records appended but neither in the database nor in the spool (the writer's memory) then
    seconds: float | None  # from the database's return to an empty spool (None: not within the limit)
    appended: int
    during: int  # records the producer appended while the database was away (a scheduler's cycles go on)
    stall: float  # the longest one append waited then (a full buffer makes the scheduler wait)
    rss_mib: tuple[float, float]  # the writer process's resident memory when the outage began, and its peak


class Producer:
    """Appends ``rate`` records/s in ticks of 10 ms, numbering from 1, until stopped."""

    def __init__(self, writer: ProcessJournalWriter, rate: int) -> None:
        self.writer, self.rate = writer, rate
        self.incarnation = uuid.uuid4().hex
        self.lsn = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def measure(self) -> None:
        """From now on, note the longest append."""
        self.stall, self.measuring = 0.0, True

    def _run(self) -> None:
        started = time.monotonic()
        self.stall, self.measuring = 0.0, False
        while not self._stop.wait(TICK):
            due = int((time.monotonic() - started) * self.rate)
            while self.lsn < due:
                self.lsn += 1
                before = time.monotonic()
                self.writer.append(records.JournalRecord(self.incarnation, self.lsn, datetime.now(timezone.utc),
                                                         "cycle", cycle_payload(self.lsn)))
                if self.measuring:
                    self.stall = max(self.stall, time.monotonic() - before)


def _rss_mib(pid: int | None, field: str) -> float:
    """The writer process's VmRSS or VmHWM (peak) in MiB, from /proc (0 where there is none)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def one_outage(base_url: str, *, mode: str, rate: int, outage: float, retry_cap: float, limit: float) -> Outcome:
    with fresh_postgres(base_url) as direct, tempfile.TemporaryDirectory() as tmp:
        migrate.upgrade(direct)
        host, port = _target(direct)
        proxy = DatabaseProxy((host, port)).start()
        writer = ProcessJournalWriter(settings.Store(proxy.url(direct)), settings.Spool(Path(tmp) / "spool"),
                                      patience=settings.Patience(max_retry_interval=retry_cap))
        producer = Producer(writer, rate).start()
        try:
            time.sleep(WARM_UP)
            rss_before, first = _rss_mib(writer.pid, "VmRSS"), producer.lsn
            producer.measure()
            proxy.cut(mode)  # type: ignore[arg-type]
            time.sleep(outage)
            spooled, held = writer.spooled, writer.stats().buffer_depth
            during, stall, peak = producer.lsn - first, producer.stall, _rss_mib(writer.pid, "VmHWM")
            proxy.restore()
            returned = time.monotonic()
            seconds = None
            while time.monotonic() - returned < limit:
                if writer.spooled == 0 and writer.stats().spilled > 0:
                    seconds = time.monotonic() - returned
                    break
                time.sleep(0.05)
        finally:
            producer.stop()
            writer.close(60)
            proxy.stop()
        return Outcome(spooled, held, seconds, producer.lsn, during, stall, (rss_before, peak))


def _target(url: str) -> tuple[str, int]:
    import sqlalchemy as sa

    parsed = sa.make_url(url)
    return parsed.host or "127.0.0.1", parsed.port or 5432


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=DEMO_RATE, help=f"records/s (default {DEMO_RATE}, the demo's)")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the database is away (default 20)")
    parser.add_argument("--modes", default="reset", help="reset, blackhole or both, comma-separated (default reset)")
    parser.add_argument("--limit", type=float, default=90.0, help="give up waiting for an empty spool after this")
    parser.add_argument("--capped-only", action="store_true", help="only the scheduler's 2 s retry cap")
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL")
                        or os.environ.get("KRUNTIMES_TEST_POSTGRES_URL") or DEFAULT_URL)
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.CRITICAL)  # the writer process logs at this level too: no spill warnings
    load = os.getloadavg()[0]
    print(f"{args.rate} records/s, a {args.outage:g} s outage after {WARM_UP:g} s; {os.cpu_count()} CPUs, "
          f"load {load:.1f}")
    print(f"{'outage':<10} {'writer retry':<22} {'appended during':>16} {'longest append':>15} "
          f"{'spooled at return':>18} {'held in memory':>15} {'return -> empty spool':>22} {'writer MiB':>14}")
    for mode in args.modes.split(","):
        caps = (("back-off to 30 s", 30.0), (f"capped at {JOURNAL_MAX_RETRY_SECONDS:g} s", None))
        for label, cap in caps[1:] if args.capped_only else caps:
            outcome = one_outage(args.postgres, mode=mode, rate=args.rate, outage=args.outage,
                                 retry_cap=cap if cap is not None else JOURNAL_MAX_RETRY_SECONDS, limit=args.limit)
            shown = f"{outcome.seconds:.1f} s" if outcome.seconds is not None else f"> {args.limit:g} s"
            memory = f"{outcome.rss_mib[0]:.0f} -> {outcome.rss_mib[1]:.0f}"
            print(f"{mode:<10} {label:<22} {outcome.during:>16,} {outcome.stall:>13.2f} s {outcome.spooled:>18,} "
                  f"{outcome.held:>15,} {shown:>22} {memory:>14}", flush=True)


if __name__ == "__main__":
    main()
