"""History views: placements, pending reasons, candidates and observations as plain SQL views.

Revision ID: 0002_history_views
Revises: 0001_journal_records
Create Date: 2026-05-10

Why views and not side tables: the writer stays one COPY / multi-row INSERT into
``journal_records`` (no JSON parsing, no expression index on the write path), and the
log stays the single source of truth. Every view is one scan of the records of its
kind; ``placements`` adds one sort (a window over Run mutations and placing cycles) to
find the runtime each Run had in the snapshot its cycle read.

The SQL is written out here per dialect, frozen with this revision: a later change to a
view is a new revision, never an edit of this one. PostgreSQL parses each payload once
(``LATERAL ... OFFSET 0``) as jsonb; SQLite uses ``json_extract``/``json_each``.
Vector raw scores and capacities come back as compact JSON text on both backends.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002_history_views"
down_revision: str | Sequence[str] | None = "0001_journal_records"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Dependants after what they read, so creation runs in order and dropping in reverse.
VIEWS = (
    "cycles", "placements", "pending_reasons", "cycle_rejections", "pending_rejections",
    "cycle_candidates", "pod_observations", "run_observations", "bind_results",
)

_SQLITE = {
    "cycles": """
SELECT r.lsn, r.incarnation, r.recorded_at AS decided_at,
       json_extract(r.payload, '$.namespace') AS namespace, json_extract(r.payload, '$.run') AS run,
       json_extract(r.payload, '$.run_uid') AS run_uid, json_extract(r.payload, '$.snapshot_lsn') AS snapshot_lsn,
       json_extract(r.payload, '$.now') AS now, json_extract(r.payload, '$.status') AS status,
       json_extract(r.payload, '$.result') AS result, json_extract(r.payload, '$.chosen') AS chosen,
       json_extract(r.payload, '$.chosen_uid') AS chosen_uid, json_extract(r.payload, '$.total') AS total,
       json_extract(r.payload, '$.message') AS message,
       json_extract(r.payload, '$.pods_evaluated') AS pods_evaluated,
       json_extract(r.payload, '$.pods_feasible') AS pods_feasible,
       json_extract(r.payload, '$.duration_us') AS duration_us, json_extract(r.payload, '$.digest') AS digest,
       json_extract(r.payload, '$.planner_version') AS planner_version,
       json_extract(r.payload, '$.config_hash') AS config_hash
FROM journal_records r WHERE r.kind = 'cycle'""",
    # A Run's runtime is the one of its latest mutation at or before the snapshot its
    # cycle read: number each Run's mutations in (position, mutation-first) order, and
    # every cycle falls into the group its latest preceding mutation opened.
    "placements": """
WITH events AS (
    SELECT r.lsn, r.incarnation, r.recorded_at, r.kind,
           json_extract(r.payload, '$.namespace') AS namespace,
           CASE r.kind WHEN 'cycle' THEN json_extract(r.payload, '$.run_uid')
                       ELSE json_extract(r.payload, '$.uid') END AS run_uid,
           CASE r.kind WHEN 'cycle' THEN json_extract(r.payload, '$.snapshot_lsn') ELSE r.lsn END AS seen_at,
           CASE r.kind WHEN 'mutation' THEN json_extract(r.payload, '$.object.runtime') END AS runtime,
           json_extract(r.payload, '$.run') AS run, json_extract(r.payload, '$.chosen') AS pod,
           json_extract(r.payload, '$.chosen_uid') AS pod_uid, json_extract(r.payload, '$.now') AS now,
           json_extract(r.payload, '$.total') AS total, json_extract(r.payload, '$.result') AS outcome
    FROM journal_records r
    WHERE r.kind IN ('cycle', 'mutation')
      AND (json_extract(r.payload, '$.chosen') IS NOT NULL OR json_extract(r.payload, '$.kind') = 'Run')
), numbered AS (
    SELECT e.*, SUM(CASE e.kind WHEN 'mutation' THEN 1 ELSE 0 END) OVER (
               PARTITION BY e.namespace, e.run_uid
               ORDER BY e.seen_at, CASE e.kind WHEN 'mutation' THEN 0 ELSE 1 END, e.lsn
               ROWS UNBOUNDED PRECEDING) AS version
    FROM events e
), resolved AS (
    SELECT n.*, MAX(n.runtime) OVER (PARTITION BY n.namespace, n.run_uid, n.version) AS run_runtime
    FROM numbered n
)
SELECT lsn, incarnation, namespace, run, run_uid, CASE WHEN version > 0 THEN run_runtime END AS runtime,
       pod, pod_uid, recorded_at AS decided_at, now, total, outcome, seen_at AS snapshot_lsn
