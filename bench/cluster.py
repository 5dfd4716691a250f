"""End-to-end binds per second: the live scheduler through the real client against the API emulator.

Setup (untimed): the emulator starts in its own process (so its JSON, copies and
watch fan-out do not share this process's GIL); for each measurement a namespace of
its own gets `--pods` Runtime Pods (Ready, a fresh heartbeat, `runs` capacity enough
for every Run) and `--runs` Pending Runs, created through the client.

**The ceiling** (first, in the same run): how many status replaces per second the
emulator takes from the real client, `replace_namespaced_custom_object_status` with
the resourceVersion guard exactly as a bind, from 1, 4 and 8 threads of one process,
while another process watches Runs and Runtime Pods in every namespace as the
scheduler's informers do. A scheduler cannot bind faster than this.

**Timed**, once per journal mode (`--journal-modes`, default SQLite then off): a
`ClusterScheduler` starts, lists, wins the lease and binds every Run - one status
write per Run, sent by its binder processes - until its informer has seen them all
Scheduled. Every Run fits, so every cycle binds. The closing table puts binds/s
beside the best ceiling and the journal's cost beside no journal.

Where the time goes: the scheduling loop's time in `Scheduler.process` (planning,
reserving and handing the write over - it never waits for HTTP), of which
`Planner.plan`; the binders' time in the client (in their own processes, summed over
their threads); the informer threads applying watch events.

    python bench/cluster.py                              # 1,000 pods, 10,000 Runs: ceiling, SQLite, off
    python bench/cluster.py --pods 200 --runs 2000 --binders 2 --bind-concurrency 4
    python bench/cluster.py --sweep 100,1000,5000 --runs 5000   # throughput vs pod count (SQLite)
    python bench/cluster.py --journal-modes off --no-ceiling
    python bench/cluster.py --journal postgresql+psycopg://postgres@127.0.0.1:5432/test --journal-modes postgres
    python bench/cluster.py --profile                    # cProfile of the scheduling loop, top 25 cumulative
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import io
import json
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
import kubernetes.config  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from bench import proc_cpu  # noqa: E402
from bench.journal_append import fresh_postgres  # noqa: E402
from kruntimes.api import models  # noqa: E402
from kruntimes.cli import kube_args  # noqa: E402
from kruntimes.cluster import client, direct, sources  # noqa: E402
from kruntimes.cluster.informer import Informer  # noqa: E402
from kruntimes.cluster.runner import ClusterScheduler  # noqa: E402
from kruntimes.cluster.settings import ClusterSettings, LeaseSettings  # noqa: E402
from tests.emulator import manifests  # noqa: E402
from tests.emulator.server import Emulator  # noqa: E402


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
    """A client for the emulator at URL ``host``, or for the server of the kubeconfig at path ``host`` (realkube.py)."""
    configuration = kubernetes.client.Configuration()
    if host.startswith("http"):
        configuration.host = host
    else:
        kubernetes.config.load_kube_config(config_file=host, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return kubernetes.client.ApiClient(configuration)


# -- setup ------------------------------------------------------------------------------------
def populate(api: kubernetes.client.ApiClient, namespace: str, pods: int, runs: int, capacity: int) -> list[Any]:
    """Create the namespace, its pods and its Runs; returns the Runs as created."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    heartbeat = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.create_namespace(manifests.namespace(namespace))  # creates elsewhere are 404, as on a real server

    def pod(i: int) -> None:
        name = f"python-{i:04d}"
        core.create_namespaced_pod(namespace, manifests.pod(name, {models.RUNTIME_LABEL: "python"}, annotations={
            models.CAPACITY_ANNOTATION_PREFIX + "runs": str(capacity), models.HEARTBEAT_ANNOTATION: heartbeat}))
        core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [
            {"type": "Ready", "status": "True"}]}})

    def run(i: int) -> Any:
        return custom.create_namespaced_custom_object(models.GROUP, models.VERSION, namespace, "runs",
                                                      manifests.run(f"run-{i:05d}"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(pod, range(pods)))
        return list(pool.map(run, range(runs)))


# -- the ceiling ----------------------------------------------------------------------------------
class _Count:
    def __init__(self) -> None:
        self.events = 0

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        self.events += 1

    def delete(self, namespace: str, name: str) -> None:
        self.events += 1


def _watch(conn: Any, host: str) -> None:
    """A child process: watch Runs and Runtime Pods in every namespace, as the scheduler's informers do."""
    api = api_client(host, pool=4)
    handler = _Count()
    informers = [Informer(sources.runs(api, None), handler, watch_timeout=300),
                 Informer(sources.runtime_pods(api, None), handler, watch_timeout=300)]
    for informer in informers:
        informer.start()
    for informer in informers:
        informer.wait_synced(60)
    conn.send("watching")
    conn.recv()
    for informer in informers:
        informer.stop()
    conn.send(handler.events)


class Watchers:
    def __init__(self, host: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_watch, args=(child, host), daemon=True)
        self._process.start()
        self._conn.recv()

    def stop(self) -> int:
        self._conn.send("stop")
        events = int(self._conn.recv())
        self._process.join(10)
        return events


def ceiling(host: str, shapes: list[str], writes: int) -> dict[str, float]:
    """Status replaces/s from the real client at each shape, with watches running.

    A shape is `T` (T threads of this process) or `PxT` (P processes of T threads each,
    each writing its own share of the Runs): one Python process's client is a limit of
    its own, which a server with room to spare shows only to several. A shape ending in
    `d` writes through `kruntimes.cluster.direct` (the binders' lean path, decoding each
    answer for its resourceVersion) instead of the official client: on a machine the
    client shares with the server, the cheaper client leaves the server more CPU.
    """
    api = api_client(host, pool=2 + max(_shape(s)[1] for s in shapes))
    runs = populate(api, "ceiling", 1, writes, 1)
    objects = [dict(r) for r in runs]
    watchers = Watchers(host)
    rates: dict[str, float] = {}
    try:
        for shape in shapes:
            processes, threads = _shape(shape)
            machine = proc_cpu.snapshot()
            if processes == 1:
                started = time.perf_counter()
                objects = _replace_all(api, objects, threads, shape)
            else:
                context = multiprocessing.get_context("spawn")
                go, answers = context.Event(), context.Queue()
                workers = [context.Process(target=_replace_share, args=(host, objects[i::processes], threads, shape,
                                                                        go, answers, i)) for i in range(processes)]
                for worker in workers:
                    worker.start()
                time.sleep(3.0)  # every process has built its client
                started = time.perf_counter()
                go.set()
                shares = dict(answers.get() for _ in workers)
                for worker in workers:
                    worker.join()
                objects = [obj for i in range(processes) for obj in shares[i]]
            rates[shape] = writes / (time.perf_counter() - started)
            spent = proc_cpu.spent(machine, proc_cpu.snapshot())
            print(f"  ceiling {shape}: {rates[shape]:,.0f}/s; CPU per write, µs: " + ", ".join(
                f"{name} {1e6 * seconds / writes:,.0f}" for name, seconds in spent.items() if seconds >= 0.05),
                flush=True)
    finally:
        watchers.stop()
        api.close()
    return rates


def _shape(shape: str) -> tuple[int, int]:
    processes, _, threads = shape.rpartition("x")
    return int(processes or 1), int(threads.rstrip("d"))


def _replace_all(api: kubernetes.client.ApiClient, objects: list[dict[str, Any]], threads: int,
                 label: str) -> list[dict[str, Any]]:
    """Replace each Run's status once, guarded by its resourceVersion as a bind is; returns the Runs after."""
    custom = kubernetes.client.CustomObjectsApi(client.without_write_retries(api))
    lean = direct.Direct(api.configuration, api.default_headers, threads) if label.endswith("d") else None
    objects = list(objects)

    def write(i: int) -> None:
        obj = objects[i]
        body = {"apiVersion": obj["apiVersion"], "kind": "Run",
                "metadata": {"name": obj["metadata"]["name"], "namespace": "ceiling",
                             "uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": {"phase": "Pending", "conditions": [], "message": f"ceiling {label}"}}
        if lean is None:
            objects[i] = custom.replace_namespaced_custom_object_status(
                models.GROUP, models.VERSION, "ceiling", "runs", obj["metadata"]["name"], body)
            return
        answer = lean.call("PUT", direct.path("apis", models.GROUP, models.VERSION, "namespaces", "ceiling",
                                              "runs", obj["metadata"]["name"], "status"), body, 60.0)
        objects[i] = json.loads(answer.body)

    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(write, range(len(objects))))
    finally:
        if lean is not None:
            lean.close()
    return objects


def _replace_share(host: str, objects: list[dict[str, Any]], threads: int, label: str, go: Any, answers: Any,
                   index: int) -> None:
    """One process of a `PxT` ceiling: its own client, its share of the Runs, started on `go`."""
    api = api_client(host, pool=threads + 2)
    try:
        go.wait()
        answers.put((index, _replace_all(api, objects, threads, label)))
    finally:
        api.close()


# -- timers -----------------------------------------------------------------------------------
class Timer:
    """Sums the time spent in a wrapped callable, across threads."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.returned: collections.Counter[str] = collections.Counter()  # what the calls returned, when a word
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = None
            try:
                result = fn(*args, **kwargs)
                return result
            finally:
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.seconds += elapsed
                    self.calls += 1
                    if isinstance(result, str):
                        self.returned[result] += 1
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
def measure(host: str, args: argparse.Namespace, namespace: str, runs: int, journal_dir: str,
            journal_url: str | None, lease: LeaseSettings | None = None) -> dict[str, Any]:
    api = api_client(host, pool=8)
    lease = lease or LeaseSettings(name="bench", namespace=namespace, identity="bench", duration=15,
                                   renew_deadline=10, retry_period=2)
    settings = ClusterSettings(namespace=namespace, binders=args.binders, bind_concurrency=args.bind_concurrency,
                               lease=lease, journal_url=journal_url,
                               journal_spool=f"{journal_dir}/{namespace}.spool", journal_writer=args.journal_writer,
                               request_timeout=60.0, event_interval=args.event_interval)
    # A kubeconfig's credentials are loaded again in each binder process, as `kruntimes scheduler` does.
    source = None if host.startswith("http") else functools.partial(kube_args.load_configuration, host, None)
    scheduler = ClusterScheduler(api, settings, registry=CollectorRegistry(), configuration_source=source)
    if scheduler.events is not None and getattr(args, "event_senders", None):
        scheduler.events.senders = args.event_senders  # read when it starts
    plan, process, informers = Timer(), Timer(), Timer()
    profiles = ThreadProfiles() if args.profile else None
    cycle = scheduler.scheduler.process if profiles is None else profiles.wrap(scheduler.scheduler.process)
    scheduler.scheduler.planner.plan = plan.wrap(scheduler.scheduler.planner.plan)  # type: ignore[method-assign]
    scheduler.scheduler.process = process.wrap(cycle)  # type: ignore[method-assign]
    for informer in scheduler.informers.values():
        informer.handler = TimedHandler(informer.handler, informers)
    cpu = os.times()
    started = time.perf_counter()
    scheduler.start()
    synced = leading = bound = None
    machine: Any = {}
    try:
        while True:
            now = time.perf_counter()
            if synced is None and scheduler.ready():
                synced = now
            if leading is None and scheduler.leading:
                leading = now
                cpu = os.times()
                machine = proc_cpu.snapshot()
            # A bind whose answer never came (a timeout) is settled by the informer, not counted as a write.
            if bound is None and scheduler.binder.writes + scheduler.binder.ambiguous >= runs:
                bound = now
            if bound is not None and scheduled(scheduler) >= runs:
                observed = time.perf_counter()
                machine = proc_cpu.spent(machine, proc_cpu.snapshot())
                events_then = _events_sent(scheduler)
                break
            if now - started > args.timeout:
                raise SystemExit(f"timed out after {args.timeout}s: {scheduler.binder.writes} binds")
            time.sleep(0.05)
        used = os.times()
    finally:
        scheduler.stop()
        api.close()
    assert synced is not None and leading is not None and bound is not None
    binder = scheduler.binder
    recorder = scheduler.events
    return {"runs": runs, "synced": synced - started, "leading": leading - started, "bound": bound - leading,
            "observed": observed - leading, "binds": binder.writes, "conflicts": binder.conflicts,
            "ambiguous": binder.ambiguous,
            "failures": binder.failures, "results": dict(scheduler.scheduler.results),
            "plan": plan.seconds, "process": process.seconds, "cycles": process.calls, "client": binder.seconds,
            "returned": dict(process.returned),
            "informers": informers.seconds, "events": informers.calls, "profiles": profiles,
            "cpu": (used.user + used.system) - (cpu.user + cpu.system), "machine": machine,
            "scheduled_events": None if recorder is None else
            (events_then, _events_sent(scheduler), recorder.dropped, recorder.failed)}


def _events_sent(scheduler: ClusterScheduler) -> int:
    return 0 if scheduler.events is None else scheduler.events.created + scheduler.events.patched


def report(args: argparse.Namespace, label: str, pods: int, r: dict[str, Any]) -> None:
    cycles = max(r["cycles"], 1)
    wall = r["observed"]
    rows = [
        ("Runtime Pods / Runs", f"{pods:,} / {r['runs']:,}"),
        ("binders x requests in flight", f"{args.binders} x {args.bind_concurrency}"),
        ("journal", label),
        ("start -> caches synced (list)", f"{r['synced']:.2f} s"),
        ("start -> leading (relist, checkpoint)", f"{r['leading']:.2f} s"),
        ("leading -> last bind written", f"{r['bound']:.2f} s"),
        ("leading -> last bind observed by the informer", f"{wall:.2f} s"),
        ("binds/s (written)", f"{r['binds'] / r['bound']:,.0f}"),
        ("binds/s (end to end, observed)", f"{r['runs'] / wall:,.0f}"),
        ("cycles / binds / conflicts / outcomes unknown / errors",
         f"{r['cycles']:,} / {r['binds']:,} / {r['conflicts']} / {r['ambiguous']} / {r['failures']}"),
        ("cycles by what Scheduler.process returned", ", ".join(f"{k} {v:,}" for k, v in sorted(r["returned"].items()))),
        ("cycles by how they ended", ", ".join(f"{k} {v:,}" for k, v in sorted(r["results"].items()))),
        ("scheduler process CPU while leading", f"{r['cpu']:.2f} s ({r['cpu'] / wall:.2f} of a core)"),
        ("scheduling loop in Scheduler.process", f"{r['process']:.2f} s ({1e3 * r['process'] / cycles:.3f} ms/cycle,"
                                                 f" {r['process'] / wall:.2f} of the wall time)"),
        ("  of which Planner.plan", f"{r['plan']:.2f} s ({1e3 * r['plan'] / cycles:.3f} ms/cycle)"),
        ("binders in the client (their processes)", f"{r['client']:.2f} s ({1e3 * r['client'] / cycles:.2f} ms/write,"
                                                     " summed over requests in flight)"),
        ("informer threads applying events", f"{r['informers']:.2f} s for {r['events']:,} events"
                                             f" ({1e3 * r['informers'] / max(r['events'], 1):.3f} ms/event)"),
        ("the machine's CPU while leading, by process", proc_cpu.line(r["machine"], wall)),
    ]
    if r["scheduled_events"] is not None:
        then, sent, dropped, failed = r["scheduled_events"]
        rows.append(("Events written by the last bind / in all", f"{then:,} / {sent:,} ({dropped:,} dropped, the "
                                                                 f"queue full; {failed:,} refused)"))
    width = max(len(k) for k, _ in rows)
    print()
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if r["profiles"] is not None:
        print("\ncProfile of the scheduling loop (profiling slows it down):\n" + r["profiles"].table(25))


def capacity_for(pods: int, runs: int, capacity: int | None) -> int:
    return capacity if capacity is not None else max(10, -(-runs // pods))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--capacity", type=int, help="runs capacity of each pod (default: enough for every Run, "
                                                     "at least 10)")
    parser.add_argument("--binders", type=int, default=ClusterSettings.binders)
    parser.add_argument("--bind-concurrency", type=int, default=ClusterSettings.bind_concurrency)
    parser.add_argument("--journal-modes", default="sqlite,off",
                        help="comma-separated, measured in this order: sqlite, postgres (needs --journal), off")
    parser.add_argument("--journal-writer", choices=("process", "thread"), default="process")
    parser.add_argument("--event-interval", type=float, default=ClusterSettings.event_interval,
                        help="the scheduler's --event-interval; 0: no Events")
    parser.add_argument("--event-senders", type=int,
                        help="Events written at once (default: the scheduler's, as many as binds in flight); "
                             "1 is how they were written before the senders")
    parser.add_argument("--journal", metavar="URL", help="the PostgreSQL server of the postgres mode (each "
                                                         "measurement uses a fresh schema)")
    parser.add_argument("--sweep", metavar="PODS,...", help="instead: one SQLite measurement per pod count")
    parser.add_argument("--ceiling-threads", default="1,4,8", help="shapes: T threads, or PxT processes x threads")
    parser.add_argument("--ceiling-writes", type=int, default=3000)
    parser.add_argument("--no-ceiling", action="store_true")
    parser.add_argument("--in-process", action="store_true", help="run the emulator in this process")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.journal_modes.split(",") if m.strip()]
    if any(m not in ("sqlite", "postgres", "off") for m in modes) or ("postgres" in modes and not args.journal):
        parser.error("--journal-modes takes sqlite, postgres and off; postgres needs --journal URL")
    plan = [(f"pods{p}", int(p), "sqlite") for p in args.sweep.split(",")] if args.sweep else \
        [(f"bench-{m}", args.pods, m) for m in modes]
    for _, pods, _ in plan:
        if args.capacity is not None and pods * args.capacity < args.runs:
            parser.error("--pods x --capacity must hold every Run, so that every cycle binds")
    history = 4 * sum(p + args.runs for _, p, _ in plan) + 3 * args.ceiling_writes + 10_000
    emulator: Any = Emulator(history_size=history, bookmark_interval=1.0).start() if args.in_process \
        else EmulatorProcess(history)
    results: list[tuple[str, int, str, dict[str, Any]]] = []
    rates: dict[str, float] = {}
    try:
        api = api_client(emulator.host, pool=16)
        started = time.perf_counter()
        for namespace, pods, _ in plan:
            populate(api, namespace, pods, args.runs, capacity_for(pods, args.runs, args.capacity))
        print(f"setup (create pods and Runs, untimed): {time.perf_counter() - started:.1f} s", flush=True)
        api.close()
        if not args.no_ceiling:
            rates = ceiling(emulator.host, args.ceiling_threads.split(","), args.ceiling_writes)
            print("ceiling: " + ", ".join(f"{n} {r:,.0f}/s" for n, r in rates.items()), flush=True)
        with tempfile.TemporaryDirectory() as journal_dir:
            for namespace, pods, mode in plan:
                with contextlib.ExitStack() as stack:
                    url = {"off": None, "sqlite": f"sqlite:///{journal_dir}/{namespace}.db"}.get(mode)
                    if mode == "postgres":
                        url = stack.enter_context(fresh_postgres(args.journal))
                    backend = "PostgreSQL" if mode == "postgres" else "SQLite (WAL)"
                    label = "off" if mode == "off" else f"{backend}, summary, {args.journal_writer} writer"
                    result = measure(emulator.host, args, namespace, args.runs, journal_dir, url)
                results.append((namespace, pods, label, result))
                report(args, label, pods, result)
    finally:
        emulator.stop()
    summary(rates, results)
    return 0


def summary(rates: dict[str, float], results: list[tuple[str, int, str, dict[str, Any]]]) -> None:
    print(f"\nbench/cluster.py - {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} (1 min average, at the end)")
    best = max(rates.values()) if rates else None
    if rates:
        best_n = max(rates, key=lambda n: rates[n])
        print("  emulator's raw ceiling, status replaces/s (real client, watches running): "
              + " / ".join(f"{rates[n]:,.0f}" for n in rates) + f" at {' / '.join(rates)} (threads, or processes x threads)"
              + f"; best {best:,.0f} ({best_n})")
    print(f"  {'pods':>6} {'Runs':>7}  {'journal':<44} {'binds/s':>8} {'x ceiling':>9}")
    off = next((r["runs"] / r["observed"] for _, _, label, r in results if label == "off"), None)
    for _, pods, label, r in results:
        rate = r["runs"] / r["observed"]
        ratio = f"{rate / best:.2f}" if best else "-"
        vs_off = f"  ({rate / off:.2f} of journal off)" if off and label != "off" else ""
        print(f"  {pods:>6,} {r['runs']:>7,}  {label:<44} {rate:>8,.0f} {ratio:>9}{vs_off}")


if __name__ == "__main__":
    sys.exit(main())
