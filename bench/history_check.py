"""What proving a journal costs at production scale: `replay verify`'s integrity check and `journal reindex
--check` (issue 22 item 8), on the 1M-record journals of ``bench/history.py``.

`verify` proves the records (every payload hash and link, the heads, the prunes);
`journal reindex --check` proves the history tables are what those records derive,
by rebuilding them in a transaction it rolls back. Both read every record once; the
check also writes and reads back every history row. Uses (and builds, if needed)
the journals `bench/history.py` keeps, so build them there first:

    python bench/history.py --sizes 1000000 --backends sqlite --build-only --dir DIR
    python bench/history_check.py [--sizes 1000000] [--backends sqlite,postgresql] [--dir DIR] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import history as bench_history  # noqa: E402
from kruntimes.journal.history import check as history_check
from kruntimes.journal.store import backends  # noqa: E402
from replay import coverage, integrity  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL",
                                                              bench_history.DEFAULT_POSTGRES))
    args = parser.parse_args()
    print(f"{'journal':<22}{'records':>10}{'verify integrity s':>20}{'reindex --check s':>19}{'records/s':>10}"
          f"{'max RSS MiB':>13}")
    for backend in args.backends.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            url, _built, _ = bench_history.ensure(backend, size, Path(args.dir), args.postgres, rebuild=False)
            journal = backends.Journal.open(url, create=False)
            try:
                started = time.perf_counter()
                pruned = coverage.check(journal)
                epochs = integrity.check(journal, starts=pruned.starts if pruned else None)
                proven = time.perf_counter() - started
                assert all(e.ok for e in epochs), [str(p) for e in epochs for p in e.problems]
                found = history_check.check(journal)
            finally:
                journal.close()
            assert found.ok, found
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{backend + ' ' + f'{size:,}':<22}{found.records:>10,}{proven:>20.1f}{found.seconds:>19.1f}"
                  f"{found.records / found.seconds:>10,.0f}{rss:>13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
