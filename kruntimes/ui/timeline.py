"""The Timeline page: Runtime Pods as lanes, Runs as bars, and below them what the window cost.

One window read (``Reader.window``) feeds four figures: the lanes (one bar per
placement, coloured by the pod's Runtime, clipped to the window), utilisation per
resource over every pod (not only the lanes shown), Pending Runs by reason, and
binds and conflicts per second. At a thousand pods the lanes are paged (``per``
lanes at a time, ``lanes`` the offset) and can be narrowed to one Runtime: a page
never draws more than ``MAX_LANES`` lanes, however large the cluster.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any

from kruntimes.ui import markup as m
from kruntimes.ui import params, queries

DEFAULT_WINDOW = timedelta(seconds=60)
DEFAULT_RECORDS = 50_000
DEFAULT_LANES = 40
MAX_LANES = 200
BUCKETS = 120
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")


def natural(text: str) -> tuple[Any, ...]:
    """Sort key that puts rt2 before rt10 (numbers inside names compare as numbers)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", text))


def colours(runtimes: list[str]) -> dict[str, str]:
    """A stable colour per Runtime: its position among the Runtime names, in natural order."""
    return {rt: PALETTE[i % len(PALETTE)] for i, rt in enumerate(sorted(set(runtimes), key=natural))}


def run_href(namespace: str, name: str) -> str:
    return f"/run/{m.seg(namespace)}/{m.seg(name)}"


