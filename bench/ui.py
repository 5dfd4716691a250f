"""Web view benchmark (issue 17; not a test): server time per page on a large journal.

Each page is rendered through the WSGI application itself (``App.respond``: routing,
parameters, every query, HTML and figure JSON), without the network, ``--repeat``
times; the table shows the median and the slowest wall time, and the median CPU time
of the rendering thread (SQLite runs in that thread, so it counts too). The target is
300 ms per page.

The journal is one you name (``--journal URL``), or one written here by
``bench/replay.py``'s generator: real cache, recorder and planner, 50 Runtimes x 20
pods (1,000 pods), Runs arriving every 10 ms, each reserved, bound, observed, ended
and deleted, pods renewing heartbeats - about 120,000 Runs per million records.

    python bench/ui.py                            # a 1M-record journal (generated in ~8 min), then the pages
    python bench/ui.py --journal sqlite:///path/to/journal.db
    python bench/ui.py --records 20000 --repeat 2 # quick
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

if __name__ == "__main__" and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the repository, not bench/ (replay/ is a package)

import sqlalchemy as sa  # noqa: E402

from kruntimes.ui import markup, queries, server  # noqa: E402

TARGET_MS = 300


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("bench_replay", Path(__file__).with_name("replay.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(path: Path, records: int) -> str:
    url = f"sqlite:///{path}"
    if not path.exists():
        started = time.perf_counter()
        shape = _generator().generate(url, target=records, runtimes=50, pods_per_runtime=20, capacity=4)
        print(f"generated {shape['records']:,} records ({shape['cycles']:,} cycles, {shape['pods']:,} pods) "
              f"in {time.perf_counter() - started:.0f}s at {path}", flush=True)
    return url


def pages(reader: queries.Reader) -> list[tuple[str, str]]:
    """The pages to time: each kind, at the journal's end and in its middle."""
    bounds = reader.bounds()
    assert bounds is not None, "the journal is empty"
    middle = bounds.first_at + (bounds.last_at - bounds.first_at) / 2
    with reader.journal.engine.connect() as conn:
        lsn, payload = conn.execute(sa.text(
            "SELECT lsn, payload FROM journal_records WHERE kind = 'cycle' AND recorded_at >= :at "
            "ORDER BY recorded_at LIMIT 1"), {"at": middle.replace(tzinfo=None).isoformat(" ")}).one()
    import orjson

    cycle = orjson.loads(payload)
    ns, run, pod = cycle["namespace"], cycle["run"], cycle.get("chosen") or ""
    run_path = f"/run/{markup.seg(ns)}/{markup.seg(run)}"
    return [
        ("Timeline, last 60 s (default)", "/timeline"),
        ("Timeline, 60 s mid-journal", markup.url("/timeline", since=middle - timedelta(seconds=30),
                                                  until=middle + timedelta(seconds=30))),
        ("Timeline, 60 s, one Runtime", markup.url("/timeline", runtime="rt7")),
        ("Timeline, lanes 961-1000", markup.url("/timeline", lanes=960)),
        ("Timeline, 5 min", markup.url("/timeline", since=bounds.last_at - timedelta(minutes=5))),
        ("Run (mid-journal)", run_path),
        ("Pod at T (mid-journal)", markup.url(f"/pod/{markup.seg(ns)}/{markup.seg(pod)}", at=middle)),
        ("Pod list at the end", "/pod"),
        ("What-if form", "/whatif"),
        ("Integrity", "/integrity"),
        ("Replay verdict of one cycle (on demand)", f"/replay/{lsn}?fragment=1"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journal", help="an existing journal's URL (default: generate one)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records to generate (1,000,000)")
    parser.add_argument("--dir", help="where to write the generated journal (default: a temporary directory)")
    parser.add_argument("--repeat", type=int, default=5, help="renders per page (5)")
    args = parser.parse_args(argv)
    url = args.journal or build(Path(args.dir or tempfile.mkdtemp(prefix="kruntimes-ui-bench-"))
                                / f"ui-{args.records}.db", args.records)
    reader = queries.open_reader(url)
    app = server.App(reader)
    counts = reader.kind_counts()
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}; "
          f"{sum(counts.values()):,} records, {counts.get('cycle', 0):,} cycles ({reader.backend})")
    header = f"{'page':<42} {'median ms':>10} {'max ms':>8} {'CPU ms':>8} {'KiB':>7}  {'':<6}"
    print(header)
    print("-" * len(header))
    for name, path in pages(reader):
        target, _, query = path.partition("?")
        times, cpu, size = [], [], 0
        for _ in range(args.repeat):
            started, used = time.perf_counter(), time.thread_time()
            status, _, body = app.respond("GET", target, query)
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - used) * 1000)
            size = len(body)
            if not status.startswith("200"):
                print(f"{name}: {status}: {body[:200]!r}", file=sys.stderr)
                break
        median = statistics.median(times)
        verdict = "ok" if median <= TARGET_MS else "SLOW"
        print(f"{name:<42} {median:>10.1f} {max(times):>8.1f} {statistics.median(cpu):>8.1f} {size / 1024:>7.0f}  "
              f"{verdict:<6}", flush=True)
    print(f"target: <= {TARGET_MS} ms server time per page (median wall time; CPU ms is this thread's own time,\n"
          "which does not count waiting for a core or for the disk: on a busy machine compare the two)")
    reader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
