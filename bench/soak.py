"""Soak: the scheduler, the Runtime controller and runtimed under faults, counted from what executed (issue 23).

One namespace on the API emulator (in this process, for its fault hooks), a Runtime
of `--pods` pods with `--capacity` runs each, the Runtime controller (its own
ServiceAccount's identity) and the scheduler (leader-elected, the fence bound to its
Lease) in this process, and one `kruntimes runtimed` process per pod (a token bound
to its pod, so the deployed admission policies judge every write it makes). This
process plays the kubelet: a new pod is made Ready and gets its runtimed; a runtimed
that died is started again on the same pod and state directory, as a container
restart; a deleted pod's runtimed is stopped.

Runs arrive all along (about twice the total capacity kept waiting beside the running ones). Each is a task
`sh` script that records its start and end in a ledger file of its own, then sleeps
0.2-2 s. For `--duration` seconds, one fault every `--fault-every` seconds, chosen
at random:

- hold: a status write held past its client's timeout (applied late, or applied at
  once and answered late);
- drop-before / drop-after: a status write's connection closed without an answer,
  before or after it was applied;
- duplicate: a status write applied twice, its client answered by the second (409);
- lease-429: three Lease writes answered 429 with Retry-After;
- sigkill: one runtimed SIGKILLed (its Runs' processes keep running);
- delete-pod: one Runtime Pod deleted (the controller makes another);
- reset: every open watch cut without ending its stream;
- silence: every open watch ended, the next two answered 200 and then silent.

Then the faults stop, the Runs already made are given `--settle` seconds to end,
and a probe of two Runs per slot is sent: every live pod must start one within the
bound (`--settle`), or it is wedged.

Counted from the processes, not the API: a sampler reads /proc every 0.1 s for the
Runs' processes and their pods (working directory), and the ledger holds every
start. Over-commit: samples where a pod ran more processes than its capacity. Runs
executed twice: a Run whose ledger has two starts. Ends not written: a Run whose
process is gone at the end but whose phase is not terminal. Wedged: a live pod that
started no probe Run within the bound.

    python bench/soak.py --duration 300 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import kubernetes.client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.*, when run as a script

from kruntimes.cluster.runner import ClusterScheduler  # noqa: E402
from kruntimes.controller.runner import ControllerRunner  # noqa: E402
from tests.emulator import admission, faults  # noqa: E402
from tests.emulator.server import Emulator  # noqa: E402
from tests.integration import cluster  # noqa: E402
from tests.integration.test_controller_runner import create_runtime, pods  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MARK = "kruntimes-soak"
SCRIPT = 'echo "start $$ $PWD" >> "$2/$1"; sleep "$3"; echo "end $$" >> "$2/$1"'
TERMINAL = ("Succeeded", "Failed")
FAULTS = ("hold", "drop-before", "drop-after", "duplicate", "lease-429", "sigkill", "delete-pod", "reset", "silence")
REQUEST_TIMEOUT = 5.0


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.random = random.Random(args.seed)
        self.ledger = work / "ledger"
        self.ledger.mkdir(parents=True)
        self.emulator = Emulator(bookmark_interval=5.0).start()
        self.api = self.emulator.api_client()
        self.namespace = "soak"
        kubernetes.client.CoreV1Api(self.api).create_namespace({"metadata": {"name": self.namespace}})
        self.emulator.bind_fence(self.namespace)
        self.c = cluster.Cluster(self.api, self.namespace)
        self.runtimed: dict[str, tuple[Any, subprocess.Popen[bytes]]] = {}  # pod uid -> (pod, process)
        self.faults: Counter[str] = Counter()
        self.over_commit = 0
        self.over_commit_seen: list[tuple[float, str, list[str]]] = []  # (seconds in, pod, its Runs)
        self.began = time.monotonic()
        self.samples = 0
        self.most_running: dict[str, int] = {}
        self.created = 0
        self.stopping = threading.Event()
        self.faulting = threading.Event()
        self.scheduler: ClusterScheduler | None = None
        self.controller: ControllerRunner | None = None
        self._lock = threading.Lock()

    # -- the parts ---------------------------------------------------------------------
    def start(self) -> None:
        create_runtime(self.c, self.args.pods, {"runs": str(self.args.capacity)})
        token = self.emulator.identity(admission.service_account("kruntimes-system", "kruntimes-controller"))
        self.controller = ControllerRunner(self.emulator.api_client(token), self.namespace, resync_period=0.5,
                                           bookmark_interval=5.0).start(sync_timeout=60)
        settings = cluster.settings(self.namespace, bookmark_interval=5.0, request_timeout=REQUEST_TIMEOUT,
                                    lease_duration=6, renew_deadline=4.0, retry_period=1.0, backoff_max=2.0)
        self.scheduler = ClusterScheduler(self.api, settings).start()
        for target, name in ((self._kubelet, "kubelet"), (self._sample, "sampler"), (self._submit, "submitter")):
            threading.Thread(target=target, name=f"soak-{name}", daemon=True).start()

    def _kubelet(self) -> None:
        while not self.stopping.is_set():
            try:
                live = {p.metadata.uid: p for p in pods(self.c)}
            except Exception:  # noqa: BLE001 - the kubelet retries
                live = None
            if live is not None:
                with self._lock:
                    for uid, pod in live.items():
                        known = self.runtimed.get(uid)
                        if known is None:
                            try:
                                self.c.set_ready(pod.metadata.name, True)
                            except Exception:  # noqa: BLE001 - next pass
                                continue
                            self.runtimed[uid] = (pod, self._runtimed(pod))
                        elif known[1].poll() is not None:  # died (SIGKILL): the container restarts
                            self.runtimed[uid] = (pod, self._runtimed(pod))
                    for uid in [u for u in self.runtimed if u not in live]:
                        pod, process = self.runtimed.pop(uid)
                        if process.poll() is None:
                            process.send_signal(signal.SIGTERM)
            self.stopping.wait(0.5)

    def _runtimed(self, pod: Any) -> subprocess.Popen[bytes]:
        name, uid = pod.metadata.name, pod.metadata.uid
        token = self.emulator.identity(admission.service_account(self.namespace, "kruntimes-runtimed", (name, uid)))
        config = self.work / f"kubeconfig-{name}"
        config.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "soak",
            "clusters": [{"name": "soak", "cluster": {"server": self.emulator.host}}],
            "users": [{"name": "runtimed", "user": {"token": token}}],
            "contexts": [{"name": "soak", "context": {"cluster": "soak", "user": "runtimed"}}]}))
        log = open(self.work / f"runtimed-{name}.log", "ab")  # noqa: SIM115 - the process owns it
        return subprocess.Popen(
            [sys.executable, "-m", "kruntimes.cli.main", "runtimed", "--kubeconfig", str(config),
             "--pod-name", name, "--pod-namespace", self.namespace, "--pod-uid", uid,
             "--work-dir", str(self.work / "pods" / name), "--heartbeat-period", "2",
             "--settings-namespace", self.namespace],
            stdout=log, stderr=log, cwd=ROOT)

    def _submit(self) -> None:
        """Keep about twice the total capacity waiting, until the faults stop."""
        while not self.stopping.is_set() and self.faulting.is_set():
            try:
                phases = [(r.get("status") or {}).get("phase") for r in self.c.runs().values()]
                waiting = sum(1 for p in phases if p not in TERMINAL)
                for _ in range(max(0, 3 * self.args.pods * self.args.capacity - waiting)):
                    self.add_run(f"run-{self.created:05d}")
            except Exception:  # noqa: BLE001 - next pass
                pass
            self.stopping.wait(1.0)

    def add_run(self, name: str) -> None:
        seconds = f"{self.random.uniform(0.2, 2.0):.2f}"
        self.c.add_run(name, mode={"task": {"args": ["/bin/sh", "-c", SCRIPT, MARK, name, str(self.ledger),
                                                     seconds]}})
        self.created += 1

    def _sample(self) -> None:
        base = str(self.work / "pods") + "/"
        while not self.stopping.is_set():
            running: dict[str, set[str]] = defaultdict(set)  # pod -> Runs (a forking sh shows twice for a moment)
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                    if len(argv) < 6 or argv[3] != MARK.encode() or argv[5] != str(self.ledger).encode():
                        continue
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                if cwd.startswith(base):
                    running[cwd[len(base):].split("/")[0]].add(argv[4].decode())
            with self._lock:
                self.samples += 1
                for pod, names in running.items():
                    self.most_running[pod] = max(self.most_running.get(pod, 0), len(names))
                    if len(names) > self.args.capacity:
                        self.over_commit += 1
                        self.over_commit_seen.append((round(time.monotonic() - self.began, 1), pod, sorted(names)))
            self.stopping.wait(0.1)

    # -- faults ---------------------------------------------------------------------------
    def fault(self) -> None:
        kind = self.random.choice(FAULTS)
        e, write = self.emulator, faults.status_write()
        if kind == "hold":
            e.delay(REQUEST_TIMEOUT + 2, write, apply_first=self.random.random() < 0.5)
        elif kind in ("drop-before", "drop-after"):
            e.drop(write, apply_first=kind == "drop-after")
        elif kind == "duplicate":
            e.duplicate(write)
        elif kind == "lease-429":
            e.throttle(faults.lease_write(), count=3, retry_after=1)
        elif kind == "sigkill":
            with self._lock:
                alive = [p for _, p in self.runtimed.values() if p.poll() is None]
            if not alive:
                return
            self.random.choice(alive).send_signal(signal.SIGKILL)
        elif kind == "delete-pod":
            live = pods(self.c)
            if not live:
                return
            self.c.core.delete_namespaced_pod(self.random.choice(live).metadata.name, self.namespace,
                                              grace_period_seconds=0)
        elif kind == "reset":
            e.drop_watches(abrupt=True)
        elif kind == "silence":
            e.silence(lambda method, path: method == "GET", count=2)
            e.drop_watches()
        self.faults[kind] += 1

    # -- the run --------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.faulting.set()
        self.start()
        cluster.wait_for(lambda: len(self.runtimed) == self.args.pods, timeout=120, what="every pod's runtimed")
        end = time.monotonic() + self.args.duration
        while time.monotonic() < end:
            time.sleep(self.random.uniform(0.5, 2 * self.args.fault_every - 0.5))
            try:
                self.fault()
            except Exception as exc:  # noqa: BLE001 - a fault that could not be made is not counted
                print(f"fault failed: {exc}", file=sys.stderr)
        self.faulting.clear()
        self.emulator.faults.clear()
        faults_stopped = time.monotonic()
        made = set(self.c.runs())
        settled = self._wait(lambda runs: all(runs[n] in TERMINAL for n in made if n in runs), self.args.settle)
        with self._lock:
            live_pods = {p.metadata.name for p, proc in self.runtimed.values()}
        probes = [f"probe-{i:03d}" for i in range(2 * self.args.pods * self.args.capacity)]
        for name in probes:
            self.add_run(name)
        self._wait(lambda runs: all(runs.get(n) in TERMINAL for n in probes), self.args.settle)
        admitted_by = time.monotonic() - faults_stopped
        started = self._starts()
        probe_pods = {pod for name in probes for pod, _ in started.get(name, [])}
        wedged = sorted(p for p in live_pods if p not in probe_pods and p in {x.metadata.name for x in pods(self.c)})
        runs = self._phases()
        alive = self._alive_runs()
        ends_lost = sorted(n for n, phase in runs.items() if phase not in TERMINAL and n in started and n not in alive)
        never = sorted(n for n, phase in runs.items() if phase not in TERMINAL and n not in started)
        self.stopping.set()
        return {"runs": len(runs), "executed": len(started), "faults": dict(self.faults),
                "fault_total": sum(self.faults.values()), "over_commit": self.over_commit, "samples": self.samples,
                "most_running": max(self.most_running.values(), default=0),
                "twice": sorted(n for n, s in started.items() if len(s) > 1), "wedged": wedged,
                "over_commit_seen": self.over_commit_seen[:20],
                "ends_lost": ends_lost, "never_ended": never, "settled": settled,
                "probe_seconds": round(admitted_by, 1),
                "phases": dict(Counter(runs.values())), "failed": self._failed_reasons()}

    def _phases(self) -> dict[str, str]:
        return {n: (r.get("status") or {}).get("phase", "Pending") for n, r in self.c.runs().items()}

    def _failed_reasons(self) -> dict[str, int]:
        """How many Runs ended Failed, by their Completed condition's reason."""
        reasons: Counter[str] = Counter()
        for run in self.c.runs().values():
            status = run.get("status") or {}
            if status.get("phase") == "Failed":
                completed = [c for c in status.get("conditions") or [] if c.get("type") == "Completed"]
                reasons[completed[0].get("reason", "?") if completed else "?"] += 1
        return dict(reasons)

    def _wait(self, done: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done(self._phases()):
                return True
            time.sleep(1.0)
        return False

    def _starts(self) -> dict[str, list[tuple[str, str]]]:
        """Run -> (pod, pid) of each start its ledger holds."""
        base = str(self.work / "pods") + "/"
        found: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for path in self.ledger.iterdir():
            for line in path.read_text().splitlines():
                word, pid, *rest = line.split(" ")
                if word == "start" and rest and rest[0].startswith(base):
                    found[path.name].append((rest[0][len(base):].split("/")[0], pid))
        return found

    def _alive_runs(self) -> set[str]:
        names = set()
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                if len(argv) >= 6 and argv[3] == MARK.encode() and argv[5] == str(self.ledger).encode():
                    names.add(argv[4].decode())
        return names

    def stop(self) -> None:
        self.stopping.set()
        self.faulting.clear()
        with self._lock:
            processes = [p for _, p in self.runtimed.values()]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.controller is not None:
            self.controller.stop()
        self.emulator.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of faults")
    parser.add_argument("--fault-every", type=float, default=1.5, help="mean seconds between two faults")
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--settle", type=float, default=180.0,
                        help="seconds the Runs get to end after the faults, and the probe to start on every pod")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, ledger)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kruntimes-soak-"))
    soak = Soak(args, work)
    try:
        result = soak.run()
    finally:
        soak.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, sort_keys=True))
    faults_line = " ".join(f"{k} {v}" for k, v in sorted(result["faults"].items()))
    print(f"{'seed':>4} {'Runs':>5} {'faults':>6} {'over-commit':>11} {'twice':>5} {'wedged':>6} "
          f"{'ends lost':>9} {'not ended':>9} {'max/pod':>7}")
    print(f"{args.seed:>4} {result['runs']:>5} {result['fault_total']:>6} {result['over_commit']:>11} "
          f"{len(result['twice']):>5} {len(result['wedged']):>6} {len(result['ends_lost']):>9} "
          f"{len(result['never_ended']):>9} {result['most_running']:>7}")
    print(f"faults: {faults_line}")
    if not args.keep:
        return
    print(f"work directory: {work}")


if __name__ == "__main__":
    main()
