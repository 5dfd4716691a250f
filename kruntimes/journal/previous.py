"""A scheduled placement's previous cycle: what the churn question compares it with.

Churn is a placement that went to another pod than the top candidate of the Run's
previous cycle (its latest cycle of the same epoch before the placement; usually a
choice that lost a race). Looking that cycle and its top candidate up costs three
index look-ups per placement; asked of every placement of a window, that was the
slowest history question. So they are looked up once, when the placement is written:
``history_placements.previous_lsn``, ``previous_result`` and ``previous_top`` (revision
``0005_churn``), filled by one statement per batch after the batch's rows are in, in
the writer's transaction (``Journal.append_batch``), and over the whole table by
``Journal.reindex`` and the revision's backfill. A partial index holds the churned
placements by time, so the question reads only its answer.
"""

from __future__ import annotations

import sqlalchemy as sa

from kruntimes.journal.derived import Derived


# The Run's latest cycle of the same epoch before the placement, with its top candidate:
# three index look-ups, paid once when the placement is written instead of by every
# question about churn. Revision 0005_churn runs the same statement (frozen there) over a whole journal.
_LINK_SQL = (
    "UPDATE history_placements SET (previous_lsn, previous_result, previous_top) ="
    " (SELECT c.lsn, c.result, k.pod FROM history_cycles c"
    " LEFT JOIN history_candidates k ON k.epoch = c.epoch AND k.lsn = c.lsn AND k.rank = 1"
    " WHERE c.namespace = history_placements.namespace AND c.run_uid = history_placements.run_uid"
    " AND c.epoch = history_placements.epoch AND c.lsn < history_placements.lsn"
    " ORDER BY c.lsn DESC LIMIT 1)"
    " WHERE outcome = 'scheduled'")
_LINK_SPAN = sa.text(_LINK_SQL + " AND epoch = :epoch AND lsn >= :low AND lsn <= :high")


def link_previous(conn: sa.Connection, derived: Derived | None = None) -> None:
    """Fill the previous-cycle columns of ``derived``'s scheduled placements (every one: None).

    Runs after the batch's rows are in, in the same transaction: a placement's previous
    cycle is stored before it (in this batch or an earlier one), so the writer's batches
    and a rebuild fill the same values.
    """
    if derived is None:
        conn.execute(sa.text(_LINK_SQL))
    elif derived.placed:
        conn.execute(_LINK_SPAN, [{"epoch": epoch, "low": low, "high": high}
                                  for epoch, (low, high) in derived.placed.items()])
