"""A scheduled placement's previous cycle: what the churn question compares it with.

Churn is a placement that went to another pod than the top candidate of the Run's
previous cycle (its latest cycle of the same epoch before the placement; usually a
choice that lost a race). Looking that cycle and its top candidate up costs three
index look-ups per placement; asked of every placement of a window, that was the
slowest history question. So the writer looks them up once, when it writes the
placement: ``history_placements.previous_lsn``, ``previous_result`` and
``previous_top`` (revision ``0006_churn``) are in the placement's row as it is
inserted, in the batch's transaction (``Journal.append_batch``). A previous cycle in
the same batch is found in the batch; the others with one read per batch. No row is
written twice: an UPDATE of the batch's new rows, tried first, rewrote each placement
and its index entries on PostgreSQL (+27-30% writer and server CPU, under load).
``Journal.reindex`` and the revision's backfill fill the same columns of every
placement with one UPDATE. A partial index holds the churned placements by time, so
the question reads only its answer.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from kruntimes.journal.history import derive

_NONE = (None, None, None)


def link(conn: sa.Connection, batch: derive.Derived) -> None:
    """Give each placement row of ``batch`` its previous cycle's LSN, result and top candidate.

    Runs before the rows are inserted, in the writer's transaction. A row of a
    placement that is not ``scheduled``, or whose Run has no earlier cycle in its
    epoch, gets NULLs.
    """
    placements = batch.rows["history_placements"]
    if not placements:
        return
    tops = {(c[0], c[1]): c[3] for c in batch.rows["history_candidates"] if c[2] == 1}
    latest: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    found: dict[tuple[str, int], tuple[Any, ...]] = {}
    wanted: list[tuple[str, str, str, int]] = []
    scheduled = {(p[0], p[1]) for p in placements if p[10] == "scheduled"}
    for c in batch.rows["history_cycles"]:  # in LSN order
        epoch, lsn, namespace, run_uid = c[0], c[1], c[3], c[5]
        if namespace is None or run_uid is None:
            continue  # matches no earlier cycle, as NULL = NULL matches nothing in SQL
        key = (epoch, namespace, run_uid)
        if (epoch, lsn) in scheduled:
            before = latest.get(key)
            if before is not None:
                found[(epoch, lsn)] = before
            else:
                wanted.append((epoch, namespace, run_uid, lsn))
        latest[key] = (lsn, c[9], tops.get((epoch, lsn)))
    if wanted:
        found.update(_look_up(conn, wanted))
    placements[:] = [p + found.get((p[0], p[1]), _NONE) for p in placements]


# The stored previous cycle of each asked placement, one statement per batch, as driver
# SQL (built by SQLAlchemy, a statement of a batch's size cost more than the look-ups).
_LOOK_UP_SQLITE = """
WITH asked AS (SELECT json_extract(value, '$[0]') AS epoch, json_extract(value, '$[1]') AS namespace,
                      json_extract(value, '$[2]') AS run_uid, json_extract(value, '$[3]') AS lsn
               FROM json_each(?)),
y AS MATERIALIZED (SELECT epoch, lsn,
                          (SELECT MAX(c.lsn) FROM history_cycles c
                           WHERE c.namespace = asked.namespace AND c.run_uid = asked.run_uid
                             AND c.epoch = asked.epoch AND c.lsn < asked.lsn) AS previous_lsn
                   FROM asked)
SELECT epoch, lsn, previous_lsn,
       (SELECT c.result FROM history_cycles c WHERE c.epoch = y.epoch AND c.lsn = y.previous_lsn),
       (SELECT k.pod FROM history_candidates k WHERE k.epoch = y.epoch AND k.lsn = y.previous_lsn AND k.rank = 1)
FROM y WHERE previous_lsn IS NOT NULL"""
_LOOK_UP_POSTGRESQL = """
SELECT a.epoch, a.lsn, p.lsn, p.result, p.pod
FROM unnest(%s::text[], %s::text[], %s::text[], %s::int8[]) AS a(epoch, namespace, run_uid, lsn)
CROSS JOIN LATERAL (SELECT c.lsn, c.result, k.pod FROM history_cycles c
                    LEFT JOIN history_candidates k ON k.epoch = c.epoch AND k.lsn = c.lsn AND k.rank = 1
                    WHERE c.namespace = a.namespace AND c.run_uid = a.run_uid AND c.epoch = a.epoch AND c.lsn < a.lsn
                    ORDER BY c.lsn DESC LIMIT 1) p"""


def _look_up(conn: sa.Connection, wanted: list[tuple[str, str, str, int]]) -> dict[tuple[str, int], tuple[Any, ...]]:
    """The stored previous cycle of each (epoch, namespace, run_uid, lsn) that has one."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        if conn.dialect.name == "sqlite":
            cursor.execute(_LOOK_UP_SQLITE, (json.dumps(wanted),))
        else:
            cursor.execute(_LOOK_UP_POSTGRESQL, [list(column) for column in zip(*wanted)])
        return {(epoch, lsn): (previous, result, top) for epoch, lsn, previous, result, top in cursor.fetchall()}
    finally:
        cursor.close()


# The same, for every placement already stored: Journal.reindex (revision 0006_churn runs
# its own frozen copy of this statement).
_LINK_ALL = sa.text(
    "UPDATE history_placements SET (previous_lsn, previous_result, previous_top) ="
    " (SELECT c.lsn, c.result, k.pod FROM history_cycles c"
    " LEFT JOIN history_candidates k ON k.epoch = c.epoch AND k.lsn = c.lsn AND k.rank = 1"
    " WHERE c.namespace = history_placements.namespace AND c.run_uid = history_placements.run_uid"
    " AND c.epoch = history_placements.epoch AND c.lsn < history_placements.lsn"
    " ORDER BY c.lsn DESC LIMIT 1)"
    " WHERE outcome = 'scheduled'")


def link_stored(conn: sa.Connection) -> None:
    """Fill the previous-cycle columns of every stored placement (after a rebuild)."""
    conn.execute(_LINK_ALL)
