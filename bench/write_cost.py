"""What one bind costs the real API server: kruntimes' writes beside kube-scheduler's, measured apart.

`realkube.py` times both schedulers end to end; with the server the limit, each bind's
rate is the server's CPU over what a bind costs it. This takes a bind apart, on the
same server in one run (the release's kube-apiserver and etcd from `testbin/`; the CRDs
and the dev overlay applied, so the admission policies run as deployed; a Lease for the
fence's param; another process watching Runs and Runtime Pods and a thread watching
every pod, as the schedulers' informers do):

- **run bind**: the Run status replace a kruntimes bind is (`scheduled_status`, with the
  writer's term, so the fence's CEL runs), through the binders' lean client;
- **run bind, no policies**: the same after every ValidatingAdmissionPolicyBinding is
  deleted (they are applied again after);
- **run pending**: the ceiling's write (`cluster.ceiling`: a Pending status, no assignment);
- **Scheduled Event**: what a bind's `EventRecorder` writes, through its senders;
- **pod binding**: the `pods/binding` create a kube-scheduler bind is.

Each is `--writes` writes, `--in-flight` at once, to objects made for it in a namespace of
its own; each round measures them all, the order reversed every other round. Printed:
writes/s and CPU µs per write of the API server, etcd and this process (the client).

    python bench/write_cost.py --server-cpus 0 --rounds 3     # ~4 min; needs testbin/build.sh once
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.realkube, when run as a script

import kubernetes.client  # noqa: E402
import kubernetes.watch  # noqa: E402

from bench import cluster, proc_cpu, realkube  # noqa: E402
from kruntimes.api import ingest, models  # noqa: E402
from kruntimes.cluster import direct  # noqa: E402
from kruntimes.cluster.events import EventRecorder  # noqa: E402
from kruntimes.scheduler.status import scheduled_status  # noqa: E402
from tests.realkube import controlplane  # noqa: E402

#: The term of the fence's Lease (its spec.leaseTransitions) and so of every bind written here.
FENCE_TERM = 0
KINDS = ("run bind", "run bind, no policies", "run pending", "Scheduled Event", "pod binding")
SHOWN = ("kube-apiserver", "etcd", "this process")


class PodWatch:
    """Every pod's changes streamed and dropped, as kube-scheduler's pod informer receives them."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self._watch = kubernetes.watch.Watch()
        core = kubernetes.client.CoreV1Api(api)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, args=(core,), daemon=True)
        self._thread.start()

    def _run(self, core: kubernetes.client.CoreV1Api) -> None:
        try:
            for _ in self._watch.stream(core.list_pod_for_all_namespaces, deserialize=False, timeout_seconds=3600):
                pass
        except Exception:  # noqa: BLE001 - the server stopping under it ends the watch; before that, say so
            if not self._stopped:
                raise

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


def timed(writes: int, send: Callable[[], None]) -> dict[str, float]:
    """Writes/s and CPU µs per write by process role, over `send`."""
    machine = proc_cpu.snapshot()
    started = time.perf_counter()
    send()
    wall = time.perf_counter() - started
    spent = proc_cpu.spent(machine, proc_cpu.snapshot())
    return {"rate": writes / wall, **{role: 1e6 * spent[role] / writes for role in SHOWN}}


def many(lean: direct.Direct, method: str, calls: list[tuple[str, dict[str, Any]]], in_flight: int) -> None:
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(lambda call: lean.call(method, call[0], call[1], 60.0), calls))


def run_writes(api: kubernetes.client.ApiClient, namespace: str, args: argparse.Namespace,
               bind: bool) -> dict[str, float]:
    runs = cluster.populate(api, namespace, 1, args.writes, 1)
    now = datetime.now(timezone.utc)
    calls = []
    for obj in runs:
        status = (scheduled_status(obj.get("status"), "python-0000", "uid-python-0000", now, FENCE_TERM) if bind
                  else {"phase": "Pending", "conditions": [], "message": "ceiling"})
        metadata = {key: obj["metadata"][key] for key in ("name", "namespace", "uid", "resourceVersion")}
        calls.append((direct.path("apis", models.GROUP, models.VERSION, "namespaces", namespace, "runs",
                                  metadata["name"], "status"),
                      {"apiVersion": obj["apiVersion"], "kind": "Run", "metadata": metadata, "status": status}))
    lean = direct.Direct(api.configuration, api.default_headers, args.in_flight)
    try:
        return timed(len(calls), lambda: many(lean, "PUT", calls, args.in_flight))
    finally:
        lean.close()


def events(api: kubernetes.client.ApiClient, namespace: str, args: argparse.Namespace) -> dict[str, float]:
    runs = [ingest.run_info(obj) for obj in cluster.populate(api, namespace, 1, args.writes, 1)]
    recorder = EventRecorder(api, instance="bench", capacity=args.writes, senders=args.in_flight)

    def send() -> None:
        recorder.start()
        for run in runs:
            recorder.scheduled(run, "python-0000")
        recorder.stop(timeout=600)

    measured = timed(len(runs), send)
    if recorder.created != len(runs):
        raise SystemExit(f"only {recorder.created} of {len(runs)} Events were created "
                         f"({recorder.failed} failed, {recorder.dropped} dropped)")
    return measured


def pod_bindings(api: kubernetes.client.ApiClient, namespace: str, args: argparse.Namespace) -> dict[str, float]:
    realkube.populate_nodes_and_pods(api, args.nodes, args.writes, namespace, 1)
    calls = [(direct.path("api", "v1", "namespaces", namespace, "pods", f"pod-{i:05d}", "binding"),
              {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"pod-{i:05d}", "namespace": namespace},
               "target": {"apiVersion": "v1", "kind": "Node", "name": f"node-{i % args.nodes:04d}"}})
             for i in range(args.writes)]
    lean = direct.Direct(api.configuration, api.default_headers, args.in_flight)
    try:
        return timed(len(calls), lambda: many(lean, "POST", calls, args.in_flight))
    finally:
        lean.close()


