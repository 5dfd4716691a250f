"""The Waits page: how long Runs waited, in queue apart from unschedulable, and why (issue 27 item 2).

"Pending" covers two waits that call for different remedies: a Run *in queue* has not
been evaluated by any cycle yet (the scheduler is behind: more workers, a smaller
burst), an *unschedulable* one was evaluated and fits no pod (capacity, the Run's
requests). The Timeline's figure counts the second only; this page names both, for
every Run still Pending and for the longest waits, from the one history query layer
``kruntimes history waits`` reads too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kruntimes.journal.history import waits
from kruntimes.ui import markup as m
from kruntimes.ui import params, queries, timeline

DEFAULT_ROWS = 50
MAX_ROWS = 500


def seconds(us: int | None) -> str:
    """A wait for people: milliseconds under a second, else seconds."""
    if us is None:
        return "-"
    return f"{us / 1000:,.0f} ms" if us < 1_000_000 else f"{us / 1_000_000:,.1f} s"


def render(reader: queries.Reader, q: params.Query) -> bytes:
    limit = q.integer("limit", DEFAULT_ROWS, low=1, high=MAX_ROWS)
    found = reader.waits()
    now = Counter(w["state"] for w in found if w["outcome"] is None)
    summary = m.definition({
        "Pending at the journal's end": f"{sum(now.values()):,}",
        "waiting in queue (no cycle yet)": f"{now.get('in queue', 0):,}",
        "unschedulable (a cycle found no pod)": f"{now.get('unschedulable', 0):,}",
        "Runs placed": f"{sum(1 for w in found if w['outcome'] == 'scheduled'):,}",
    }, id="waits-summary")
    rows = [(m.link(f"{w['namespace']}/{w['run']}", timeline.run_href(w["namespace"], w["run"])),
             seconds(w["waited_us"]), seconds(w["queued_us"]), seconds(w["unschedulable_us"]),
             m.when(w["first_seen_at"]), m.when(w["placed_at"]) if w["placed_at"] else f"(still {w['state']})",
             w["pod"] or "-", w["pending_cycles"], w["last_reason"] or "")
            for w in found[:limit]]
    body: list[Any] = [
        summary,
        m.h("h2", f"The {min(limit, len(found)):,} longest waits of {len(found):,} Runs"),
        m.h("p", waits.WAITS_LEGEND, class_="note", id="waits-legend"),
        m.table(("Run", "waited", "in queue", "unschedulable", "first seen", "placed", "pod", "Pending cycles",
                 "latest reason"), rows, id="waits") if rows else m.h("p", "No Run in this journal.", class_="note"),
    ]
    return m.page("Waits", *body, active="Waits")
