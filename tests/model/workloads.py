"""Random `simulate` workloads: the generator shared by the differential test and the campaign.

`workload(rng)` draws from any `random.Random`-like object: hypothesis hands in its
own (`st.randoms(use_true_random=False)`, so failures shrink and replay), the
campaign a seeded `random.Random`. Inputs `simulate` must refuse as a whole
(duplicate objects, unparsable creation times) are never drawn here; they have a
small test of their own.

The space is deliberately small (two namespaces, two runtimes, a handful of pod
and label names) so that Runs meet: share pods, match each other's selectors,
collide on workspaces and on creation instants.
"""

from __future__ import annotations

import copy
import json
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
API = "kruntimes.io/v1alpha1"
NAMESPACES = ("default", "team-a")
RUNTIMES = ("py", "gpu")
RESOURCES = ("runs", "example.com/gpu", "mem")
LABELS = {"app": ("db", "web"), "service": ("scan",), "tier": ("a", "b")}
TOPOLOGY = "kruntimes.io/runtime-pod"

GOOD_AMOUNTS = (0, 1, 2, 3, "0", "1", "2", "3", "4", "1000m", "2000m", "+1", "1e0", "0.002k", "1.", "-0",
                "1000000000n")
BIG_AMOUNTS = ("1k", "1Ki", ".5k", "7Ei", "1E", "9223372036854775807")
BAD_AMOUNTS = ("500m", "1.5", "-1", "abc", 1.5, True, "9223372036854775808", "8Ei", "1e19", " 1", "1 ", "",
               None, "1K", "0x10", "1_000", "\u0661")


