"""Recorded cycle vs replayed outcome: identical, or exactly what differs.

The replayed outcome is turned into the payload the live recorder would have
written for it (`payloads.cycle_payload`, same detail, same number of top
candidates), so both sides are compared in one encoding. A decision is identical
only when every recorded field matches AND the digest of the full outcome does:
a summary record holds the top candidates only, and the digest is what proves
every other pod's verdict and scores. Two fields are the loop's, not the
planner's, and are not compared: `result` (what reserve and bind made of the
decision) and `duration_us`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kruntimes import canonical
from kruntimes.journal import payloads as journal_payloads
from kruntimes.scheduler.outcome import CycleOutcome

NOT_COMPARED = frozenset({"result", "duration_us"})
ABSENT = "(absent)"


@dataclass(frozen=True)
class Difference:
    """One recorded field (a path such as ``candidates[1].LeastLoaded.normalized``) that replays differently."""

    field: str
    recorded: Any
    replayed: Any

    def __str__(self) -> str:
        return f"{self.field}: recorded {_show(self.recorded)}, replayed {_show(self.replayed)}"

    def as_json(self) -> dict[str, Any]:
        return {"field": self.field, "recorded": self.recorded, "replayed": self.replayed}


def _show(value: Any) -> str:
    return ABSENT if value is ABSENT else repr(value)


def replayed_payload(outcome: CycleOutcome, recorded: dict[str, Any], top_candidates: int) -> dict[str, Any]:
    """The cycle payload the live recorder would write for `outcome`, in the recorded cycle's detail."""
    detail = "full" if "outcome" in recorded else "summary"
    return journal_payloads.cycle_payload(
        {"outcome": outcome, "result": recorded.get("result"), "duration": 0, "top": top_candidates}, detail)


def differences(recorded: dict[str, Any], replayed: dict[str, Any]) -> list[Difference]:
    """Every difference between two cycle payloads, most telling first, the digest last."""
    found: list[Difference] = []
    order = [k for k in replayed if k not in NOT_COMPARED] + sorted(set(recorded) - set(replayed) - NOT_COMPARED)
    for key in order:
        left, right = recorded.get(key, ABSENT), replayed.get(key, ABSENT)
        if key == "digest" or left == right:
            continue
        if key == "rejections" and isinstance(left, list):
            found.extend(_rejections(left, right))
        elif key == "candidates" and isinstance(left, list):
            found.extend(_candidates(left, right))
        elif key == "outcome" and isinstance(left, dict) and isinstance(right, dict):
            found.extend(_outcome(left, right))
        else:
            found.append(Difference(key, left, right))
    if recorded.get("digest") != replayed.get("digest"):
        found.append(Difference("digest", recorded.get("digest", ABSENT), replayed.get("digest")))
    return found


def _rejections(left: list[Any], right: list[Any]) -> Iterator[Difference]:
    a = {f"{p}: {r}": n for p, r, n in left}
    b = {f"{p}: {r}": n for p, r, n in right}
    for key in sorted(set(a) | set(b)):
        if a.get(key, 0) != b.get(key, 0):
            yield Difference(f"rejections[{key}]", a.get(key, 0), b.get(key, 0))


def _candidates(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> Iterator[Difference]:
    for rank in range(max(len(left), len(right))):
        a = left[rank] if rank < len(left) else {}
        b = right[rank] if rank < len(right) else {}
        where = f"candidates[{rank + 1}]"
        for key in ("pod", "total"):
            if a.get(key, ABSENT) != b.get(key, ABSENT):
                yield Difference(f"{where}.{key}", a.get(key, ABSENT), b.get(key, ABSENT))
        sa = {s[0]: s[1:] for s in a.get("scores", [])}
        sb = {s[0]: s[1:] for s in b.get("scores", [])}
        for plugin in sorted(set(sa) | set(sb)):
            ra, rb = sa.get(plugin, [ABSENT, ABSENT]), sb.get(plugin, [ABSENT, ABSENT])
            for i, what in enumerate(("raw", "normalized")):
                if ra[i] != rb[i]:
                    yield Difference(f"{where}.{plugin}.{what}", ra[i], rb[i])


def per_pod(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A full encoded outcome as pod -> {verdict, total, <plugin>: [raw, normalized]}."""
    pods: dict[str, dict[str, Any]] = {}
    for name, rejection in zip(outcome.get("pods", []), outcome.get("rejections", [])):
        pods[name] = {"verdict": "feasible" if rejection is None else f"{rejection[0]}: {rejection[1]}"}
    feasible = outcome.get("feasible", [])
    for i, name in enumerate(feasible):
        entry = pods.setdefault(name, {"verdict": "feasible"})
        totals = outcome.get("totals", [])
        entry["total"] = totals[i] if i < len(totals) else None
        for s in outcome.get("scores", []):
            entry[s["plugin"]] = [s["raw"][i], s["normalized"][i]]
    return pods


def _outcome(left: dict[str, Any], right: dict[str, Any]) -> Iterator[Difference]:
    a, b = per_pod(left), per_pod(right)
    for pod in sorted(set(a) | set(b)):
        pa, pb = a.get(pod), b.get(pod)
        if pa is None or pb is None:
            yield Difference(f"pods[{pod}]", "evaluated" if pa else ABSENT, "evaluated" if pb else ABSENT)
            continue
        for key in sorted(set(pa) | set(pb)):
            if pa.get(key, ABSENT) != pb.get(key, ABSENT):
                yield Difference(f"pods[{pod}].{key}", pa.get(key, ABSENT), pb.get(key, ABSENT))
    weights_a = {s["plugin"]: s["weight"] for s in left.get("scores", [])}
    weights_b = {s["plugin"]: s["weight"] for s in right.get("scores", [])}
    if weights_a != weights_b:
        yield Difference("outcome.weights", weights_a, weights_b)
    if left.get("pods") != right.get("pods") and sorted(left.get("pods", [])) == sorted(right.get("pods", [])):
        yield Difference("outcome.pod_order", left.get("pods"), right.get("pods"))


def per_pod_outcome(outcome: CycleOutcome) -> dict[str, Any]:
    """The full outcome, as JSON values, with every pod's verdict and scores side by side."""
    encoded = canonical.plain(outcome.encode())
    weights = {s["plugin"]: s["weight"] for s in encoded["scores"]}
    pods = []
    for name, entry in per_pod(encoded).items():
        row: dict[str, Any] = {"pod": name, "verdict": entry.pop("verdict"), "total": entry.pop("total", None),
                               "winner": name == outcome.chosen}
        row["scores"] = {plugin: {"raw": raw, "normalized": norm, "weight": weights.get(plugin)}
                         for plugin, (raw, norm) in entry.items()}
        pods.append(row)
    return {"status": outcome.status, "chosen": outcome.chosen, "chosen_uid": outcome.chosen_uid,
            "message": outcome.message, "snapshot_lsn": outcome.snapshot_lsn, "now": outcome.now.isoformat(),
            "config_digest": outcome.config_digest, "digest": outcome.digest(), "pods": pods}