FROM resolved WHERE kind = 'cycle'""",
    "pending_reasons": """
SELECT lsn, incarnation, namespace, run, run_uid, decided_at, now, result, message, pods_evaluated
FROM cycles WHERE status = 'unschedulable'""",
    "cycle_rejections": """
SELECT r.lsn, r.recorded_at AS decided_at, json_extract(r.payload, '$.namespace') AS namespace,
       json_extract(r.payload, '$.run') AS run, json_extract(r.payload, '$.run_uid') AS run_uid,
       json_extract(r.payload, '$.status') AS status, json_extract(r.payload, '$.result') AS result,
       json_extract(x.value, '$[0]') AS plugin, json_extract(x.value, '$[1]') AS reason,
       json_extract(x.value, '$[2]') AS pods
FROM journal_records r, json_each(r.payload, '$.rejections') x
WHERE r.kind = 'cycle'""",
    "pending_rejections": """
SELECT lsn, decided_at, namespace, run, run_uid, result, plugin, reason, pods
FROM cycle_rejections WHERE status = 'unschedulable'""",
    "cycle_candidates": """
SELECT r.lsn, r.recorded_at AS decided_at, json_extract(r.payload, '$.namespace') AS namespace,
       json_extract(r.payload, '$.run') AS run, json_extract(r.payload, '$.run_uid') AS run_uid,
       json_extract(r.payload, '$.chosen') AS chosen, c.key + 1 AS rank,
       json_extract(c.value, '$.pod') AS pod, json_extract(c.value, '$.total') AS total,
       json_extract(s.value, '$[0]') AS plugin, CAST(json_extract(s.value, '$[1]') AS TEXT) AS raw,
       json_extract(s.value, '$[2]') AS normalized
FROM journal_records r
JOIN json_each(r.payload, '$.candidates') c
LEFT JOIN json_each(c.value, '$.scores') s
WHERE r.kind = 'cycle'""",
    "pod_observations": """
SELECT r.lsn, r.recorded_at, json_extract(r.payload, '$.event') AS event,
       json_extract(r.payload, '$.namespace') AS namespace, json_extract(r.payload, '$.name') AS name,
       json_extract(r.payload, '$.uid') AS uid, json_extract(r.payload, '$.object.runtime') AS runtime,
       json_extract(r.payload, '$.resource_version') AS resource_version,
       json_extract(r.payload, '$.object.ready') AS ready,
       json_extract(r.payload, '$.object.terminating') AS terminating,
       json_extract(r.payload, '$.object.heartbeat') AS heartbeat,
       json_extract(r.payload, '$.object.capacity') AS capacity,
       json_extract(r.payload, '$.object.capacity_problem') AS capacity_problem
FROM journal_records r
WHERE r.kind = 'mutation' AND json_extract(r.payload, '$.kind') = 'Pod'""",
    "run_observations": """
SELECT r.lsn, r.recorded_at, json_extract(r.payload, '$.event') AS event,
       json_extract(r.payload, '$.namespace') AS namespace, json_extract(r.payload, '$.name') AS name,
       json_extract(r.payload, '$.uid') AS uid, json_extract(r.payload, '$.object.runtime') AS runtime,
       json_extract(r.payload, '$.resource_version') AS resource_version,
       json_extract(r.payload, '$.object.phase') AS phase,
       json_extract(r.payload, '$.object.pod_name') AS pod_name,
       json_extract(r.payload, '$.object.pending_message') AS pending_message
