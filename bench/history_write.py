"""What the history tables cost the journal's write path, side by side (issue 15; not a test).

The same busy-cluster records (bench/history_workload.py) are stored with
``Journal.append_batch`` and their payload dicts, as the writer stores them, into fresh
journals on SQLite and PostgreSQL, alternately with and without the history rows (the
derivation replaced by an empty one), three times each at batch sizes 100 and 1,000;
the table shows medians. Encoding (canonical JSON and hash, the writer's other work) is
timed once and added to both, so the last column is the writer's throughput ratio.

    python bench/history_write.py [--records 10000] [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.history_workload import journal_records  # noqa: E402
from bench.journal_append import DEFAULT_POSTGRES, fresh_postgres  # noqa: E402
from kruntimes.journal import backends, derived, records  # noqa: E402


@contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/journal.db"


def store(url: str, rows: list[records.EncodedRecord], payloads: list[Any], batch: int, history: bool) -> float:
    real = derived.derive
    if not history:
        derived.derive = lambda rows, payloads=None, stamp=None: derived.Derived()  # type: ignore[assignment]
    journal = backends.Journal.open(url)
    try:
        started = time.perf_counter()
        for i in range(0, len(rows), batch):
            journal.append_batch(rows[i : i + batch], payloads=payloads[i : i + batch])
        return time.perf_counter() - started
    finally:
        journal.close()
        derived.derive = real  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL", DEFAULT_POSTGRES))
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    recs = journal_records(args.records)
    started = time.perf_counter()
    rows = [records.encode(r, exact=r.kind in ("mutation", "cycle", "reserve", "checkpoint")) for r in recs]
    encode = (time.perf_counter() - started) / len(rows)
    payloads = [r.payload for r in recs]
    fresh: list[tuple[str, Callable[[], Any]]] = [("sqlite", fresh_sqlite)]
    if not args.no_postgres:
        fresh.append(("postgresql", lambda: fresh_postgres(args.postgres)))
    print(f"{len(rows):,} records; encoding {encode * 1e6:.1f} µs a record; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    header = (f"{'backend':<11}{'batch':>6}{'store µs/rec':>14}{'with history':>14}"
              f"{'writer rec/s':>14}{'with history':>14}{'ratio':>7}")
    print(header)
    print("-" * len(header))
    for name, make in fresh:
        for batch in (100, 1000):
            seconds: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(3):
                for history in (False, True):
                    with make() as url:
                        seconds[history].append(store(url, rows, payloads, batch, history) / len(rows))
            off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
            print(f"{name:<11}{batch:>6}{off * 1e6:>14.1f}{on * 1e6:>14.1f}{1 / (encode + off):>14,.0f}"
                  f"{1 / (encode + on):>14,.0f}{(encode + off) / (encode + on):>7.0%}")


if __name__ == "__main__":
    main()
