"""runtimed admission latency: a Scheduled Run observed → its claim (`Running`) written, 100 Runs at once.

Setup (untimed): the API emulator in its own process (bench/cluster.py's), one
Runtime Pod with room for every Run (`runs` = the Run count, so nothing waits for
capacity: this measures admission, not queueing for room), the Runs created
Pending, and one runtimed (`runtimed.agent.Agent`, the code `kruntimes runtimed`
runs) synced on that pod.

Measured: the Runs are assigned to the pod at once (status writes from 8 threads,
as a scheduler's workers would), then for each Run:
- observed → Running written: from runtimed's watch handing the Scheduled Run to
  `Lifecycle.observe` to the claim's guarded write returning (the seam is wrapped,
  nothing else changes);
- assigned → Running written: from the assignment write returning to the same
  point, so the watch's delivery is included.
runtimed handles one pod's events in watch order, one at a time (the informer calls
the handler as it reads the stream), so a Run's wait behind the claims of the Runs
before it shows in assigned → Running, not in observed → Running.

- assigned → process started: to the executor's start returning (the process was
  spawned; for a function without args, the execution recorded).

Two modes: function Runs without args (admission only, no process) and task Runs
running `true` (each claim is followed by the process start, which the next Run
waits behind). Each mode runs with both executors (SPEC §4.1, amended 2026-12-04):
`in-process` (the Runs are runtimed's children, as before the Runtime Server split)
and `runtime-server` (as deployed: `kruntimes runtime-server` in a process of its
own, driven over its Unix socket).

    python bench/runtimed_admission.py                 # 100 Runs, 3 repeats per mode and executor
    python bench/runtimed_admission.py --runs 20 --repeat 1 --executor runtime-server
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import kubernetes.client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.emulator, when run as a script

from bench.cluster import EmulatorProcess, api_client  # noqa: E402
from kruntimes import gctuning  # noqa: E402
from kruntimes.api import models  # noqa: E402
from kruntimes.runtimed.agent import Agent, Settings  # noqa: E402
from kruntimes.scheduler import status as st  # noqa: E402
from tests.emulator import manifests  # noqa: E402

MODES = {"function (no process)": {"function": {}}, "task `true`": {"task": {"args": ["true"]}}}


EXECUTORS = ("in-process", "runtime-server")


def start_server(work: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`kruntimes runtime-server` in a process of its own, as in the runtime container; returns it and its socket."""
    socket_path = work / "server" / "runtime.sock"
    kruntimes = Path(sys.executable).parent / "kruntimes"
    server = subprocess.Popen([str(kruntimes), "runtime-server", "--socket", str(socket_path),
                               "--work-dir", str(work / "runs"), "--log-level", "warning"],
                              stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not socket_path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("kruntimes runtime-server did not start")
        time.sleep(0.02)
    return server, socket_path


def measure(host: str, runs: int, mode: dict[str, Any], work: Path,
            executor: str) -> tuple[list[float], list[float], list[float]]:
    """(observed → Running, assigned → Running, assigned → process started) in seconds, one per Run."""
    api = api_client(host, 16)
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    beat = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = core.create_namespaced_pod(ns, manifests.pod("p1", {models.RUNTIME_LABEL: "python"}, annotations={
        models.CAPACITY_ANNOTATION: f'{{"runs":"{runs}"}}', models.HEARTBEAT_ANNOTATION: beat}))
    names = [f"r{i:03d}" for i in range(runs)]
    for name in names:
        custom.create_namespaced_custom_object(models.GROUP, models.VERSION, ns, "runs", manifests.run(name, mode=mode))
    server, socket_path = start_server(work / ns) if executor == "runtime-server" else (None, None)
    agent = Agent(api, Settings(pod_name="p1", pod_namespace=ns, pod_uid=pod.metadata.uid, work_dir=work / ns,
                                heartbeat_period=60, runtime_server=socket_path))
    observed: dict[str, float] = {}
    running: dict[str, float] = {}
    assigned: dict[str, float] = {}
    started: dict[str, float] = {}
    lock = threading.Lock()
    runner = agent.lifecycle.executor
    start_task, start_function = runner.start_task, runner.start_function

    def timed(start: Any) -> Any:
        def call(run: Any, *args: Any, **kwargs: Any) -> None:
            start(run, *args, **kwargs)
            with lock:
                started.setdefault(run.name, time.perf_counter())
        return call

    runner.start_task = timed(start_task)  # type: ignore[method-assign]
    runner.start_function = timed(start_function)  # type: ignore[method-assign]
    observe, write = agent.lifecycle.observe, agent.lifecycle._writer.update_status  # noqa: SLF001 - timing seams

    def timed_observe(obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("phase") == "Scheduled":
            with lock:
                observed.setdefault(obj["metadata"]["name"], time.perf_counter())
        observe(obj)

    def timed_write(run: Any, status: dict[str, Any]) -> None:
        write(run, status)
        if status.get("phase") == "Running":
            with lock:
                running.setdefault(run.name, time.perf_counter())

    agent.lifecycle.observe = timed_observe  # type: ignore[method-assign]
    agent.lifecycle._writer.update_status = timed_write  # type: ignore[method-assign]  # noqa: SLF001
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    agent.pod_informer.wait_synced(30)
    agent.run_informer.wait_synced(30)
    time.sleep(0.5)  # setup: recovery done before the burst

    def assign(name: str) -> None:
        current = custom.get_namespaced_custom_object(models.GROUP, models.VERSION, ns, "runs", name)
        current["status"] = st.scheduled_status(None, "p1", pod.metadata.uid, datetime.now(timezone.utc))
        custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, ns, "runs", name, current)
        with lock:
            assigned[name] = time.perf_counter()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(assign, names))
    deadline = time.monotonic() + 120
    while (len(running) < runs or len(started) < runs) and time.monotonic() < deadline:
        time.sleep(0.01)
    agent.stop()
    thread.join(30)
    if server is not None:
        server.send_signal(15)
        server.wait(30)
    core.delete_namespace(ns)
    api.close()
    return ([running[n] - observed[n] for n in names if n in running and n in observed],
            [running[n] - assigned[n] for n in names if n in running and n in assigned],
            [started[n] - assigned[n] for n in names if n in started and n in assigned])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--executor", choices=EXECUTORS + ("both",), default="both",
                        help="where the Runs execute: runtimed's children, or the Runtime Server (default both)")
    args = parser.parse_args(argv)
    gctuning.tune()
    emulator = EmulatorProcess(history_size=10_000)
    executors = EXECUTORS if args.executor == "both" else (args.executor,)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="kruntimes-bench-") as work:
            os.chmod(work, 0o711)
            for label, mode in MODES.items():
                for executor in executors:
                    columns: tuple[list[float], list[float], list[float]] = ([], [], [])
                    for _ in range(args.repeat):
                        for column, values in zip(columns, measure(emulator.host, args.runs, mode, Path(work),
                                                                   executor)):
                            column.extend(values)
                    rows.append((label, executor, *columns))
    finally:
        emulator.stop()
    print(f"runtimed admission latency, {args.runs} Runs assigned to one pod at once, {args.repeat} repeats "
          "(emulator in its own process)")
    print(f"{'mode':<22} {'executor':<15} {'Runs':>5} {'observed→Running p50':>21} {'p99':>9} "
          f"{'assigned→Running p50':>21} {'p99':>9} {'assigned→started p50':>21} {'p99':>9}")
    for label, executor, seen, end_to_end, started in rows:
        cells = "".join(f"{1000 * statistics.median(v):>18.1f} ms {1000 * percentile(v, 99):>6.1f} ms "
                        for v in (seen, end_to_end, started))
        print(f"{label:<22} {executor:<15} {len(seen):>5} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
