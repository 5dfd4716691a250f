"""The demo's workload: its Runtimes, RuntimeDeviceClass and Runs, generated from a seed.

Every shape a platform team meets: several Runtimes and a second namespace, pods that
never become Ready or whose runtimed never starts (stale), affinity cohorts,
anti-affinity spreading, over-subscribed GPUs and licences, Runs asking for more than
any pod has, invalid Runs, and tasks that fail; and a GPU Runtime whose pods publish
five devices each and whose Runs claim them by RuntimeDeviceClass, CEL selector and
constraint (SPEC §7): one A100, two GPUs on one NUMA node, an A100 if one is free and
else any GPU, or a 10Gi slice of a shared GPU. Most tasks are `true` or `sleep`, so
real processes stay cheap on a small machine; about eighty start a Python interpreter.

Apart from `demo`, which runs it, so that tests and benchmarks can take the same
workload (or its pods, `Workload.pods`) without the in-memory cluster.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from kruntimes.api import models
from kruntimes.controller.reading import runtime_view
from kruntimes.controller.reconcile import PodDefaults, pod_body

TOPOLOGY = models.RUNTIME_POD_TOPOLOGY
PY = sys.executable
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)  # the time of `Workload.pods`' heartbeats

#: (namespace, runtime, replicas, capacity); python's first 3 pods never become Ready
#: and its next 2 never start runtimed (their heartbeat stays missing: stale).
RUNTIMES = (
    ("demo", "python", 100, {"runs": "40"}),
    ("demo", "trainer", 60, {"runs": "8", "example.com/gpu": "2"}),
    ("demo", "batch", 50, {"runs": "40", "example.com/license": "1"}),
    ("team-b", "python", 10, {"runs": "24"}),
)
NOT_READY, NO_RUNTIMED = 3, 2

#: The GPU Runtime (SPEC §7.1): each pod publishes four GPUs, two A100 and two T4, one of each per NUMA
#: node, and one A100 shared in slices of its 40Gi of memory (a multi-allocatable device).
GPU_DRIVER = "gpu.example.com"
GPU_RUNTIME = ("demo", "cuda", 8, {"runs": "4"})
GPU_DEVICES: dict[str, Any] = {
    "driver": GPU_DRIVER, "env": {"GPU_MODEL": "model"},
    "devices": [*({"name": f"gpu-{i}", "attributes": {"model": {"string": model}, "numa": {"int": numa}}}
                  for i, (model, numa) in enumerate((("a100", 0), ("t4", 0), ("a100", 1), ("t4", 1)))),
                {"name": "shared", "attributes": {"model": {"string": "a100-shared"}, "numa": {"int": 1}},
                 "allowMultipleAllocations": True, "capacity": {f"{GPU_DRIVER}/memory": {"value": "40Gi"}}}]}
GPU_CLASS: dict[str, Any] = {
    "apiVersion": models.API_VERSION, "kind": "RuntimeDeviceClass", "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]}}
_A100 = {"cel": {"expression": f'device.attributes["{GPU_DRIVER}"].model == "a100"'}}
#: What the GPU Runs claim, in turn (SPEC §7.3).
GPU_CLAIMS: tuple[dict[str, Any], ...] = (
    {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [_A100]}}]},
    {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 2}}],
     "constraints": [{"requests": ["gpu"], "matchAttribute": f"{GPU_DRIVER}/numa"}]},
    {"requests": [{"name": "gpu", "firstAvailable": [{"name": "a100", "deviceClassName": "gpu", "selectors": [_A100]},
                                                      {"name": "any", "deviceClassName": "gpu"}]}]},
    {"requests": [{"name": "slice", "exactly": {"deviceClassName": "gpu", "capacity": {
        "requests": {f"{GPU_DRIVER}/memory": "10Gi"}}}}]},
)


@dataclass
class Workload:
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    device_classes: list[dict[str, Any]] = field(default_factory=list)  # cluster-scoped RuntimeDeviceClasses

    @property
    def pods(self) -> list[dict[str, Any]]:
        """The Runtime Pods as the controller creates them and the demo's kubelet starts them, at `NOW`.

        A static picture for tests and benchmarks that need the demo's pods without running
        it: names `<runtime>-<i>` instead of generated ones, heartbeats 5 s old, and the
        python Runtime's first pods not Ready or stale as the demo's kubelet leaves them."""
        pods: list[dict[str, Any]] = []
        for obj in self.runtimes:
            runtime = runtime_view({**obj, "metadata": {**obj["metadata"], "uid": f"uid-{obj['metadata']['name']}"}})
            assert runtime.capacity is not None
            chosen = (runtime.namespace, runtime.name) == ("demo", "python")
            for i in range(runtime.replicas):
                body = pod_body(runtime, runtime.capacity, PodDefaults())
                meta = body["metadata"]
                meta.update(name=f"{runtime.name}-{i:03d}", uid=f"{runtime.namespace}-{runtime.name}-{i}")
                stale = chosen and NOT_READY <= i < NOT_READY + NO_RUNTIMED
                beat = NOW - timedelta(seconds=600 if stale else 5)
                meta["annotations"][models.HEARTBEAT_ANNOTATION] = beat.isoformat().replace("+00:00", "Z")
                ready = not (chosen and i < NOT_READY)
                body["status"] = {"phase": "Running",
                                  "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
                pods.append(body)
        return pods


def _runtime(ns: str, name: str, replicas: int, capacity: dict[str, str],
             devices: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"apiVersion": models.API_VERSION, "kind": "Runtime", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "capacity": {"resources": capacity},
                     "template": {"spec": {"containers": [{"name": "runtimed", "command": ["kruntimes", "runtimed"]}]}}}}
    if devices is not None:
        body["spec"]["devices"] = devices
    return body


def _term(labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": TOPOLOGY}


def _run(ns: str, name: str, runtime: str, args: list[str], *, labels: dict[str, str] | None = None,
         requests: dict[str, Any] | None = None, affinity: dict[str, Any] | None = None,
         devices: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": {"args": args}}}
    if devices is not None:
        spec["devices"] = devices
    if requests is not None:
        spec["resources"] = {"requests": requests}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": models.API_VERSION, "kind": "Run",
            "metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "labels": labels or {}},
            "spec": spec}


def _count(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def generate(seed: int = 7, scale: float = 1.0) -> Workload:
    """The Runtimes and Runs; `scale` shrinks every count (tests use a tenth)."""
    rng = random.Random(seed)
    w = Workload(runtimes=[_runtime(ns, name, _count(replicas, scale) if name != "python" or ns != "demo"
                                    else max(NOT_READY + NO_RUNTIMED + 5, _count(replicas, scale)), capacity)
                           for ns, name, replicas, capacity in RUNTIMES])
    ns, name, replicas, capacity = GPU_RUNTIME
    w.runtimes.append(_runtime(ns, name, _count(replicas, scale), capacity, GPU_DEVICES))
    w.device_classes.append(GPU_CLASS)
    # python: instant tasks, 60 affinity cohorts of 5, 120 Runs spread one per pod.
    for i in range(_count(2700, scale)):
        w.runs.append(_run("demo", f"py-{i:04d}", "python", ["true"], labels={"app": "etl"}))
    for c in range(_count(60, scale)):
        cohort = {"cohort": f"c{c:02d}"}
        for m in range(5):
            w.runs.append(_run("demo", f"cohort-{c:02d}-{m}", "python", ["true"], labels=cohort,
                               affinity={"runAffinity": {"required": [_term(cohort)]}}))
    for i in range(_count(120, scale)):
        spread = {"spread": "web"}
        w.runs.append(_run("demo", f"web-{i:03d}", "python", ["sleep", "0.3"], labels=spread,
                           affinity={"runAntiAffinity": {"required": [_term(spread)]},
                                     "runAffinity": {"preferred": [{"weight": 50, "term": _term({"app": "etl"})}]}}))
    # trainer: GPUs are over-subscribed (120 GPUs, 188 one-GPU Runs, 12 two-GPU Runs, 3 that never fit).
    for i in range(_count(200, scale)):
        gpus = 2 if i % 17 == 0 else 1
        args = [PY, "-c", "import time; print('epoch 1 done'); time.sleep(0.5)"] if i % 4 == 0 else ["sleep", "0.8"]
        w.runs.append(_run("demo", f"train-{i:03d}", "trainer", args,
                           requests={"runs": "1", "example.com/gpu": str(gpus)}))
    for i in range(3):
        w.runs.append(_run("demo", f"train-huge-{i}", "trainer", ["true"], requests={"example.com/gpu": "4"}))
    # gpu: 48 Runs claim devices (SPEC §7), more than the 32 GPUs at once; each tells what it got.
    for i in range(_count(48, scale)):
        args = ([PY, "-c", "import os; print('devices', os.environ['KRUNTIMES_DEVICES'])"] if i % 8 == 0
                else ["sleep", "0.3"])
        w.runs.append(_run("demo", f"gpu-{i:02d}", name, args, devices=GPU_CLAIMS[i % len(GPU_CLAIMS)]))
    # batch: 1,500 tasks, 60 of which need one of 50 licences; 30 fail, saying why.
    for i in range(_count(1500, scale)):
        requests = {"example.com/license": "1"} if i % 25 == 0 else None
        args = ["sleep", "0.5" if requests else "0.1"]
        if i % 50 == 7:
            args = [PY, "-c", "import sys; print('input file batch.csv not found'); sys.exit(3)"]
        w.runs.append(_run("demo", f"batch-{i:04d}", "batch", args, requests=requests))
    # team-b: its own namespace and pods; never placed on demo's pods.
    for i in range(_count(220, scale)):
        w.runs.append(_run("team-b", f"nb-{i:03d}", "python", ["sleep", "0.2"],
                           requests={"runs": str(rng.choice([1, 1, 2]))}))
    # A few mistakes a user makes; each must end Failed with an actionable reason.
    bad = [{"requests": {"runs": "500m"}}, {"requests": {"bad name!": "1"}},
           {"affinity": {"runAffinity": {"preferred": [{"weight": 0, "term": _term({"a": "b"})}]}}},
           {"affinity": {"runAffinity": {"required": [{"labelSelector": {"matchExpressions": [
               {"key": "a", "operator": "Near", "values": ["b"]}]}, "topologyKey": TOPOLOGY}]}}}]
    for i in range(20):
        w.runs.append(_run("demo", f"typo-{i:02d}", "python", ["true"], **bad[i % len(bad)]))
    rng.shuffle(w.runs)
    return w
