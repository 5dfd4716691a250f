"""kruntimes beside kube-scheduler on the same real API server, in one run (issue 24 item 6).

`bench/cluster.py` measures the scheduler against the API emulator; this measures it
against the release's own kube-apiserver and etcd (testbin/, built once per machine)
and puts kube-scheduler of the same release beside it:

(a) **the server's ceiling**: Run status replaces/s through the real client (the
    resourceVersion-guarded replace a bind is) from 1, 4 and 8 threads, while another
    process watches Runs and Runtime Pods everywhere as the scheduler's informers do
    (`cluster.ceiling`);
(b) **kruntimes binds/s end to end**: `--pods` Runtime Pods, `--runs` Pending Runs,
    one `ClusterScheduler` with the journal in SQLite, then off, timed from winning the
    Lease to its informer having seen the last bind (`cluster.measure`);
(c) **kube-scheduler pods/s**: `--nodes` Ready Node objects (no kubelet: binding
    needs none), `--runs` Pending pods with cpu/memory requests, kube-scheduler started
    with the default profile, timed from its first bind to the last (`BindProgress`,
    0.1 s resolution); and from its start.

The CRDs and the dev overlay are applied first, so every Run status write passes
runtimed's, the controller's and the fence's admission policies as deployed (the
scheduler takes the fence's Lease, so the fence's CEL runs on every bind). Both
schedulers and the benchmark authenticate as the admin (APF's exempt level): the
comparison is of the schedulers, not of priority levels. kube-scheduler's client
rate limit (50 QPS by default) is raised to `--kube-qps`, since kruntimes has none.

`--server-cpus` gives etcd and kube-apiserver CPUs of their own and everything else the
rest, as a cluster's control plane has nodes of its own: the ceiling is then the server's
alone, and each scheduler is measured against what the server can take.

    python bench/realkube.py                         # 1,000 pods/nodes, 10,000 Runs/pods
    python bench/realkube.py --server-cpus 0         # the server on CPU 0, the rest elsewhere
    python bench/realkube.py --pods 200 --nodes 200 --runs 2000 --ceiling-writes 1000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.realkube, when run as a script

import kubernetes.client  # noqa: E402

from bench import cluster, proc_cpu  # noqa: E402
from kruntimes.cluster.settings import ClusterSettings, LeaseSettings  # noqa: E402
from tests.realkube import controlplane  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The Lease the deployed fence's binding names (deploy/base/scheduler-fence-policy.yaml).
FENCE_LEASE = LeaseSettings(name="kruntimes-scheduler", namespace="kruntimes-system", identity="bench",
                            duration=15, renew_deadline=10, retry_period=2)


def deploy(plane: controlplane.ControlPlane) -> None:
    """deploy/crds and the dev overlay, as a user applies them."""
    kubectl = plane.kubectl()
    subprocess.run([*kubectl, "apply", "--server-side", "-k", str(ROOT / "deploy/crds")], check=True,
                   capture_output=True)
    subprocess.run([*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "crd/runs.kruntimes.io",
                    "crd/runtimes.kruntimes.io"], check=True, capture_output=True)
    subprocess.run([*kubectl, "apply", "--server-side", "-k", str(ROOT / "deploy/overlays/dev")], check=True,
                   capture_output=True)


# -- (c) kube-scheduler ---------------------------------------------------------------------------


def populate_nodes_and_pods(api: kubernetes.client.ApiClient, nodes: int, pods: int, namespace: str,
                            rounds: int) -> None:
    """Ready nodes with room for every round's pods (made once), and Pending pods for the default scheduler."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    room = {"cpu": str(64 * rounds), "memory": f"{256 * rounds}Gi",
            "pods": str(max(110, 2 * rounds * -(-pods // nodes)))}
    made = bool(core.list_node(limit=1).items)

    def node(i: int) -> None:
        name = f"node-{i:04d}"
        core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                          "status": {"capacity": room, "allocatable": room, "conditions": [
                              {"type": "Ready", "status": "True", "lastHeartbeatTime": now,
                               "lastTransitionTime": now, "reason": "KubeletReady", "message": "bench"}]}})
        # The TaintNodesByCondition admission plugin taints every new node not-ready until
        # its node lifecycle controller sees it Ready; no such controller runs here.
        core.patch_node(name, {"spec": {"taints": None}})

    def pod(i: int) -> None:
        core.create_namespaced_pod(namespace, {"metadata": {"name": f"pod-{i:05d}"}, "spec": {"containers": [{
            "name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})

    with ThreadPoolExecutor(8) as pool:
        if not made:
            list(pool.map(node, range(nodes)))
        list(pool.map(pod, range(pods)))


class BindProgress:
    """When the first pod of the namespace got a node, and when none was left without one.

    Polled (every `PERIOD`) with two one-item lists by field selector, served from the
    API server's watch cache: cheap enough to leave kube-scheduler's figure alone, and
    within `PERIOD` of what a watch would show.
    """

    PERIOD = 0.1

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self._core = kubernetes.client.CoreV1Api(api)
        self._namespace = namespace
        self.first: float | None = None
        self.last: float | None = None

    def _any(self, selector: str) -> bool:
        return bool(self._core.list_namespaced_pod(self._namespace, field_selector=selector, limit=1).items)

    def wait(self, timeout: float) -> bool:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            now = time.perf_counter()
            if self.first is None and self._any("spec.nodeName!="):
                self.first = now
            if self.first is not None and not self._any("spec.nodeName="):
                self.last = now
                return True
            time.sleep(self.PERIOD)
        return False

    def bound(self) -> int:
        return len(self._core.list_namespaced_pod(self._namespace, field_selector="spec.nodeName!=").items)


def kube_scheduler(plane: controlplane.ControlPlane, directory: Path, qps: int) -> list[str]:
    config = directory / "kube-scheduler.yaml"
    config.write_text(json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plane.kubeconfig), "qps": qps, "burst": qps},
        "leaderElection": {"leaderElect": False}}))
    return [str(plane.bin_dir / "kube-scheduler"), f"--config={config}", "--bind-address=127.0.0.1",
            f"--secure-port={controlplane.free_port()}", f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}", "--authentication-skip-lookup"]


def measure_kube_scheduler(plane: controlplane.ControlPlane, args: argparse.Namespace,
                           directory: Path, namespace: str) -> dict[str, Any]:
    api = cluster.api_client(str(plane.kubeconfig), pool=16)
    try:
        started = time.perf_counter()
        populate_nodes_and_pods(api, args.nodes, args.runs, namespace, args.rounds)
        print(f"setup (c): {args.nodes:,} nodes and {args.runs:,} pods in {time.perf_counter() - started:.1f} s",
              flush=True)
        progress = BindProgress(api, namespace)
        log = open(directory / "kube-scheduler.log", "ab")
        cpu_before = _children_cpu()
        machine = proc_cpu.snapshot()
        launched = time.perf_counter()
        process = subprocess.Popen(kube_scheduler(plane, directory, args.kube_qps), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            if not progress.wait(args.timeout):
                raise SystemExit(f"kube-scheduler bound {progress.bound():,} of {args.runs:,} pods in "
                                 f"{args.timeout:.0f} s; see {directory / 'kube-scheduler.log'}")
            machine = proc_cpu.spent(machine, proc_cpu.snapshot())
            events_then = scheduled_events(api, namespace)
        finally:
            process.terminate()
            process.wait(15)
            log.close()
        cpu = _children_cpu() - cpu_before
        events_all = scheduled_events(api, namespace)
    finally:
        api.close()
    assert progress.first is not None and progress.last is not None
    return {"pods": args.runs, "nodes": args.nodes, "from_start": progress.last - launched,
            "first_to_last": max(progress.last - progress.first, BindProgress.PERIOD),
            "first": progress.first - launched, "cpu": cpu, "machine": machine,
            "scheduled_events": (events_then, events_all)}


def scheduled_events(api: kubernetes.client.ApiClient, namespace: str) -> int:
    """`Scheduled` Events in `namespace` (kube-scheduler's, one per bind it reports)."""
    events = kubernetes.client.EventsV1Api(api)
    count, token = 0, None
    while True:
        page = events.list_namespaced_event(namespace, field_selector="reason=Scheduled", limit=5000,
                                            _continue=token)
        count += len(page.items)
        token = page.metadata._continue
        if not token:
            return count


def cpu_list(text: str) -> set[int]:
    """CPUs as taskset writes them: `0`, `0,2`, `0-3`."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


# -- the run ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000, help="Runtime Pods of (b)")
    parser.add_argument("--nodes", type=int, default=1000, help="Node objects of (c)")
    parser.add_argument("--runs", type=int, default=10_000, help="Runs of (b), pods of (c)")
    parser.add_argument("--binders", type=int, default=ClusterSettings.binders)
    parser.add_argument("--bind-concurrency", type=int, default=ClusterSettings.bind_concurrency)
    parser.add_argument("--journal-writer", choices=("process", "thread"), default="process")
    parser.add_argument("--event-interval", type=float, default=ClusterSettings.event_interval,
                        help="the scheduler's --event-interval; 0: no Events (kube-scheduler still writes its own)")
    parser.add_argument("--event-senders", type=int,
                        help="Events written at once (default: the scheduler's, as many as binds in flight); "
                             "1 is how they were written before the senders")
    parser.add_argument("--ceiling-threads", default="1,4,8,2x8,8d,16d,32d,64d,2x8d",
                        help="shapes: T threads of one process, or PxT processes x threads; a d after T: "
                             "through the binders' lean client (kruntimes.cluster.direct)")
    parser.add_argument("--ceiling-writes", type=int, default=3000)
    parser.add_argument("--kube-qps", type=int, default=5000, help="kube-scheduler's client QPS and burst")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--parts", default="a,b,c", help="which measurements, of a, b, c")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure (b) and (c) this many times, in turn, the order reversed every other round "
                             "(a shared machine moves between measurements; medians are printed)")
    parser.add_argument("--dir", type=Path, help="the control plane's directory (default: a temporary one)")
    parser.add_argument("--server-cpus", help="CPUs (e.g. 0 or 0-1) for etcd and kube-apiserver alone; this "
                                              "benchmark, the schedulers and the ceiling's clients get the others")
    args = parser.parse_args(argv)
    server_cpus = cpu_list(args.server_cpus) if args.server_cpus else None
    if server_cpus is not None:
        available = os.sched_getaffinity(0)
        rest = available - server_cpus
        if not rest or not server_cpus <= available:
            parser.error(f"--server-cpus {args.server_cpus} must leave some of CPUs {sorted(available)} "
                         "to the schedulers")
        os.sched_setaffinity(0, rest)  # inherited by every process this one starts
    args.profile = False
    # SIGTERM stops the control plane as Ctrl-C does (its processes run in sessions of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="kr-bench-") as scratch:
        directory = args.dir or Path(scratch)
        plane = controlplane.ControlPlane(directory / "plane", cpus=server_cpus)
        with plane:
            deploy(plane)
            parts = set(args.parts.split(","))
            rates = {}
            if "a" in parts:
                rates = cluster.ceiling(str(plane.kubeconfig), args.ceiling_threads.split(","), args.ceiling_writes)
                print("(a) ceiling: " + ", ".join(f"{n} {r:,.0f}/s" for n, r in rates.items()), flush=True)
            rounds = [measure_round(plane, args, directory, parts, n) for n in range(1, args.rounds + 1)]
    summary(args, rates, rounds)
    return 0


def measure_round(plane: controlplane.ControlPlane, args: argparse.Namespace, directory: Path, parts: set[str],
                  number: int) -> dict[str, dict[str, Any]]:
    """One round of (b) with the journal on and off and (c), each in namespaces of its own."""
    host = str(plane.kubeconfig)
    started = time.perf_counter()
    modes = ("sqlite", "off") if "b" in parts else ()
    api = cluster.api_client(host, pool=16)
    capacity = cluster.capacity_for(args.pods, args.runs, None)
    for mode in modes:
        cluster.populate(api, f"bench-{mode}-{number}", args.pods, args.runs, capacity)
    api.close()
    print(f"round {number}, setup (b): {len(modes) * args.pods:,} Runtime Pods and {len(modes) * args.runs:,} "
          f"Runs in {time.perf_counter() - started:.1f} s", flush=True)
    order = [*modes, *(["kube"] if "c" in parts else [])]
    results: dict[str, dict[str, Any]] = {}
    for what in order if number % 2 else reversed(order):
        if what == "kube":
            results[what] = measure_kube_scheduler(plane, args, directory, f"kube-bench-{number}")
            continue
        url = f"sqlite:///{directory}/journal-{what}-{number}.db" if what == "sqlite" else None
        label = "off" if what == "off" else f"SQLite (WAL), summary, {args.journal_writer} writer"
        label += events_label(args)
        results[what] = cluster.measure(host, args, f"bench-{what}-{number}", args.runs, str(directory), url,
                                        FENCE_LEASE)
        results[what]["label"] = label
        cluster.report(args, f"{label} (round {number})", args.pods, results[what])
    return results


def events_label(args: argparse.Namespace) -> str:
    """What a kruntimes label adds when its Events are off (`--event-interval 0`) or sent otherwise."""
    if not args.event_interval:
        return ", no Events"
    return f", Events {args.event_senders} at a time" if args.event_senders else ""


def rate(what: str, r: dict[str, Any]) -> float:
    return float(r["pods"] / r["first_to_last"]) if what == "kube" else float(r["runs"] / r["observed"])


def summary(args: argparse.Namespace, rates: dict[str, float], rounds: list[dict[str, dict[str, Any]]]) -> None:
    best = max(rates.values()) if rates else float("nan")
    pinned = f" (the server on CPUs {args.server_cpus}, the rest elsewhere)" if args.server_cpus else ""
    print(f"\nbench/realkube.py - kube-apiserver v1.37.2 + etcd on loopback, {os.cpu_count()} CPUs{pinned}, "
          f"load {os.getloadavg()[0]:.2f} (1 min average, at the end)")
    if rates:
        print("  (a) the server's ceiling, Run status replaces/s (watches running): "
              + " / ".join(f"{rates[n]:,.0f}" for n in rates) + f" at {' / '.join(rates)} "
              "(threads, or processes x threads; d: the lean client)")
    kruntimes = f"(b) kruntimes, {args.pods:,} pods / {args.runs:,} Runs"
    labels = {"sqlite": f"{kruntimes}, journal SQLite (WAL){events_label(args)}",
              "off": f"{kruntimes}, journal off{events_label(args)}",
              "kube": f"(c) kube-scheduler, {args.nodes:,} nodes / {args.runs:,} pods, default profile"}
    print(f"  {'what':<62} {'per s, each round':>22} {'median':>7} {'x ceiling':>9} {'x kube-scheduler':>16}")
    medians = {what: statistics.median(rate(what, r[what]) for r in rounds) for what in labels if what in rounds[0]}
    for what, median in medians.items():
        each = " / ".join(f"{rate(what, r[what]):,.0f}" for r in rounds)
        versus = median / medians["kube"] if "kube" in medians else float("nan")
        print(f"  {labels[what]:<62} {each:>22} {median:>7,.0f} {median / best:>9.2f} {versus:>16.2f}")
    for number, r in enumerate(rounds, 1):
        for what in r:
            wall = r[what]["from_start"] if what == "kube" else r[what]["observed"]
            print(f"      round {number} {what:<6} CPU by process: {proc_cpu.line(r[what]['machine'], wall)}")
        for what in r:
            events = r[what].get("scheduled_events")
            if events is not None:  # kruntimes: (by the last bind, in all, dropped, refused); kube: (then, all)
                print(f"      round {number} {what:<6} Scheduled Events: {events[0]:,} by the last bind, "
                      f"{events[1]:,} in all")
        if "kube" in r:
            kube = r["kube"]
            print(f"      round {number} kube-scheduler: first bind {kube['first']:.1f} s after start, all bound "
                  f"{kube['from_start']:.1f} s after start ({kube['pods'] / kube['from_start']:,.0f}/s from start)")


if __name__ == "__main__":
    sys.exit(main())
