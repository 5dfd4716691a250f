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

Two modes: function Runs without args (admission only, no process) and task Runs
running `true` (each claim is followed by the process start, which the next Run
waits behind).

    python bench/runtimed_admission.py                 # 100 Runs, 3 repeats per mode
    python bench/runtimed_admission.py --runs 20 --repeat 1
"""

from __future__ import annotations

import argparse
import statistics
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


def measure(host: str, runs: int, mode: dict[str, Any], work: Path) -> tuple[list[float], list[float]]:
    """(observed → Running, assigned → Running) in seconds, one per Run."""
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
    agent = Agent(api, Settings(pod_name="p1", pod_namespace=ns, pod_uid=pod.metadata.uid, work_dir=work / ns,
                                heartbeat_period=60))
    observed: dict[str, float] = {}
    running: dict[str, float] = {}
    assigned: dict[str, float] = {}
    lock = threading.Lock()
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
    while len(running) < runs and time.monotonic() < deadline:
        time.sleep(0.01)
    agent.stop()
    thread.join(30)
    core.delete_namespace(ns)
    api.close()
    return ([running[n] - observed[n] for n in names if n in running and n in observed],
            [running[n] - assigned[n] for n in names if n in running and n in assigned])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    gctuning.tune()
    emulator = EmulatorProcess(history_size=10_000)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="kruntimes-bench-") as work:
            for label, mode in MODES.items():
                seen: list[float] = []
                end_to_end: list[float] = []
                for _ in range(args.repeat):
                    a, b = measure(emulator.host, args.runs, mode, Path(work))
                    seen += a
                    end_to_end += b
                rows.append((label, seen, end_to_end))
    finally:
        emulator.stop()
    print(f"runtimed admission latency, {args.runs} Runs assigned to one pod at once, {args.repeat} repeats "
          "(emulator in its own process)")
    print(f"{'mode':<24} {'Runs':>5} {'observed→Running p50':>21} {'p99':>9} "
          f"{'assigned→Running p50':>21} {'p99':>9}")
    for label, seen, end_to_end in rows:
        print(f"{label:<24} {len(seen):>5} {1000 * statistics.median(seen):>18.1f} ms "
              f"{1000 * percentile(seen, 99):>6.1f} ms {1000 * statistics.median(end_to_end):>18.1f} ms "
              f"{1000 * percentile(end_to_end, 99):>6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