FROM journal_records r
WHERE r.kind = 'mutation' AND json_extract(r.payload, '$.kind') = 'Run'""",
    "bind_results": """
SELECT r.lsn, r.recorded_at, json_extract(r.payload, '$.namespace') AS namespace,
       json_extract(r.payload, '$.run_uid') AS run_uid, json_extract(r.payload, '$.result') AS result,
       json_extract(r.payload, '$.error') AS error
FROM journal_records r WHERE r.kind = 'bind'""",
}

# `OFFSET 0` keeps PostgreSQL from inlining the LATERAL subquery, which would re-parse
# the payload once per extracted field instead of once per row.
_PG_PAYLOAD = "CROSS JOIN LATERAL (SELECT r.payload::jsonb AS p OFFSET 0) j"

_POSTGRESQL = {
    "cycles": f"""
SELECT r.lsn, r.incarnation, r.recorded_at AS decided_at,
       j.p ->> 'namespace' AS namespace, j.p ->> 'run' AS run, j.p ->> 'run_uid' AS run_uid,
       (j.p ->> 'snapshot_lsn')::bigint AS snapshot_lsn, j.p ->> 'now' AS now, j.p ->> 'status' AS status,
       j.p ->> 'result' AS result, j.p ->> 'chosen' AS chosen, j.p ->> 'chosen_uid' AS chosen_uid,
       (j.p ->> 'total')::bigint AS total, j.p ->> 'message' AS message,
       (j.p ->> 'pods_evaluated')::bigint AS pods_evaluated, (j.p ->> 'pods_feasible')::bigint AS pods_feasible,
       (j.p ->> 'duration_us')::bigint AS duration_us, j.p ->> 'digest' AS digest,
       j.p ->> 'planner_version' AS planner_version, j.p ->> 'config_hash' AS config_hash
FROM journal_records r {_PG_PAYLOAD}
WHERE r.kind = 'cycle'""",
    "placements": f"""
WITH events AS MATERIALIZED (
    SELECT r.lsn, r.incarnation, r.recorded_at, r.kind, j.p ->> 'namespace' AS namespace,
           CASE r.kind WHEN 'cycle' THEN j.p ->> 'run_uid' ELSE j.p ->> 'uid' END AS run_uid,
           CASE r.kind WHEN 'cycle' THEN (j.p ->> 'snapshot_lsn')::bigint ELSE r.lsn END AS seen_at,
           CASE r.kind WHEN 'mutation' THEN j.p -> 'object' ->> 'runtime' END AS runtime,
           j.p ->> 'run' AS run, j.p ->> 'chosen' AS pod, j.p ->> 'chosen_uid' AS pod_uid, j.p ->> 'now' AS now,
           (j.p ->> 'total')::bigint AS total, j.p ->> 'result' AS outcome
    FROM journal_records r {_PG_PAYLOAD}
    WHERE r.kind IN ('cycle', 'mutation') AND (j.p ->> 'chosen' IS NOT NULL OR j.p ->> 'kind' = 'Run')
), numbered AS (
    SELECT e.*, SUM(CASE e.kind WHEN 'mutation' THEN 1 ELSE 0 END) OVER (
               PARTITION BY e.namespace, e.run_uid
               ORDER BY e.seen_at, CASE e.kind WHEN 'mutation' THEN 0 ELSE 1 END, e.lsn
               ROWS UNBOUNDED PRECEDING) AS version
    FROM events e
), resolved AS (
    SELECT n.*, MAX(n.runtime) OVER (PARTITION BY n.namespace, n.run_uid, n.version) AS run_runtime
    FROM numbered n
)
SELECT lsn, incarnation, namespace, run, run_uid, CASE WHEN version > 0 THEN run_runtime END AS runtime,
       pod, pod_uid, recorded_at AS decided_at, now, total, outcome, seen_at AS snapshot_lsn
