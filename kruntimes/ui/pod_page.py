"""The Pod at T page: what a Runtime Pod held at an instant, its capacity, and its heartbeat's state.

"Held" is every Run placed on it (reserved, or observed there) and not yet ended or
released at T; "heartbeat" is the one the scheduler had recorded, judged against the
staleness window of the configuration then running - as a cycle at T would have
judged it (``docs/journal.md``: a heartbeat renewal is journaled only when a verdict
could depend on it, so this is the heartbeat the cycles read).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from kruntimes.devices import results
from kruntimes.ui import markup as m
from kruntimes.ui import params, queries, timeline


def render_picker(reader: queries.Reader, q: params.Query) -> bytes:
    """``/pod``: a form, and (with ``pod=NS/NAME``) the pod's page itself."""
    wanted = q.text("pod")
    if wanted:
        parts = wanted.split("/")
        if len(parts) != 2 or not all(parts):
            raise params.BadParameter(f"pod must be NAMESPACE/NAME, got {wanted!r}")
        return render(reader, q, parts[0], parts[1])
    bounds = reader.bounds()
    if bounds is None:
        return m.page("Pod at T", m.h("p", "The journal holds no records yet."), active="Pod at T")
    at = q.time("at", bounds.last_at, now=bounds.last_at) or bounds.last_at
    per = q.integer("per", PODS_PER_PAGE, low=1, high=MAX_PODS_PER_PAGE)
    lanes = sorted((lane for lane in reader.window(at, at).lanes.values()
                    if lane.deleted_at is None or lane.deleted_at >= at),
                   key=lambda lane: (timeline.natural(timeline.runtime_key(lane)), lane.name))
    offset = min(q.integer("offset", 0), max(0, len(lanes) - 1) // per * per)  # past the end: the last page
    epoch, lsn = reader.newest_at(at) or (None, 0)
    staleness = int(reader.config_at(lsn, epoch).get("heartbeat_staleness_seconds") or 0)
    # The lanes say which pods existed at T; what each was at T (ready, heartbeat) is its newest
    # observation then, which a window of added and deleted pods does not follow: looked up per row.
    rows, ready = [], 0
    for lane in lanes[offset:offset + per]:
        seen = reader.pod_observation(lane.namespace, lane.name, at)
        obj = (seen.payload.get("object") or {}) if seen is not None else {}
        is_ready, terminating = bool(obj.get("ready", lane.ready)), bool(obj.get("terminating", lane.terminating))
        ready += is_ready and not terminating
        rows.append((m.link(f"{lane.namespace}/{lane.name}",
                            m.url(f"/pod/{m.seg(lane.namespace)}/{m.seg(lane.name)}", at=at)),
                     timeline.runtime_key(lane), _state(is_ready, terminating),
                     _heartbeat(obj.get("heartbeat", lane.heartbeat), at, staleness), _capacity(lane.capacity)))
    return m.page("Pod at T", _form("", at), m.h("h2", f"Runtime Pods at {m.when(at)}"),
                  m.h("p", f"{len(lanes):,} pods, {ready:,} of the {len(rows):,} below ready; heartbeats judged as a "
                           f"cycle at T would judge them (stale after {staleness} s)", class_="note"),
                  _pods_pager(at, offset, per, len(lanes)),
                  m.table(("pod", "Runtime", "state", "heartbeat", "capacity"), rows, id="pods"), active="Pod at T")


PODS_PER_PAGE = 100
MAX_PODS_PER_PAGE = 1000


def _pods_pager(at: datetime, offset: int, per: int, total: int) -> m.Html:
    """Where this page of pods is in the list, and links to the pages beside it."""
    if total == 0:
        return m.h("p", "No Runtime Pods at T.", class_="note pager")
    base = {"at": at, "per": per if per != PODS_PER_PAGE else None}
    parts: list[Any] = [f"pods {offset + 1:,}–{min(total, offset + per):,} of {total:,}"]
    if offset > 0:
        parts += [" · ", m.link("previous", m.url("/pod", **base, offset=max(0, offset - per) or None),
                                id="pods-previous")]
    if offset + per < total:
        parts += [" · ", m.link("next", m.url("/pod", **base, offset=offset + per), id="pods-next")]
    return m.h("p", *parts, class_="pager", id="pods-pager")


def _state(ready: bool | None, terminating: bool | None) -> str:
    return ", ".join([("ready" if ready else "not ready")] + (["terminating"] if terminating else []))


def _form(pod: str, at: datetime) -> m.Html:
    return m.h("form", m.h("label", "pod ", m.void("input", name="pod", value=pod, placeholder="namespace/name")),
               m.h("label", " at ", m.void("input", name="at", value=m.iso(at), size=28)),
               m.h("button", "show", type="submit"), method="get", action="/pod", id="pod-form")


def _capacity(capacity: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(capacity.items())) or "-"


def render(reader: queries.Reader, q: params.Query, namespace: str, name: str) -> bytes:
    bounds = reader.bounds()
    if bounds is None:
        raise LookupError("the journal holds no records yet")
    at = q.time("at", bounds.last_at, now=bounds.last_at) or bounds.last_at
    seen = reader.pod_observation(namespace, name, at)
    if seen is None:
        raise LookupError(f"the journal has no observation of pod {namespace}/{name} at or before {m.when(at)}")
    obj = seen.payload.get("object") or {}
    capacity = {str(k): int(v) for k, v in obj.get("capacity") or () if isinstance(v, int)}
    held = reader.pod_runs(namespace, name, at)
    used: Counter[str] = Counter()
    for bar in held:
        used.update(bar.requests)
    staleness = int(reader.config_at(seen.lsn, seen.incarnation).get("heartbeat_staleness_seconds") or 0)
    deleted = seen.payload.get("event") == "DELETED"
    items = {
        "at": m.when(at),
        "observed": f"{seen.payload.get('event', '').lower()} at {m.when(seen.at)} (LSN {seen.lsn})",
        "Runtime": obj.get("runtime", "-"),
        "state": "deleted" if deleted else _state(obj.get("ready"), obj.get("terminating")),
        "heartbeat": _heartbeat(obj.get("heartbeat"), at, staleness),
        "capacity problem": obj.get("capacity_problem") or "-",
    }
    rows = [(resource, capacity.get(resource, 0), used.get(resource, 0), capacity.get(resource, 0) - used[resource])
            for resource in sorted(set(capacity) | set(used))]
    devices = reader.held_devices(namespace, name, at) if held else {}
    held_rows = [(m.link(f"{b.namespace}/{b.run}", timeline.run_href(b.namespace, b.run)),
                  m.when(b.start) if b.start else "before the checkpoint", _capacity(b.requests),
                  results.describe(devices.get(b.run_uid)) or "-",
                  f"{m.when(b.end)} ({b.ended})" if b.end else "-") for b in held]
    span = timedelta(seconds=30)
    around = m.url("/timeline", since=at - span, until=at + span,
                   runtime=f"{namespace}/{obj['runtime']}" if obj.get("runtime") else None)
    body: list[Any] = [
        _form(f"{namespace}/{name}", at),
        m.definition(items, id="pod-state"),
        m.h("h2", "Capacity and use"),
        m.table(("resource", "capacity", "held", "free"), rows, id="capacity"),
        m.h("h2", f"Runs held at T ({len(held)})"),
        m.table(("Run", "placed", "requests", "devices", "ended"), held_rows, id="held") if held_rows
        else m.h("p", "none", class_="note"),
        m.h("p", m.link("this Runtime's timeline around T", around)),
    ]
    return m.page(f"Pod {namespace}/{name} at T", *body, active="Pod at T")


def _heartbeat(text: Any, at: datetime, staleness: int) -> str:
    if not text:
        return "none recorded (a pod without a heartbeat is not available)"
    try:
        beat = datetime.fromisoformat(str(text))
    except ValueError:
        return f"unreadable: {text}"
    age = (at - beat).total_seconds()
    verdict = "fresh" if staleness <= 0 or age <= staleness else "stale"
    return f"{verdict}: {text} ({age:,.1f} s before T; stale after {staleness} s)"