def render(reader: queries.Reader, q: params.Query) -> bytes:
    bounds = reader.bounds()
    if bounds is None:
        return m.page("Timeline", m.h("p", "The journal holds no records yet."), active="Timeline")
    # On a busy journal the default minute is shortened to its last DEFAULT_RECORDS records: the page
    # opens quickly, and zooming out or a chosen window reads as much as it is asked to.
    start = bounds.first_at
    if not q.text("since") and bounds.last_lsn - bounds.first_lsn > DEFAULT_RECORDS:
        start = max(start, reader.recorded_at_lsn(bounds.last_lsn - DEFAULT_RECORDS) or start)
    since, until = q.window(bounds.last_at, DEFAULT_WINDOW, start)
    runtime = q.text("runtime")
    offset = q.integer("lanes", 0)
    per = q.integer("per", DEFAULT_LANES, low=1, high=MAX_LANES)
    w = reader.window(since, until)
    alive = [lane for lane in w.lanes.values() if lane.deleted_at is None or lane.deleted_at >= since]
    palette = colours([lane.runtime for lane in alive])
    chosen = sorted((lane for lane in alive if not runtime or lane.runtime == runtime),
                    key=lambda lane: (natural(lane.runtime), lane.namespace, natural(lane.name)))
    offset = min(offset, max(0, len(chosen) - 1) // per * per)  # past the last lane: its last page
    shown = chosen[offset:offset + per]
    base = {"since": since, "until": until, "runtime": runtime or None, "per": per if per != DEFAULT_LANES else None}
    span = until - since
    body = [
        _controls(since, until, runtime, offset, per, base, list(palette)),
        _legend(alive, palette, base),
        _pager(offset, per, len(chosen), base),
        m.figure("lanes", lanes_figure(w, shown, palette), height=max(160, 60 + 22 * len(shown))),
        m.h("h2", f"Utilisation per resource ({runtime + ' pods' if runtime else 'all pods'})"),
        m.figure("utilisation", utilisation_figure(w, chosen), height=240),
        m.h("h2", "Pending Runs by reason (all Runtimes)"),
        m.figure("pending", pending_figure(w), height=240),
        m.h("h2", "Binds and conflicts per second"),
        m.figure("binds", binds_figure(w), height=220),
        m.h("p", f"{len(w.bars):,} placements, {len(w.binds):,} binds and {len(w.pending):,} Pending verdicts in "
                 f"{span.total_seconds():,.3f} s; {w.records_read:,} journal records read (from the checkpoint "
                 "before the window). Click a bar for its Run; drag across the lanes to zoom.", class_="note"),
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


def _legend(alive: list[queries.Lane], palette: dict[str, str], base: dict[str, Any]) -> m.Html:
    pods = Counter(lane.runtime for lane in alive)
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


def _clip(bar: queries.Bar, since: datetime, until: datetime) -> tuple[datetime, datetime]:
    start = max(bar.start or since, since)
    end = min(bar.end or until, until)
    return start, max(start, end)


def lanes_figure(w: queries.Window, shown: list[queries.Lane], palette: dict[str, str]) -> dict[str, Any]:
    names = {(lane.namespace, lane.name): f"{lane.namespace}/{lane.name}" for lane in shown}
    runtime_of = {(lane.namespace, lane.name): lane.runtime for lane in shown}
    traces: dict[str, dict[str, Any]] = {}
    for bar in w.bars:
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
        placed = m.when(bar.start) if bar.start else "before the window"
        t["customdata"].append([f"{bar.namespace}/{bar.run}", f"placed {placed}, {ended}",
                                run_href(bar.namespace, bar.run)])
    order = [names[(lane.namespace, lane.name)] for lane in shown]
    return {"data": [traces[k] for k in sorted(traces)],
            "layout": {"barmode": "overlay", "showlegend": False, "margin": {"l": 170, "r": 10, "t": 10, "b": 30},
                       "xaxis": {"type": "date", "range": [m.iso(w.since), m.iso(w.until)]},
                       "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": order[::-1], "automargin": False,
                                 "range": [-0.5, max(0.5, len(order) - 0.5)]}}}


def _edges(w: queries.Window) -> tuple[list[datetime], float]:
    step = (w.until - w.since) / BUCKETS
    return [w.since + step * i for i in range(BUCKETS)], step.total_seconds()


def _bucket(w: queries.Window, at: datetime) -> int:
    return min(BUCKETS - 1, max(0, int((at - w.since) / (w.until - w.since) * BUCKETS)))


def utilisation(w: queries.Window, lanes: list[queries.Lane]) -> dict[str, list[float]]:
    """Per resource and bucket: the time-weighted share of the ``lanes``' capacity their Runs held, in percent.

    Time-weighted, not a count of the Runs seen in a bucket: ten Runs of 50 ms one after
    another in the same slot of a half-second bucket held it for a tenth of the bucket.
    Buckets a bar covers whole go through a difference array; only its two ends are partial.
    Seconds as floats (not datetimes) because this runs once per bar of the window.
    """
    origin, span = w.since.timestamp(), (w.until - w.since).total_seconds()
    step = span / BUCKETS
    pods = {(lane.namespace, lane.name) for lane in lanes}
    full: dict[str, list[float]] = defaultdict(lambda: [0.0] * (BUCKETS + 1))
    part: dict[str, list[float]] = defaultdict(lambda: [0.0] * BUCKETS)
    for bar in w.bars:
        if (bar.namespace, bar.pod) not in pods:
            continue
        start = max(0.0, bar.start.timestamp() - origin) if bar.start else 0.0
        end = min(span, bar.end.timestamp() - origin) if bar.end else span
        end = max(start, end)
        first, last = min(BUCKETS - 1, int(start / step)), min(BUCKETS - 1, int(end / step))
        for resource, amount in bar.requests.items():
            if first == last:
                part[resource][first] += amount * (end - start) / step
                continue
            part[resource][first] += amount * ((first + 1) * step - start) / step
            part[resource][last] += amount * (end - last * step) / step
            full[resource][first + 1] += amount
            full[resource][last] -= amount
    capacity: Counter[str] = Counter()
    for lane in lanes:
        capacity.update(lane.capacity)
    out: dict[str, list[float]] = {}
    for resource in sorted(set(full) | set(part) | set(capacity)):
        running, series = 0.0, []
        for i in range(BUCKETS):
            running += full[resource][i]
            held = running + part[resource][i]
            series.append(round(100.0 * held / capacity[resource], 2) if capacity[resource] else 0.0)
        out[resource] = series
    return out


def _xs(w: queries.Window) -> list[str]:
    edges, _ = _edges(w)
    return [m.iso(e) for e in edges]


def _layout(w: queries.Window, title: str, **extra: Any) -> dict[str, Any]:
    return {"margin": {"l": 170, "r": 10, "t": 10, "b": 30}, "legend": {"orientation": "h", "y": -0.25},
            "showlegend": True,
            "xaxis": {"type": "date", "range": [m.iso(w.since), m.iso(w.until)]},
            "yaxis": {"title": {"text": title}, "rangemode": "tozero"}, **extra}


def utilisation_figure(w: queries.Window, lanes: list[queries.Lane]) -> dict[str, Any]:
    xs = _xs(w)
    data = [{"type": "scatter", "mode": "lines", "line": {"shape": "hv"}, "name": resource, "x": xs, "y": ys}
            for resource, ys in utilisation(w, lanes).items()]
    return {"data": data, "layout": _layout(w, "% of capacity")}


def pending_figure(w: queries.Window) -> dict[str, Any]:
    runs: dict[str, list[set[str]]] = defaultdict(lambda: [set() for _ in range(BUCKETS)])
    for at, reason, uid in w.pending:
        runs[reason][_bucket(w, at)].add(uid)
    xs = _xs(w)
    data = [{"type": "bar", "name": reason, "x": xs, "y": [len(s) for s in buckets]}
            for reason, buckets in sorted(runs.items())]
    layout = _layout(w, "Pending Runs", barmode="stack", bargap=0)
    if not data:
        layout["annotations"] = [{"text": "no cycle left a Run Pending in this window", "showarrow": False,
                                  "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return {"data": data, "layout": layout}


def binds_figure(w: queries.Window) -> dict[str, Any]:
    _, seconds = _edges(w)
    counts: dict[str, list[int]] = {r: [0] * BUCKETS for r in ("ok", "conflict", "error")}
    for at, result in w.binds:
        counts.setdefault(result, [0] * BUCKETS)[_bucket(w, at)] += 1
    xs = _xs(w)
    colour = {"ok": "#59a14f", "conflict": "#e15759", "error": "#b07aa1"}
    data = [{"type": "bar", "name": result, "x": xs, "y": [round(n / seconds, 3) for n in ns],
             "marker": {"color": colour.get(result, "#888")}} for result, ns in counts.items()]
    return {"data": data, "layout": _layout(w, "per second", barmode="stack", bargap=0)}
