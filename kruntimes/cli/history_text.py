"""How the answers of `kruntimes history` read to people: waits and durations, why a Run ended, the
ranked candidates, capacities, and what an answer of "nothing" should add.

Kept apart from the commands (``history_cmd``): these say what a value means, the
commands say which question to ask. Nothing here reads the journal.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from kruntimes import scores
from kruntimes.cli import journal_args as ja
from kruntimes.cli.output import Column, Listing


def num(value: Any) -> str:
    return "-" if value is None else str(value)


def waits_line(w: dict[str, Any]) -> str:
    """A Run's two waits in one line, named as `history waits` names them."""
    queued = ("not yet evaluated by any cycle" if w["queued_us"] is None
              else f"{seconds(w['queued_us'])} (first seen {ja.when(w['first_seen_at'])}, first cycle "
                   f"{ja.when(w['first_cycle_at'])})")
    unschedulable = seconds(w["unschedulable_us"]) + (" so far" if w["still_unschedulable"] else "")
    return f"waited in queue {queued}; unschedulable {unschedulable}"


def seconds(us: int) -> str:
    """A wait for people: milliseconds under a second, else the ``duration`` form."""
    return f"{us / 1000:.0f} ms" if us < 1_000_000 else duration(round(us / 1_000_000))


def why_ended(ended: dict[str, Any]) -> str:
    """``Reason: message`` of a Run's end, or what the journal cannot say."""
    if ended["end_reason"] is None:
        return "no reason recorded (a journal written before kruntimes recorded why Runs end)"
    return f"{ended['end_reason']}: {ended['end_message']}" if ended["end_message"] else ended["end_reason"]


def candidates_table(title: str, ranked: list[dict[str, Any]]) -> Listing:
    """The ranked candidates; equal totals are ranked by pod name, and the table says so."""
    plugins = sorted({s["plugin"] for c in ranked for s in c["scores"]})
    ties = len(ranked) > 1 and ranked[0]["total"] == ranked[1]["total"]
    if ties:
        tied = sum(1 for c in ranked if c["total"] == ranked[0]["total"])
        title += f" ({tied} share the top total {ranked[0]['total']}: the tie goes to the first pod by name)"
    table = Listing([Column("RANK", right=True), Column("POD", name=True), Column("TOTAL", right=True),
                     *[Column(p, optional=True) for p in plugins], Column("CHOSEN")],
                    title=title, legend=scores.LEGEND)
    for c in ranked:
        by_plugin = {s["plugin"]: scores.text(s["plugin"], s["normalized"], s["raw"]) for s in c["scores"]}
        table.add(c["rank"], c["pod"], c["total"], *[by_plugin.get(p, "-") for p in plugins],
                  "yes" if c["chosen"] else "")
    return table


def capacity(recorded: Any) -> dict[str, Any]:
    """A recorded capacity (JSON text of [resource, amount] pairs) as a mapping by resource."""
    try:
        pairs = json.loads(recorded) if isinstance(recorded, str) else recorded
        return {str(r): q for r, q in pairs or []}
    except (ValueError, TypeError):
        return {"(unreadable)": recorded}


def yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def before_start(at: datetime | None, extent: tuple[datetime | None, bool]) -> str:
    """What "nothing found" should add: that the journal starts after ``at`` (an answer about a time it does not
    cover is not "nothing then"), or, with no time asked, that a prune removed its older records."""
    start, pruned = extent
    if start is None or (at is not None and at >= start) or (at is None and not pruned):
        return ""
    first = start.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if at is None:
        return f" (it was pruned and starts at {first}: older records are gone, see `kruntimes journal prune`)"
    return f": the journal starts at {first}, after that time (ask with --at {first} or later)"


def duration(total: int) -> str:
    """Whole seconds as ``1h02m03s``, ``2m03s`` or ``3s``."""
    hours, rest = divmod(int(total), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


#: What a bind row means when its record says no more (a 409 and an unknown outcome carry no error text).
BIND_DETAIL = {"bind conflict": "the Run changed since it was read (409): assumption released, Run requeued",
               "bind unknown": "the write may have landed: assumption kept until the Run is seen again"}
