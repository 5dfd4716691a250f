"""End-to-end binds per second: the live scheduler through the real client against the API emulator.

Setup (untimed): the emulator starts in its own process (so its JSON, copies and
watch fan-out do not share this process's GIL), then 1,000 Runtime Pods (Ready,
`runs` capacity 10, fresh heartbeat) and 10,000 Pending Runs are created through the
client. Timed: a `ClusterScheduler` (journal on: SQLite in a temporary directory, or `--journal`)
starts, lists, wins the lease, and binds every Run - one
`replace_namespaced_custom_object_status` per Run - until its informer has seen
them all Scheduled. Every Run fits, so every cycle binds.

Where the time goes, as sums over all workers (threads overlap, so the shares are of
worker time, not of wall time): the planner (`Planner.plan`), the client
(`KubernetesBinder.update_status`: serialising, HTTP, the emulator answering,
deserialising) and the rest of the cycle (snapshot, reserve, journal records,
queue, metrics). The informers' time applying watch events is shown apart.

    python bench/cluster.py                     # 1,000 pods, 10,000 Runs, 4 workers
    python bench/cluster.py --pods 200 --runs 2000 --workers 8
    python bench/cluster.py --in-process        # emulator in this process (shares the GIL)
    python bench/cluster.py --journal-writer thread   # or --no-journal
    python bench/cluster.py --journal postgresql+psycopg://postgres@127.0.0.1:5432/test  # a fresh schema there
    python bench/cluster.py --profile           # cProfile of the workers' cycles, top 25 cumulative
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import multiprocessing
import os
import pstats
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.emulator, when run as a script

import kubernetes.client  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from bench.journal_append import fresh_postgres  # noqa: E402
from kruntimes.api import models  # noqa: E402
from kruntimes.cluster.runner import ClusterScheduler  # noqa: E402
from kruntimes.cluster.settings import ClusterSettings, LeaseSettings  # noqa: E402
from tests.emulator import manifests  # noqa: E402
from tests.emulator.server import Emulator  # noqa: E402

NAMESPACE = "bench"


# -- the emulator, in a child process ---------------------------------------------------------
def _serve(conn: Any, history_size: int) -> None:
    emulator = Emulator(history_size=history_size, bookmark_interval=1.0).start()
    conn.send(emulator.host)
    conn.recv()  # until the parent says stop
    emulator.stop()


class EmulatorProcess:
    def __init__(self, history_size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, history_size), daemon=True)
        self._process.start()
        self.host: str = self._conn.recv()

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(10)


def api_client(host: str, pool: int) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    configuration.host = host
    configuration.connection_pool_maxsize = pool
    return kubernetes.client.ApiClient(configuration)


# -- setup ------------------------------------------------------------------------------------
def populate(api: kubernetes.client.ApiClient, pods: int, runs: int, capacity: int) -> None:
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    heartbeat = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.create_namespace(manifests.namespace(NAMESPACE))  # creates elsewhere are 404, as on a real server

    def pod(i: int) -> None:
        name = f"python-{i:04d}"
        core.create_namespaced_pod(NAMESPACE, manifests.pod(name, {models.RUNTIME_LABEL: "python"}, annotations={
            models.CAPACITY_ANNOTATION_PREFIX + "runs": str(capacity), models.HEARTBEAT_ANNOTATION: heartbeat}))
        core.patch_namespaced_pod_status(name, NAMESPACE, {"status": {"conditions": [
            {"type": "Ready", "status": "True"}]}})

    def run(i: int) -> None:
        custom.create_namespaced_custom_object(models.GROUP, models.VERSION, NAMESPACE, "runs",
                                               manifests.run(f"run-{i:05d}"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(pod, range(pods)))
        list(pool.map(run, range(runs)))


# -- timers -----------------------------------------------------------------------------------
class Timer:
    """Sums the time spent in a wrapped callable, across threads."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.seconds += elapsed
                    self.calls += 1
        return timed