def measure_round(plane: controlplane.ControlPlane, api: kubernetes.client.ApiClient, args: argparse.Namespace,
                  number: int, saved: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    kubectl = plane.kubectl()
    order = list(KINDS) if number % 2 else list(reversed(KINDS))
    results: dict[str, dict[str, float]] = {}
    for kind in order:
        namespace = f"w{number}-{KINDS.index(kind)}"
        if kind == "run bind, no policies":
            subprocess.run([*kubectl, "delete", "validatingadmissionpolicybindings", "--all"], check=True,
                           capture_output=True)
            policy_bindings(kubectl, expected=0)
            time.sleep(args.settle)  # the server's policy informer sees them gone
            try:
                results[kind] = run_writes(api, namespace, args, True)
            finally:
                subprocess.run([*kubectl, "apply", "--server-side", "-f", "-"], check=True, capture_output=True,
                               text=True, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": saved}))
                policy_bindings(kubectl, expected=len(saved))
                time.sleep(args.settle)
        elif kind == "run bind":
            results[kind] = run_writes(api, namespace, args, True)
        elif kind == "run pending":
            results[kind] = run_writes(api, namespace, args, False)
        elif kind == "Scheduled Event":
            results[kind] = events(api, namespace, args)
        else:
            results[kind] = pod_bindings(api, namespace, args)
        print(f"round {number}, {kind}: " + row(results[kind]), flush=True)
    return results


def policy_bindings(kubectl: list[str], expected: int) -> None:
    """Fail unless the server has `expected` admission policy bindings (all deleted, or all back)."""
    listed = subprocess.run([*kubectl, "get", "validatingadmissionpolicybindings", "-o", "name"], check=True,
                            capture_output=True, text=True).stdout.split()
    if len(listed) != expected:
        raise SystemExit(f"expected {expected} admission policy bindings, the server has {len(listed)}: {listed}")


def row(r: dict[str, float]) -> str:
    return f"{r['rate']:,.0f}/s; CPU per write, µs: " + ", ".join(f"{role} {r[role]:,.0f}" for role in SHOWN)


def fence_lease(api: kubernetes.client.ApiClient) -> None:
    """The fence's param, made as the scheduler would hold it, in term `FENCE_TERM`."""
    lease = realkube.FENCE_LEASE
    kubernetes.client.CoordinationV1Api(api).create_namespaced_lease(lease.namespace, {
        "metadata": {"name": lease.name}, "spec": {"holderIdentity": lease.identity, "leaseTransitions": FENCE_TERM,
                                                   "leaseDurationSeconds": 3600}})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=3000, help="writes of each kind, each round")
    parser.add_argument("--in-flight", type=int, default=32, help="writes at once (the binders' default)")
    parser.add_argument("--nodes", type=int, default=100, help="Node objects the pod bindings name")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds for the server to see admission policy bindings deleted or applied")
    parser.add_argument("--server-cpus", help="CPUs (e.g. 0) for etcd and kube-apiserver alone; this benchmark "
                                              "gets the others")
    args = parser.parse_args(argv)
    server_cpus = realkube.cpu_list(args.server_cpus) if args.server_cpus else None
    if server_cpus is not None:
        rest = os.sched_getaffinity(0) - server_cpus
        if not rest:
            parser.error(f"--server-cpus {args.server_cpus} must leave a CPU to this benchmark")
        os.sched_setaffinity(0, rest)
    with tempfile.TemporaryDirectory(prefix="kr-write-cost-") as scratch:
        plane = controlplane.ControlPlane(Path(scratch) / "plane", cpus=server_cpus)
        with plane:
            realkube.deploy(plane)
            listed = json.loads(subprocess.run([*plane.kubectl(), "get", "validatingadmissionpolicybindings",
                                                "-o", "json"], check=True, capture_output=True, text=True).stdout)
            # What applies them again after the measurement without them: each as deployed.
            saved = [{"apiVersion": b["apiVersion"], "kind": b["kind"], "metadata": {"name": b["metadata"]["name"]},
                      "spec": b["spec"]} for b in listed["items"]]
            print(f"admission policy bindings: {', '.join(b['metadata']['name'] for b in saved)}", flush=True)
            api = cluster.api_client(str(plane.kubeconfig), pool=args.in_flight + 8)
            fence_lease(api)
            watchers, pods = cluster.Watchers(str(plane.kubeconfig)), PodWatch(api)
            try:
                rounds = [measure_round(plane, api, args, n, saved) for n in range(1, args.rounds + 1)]
            finally:
                watchers.stop()
                pods.stop()
                api.close()
    print(f"\n{args.writes:,} writes of each kind, {args.in_flight} in flight, {args.rounds} rounds "
          f"(server CPUs: {args.server_cpus or 'shared'}); medians, CPU µs per write:")
    print(f"| write | per s | {' | '.join(SHOWN)} | server (API server + etcd) |")
    print("|---|---:|" + "---:|" * (len(SHOWN) + 1))
    for kind in KINDS:
        median = {key: statistics.median(r[kind][key] for r in rounds) for key in ("rate", *SHOWN)}
        server = statistics.median(r[kind]["kube-apiserver"] + r[kind]["etcd"] for r in rounds)
        print(f"| {kind} | {median['rate']:,.0f} | " + " | ".join(f"{median[role]:,.0f}" for role in SHOWN)
              + f" | {server:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