FROM resolved WHERE kind = 'cycle'""",
    "pending_reasons": _SQLITE["pending_reasons"],
    "cycle_rejections": f"""
SELECT r.lsn, r.recorded_at AS decided_at, j.p ->> 'namespace' AS namespace, j.p ->> 'run' AS run,
       j.p ->> 'run_uid' AS run_uid, j.p ->> 'status' AS status, j.p ->> 'result' AS result,
       x.value ->> 0 AS plugin, x.value ->> 1 AS reason, (x.value ->> 2)::bigint AS pods
FROM journal_records r {_PG_PAYLOAD}
CROSS JOIN LATERAL jsonb_array_elements(j.p -> 'rejections') x(value)
WHERE r.kind = 'cycle'""",
    "pending_rejections": _SQLITE["pending_rejections"],
    # Raw scores are ints or lists of ints, so dropping jsonb's spaces gives the
    # compact text SQLite returns.
    "cycle_candidates": f"""
SELECT r.lsn, r.recorded_at AS decided_at, j.p ->> 'namespace' AS namespace, j.p ->> 'run' AS run,
       j.p ->> 'run_uid' AS run_uid, j.p ->> 'chosen' AS chosen, c.rank,
       c.value ->> 'pod' AS pod, (c.value ->> 'total')::bigint AS total,
       s.value ->> 0 AS plugin, replace(s.value ->> 1, ' ', '') AS raw, (s.value ->> 2)::bigint AS normalized
FROM journal_records r {_PG_PAYLOAD}
CROSS JOIN LATERAL jsonb_array_elements(j.p -> 'candidates') WITH ORDINALITY c(value, rank)
LEFT JOIN LATERAL jsonb_array_elements(c.value -> 'scores') s(value) ON true
WHERE r.kind = 'cycle'""",
    # capacity through `json` (not jsonb): json keeps the stored canonical text as is.
    "pod_observations": f"""
SELECT r.lsn, r.recorded_at, j.p ->> 'event' AS event, j.p ->> 'namespace' AS namespace,
       j.p ->> 'name' AS name, j.p ->> 'uid' AS uid, j.p -> 'object' ->> 'runtime' AS runtime,
       j.p ->> 'resource_version' AS resource_version, (j.p -> 'object' ->> 'ready')::boolean AS ready,
       (j.p -> 'object' ->> 'terminating')::boolean AS terminating,
       j.p -> 'object' ->> 'heartbeat' AS heartbeat, (r.payload::json -> 'object' -> 'capacity')::text AS capacity,
       j.p -> 'object' ->> 'capacity_problem' AS capacity_problem
FROM journal_records r {_PG_PAYLOAD}
WHERE r.kind = 'mutation' AND j.p ->> 'kind' = 'Pod'""",
    "run_observations": f"""
SELECT r.lsn, r.recorded_at, j.p ->> 'event' AS event, j.p ->> 'namespace' AS namespace,
       j.p ->> 'name' AS name, j.p ->> 'uid' AS uid, j.p -> 'object' ->> 'runtime' AS runtime,
       j.p ->> 'resource_version' AS resource_version, j.p -> 'object' ->> 'phase' AS phase,
       j.p -> 'object' ->> 'pod_name' AS pod_name, j.p -> 'object' ->> 'pending_message' AS pending_message
FROM journal_records r {_PG_PAYLOAD}
WHERE r.kind = 'mutation' AND j.p ->> 'kind' = 'Run'""",
    "bind_results": f"""
SELECT r.lsn, r.recorded_at, j.p ->> 'namespace' AS namespace, j.p ->> 'run_uid' AS run_uid,
       j.p ->> 'result' AS result, j.p ->> 'error' AS error
FROM journal_records r {_PG_PAYLOAD}
WHERE r.kind = 'bind'""",
}


def _definitions() -> dict[str, str]:
    return _POSTGRESQL if op.get_context().dialect.name == "postgresql" else _SQLITE


def upgrade() -> None:
    definitions = _definitions()
    for name in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {definitions[name].strip()}")


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
