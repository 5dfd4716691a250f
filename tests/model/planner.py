"""The model's scheduler: SPEC §2.3 and §3.2–§3.4, one Run at a time, by brute force.

`simulate(load(text), now)` answers what `kruntimes simulate` answers: every Pending Run
scheduled once, in creation order (instant, then namespace/name), each seeing the
assumptions of the Runs before it. Nothing is indexed or cached: for each Run and
each pod, every other Run is looked at again. Slow, and easy to check against the
SPEC's sentences, which are quoted where a rule is implemented.

For a Pending outcome the model does not pick one reason per pod: it returns, for
each rejected pod, every reason the SPEC allows for it (see `compare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

import yaml

from tests.model import objects, syntax

STALENESS_SECONDS = 30
DEFAULT_RUNS_CAPACITY = 1

# Reason categories. The plugin a category belongs to matters: a pod rejected by
# RuntimePodAvailability is never evaluated by RunAffinity (§3.2 step 3).
AVAILABILITY = ("not_ready", "terminating", "stale", "invalid_capacity", "not_offered", "insufficient",
                "workspace")
AFFINITY = ("affinity", "anti_affinity", "existing_anti_affinity")


# Emulations of kruntimes defects that issue 12 lists, used ONLY to classify a
# disagreement (`campaign`): "does emulating defect X make the model agree with
# simulate?". The model's verdict, the one the differential test uses, is the
# SPEC's: no quirks.
QUIRKS = {
    "capacity-json-ignored": "§2.1 amended: the JSON kruntimes.io/capacity annotation is not read",
    "pod-identity-by-name": "#2: affinity targets, symmetry and workspaces follow podName, not podUID",
    "affinity-lost-with-spec": "#3: an active Run with any malformed spec part loses its whole affinity",
    "order-by-text": "#4: Runs are ordered by the creationTimestamp's text",
    "loose-weights": '#5: weight "10", " 10", true and 10.0 are accepted as integers',
    "affinity-per-term": "§3.3 amended: different targets may satisfy different required terms; "
                         "bootstrap only when no term has a target",
    # Found by this model, NOT listed in issue 12 (see the report in /work/notes/model-findings/).
    "null-as-malformed": "NEW: an explicit null `required`, `preferred` or `values` fails the Run",
    "iso8601-heartbeats": "NEW: ISO 8601 heartbeats that are not RFC 3339 (no seconds, basic format, "
                          "week dates, a space) are parsed, so fresh",
}


class ModelInputError(ValueError):
    """Input the SPEC makes an error as a whole (duplicates, an unparsable creation time)."""


@dataclass
class Outcome:
    namespace: str
    name: str
    phase: str                      # Scheduled, Pending or Failed
    pod: str | None = None
    evaluated: int = 0              # Pending: how many Runtime Pods were evaluated
    allowed: list[frozenset[str]] = field(default_factory=list)  # Pending: per rejected pod
    # Pending: per capacity category, every requested resource some pod is short of (issue 27)
    short: dict[str, set[str]] = field(default_factory=dict)
    never_fits: bool = False        # Pending: every pod's whole capacity is below the request
    scores: dict[str, tuple[int, int]] = field(default_factory=dict)  # Scheduled: pod -> (pref, load)


def load(text: str) -> list[dict[str, Any]]:
    """The YAML documents of `text` (libyaml's parser when present: same result, faster)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(text, Loader=loader) if d is not None]


def simulate(documents: list[dict[str, Any]], now: datetime, quirks: frozenset[str] = frozenset()) -> list[Outcome]:
    """Outcomes of the eligible Pending Runs, in scheduling order."""
    now_s = syntax.instant(now)
    assert now_s is not None, "now must carry a zone"
    assert quirks <= set(QUIRKS), quirks
    pods, runs = _read(documents, quirks)
    assumed: list[dict[str, Any]] = []  # {run, pod (the pod dict)} in decision order
    pending = [r for r in runs if r["phase"] == "Pending" and not r["deleting"]]
    # §3.2 / README: creation order by instant, then namespace/name.
    if "order-by-text" in quirks:
        pending.sort(key=lambda r: (str(r["created"] or ""), r["namespace"], r["name"]))
    else:
        pending.sort(key=lambda r: (r["instant"], r["namespace"], r["name"]))
    outcomes = []
    for run in pending:
        outcome = schedule_one(run, pods, runs, assumed, now_s, quirks)
        if outcome.phase == "Scheduled":
            pod = next(p for p in pods if p["namespace"] == run["namespace"] and p["name"] == outcome.pod)
            assumed.append({"run": run, "pod": pod})
        outcomes.append(outcome)
    return outcomes


def _read(documents: list[dict[str, Any]], quirks: frozenset[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pods, runs, seen = [], [], {}
    for i, doc in enumerate(documents, start=1):
        kind = doc.get("kind")
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        key = (kind, objects.namespace_of(meta), meta.get("name"))
        if key in seen:
            raise ModelInputError(f"document {seen[key]} and document {i} are the same {kind} {key[1]}/{key[2]}")
        seen[key] = i
        if kind == "Pod":
            pods.append(objects.read_pod(doc, quirks))
        elif kind == "Run":
            run = objects.read_run(doc, quirks)
            run["instant"] = syntax.instant(run["created"])
            if run["instant"] is None:
                raise ModelInputError(f"document {i}: creationTimestamp {run['created']!r} is not an RFC 3339 time")
            runs.append(run)
        else:
            raise ModelInputError(f"document {i}: unsupported kind {kind!r}")
    return pods, runs


# -- where Runs are ------------------------------------------------------------------------

def pod_of(run: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """§2.2 "One pod identity everywhere": the pod whose UID is `assignment.podUID`; without
    a UID, the pod of that name; a UID no current pod has: no pod."""
    for p in pods:
        if p["namespace"] != run["namespace"]:
            continue
        if run["pod_uid"] is not None:
            if p["uid"] == run["pod_uid"]:
                return p
        elif p["name"] == run["pod_name"]:
            return p
    return None


def is_active(run: dict[str, Any]) -> bool:
    """Active = assigned, phase Scheduled or Running, not released (§2.2)."""
    return run["phase"] in ("Scheduled", "Running") and run["pod_name"] is not None and not run["released"]


def targets(namespace: str, pods: list[dict[str, Any]], runs: list[dict[str, Any]],
            assumed: list[dict[str, Any]], by_name: bool = False) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(run, pod, how) for every active or assumed Run of the namespace that is on a current pod.

    `by_name` (quirk) places active Runs by podName, on a phantom pod when none has that name.
    """
    out = []
    for r in runs:
        if r["namespace"] == namespace and is_active(r):
            p = pod_of(r, pods)
            if by_name:
                p = next((q for q in pods if q["namespace"] == namespace and q["name"] == r["pod_name"]),
                         {"namespace": namespace, "name": r["pod_name"], "phantom": True})
            if p is not None:
                out.append((r, p, "active"))
    for a in assumed:
        if a["run"]["namespace"] == namespace:
            out.append((a["run"], a["pod"], "assumed"))
    return out


def same_pod(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a is b


def usage(pod: dict[str, Any], tgts: list[tuple[dict[str, Any], dict[str, Any], str]]) -> dict[str, int]:
    """§2.3: active Runs' (counted) requests plus assumed (validated) requests on this pod."""
    used: dict[str, int] = {}
    for run, p, how in tgts:
        if same_pod(p, pod) and (how != "active" or pod_of(run, [pod]) is pod):
            for r, q in (run["counted"] if how == "active" else run["request"]).items():
                used[r] = used.get(r, 0) + q
    return used


def capacity(pod: dict[str, Any]) -> dict[str, int]:
    cap = dict(pod["capacity"])
    cap.setdefault("runs", DEFAULT_RUNS_CAPACITY)  # §2.3: a pod always declares runs
    return cap


# -- one cycle -------------------------------------------------------------------------------

def schedule_one(run: dict[str, Any], pods: list[dict[str, Any]], runs: list[dict[str, Any]],
                 assumed: list[dict[str, Any]], now_s: Fraction, quirks: frozenset[str] = frozenset()) -> Outcome:
    ns, name = run["namespace"], run["name"]
    # §3.2 step 2: invalid data is a permanent configuration error.
    if run["problems"]:
        return Outcome(ns, name, "Failed")
    candidates = sorted((p for p in pods if p["namespace"] == ns and p["runtime"] == run["runtime"]),
                        key=lambda p: p["name"])
    tgts = targets(ns, pods, runs, assumed, by_name="pod-identity-by-name" in quirks)
    feasible, allowed = [], []
    for pod in candidates:
        reasons = availability(run, pod, tgts, now_s)
        if not reasons:
            reasons = run_affinity(run, pod, tgts, "affinity-per-term" in quirks)
        if reasons:
            allowed.append(frozenset(reasons))
        else:
            feasible.append(pod)
    if not feasible:
        short: dict[str, set[str]] = {"insufficient": set(), "not_offered": set()}
        for pod in candidates:
            for category, resources in shortages(run, pod, tgts).items():
                short[category] |= resources
        # Usage only frees what a pod has: above every pod's whole capacity, nothing but a
        # pod or capacity change helps (a pod whose capacity cannot be read holds nothing).
        never = bool(candidates) and all(
            p["capacity"] is None or any(q > capacity(p).get(r, -1) for r, q in run["request"].items())
            for p in candidates)
        return Outcome(ns, name, "Pending", evaluated=len(candidates), allowed=allowed, short=short,
                       never_fits=never)
    pref = normalise_preferred([preferred_raw(run, p, tgts) for p in feasible])
    load = normalise_rank([load_key(run, p, tgts) for p in feasible])
    totals = [a + b for a, b in zip(pref, load)]
    best = max(totals)
    # Ties go to the lexicographically smallest pod name (§3.2 step 4).
    chosen = min(p["name"] for p, t in zip(feasible, totals) if t == best)
    scores = {p["name"]: (a, b) for p, a, b in zip(feasible, pref, load)}
    return Outcome(ns, name, "Scheduled", pod=chosen, scores=scores)


def availability(run: dict[str, Any], pod: dict[str, Any], tgts: list[Any], now_s: Fraction) -> set[str]:
    """§3.3.1 RuntimePodAvailability: every check that fails (the SPEC fixes no order inside a plugin)."""
    reasons = set()
    if not pod["ready"]:
        reasons.add("not_ready")
    if pod["terminating"]:
        reasons.add("terminating")
    # now - heartbeat <= staleness; missing/unparsable is stale; ahead of now is fresh.
    if pod["heartbeat"] is None or now_s - pod["heartbeat"] > STALENESS_SECONDS:
        reasons.add("stale")
    if pod["capacity"] is None:
        reasons.add("invalid_capacity")
    else:
        cap, used = capacity(pod), usage(pod, tgts)
        for r, q in run["request"].items():
            if r not in cap:
                reasons.add("not_offered")
            elif used.get(r, 0) + q > cap[r]:
                reasons.add("insufficient")
    if run["workspace"] is not None:
        # Bound once an active or assumed Run of the workspace is on a pod; several pods: any.
        bound = [p for r, p, _ in tgts if r["workspace"] == run["workspace"]]
        if bound and not any(same_pod(p, pod) for p in bound):
            reasons.add("workspace")
    return reasons


def shortages(run: dict[str, Any], pod: dict[str, Any], tgts: list[Any]) -> dict[str, set[str]]:
    """The requested resources this pod does not declare, and those it has too little left of."""
    if pod["capacity"] is None:
        return {}
    cap, used = capacity(pod), usage(pod, tgts)
    return {"not_offered": {r for r in run["request"] if r not in cap},
            "insufficient": {r for r, q in run["request"].items() if r in cap and used.get(r, 0) + q > cap[r]}}


def run_affinity(run: dict[str, Any], pod: dict[str, Any], tgts: list[Any], per_term: bool = False) -> set[str]:
    """§3.3.2 RunAffinity (amended 2026-12-01)."""
    reasons = set()
    aff = run["affinity"]
    required = aff["required"]
    if required and per_term:  # quirk: the rule before the amendment
        holders = [[p for r, p, _ in tgts if objects.matches(sel, r["labels"])] for sel in required]
        seeds = not any(holders) and all(objects.matches(sel, run["labels"]) for sel in required)
        if not seeds and not all(any(same_pod(p, pod) for p in h) for h in holders):
            reasons.add("affinity")
    elif required:
        def satisfies(target: dict[str, Any]) -> bool:
            return all(objects.matches(sel, target["labels"]) for sel in required)

        anywhere = any(satisfies(r) for r, _, _ in tgts)  # any pod, available or not
        seeds = not anywhere and all(objects.matches(sel, run["labels"]) for sel in required)
        if not seeds and not any(satisfies(r) for r, p, _ in tgts if same_pod(p, pod)):
            reasons.add("affinity")
    on_pod = [r for r, p, _ in tgts if same_pod(p, pod)]
    for sel in aff["required_anti"]:
        if any(objects.matches(sel, r["labels"]) for r in on_pod):
            reasons.add("anti_affinity")
    for r in on_pod:
        if any(objects.matches(sel, run["labels"]) for sel in r["affinity"]["required_anti"]):
            reasons.add("existing_anti_affinity")
    return reasons


# -- scores ------------------------------------------------------------------------------------

def preferred_raw(run: dict[str, Any], pod: dict[str, Any], tgts: list[Any]) -> int:
    """§3.4.1: each preferred term counts its weight once per pod if any target there matches."""
    on_pod = [r for r, p, _ in tgts if same_pod(p, pod)]
    raw = 0
    for sign, key in ((1, "preferred"), (-1, "preferred_anti")):
        for weight, sel in run["affinity"][key]:
            if any(objects.matches(sel, r["labels"]) for r in on_pod):
                raw += sign * weight
    return raw


def normalise_preferred(raws: list[int]) -> list[int]:
    low, high = min(raws), max(raws)
    if low == high:
        return [0] * len(raws)
    return [(r - low) * 100 // (high - low) for r in raws]


def load_key(run: dict[str, Any], pod: dict[str, Any], tgts: list[Any]) -> tuple[Fraction, Fraction]:
    """§3.4.2: (max, sum) of (usage + request) / capacity over declared resources with capacity > 0.

    The SPEC is silent on a pod with no such resource; (0, 0) ranks it as unloaded.
    """
    used = usage(pod, tgts)
    utils = [Fraction(used.get(r, 0) + run["request"].get(r, 0), c) for r, c in capacity(pod).items() if c > 0]
    if not utils:
        return (Fraction(0), Fraction(0))
    return (max(utils), sum(utils, Fraction(0)))


def normalise_rank(keys: list[tuple[Fraction, Fraction]]) -> list[int]:
    distinct = sorted(set(keys))
    k = len(distinct)
    if k == 1:
        return [100] * len(keys)
    return [100 * (k - 1 - distinct.index(key)) // (k - 1) for key in keys]
