"""The What-if page: other score weights, or a score plugin switched off, for a window of cycles.

The form is prefilled with the configuration the window's scheduler ran. Nothing is
replayed until it is submitted (``run=1``); then ``replay.whatif`` plans each cycle
twice on its rebuilt snapshot, with the recorded configuration and with the
alternative, and the page lists the Runs whose decision would have changed and the
shift in decisions per pod. A window is limited to ``MAX_CYCLES`` cycles so that one
click cannot keep the server busy for minutes; the CLI has no such limit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kruntimes.scheduler.config import ConfigError
from kruntimes.ui import markup as m
from kruntimes.ui import busy, params, queries
from replay import errors as replay_errors
from replay import source, whatif

DEFAULT_WINDOW = timedelta(seconds=10)
MAX_CYCLES = 3000
MAX_WEIGHT = 1000
MAX_ROWS = 100

EXPLAIN = ("Each cycle is replayed against the recorded history: the capacity, assumptions and affinity targets "
           "that the recorded decisions produced, not the state the alternative's own earlier decisions would "
           "have produced. Read the list as “which decisions would have been different, one at a time”, not "
           "“where everything would be now” (docs/replay.md, what-if).")


def render(reader: queries.Reader, q: params.Query) -> bytes:
    bounds = reader.bounds()
    if bounds is None:
        return m.page("What-if", m.h("p", "The journal holds no records yet."), active="What-if")
    since, until = q.window(bounds.last_at, DEFAULT_WINDOW, bounds.first_at)
    config = reader.config_at(bounds.last_lsn, bounds.last_epoch)
    scores = [(str(name), int(weight)) for name, weight in config.get("scores") or ()]
    strange = sorted(set(q.names("w.")) - {f"w.{name}" for name, _ in scores})
    if strange:  # as `kruntimes replay what-if --weights` refuses it, rather than report "no change"
        raise params.BadParameter(f"{', '.join(strange)}: no score plugin of this scheduler has that name"
                                  f" (its score plugins: {', '.join(n for n, _ in scores)})")
    weights = {name: q.integer(f"w.{name}", weight, low=1, high=MAX_WEIGHT) for name, weight in scores}
    disabled = frozenset(q.all("disable"))
    unknown = disabled - {name for name, _ in scores}
    if unknown:
        raise params.BadParameter(f"disable names no score plugin of this scheduler: {', '.join(sorted(unknown))}"
                                  f" (its score plugins: {', '.join(n for n, _ in scores)})")
    body: list[Any] = [_form(since, until, scores, weights, disabled), m.h("p", EXPLAIN, class_="note")]
    if q.text("run") == "1":
        body.append(_report(reader, since, until, scores, weights, disabled, q.memory))
    return m.page("What-if", *body, active="What-if")


def _form(since: Any, until: Any, scores: list[tuple[str, int]], weights: dict[str, int],
          disabled: frozenset[str]) -> m.Html:
    rows = [(name, recorded,
             m.void("input", type="number", min=1, max=MAX_WEIGHT, name=f"w.{name}", value=weights[name], size=5),
             m.void("input", type="checkbox", name="disable", value=name, checked=name in disabled))
            for name, recorded in scores]
    return m.h("form",
               m.h("label", "since ", m.void("input", name="since", value=m.iso(since), size=28)),
               m.h("label", " until ", m.void("input", name="until", value=m.iso(until), size=28)),
               m.table(("score plugin", "recorded weight", "what-if weight", "disable"), rows, id="plugins"),
               m.void("input", type="hidden", name="run", value="1"),
               m.h("button", "replay the window with these weights", type="submit", id="run-whatif"),
               method="get", action="/whatif", id="whatif")


def _report(reader: queries.Reader, since: Any, until: Any, scores: list[tuple[str, int]],
            weights: dict[str, int], disabled: frozenset[str], memory: dict[str, Any]) -> m.Html:
    recorded = dict(scores)
    alternative = whatif.Alternative(
        weights=tuple(sorted((n, w) for n, w in weights.items() if w != recorded[n] and n not in disabled)),
        disabled=disabled)
    count = reader.cycles_between(since, until)
    if count > MAX_CYCLES:
        return m.h("p", f"{count:,} cycles in this window; narrow it to at most {MAX_CYCLES:,} "
                        "(or use `kruntimes replay what-if`, which has no limit)", class_="error")
    try:
        with busy.one_at_a_time(memory, busy.WHATIF):
            report = whatif.what_if(reader.journal, source.Selection(since=since, until=until), alternative)
    except (replay_errors.ReplayError, ConfigError) as exc:
        return m.h("p", f"cannot replay this window: {exc}", class_="error")
    changed_rows = [(m.link(c.lsn, f"/run/{m.seg(c.namespace)}/{m.seg(c.run)}#cycle-{c.lsn}"),
                     f"{c.namespace}/{c.run}", str(c.before), str(c.after)) for c in report.changed[:MAX_ROWS]]
    shift = report.shift()
    parts: list[Any] = [
        m.h("h2", f"What-if: {alternative.describe()}"),
        m.h("p", m.h("strong", f"{len(report.changed):,}", id="changed-count"),
            f" of {report.cycles:,} decisions would have changed", id="whatif-summary"),
    ]
    if report.not_reproduced:
        parts.append(m.h("p", f"{len(report.not_reproduced)} cycles did not reproduce with the recorded "
                              "configuration and are left out: " + ", ".join(map(str, report.not_reproduced[:20])),
                         class_="error"))
    if shift:
        parts += [m.h("h3", "Decisions per pod, recorded and what-if"),
                  m.figure("shift-figure", _shift_figure(shift), height=320),
                  m.table(("pod", "recorded", "what-if"), shift, id="shift")]
    else:
        parts.append(m.h("p", "No pod's count of decisions changes.", class_="note", id="shift"))
    parts.append(m.h("h3", "Decisions that change"))
    if len(report.changed) > MAX_ROWS:
        parts.append(m.h("p", f"the first {MAX_ROWS:,} of {len(report.changed):,}", class_="note"))
    parts.append(m.table(("cycle", "Run", "recorded", "what-if"), changed_rows, id="changes") if changed_rows
                 else m.h("p", "none", class_="note"))
    return m.h("section", *parts, id="whatif-report")


def _shift_figure(shift: list[tuple[str, int, int]]) -> dict[str, Any]:
    pods = [p for p, _, _ in shift]
    return {"data": [{"type": "bar", "name": "recorded", "x": pods, "y": [b for _, b, _ in shift],
                      "marker": {"color": "#4e79a7"}},
                     {"type": "bar", "name": "what-if", "x": pods, "y": [a for _, _, a in shift],
                      "marker": {"color": "#f28e2b"}}],
            "layout": {"barmode": "group", "margin": {"l": 60, "r": 10, "t": 10, "b": 90},
                       "legend": {"orientation": "h", "y": 1.1}, "yaxis": {"title": {"text": "decisions"}}}}