def pod(name: str, *, namespace: str | None = "default", runtime: str = "py", uid: str | None = None,
        ready: bool = True, terminating: bool = False, heartbeat: Any = NOW,
        capacity: dict[str, str] | None = None, capacity_json: str | None = None) -> dict[str, Any]:
    """A Runtime Pod document; `capacity` in per-resource keys, `capacity_json` verbatim."""
    annotations: dict[str, Any] = {}
    if heartbeat is not None:
        annotations["kruntimes.io/runtimed-heartbeat"] = (
            heartbeat.isoformat().replace("+00:00", "Z") if isinstance(heartbeat, datetime) else heartbeat)
    for r, q in (capacity or {}).items():
        annotations[f"kruntimes.io/capacity.{r}"] = q
    if capacity_json is not None:
        annotations["kruntimes.io/capacity"] = capacity_json
    meta: dict[str, Any] = {"name": name, "labels": {"kruntimes.io/runtime": runtime}, "annotations": annotations}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if terminating:
        meta["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status}


def run(name: str, *, namespace: str | None = "default", runtime: str | None = "py",
        created: Any = "2026-11-29T10:00:00Z", labels: dict[str, str] | None = None,
        requests: Any = None, affinity: Any = None, workspace: str | None = None,
        phase: str | None = None, pod_name: str | None = None, pod_uid: str | None = None,
        released: bool = False, mode: Any = None) -> dict[str, Any]:
    """A Run document; `requests=None` omits spec.resources."""
    spec: dict[str, Any] = {"mode": mode if mode is not None else {"task": {"args": ["python", "job.py"]}}}
    if runtime is not None:
        spec["runtime"] = runtime
    if requests is not None:
        spec["resources"] = {"requests": requests}
    if affinity is not None:
        spec["affinity"] = affinity
    if workspace is not None:
        spec["workspace"] = workspace
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    doc: dict[str, Any] = {"apiVersion": API, "kind": "Run", "metadata": meta, "spec": spec}
    if phase is not None:
        status: dict[str, Any] = {"phase": phase}
        if pod_name is not None:
            status["assignment"] = {"podName": pod_name, **({"podUID": pod_uid} if pod_uid else {})}
        if released:
            status["released"] = True
        doc["status"] = status
    return doc


def term(selector: Any, topology: Any = TOPOLOGY) -> dict[str, Any]:
    t: dict[str, Any] = {} if topology is None else {"topologyKey": topology}
    if selector is not None:
        t["labelSelector"] = selector
    return t


def to_yaml(documents: list[dict[str, Any]]) -> str:
    return yaml.dump_all(documents, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


# -- random parts -----------------------------------------------------------------------------

def _heartbeat(rng: random.Random) -> Any:
    kind = rng.choices(["fresh", "edge", "stale", "future", "missing", "garbage", "iso8601"],
                       [50, 5, 15, 8, 7, 12, 3])[0]
    if kind == "missing":
        return None
    if kind == "iso8601":
        # Fresh ISO 8601 spellings that no reading of RFC 3339 allows (no seconds, basic
        # format, week date, a decimal comma): unparsable, hence stale (§3.3.1), as Go's
        # RFC 3339 parser says too. (A space for "T", which RFC 3339 §5.6 lets
        # applications choose, is left out: the SPEC does not say whether kruntimes does.)
        return rng.choice(["2026-11-29T11:59Z", "2026-11-29T12Z", "20261129T115950Z", "2026-W48-7T11:59:50Z",
                           "2026-11-29T11:59:50,5Z"])
    if kind == "garbage":
        return rng.choice(["", "yesterday", "2026-11-29", "2026-11-29T12:00:00", "2026-13-01T00:00:00Z",
                           "2026-11-29T25:00:00Z", "1764417600", "2026-11-29T11:59:50+25:00"])
    seconds = {"fresh": rng.randint(0, 29), "edge": rng.choice([30, 31]), "stale": rng.randint(31, 7200),
               "future": -rng.randint(1, 3600)}[kind]
    fraction = timedelta(microseconds=250000) if kind == "fresh" and rng.random() < 0.2 else timedelta(0)
    return _time_text(rng, NOW - timedelta(seconds=seconds) + fraction)


def _time_text(rng: random.Random, at: datetime) -> str:
    """An RFC 3339 text for `at` in one of several spellings (Z, offsets, fractions)."""
    style = rng.choice(["Z", "Z", "frac", "plus2", "minus5", "zero-offset"])
    if style == "plus2":
        at = at.astimezone(timezone(timedelta(hours=2)))
    elif style == "minus5":
        at = at.astimezone(timezone(timedelta(hours=-5, minutes=-30)))
    text = at.isoformat(timespec="microseconds" if style == "frac" or at.microsecond else "seconds")
    return text.replace("+00:00", "Z") if style != "zero-offset" else text


def _created(rng: random.Random, base: datetime) -> Any:
    at = base + timedelta(seconds=rng.choice([0, 1, 2, 3, 5, 8, 3600, 7200 - 1]),
                          microseconds=rng.choice([0, 0, 0, 500000, 1, 999999]))
    if rng.random() < 0.15:
        # An unquoted YAML timestamp: the loader hands simulate a datetime.
        return at.astimezone(timezone(timedelta(hours=rng.choice([0, 2, -3]))))
    if rng.random() < 0.05:
        # RFC 3339 allows any number of fractional digits; "by instant" means all of them.
        digits = rng.choice([".0000001", ".0000009", ".000000999", ".5000000001"])
        return at.strftime("%Y-%m-%dT%H:%M:%S") + digits + "Z"
    return _time_text(rng, at)


def _amount(rng: random.Random, bad: float) -> Any:
    if rng.random() < bad:
        return rng.choice(BAD_AMOUNTS)
    return rng.choice(GOOD_AMOUNTS + BIG_AMOUNTS) if rng.random() < 0.1 else rng.choice(GOOD_AMOUNTS[:9])


def _capacity(rng: random.Random) -> tuple[dict[str, str], str | None]:
    """(per-resource annotations, JSON annotation text or None)."""
    per_key: dict[str, str] = {}
    in_json: dict[str, Any] = {}
    for r in RESOURCES:
        if rng.random() < (0.6 if r == "runs" else 0.4):
            value = str(rng.choice([0, 1, 2, 2, 3, 4, 5, 8])) if rng.random() > 0.08 else rng.choice(
                ["1k", "2000m", "1Ki", "500m", "-1", "x", "9223372036854775808"])
            form = rng.choice(["key", "json", "json", "both"])
            if form in ("key", "both"):
                per_key[r] = value
            if form in ("json", "both"):
                # Both forms: usually the same value, sometimes spelled otherwise or different.
                in_json[r] = value if form == "json" else rng.choice([value, value, f"{value}000m", "7"])
    if rng.random() < 0.015:
        per_key["_x"] = "1"                         # issue 12 defect 1: a non-qualified name
    text = json.dumps(in_json, sort_keys=True) if in_json or rng.random() < 0.1 else None
    if rng.random() < 0.04:
        text = rng.choice(['{"runs": 4}', "[1]", "not json", '"4"', '{"bad name!": "1"}', "{}", "null"])
    return per_key, text


def _selector(rng: random.Random) -> Any:
    kind = rng.choices(["labels", "exprs", "both", "empty", "missing"], [35, 35, 10, 10, 10])[0]
    if kind == "missing":
        return None
    if kind == "empty":
        return {}
    sel: dict[str, Any] = {}
    if kind in ("labels", "both"):
        key = rng.choice(sorted(LABELS))
        sel["matchLabels"] = {key: rng.choice(LABELS[key])}
    if kind in ("exprs", "both"):
        exprs = []
        for _ in range(rng.choice([1, 1, 2])):
            key = rng.choice(sorted(LABELS))
            op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
            e: dict[str, Any] = {"key": key, "operator": op}
            if op in ("In", "NotIn"):
                e["values"] = rng.sample(LABELS[key], rng.randint(1, len(LABELS[key])))
            elif rng.random() < 0.1:
                e["values"] = rng.choice([None, []])  # null and [] are "no values" in Kubernetes
            if rng.random() < 0.03:  # malformed: operator/value mismatch or unknown operator
                e = rng.choice([{"key": key, "operator": "In"}, {"key": key, "operator": "Exists", "values": ["x"]},
                                {"key": key, "operator": "Gt", "values": ["1"]}])
            exprs.append(e)
        sel["matchExpressions"] = exprs
    return sel


COHORT = (term({"matchLabels": {"app": "db"}}), term({"matchLabels": {"service": "scan"}}))


def _term(rng: random.Random) -> dict[str, Any]:
    topology = TOPOLOGY if rng.random() > 0.03 else rng.choice([None, "kubernetes.io/hostname"])
    return term(_selector(rng), topology)


def _weight(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice([0, 101, "10", True, -5])
    return rng.choice([1, 5, 10, 50, 100])


def _affinity(rng: random.Random, anti: float = 0.2) -> Any:
    """Affinity in about half of the Runs; `anti`: how often it has required anti-affinity."""
    if rng.random() < 0.45:
        return None
    aff: dict[str, Any] = {}
    if rng.random() < anti:
        aff["runAntiAffinity"] = {"required": [_term(rng)]}
    if rng.random() < 0.15:
        # Issue 12's cohort: two required terms that Runs often match only in part.
        aff["runAffinity"] = {"required": copy.deepcopy(list(COHORT))}  # no YAML aliases
    for side in ("runAffinity", "runAntiAffinity"):
        if rng.random() < 0.55:
            rules: dict[str, Any] = aff.get(side, {})
            n_req = rng.choices([0, 1, 2, 3], [40, 35, 20, 5])[0]
            if n_req:
                rules["required"] = rules.get("required", []) + [_term(rng) for _ in range(n_req)]
            n_pref = rng.choices([0, 1, 2], [50, 35, 15])[0]
            if n_pref:
                rules["preferred"] = [{"weight": _weight(rng), "term": _term(rng)} for _ in range(n_pref)]
            if rng.random() < 0.02:
                # An explicit null is an omitted field for a Kubernetes API object.
                rules[rng.choice(["required", "preferred"])] = None
            aff[side] = rules
    return aff


def _labels(rng: random.Random) -> dict[str, str]:
    return {k: rng.choice(v) for k, v in sorted(LABELS.items()) if rng.random() < 0.5}


def _requests(rng: random.Random, bad: float = 0.05) -> Any:
    if rng.random() < 0.3:
        return None
    req: dict[str, Any] = {}
    for r in RESOURCES:
        if rng.random() < (0.6 if r == "runs" else 0.3):
            req[r] = _amount(rng, bad=bad)
    if rng.random() < 0.02:
        req["bad name!"] = "1"
    return req


# -- the workload --------------------------------------------------------------------------------

def workload(rng: random.Random) -> list[dict[str, Any]]:
    """One random `simulate` input: Runtime Pods then Runs, in a shuffled input order."""
    namespaces = NAMESPACES[: rng.choice([1, 1, 2])]
    runtimes = RUNTIMES[: rng.choice([1, 1, 2])]
    pods: list[dict[str, Any]] = []
    # (namespace, name) -> (current uid or None, an earlier uid that no pod has any more)
    uids: dict[tuple[str, str], tuple[str | None, str]] = {}
    for i in range(rng.choice([0, 1, 2, 2, 3, 3, 4, 5])):
        ns = rng.choice(namespaces)
        name = f"p{sum(1 for (pns, _) in uids if pns == ns)}"  # p0, p1, ... in each namespace
        generation = rng.choice([1, 2])
        uid = None if rng.random() < 0.08 else f"uid-{ns}-{name}-{generation}"
        uids[(ns, name)] = (uid, f"uid-{ns}-{name}-0")
        per_key, text = _capacity(rng)
        pods.append(pod(name, namespace=None if ns == "default" and rng.random() < 0.3 else ns,
                        runtime=rng.choice(runtimes), uid=uid, ready=rng.random() < 0.88,
                        terminating=rng.random() < 0.07, heartbeat=_heartbeat(rng),
                        capacity=per_key, capacity_json=text))
    runs: list[dict[str, Any]] = []
    base = NOW - timedelta(hours=3)
    names: dict[str, int] = {}
    for _ in range(rng.randint(1, 9)):
        ns = rng.choice(namespaces)
        names[ns] = names.get(ns, -1) + 1
        kind = rng.choices(["pending", "active", "terminal", "released"], [60, 28, 8, 4])[0]
        phase = pod_name = pod_uid = None
        if kind == "pending" and rng.random() < 0.5:
            phase = "Pending"
        elif kind != "pending":
            phase = {"active": rng.choice(["Scheduled", "Running"]), "terminal": rng.choice(["Succeeded", "Failed"]),
                     "released": "Running"}[kind]
            here = [n for (pns, n) in uids if pns == ns]
            pod_name = rng.choice(here) if here and rng.random() < 0.9 else "gone"
            current, earlier = uids.get((ns, pod_name), (None, f"uid-{ns}-{pod_name}-0"))
            which = rng.choices(["current", "earlier", "none", "other"], [62, 20, 15, 3])[0]
            pod_uid = current if which == "current" else earlier if which == "earlier" else None
            if which == "other":
                # podName and podUID of two different current pods: the UID decides (§2.2).
                pod_uid = rng.choice([u for (pns, _), (u, _) in sorted(uids.items()) if pns == ns and u] or [None])
        labels = _labels(rng)
        affinity = _affinity(rng, anti=0.5 if kind == "active" else 0.2)
        required = ((affinity or {}).get("runAffinity") or {}).get("required") or []
        if required[:2] == list(COHORT) and rng.random() < 0.5:
            labels.update(app="db", service="scan")  # a cohort member that can seed the cohort
        runs.append(run(
            f"r{names[ns]}", namespace=None if ns == "default" and rng.random() < 0.3 else ns,
            runtime=rng.choice(runtimes) if rng.random() > 0.03 else None, created=_created(rng, base),
            labels=labels, requests=_requests(rng, 0.25 if kind == "active" else 0.05), affinity=affinity,
            workspace=rng.choice([None, None, None, "ws1", "ws2"]), phase=phase, pod_name=pod_name,
            pod_uid=pod_uid, released=kind == "released",
            mode={"function": {}} if kind == "released" else None))
    documents = pods + runs
    rng.shuffle(documents)
    return documents
