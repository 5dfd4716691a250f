"""The Timeline page: Runtime Pods as lanes, Runs as bars, and below them what the window cost.

The window's pods (``Reader.window``) are the lanes; bars are read for the lanes on
screen only (one per placement, coloured by the pod's Runtime, clipped to the
window). The three figures below are SQL aggregates per time bucket (``history.buckets``):
utilisation per resource over every chosen pod (not only the lanes shown), Pending
Runs by reason, binds and conflicts per second. At a thousand pods the lanes are paged
(``per`` lanes at a time, ``lanes`` the offset) and can be narrowed to one Runtime: a
page never draws more than ``MAX_LANES`` lanes, however large the cluster.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from kruntimes.journal.history import buckets, windows
from kruntimes.ui import markup as m
from kruntimes.ui import params, queries

DEFAULT_WINDOW = timedelta(seconds=60)
DEFAULT_RECORDS = 50_000
DEFAULT_LANES = 40
MAX_LANES = 200
BUCKETS = buckets.BUCKETS
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")


def natural(text: str) -> tuple[Any, ...]:
    """Sort key that puts rt2 before rt10 (numbers inside names compare as numbers)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", text))


def colours(runtimes: list[str]) -> dict[str, str]:
    """A stable colour per Runtime: its position among the Runtime names, in natural order."""
    return {rt: PALETTE[i % len(PALETTE)] for i, rt in enumerate(sorted(set(runtimes), key=natural))}


def runtime_key(lane: windows.Lane) -> str:
    """A lane's Runtime as ``namespace/name``: Runtimes are namespaced, so ``demo/python`` and
    ``team-b/python`` are two Runtimes with two colours, two legend entries and two filters."""
    return f"{lane.namespace}/{lane.runtime}"


def of_runtime(lane: windows.Lane, runtime: str) -> bool:
    """Whether the lane is a pod of ``runtime``: ``namespace/name``, or a bare name in any namespace."""
    return not runtime or (runtime_key(lane) if "/" in runtime else lane.runtime) == runtime


def run_href(namespace: str, name: str) -> str:
    return f"/run/{m.seg(namespace)}/{m.seg(name)}"