class ThreadProfiles:
    """cProfile of every worker's cycles: one profiler per thread (cProfile is per thread), merged."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            profile = getattr(self._local, "profile", None)
            if profile is None:
                profile = self._local.profile = cProfile.Profile()
                with self._lock:
                    self._all.append(profile)
            profile.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                profile.disable()
        return profiled

    def table(self, top: int) -> str:
        out = io.StringIO()
        stats = pstats.Stats(self._all[0], stream=out)
        for profile in self._all[1:]:
            stats.add(profile)
        stats.sort_stats("cumulative").print_stats(top)
        return out.getvalue()


class TimedHandler:
    def __init__(self, inner: Any, timer: Timer) -> None:
        self.upsert = timer.wrap(inner.upsert)
        self.delete = timer.wrap(inner.delete)


def scheduled(scheduler: ClusterScheduler) -> int:
    with scheduler.cache.lock:
        return sum(1 for r in scheduler.cache.runs() if r.phase == "Scheduled")


# -- one measurement ----------------------------------------------------------------------------
def measure(host: str, args: argparse.Namespace, journal_dir: str, journal_url: str | None) -> dict[str, Any]:
    api = api_client(host, pool=args.workers + 8)
    lease = LeaseSettings(name="bench", namespace=NAMESPACE, identity="bench", duration=15, renew_deadline=10,
                          retry_period=2)
    settings = ClusterSettings(namespace=NAMESPACE, workers=args.workers, lease=lease,
                               journal_url=journal_url,
                               journal_spool=f"{journal_dir}/journal.spool", journal_writer=args.journal_writer,
                               request_timeout=60.0)
    scheduler = ClusterScheduler(api, settings, registry=CollectorRegistry())
    plan, process, informers = Timer(), Timer(), Timer()
    profiles = ThreadProfiles() if args.profile else None
    cycle = scheduler.scheduler.process if profiles is None else profiles.wrap(scheduler.scheduler.process)
    scheduler.scheduler.planner.plan = plan.wrap(scheduler.scheduler.planner.plan)  # type: ignore[method-assign]
    scheduler.scheduler.process = process.wrap(cycle)  # type: ignore[method-assign]
    for informer in scheduler.informers.values():
        informer.handler = TimedHandler(informer.handler, informers)
    started = time.perf_counter()
    scheduler.start()
    synced = leading = bound = None
    try:
        while True:
            now = time.perf_counter()
            if synced is None and scheduler.ready():
                synced = now
            if leading is None and scheduler.leading:
                leading = now
            if bound is None and scheduler.binder.writes >= args.runs:
                bound = now
            if bound is not None and scheduled(scheduler) >= args.runs:
                observed = time.perf_counter()
                break
            if now - started > args.timeout:
                raise SystemExit(f"timed out after {args.timeout}s: {scheduler.binder.writes} binds")
            time.sleep(0.05)
    finally:
        scheduler.stop()
        api.close()
    assert synced is not None and leading is not None and bound is not None
    binder = scheduler.binder
    return {"synced": synced - started, "leading": leading - started, "bound": bound - leading,
            "observed": observed - leading, "binds": binder.writes, "conflicts": binder.conflicts,
            "failures": binder.failures, "results": dict(scheduler.scheduler.results),
            "plan": plan.seconds, "process": process.seconds, "cycles": process.calls, "client": binder.seconds,
            "informers": informers.seconds, "events": informers.calls, "profiles": profiles}


def report(args: argparse.Namespace, r: dict[str, Any], setup: float) -> None:
    rest = r["process"] - r["plan"] - r["client"]
    cycles = max(r["cycles"], 1)
    rows = [
        ("Runtime Pods / Runs / workers", f"{args.pods:,} / {args.runs:,} / {args.workers}"),
        ("emulator", "in this process (shares the GIL)" if args.in_process else "separate process"),
        ("journal", "off" if args.no_journal else
         f"{'PostgreSQL' if args.journal else 'SQLite (WAL)'}, summary detail, {args.journal_writer} writer"),
        ("setup (create pods and Runs, untimed)", f"{setup:.1f} s"),
        ("start -> caches synced (list)", f"{r['synced']:.2f} s"),
        ("start -> leading (relist, checkpoint)", f"{r['leading']:.2f} s"),
        ("leading -> last bind written", f"{r['bound']:.2f} s"),
        ("leading -> last bind observed by the informer", f"{r['observed']:.2f} s"),
        ("binds/s (written)", f"{r['binds'] / r['bound']:,.0f}"),
        ("binds/s (end to end, observed)", f"{r['binds'] / r['observed']:,.0f}"),
        ("cycles / binds / conflicts / errors", f"{r['cycles']:,} / {r['binds']:,} / {r['conflicts']} / {r['failures']}"),
        ("worker time in cycles (sum over workers)", f"{r['process']:.2f} s ({1e3 * r['process'] / cycles:.2f} ms/cycle)"),
        ("  client: status write (HTTP + emulator)", f"{r['client']:.2f} s  {100 * r['client'] / r['process']:.0f}%"
                                                      f"  ({1e3 * r['client'] / cycles:.2f} ms/cycle)"),
        ("  planner: Planner.plan", f"{r['plan']:.2f} s  {100 * r['plan'] / r['process']:.0f}%"
                                    f"  ({1e3 * r['plan'] / cycles:.3f} ms/cycle)"),
        ("  rest: snapshot, reserve, journal, queue", f"{rest:.2f} s  {100 * rest / r['process']:.0f}%"),
        ("informer threads applying events", f"{r['informers']:.2f} s for {r['events']:,} events"
                                             f" ({1e3 * r['informers'] / max(r['events'], 1):.3f} ms/event)"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\nbench/cluster.py - {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if r["profiles"] is not None:
        print("\ncProfile of the workers' cycles (all threads merged; profiling slows them down):\n"
              + r["profiles"].table(25))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--capacity", type=int, default=10, help="runs capacity of each pod (default 10)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--no-journal", action="store_true")
    parser.add_argument("--journal-writer", choices=("process", "thread"), default="process")
    parser.add_argument("--journal", metavar="URL", help="a PostgreSQL journal (each run uses a fresh schema);"
                                                         " default SQLite in a temporary directory")
    parser.add_argument("--in-process", action="store_true", help="run the emulator in this process")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    if args.pods * args.capacity < args.runs:
        parser.error("--pods x --capacity must hold every Run, so that every cycle binds")
    history = 4 * (args.pods + args.runs) + 10_000  # no watch may fall out of the history mid-run
    emulator: Any = Emulator(history_size=history, bookmark_interval=1.0).start() if args.in_process \
        else EmulatorProcess(history)
    try:
        api = api_client(emulator.host, pool=16)
        started = time.perf_counter()
        populate(api, args.pods, args.runs, args.capacity)
        setup = time.perf_counter() - started
        api.close()
        with tempfile.TemporaryDirectory() as journal_dir, contextlib.ExitStack() as stack:
            url = None if args.no_journal else f"sqlite:///{journal_dir}/journal.db"
            if args.journal and not args.no_journal:
                url = stack.enter_context(fresh_postgres(args.journal))
            result = measure(emulator.host, args, journal_dir, url)
    finally:
        emulator.stop()
    report(args, result, setup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