def render(reader: queries.Reader, q: params.Query) -> bytes:
    bounds = reader.bounds()
    if bounds is None:
        return m.page("Timeline", m.h("p", "The journal holds no records yet."), active="Timeline")
    # On a busy journal the default minute is shortened to its last DEFAULT_RECORDS records: the page
    # opens quickly, and zooming out or a chosen window reads as much as it is asked to.
    start = bounds.first_at
    if not q.text("since"):
        start = max(start, reader.recorded_at_back(DEFAULT_RECORDS) or start)
    since, until = q.window(bounds.last_at, DEFAULT_WINDOW, start)
    runtime = q.text("runtime")
    offset = q.integer("lanes", 0)
    per = q.integer("per", DEFAULT_LANES, low=1, high=MAX_LANES)
    w = reader.window(since, until)
    alive = [lane for lane in w.lanes.values() if lane.deleted_at is None or lane.deleted_at >= since]
    palette = colours([runtime_key(lane) for lane in alive])
    chosen = sorted((lane for lane in alive if of_runtime(lane, runtime)),
                    # Pod names are compared as text: generated suffixes are zero-padded, and often hex.
                    key=lambda lane: (natural(runtime_key(lane)), lane.name))
    offset = min(offset, max(0, len(chosen) - 1) // per * per)  # past the last lane: its last page
    shown = chosen[offset:offset + per]
    b = buckets.Buckets.of(since, until)
    bars = reader.bars(w, [(lane.namespace, lane.name) for lane in shown])
    held = reader.held(w, [(lane.namespace, lane.name) for lane in chosen], b)
    binds = reader.bind_counts(b)
    base = {"since": since, "until": until, "runtime": runtime or None, "per": per if per != DEFAULT_LANES else None}
    span = until - since
    body = [
        _controls(since, until, runtime, offset, per, base, list(palette)),
        _legend(alive, palette, base),
        _pager(offset, per, len(chosen), base),
        m.figure("lanes", lanes_figure(w, bars, shown, palette), height=max(160, 60 + 22 * len(shown))),
        m.h("h2", f"Utilisation per resource ({runtime + ' pods' if runtime else 'all pods'})"),
        m.figure("utilisation", utilisation_figure(b, held, chosen), height=240),
        m.h("h2", "Unschedulable Runs by reason (all Runtimes)"),
        m.h("p", "Runs a cycle left Pending, by the reason it gave. Runs waiting in queue (no cycle yet) are not "
                 "counted here: the ", m.link("Waits", "/waits"), " page names both waits.", class_="note",
            id="pending-note"),
        m.figure("pending", pending_figure(b, reader.pending_counts(b)), height=240),
        m.h("h2", "Binds and conflicts per second"),
        m.figure("binds", binds_figure(b, binds), height=220),
        m.h("p", f"{held.placements:,} placements on these pods and {sum(map(sum, binds.values())):,} binds in "
                 f"{span.total_seconds():,.3f} s, in {BUCKETS} buckets of {b.seconds:,.3f} s; the {len(bars):,} "
                 f"bars of the lanes shown. Click a bar for its Run; drag across the lanes to zoom.", class_="note"),
    ]
    return m.page("Timeline", *body, active="Timeline")


def _controls(since: datetime, until: datetime, runtime: str, offset: int, per: int, base: dict[str, Any],
              runtimes: list[str]) -> m.Html:
    span = until - since
    mid = since + span / 2

    def at(start: datetime, end: datetime) -> str:
        return m.url("/timeline", **{**base, "since": start, "until": end})

    options = [m.h("option", "every Runtime", value="")] + [
        m.h("option", rt, value=rt, selected=rt == runtime) for rt in runtimes]
    form = m.h("form", m.h("label", "since ", m.void("input", name="since", value=m.iso(since), size=28)),
               m.h("label", " until ", m.void("input", name="until", value=m.iso(until), size=28)),
               m.h("label", " Runtime ", m.h("select", *options, name="runtime")),
               m.void("input", type="hidden", name="per", value=per),
               m.h("button", "show", type="submit"), method="get", action="/timeline", id="window")
    links = m.h("p", m.link("◀ earlier", at(since - span, since), id="earlier"), " · ",
                m.link("zoom in", at(mid - span / 4, mid + span / 4), id="zoom-in"), " · ",
                m.link("zoom out", at(mid - span, mid + span), id="zoom-out"), " · ",
                m.link("later ▶", at(until, until + span), id="later"), class_="controls")
    return m.join((form, links))


def _legend(alive: list[windows.Lane], palette: dict[str, str], base: dict[str, Any]) -> m.Html:
    pods = Counter(runtime_key(lane) for lane in alive)
    items = [m.h("span", m.h("i", style=f"background:{colour}"),
                  m.link(f"{rt} ({pods[rt]} pods)", m.url("/timeline", **{**base, "runtime": rt})), class_="key")
             for rt, colour in palette.items()]
    return m.h("p", *items, class_="legend")


def _pager(offset: int, per: int, total: int, base: dict[str, Any]) -> m.Html:
    if total == 0:
        return m.h("p", "No Runtime Pods in this window.", class_="note")
    parts: list[Any] = [f"lanes {offset + 1:,}–{min(total, offset + per):,} of {total:,} pods"]
    if offset > 0:
        parts += [" · ", m.link("previous", m.url("/timeline", **{**base, "lanes": max(0, offset - per) or None}),
                                id="lanes-previous")]
    if offset + per < total:
        parts += [" · ", m.link("next", m.url("/timeline", **{**base, "lanes": offset + per}), id="lanes-next")]
    return m.h("p", *parts, class_="pager")


def _clip(bar: windows.Bar, since: datetime, until: datetime) -> tuple[datetime, datetime]:
    start = max(bar.start, since)
    end = min(bar.end or until, until)
    return start, max(start, end)


def lanes_figure(w: windows.Window, bars: list[windows.Bar], shown: list[windows.Lane],
                 palette: dict[str, str]) -> dict[str, Any]:
    names = {(lane.namespace, lane.name): f"{lane.namespace}/{lane.name}" for lane in shown}
    runtime_of = {(lane.namespace, lane.name): runtime_key(lane) for lane in shown}
    traces: dict[str, dict[str, Any]] = {}
    for bar in bars:
        key = (bar.namespace, bar.pod)
        if key not in names:
            continue
        start, end = _clip(bar, w.since, w.until)
        rt = runtime_of[key]
        t = traces.setdefault(rt, {"type": "bar", "orientation": "h", "name": rt, "y": [], "x": [], "base": [],
                                   "customdata": [], "opacity": 0.7, "marker": {"color": palette.get(rt, "#888"),
                                                                "line": {"color": "#fff", "width": 0.5}},
                                   "hovertemplate": "%{customdata[0]}<br>%{customdata[1]}<extra>%{y}</extra>"})
        t["y"].append(names[key])
        t["base"].append(m.iso(start))
        t["x"].append(max(1.0, (end - start).total_seconds() * 1000))
        ended = f"until {m.when(bar.end)} ({bar.ended})" if bar.end else "still there at the window's end"
        t["customdata"].append([f"{bar.namespace}/{bar.run}", f"placed {m.when(bar.start)}, {ended}",
                                run_href(bar.namespace, bar.run)])
    order = [names[(lane.namespace, lane.name)] for lane in shown]
    return {"data": [traces[k] for k in sorted(traces)],
            "layout": {"barmode": "overlay", "showlegend": False, "margin": {"l": 170, "r": 10, "t": 10, "b": 30},
                       "xaxis": {"type": "date", "range": [m.iso(w.since), m.iso(w.until)]},
                       "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": order[::-1], "automargin": False,
                                 "range": [-0.5, max(0.5, len(order) - 0.5)]}}}


def _layout(b: buckets.Buckets, title: str, **extra: Any) -> dict[str, Any]:
    return {"margin": {"l": 170, "r": 10, "t": 10, "b": 30}, "legend": {"orientation": "h", "y": -0.25},
            "showlegend": True,
            "xaxis": {"type": "date", "range": [m.iso(b.since), m.iso(b.until)]},
            "yaxis": {"title": {"text": title}, "rangemode": "tozero"}, **extra}


def _xs(b: buckets.Buckets) -> list[str]:
    return [m.iso(e) for e in b.starts()]


def utilisation(held: buckets.Held, b: buckets.Buckets, capacity: dict[str, int]) -> dict[str, list[float]]:
    """Per resource and bucket: the time-weighted share of ``capacity`` the placements held, in percent.

    Time-weighted, not a count of the Runs seen in a bucket: ten Runs of 50 ms one after
    another in the same slot of a half-second bucket held it for a tenth of the bucket.
    A group's placements fill the buckets between their first and last whole (through a
    difference array) and those two in part, from the sums of their clipped starts and ends.
    """
    step = b.step_us
    full: dict[str, list[float]] = {}
    part: dict[str, list[float]] = {}
    parsed: dict[str, list[tuple[str, int]]] = {}
    for requests, first, last, n, starts, ends in held.groups:
        asked = parsed.get(requests)
        if asked is None:
            asked = parsed[requests] = buckets.amounts(requests)
        for resource, amount in asked:
            f = full.setdefault(resource, [0.0] * (BUCKETS + 1))
            q = part.setdefault(resource, [0.0] * (BUCKETS + 1))
            if first == last:
                q[first] += amount * (ends - starts) / step
                continue
            q[first] += amount * (n * (first + 1) * step - starts) / step
            q[last] += amount * (ends - n * last * step) / step
            f[first + 1] += amount * n
            f[last] -= amount * n
    out: dict[str, list[float]] = {}
    for resource in sorted(set(full) | set(capacity)):
        whole, partial = full.get(resource, [0.0] * (BUCKETS + 1)), part.get(resource, [0.0] * (BUCKETS + 1))
        running, series, cap = 0.0, [], capacity.get(resource, 0)
        for i in range(BUCKETS):
            running += whole[i]
            series.append(round(100.0 * (running + partial[i]) / cap, 2) if cap else 0.0)
        out[resource] = series
    return out


def utilisation_figure(b: buckets.Buckets, held: buckets.Held, lanes: list[windows.Lane]) -> dict[str, Any]:
    capacity: Counter[str] = Counter()
    for lane in lanes:
        capacity.update(lane.capacity)
    xs = _xs(b)
    data = [{"type": "scatter", "mode": "lines", "line": {"shape": "hv"}, "name": resource, "x": xs, "y": ys}
            for resource, ys in utilisation(held, b, dict(capacity)).items()]
    return {"data": data, "layout": _layout(b, "% of capacity")}


def pending_figure(b: buckets.Buckets, runs: dict[str, list[int]]) -> dict[str, Any]:
    xs = _xs(b)
    data = [{"type": "bar", "name": reason, "x": xs, "y": counts} for reason, counts in sorted(runs.items())]
    layout = _layout(b, "unschedulable Runs", barmode="stack", bargap=0)
    if not data:
        layout["annotations"] = [{"text": "no cycle left a Run Pending in this window", "showarrow": False,
                                  "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return {"data": data, "layout": layout}


def binds_figure(b: buckets.Buckets, results: dict[str, list[int]]) -> dict[str, Any]:
    counts: dict[str, list[int]] = {r: [0] * BUCKETS for r in ("ok", "conflict", "error")}
    counts.update(results)
    xs = _xs(b)
    colour = {"ok": "#59a14f", "conflict": "#e15759", "error": "#b07aa1"}
    data = [{"type": "bar", "name": result, "x": xs, "y": [round(n / b.seconds, 3) for n in ns],
             "marker": {"color": colour.get(result, "#888")}} for result, ns in counts.items()]
    return {"data": data, "layout": _layout(b, "per second", barmode="stack", bargap=0)}
