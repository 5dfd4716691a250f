"""Every SQL query in docs/journal.md, run against a journal the real scheduler wrote, on both backends.

The queries are read from the document itself (```sql blocks opening with
``-- query: ID`` and, where the dialects differ, ``-- dialect: ...``), so the page cannot
drift from what is tested. Answers are checked against what the MemoryApi ended with
and against a plain-Python reading of the same records.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from kruntimes.journal.history import views
from kruntimes.journal.store import backends, engines, schema
from tests.journal.history_journal import END, NS, PHASE1, PHASE2, SCORES, Generated

pytest_plugins = ("tests.journal.history_fixtures",)  # the generated journal's fixtures

DOC = Path(__file__).resolve().parents[2] / "docs" / "journal.md"
DIALECTS = ("sqlite", "postgresql")


def doc_queries() -> dict[str, dict[str, str]]:
    """query id -> {dialect or "any": SQL}, from the fenced sql blocks of docs/journal.md."""
    found: dict[str, dict[str, str]] = {}
    for block in re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        header = re.match(r"-- query: ([a-z0-9-]+)\n(?:-- dialect: (sqlite|postgresql)\n)?", block)
        assert header, f"a sql block in {DOC.name} has no '-- query: ID' line:\n{block}"
        variants = found.setdefault(header.group(1), {})
        dialect = header.group(2) or "any"
        assert dialect not in variants, f"query {header.group(1)} is documented twice for {dialect}"
        variants[dialect] = block
    return found


QUERIES = doc_queries()
Ask = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="module")
def ask(history_url: str) -> Iterator[Ask]:
    """Run a documented query by id with bound parameters; datetimes bound as journal timestamps."""
    engine = engines.create_engine(history_url)

    def run(query_id: str, **params: Any) -> list[dict[str, Any]]:
        variants = QUERIES[query_id]
        stmt = sa.text(variants.get(engine.dialect.name) or variants["any"])
        stmt = stmt.bindparams(*[sa.bindparam(k, type_=schema.UtcDateTime())
                                 for k, v in params.items() if isinstance(v, datetime)])
        with engine.connect() as conn:
            return [dict(row) for row in conn.execute(stmt, params).mappings()]

    yield run
    engine.dispose()


def payloads(g: Generated, kind: str) -> list[tuple[int, dict[str, Any]]]:
    return [(r.lsn, dict(r.payload)) for r in g.records if r.kind == kind]


def _instant(value: Any) -> datetime:
    """A view's timestamp as an aware datetime (SQLite hands back its UTC text)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


CHECKED = {"placement-of-run", "why-placed", "pending-insufficient-capacity", "placements-per-pod-hour",
           "bind-conflict-rate", "pod-at-time", "pod-held-at-time", "slowest-cycles", "longest-waits",
           "decisions-in-window", "churn", "conflicts-in-window", "rejections-by-reason", "pending-by-reason",
           "decisions-by-incarnation", "history-lag"}


def test_every_documented_query_is_checked_here_and_exists_for_both_dialects() -> None:
    assert set(QUERIES) == CHECKED
    assert len(QUERIES) >= 8
    for query_id, variants in QUERIES.items():
        assert "any" in variants or set(variants) == set(DIALECTS), f"{query_id}: {sorted(variants)}"


def test_the_placement_query_returns_the_pod_the_api_recorded(ask: Ask, generated: Generated) -> None:
    assert generated.truth.placed
    for run, pod in generated.truth.placed.items():
        rows = ask("placement-of-run", namespace=NS, run=run)
        scheduled = [r for r in rows if r["outcome"] == "scheduled"]
        assert scheduled[-1]["pod"] == pod
        assert {r["runtime"] for r in rows} == {pod.split("-")[0]}
        assert {r["outcome"] for r in rows} <= {"scheduled", "conflict", "error"}


def test_why_placed_lists_the_chosen_pod_first_with_weighted_scores_summing_to_its_total(
        ask: Ask, generated: Generated) -> None:
    weights = dict(SCORES)
    for run, pod in generated.truth.placed.items():
        rows = ask("why-placed", namespace=NS, run=run)
        assert rows[0]["rank"] == 1 and rows[0]["pod"] == pod
        assert {r["pod"] for r in rows if r["chosen"]} == {pod}
        by_rank: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            by_rank.setdefault(r["rank"], []).append(r)
        totals = []
        for scores in by_rank.values():
            assert {s["plugin"] for s in scores} == set(weights)
            assert scores[0]["total"] == sum(weights[s["plugin"]] * s["normalized"] for s in scores)
            totals.append(scores[0]["total"])
        assert totals == sorted(totals, reverse=True)


def test_pending_for_insufficient_capacity_in_the_last_hour_is_exactly_the_late_runs(
        ask: Ask, generated: Generated) -> None:
    rows = ask("pending-insufficient-capacity", since=END - timedelta(hours=1))
    assert {r["run"] for r in rows} == generated.truth.late_runs
    assert all(r["namespace"] == NS and r["cycles"] >= 1 and r["pods_full"] == 3 for r in rows)
    whole_day = {r["run"] for r in ask("pending-insufficient-capacity", since=PHASE1 - timedelta(hours=1))}
    assert whole_day >= generated.truth.pending_after_phase1 | generated.truth.late_runs


def test_placements_per_pod_and_hour_add_up_to_the_api_placements(ask: Ask, generated: Generated) -> None:
    rows = ask("placements-per-pod-hour", since_hour="2026-11-29 00:00", until_hour="2026-11-30 00:00")
    per_pod: Counter[str] = Counter()
    per_hour: Counter[str] = Counter()
    for r in rows:
        per_pod[r["pod"]] += r["placements"]
        per_hour[r["hour"]] += r["placements"]
    assert per_pod == Counter(generated.truth.placed.values())
    late = generated.truth.pending_after_phase1 & set(generated.truth.placed)
    assert per_hour == {"2026-11-29 10:00": len(generated.truth.placed) - len(late), "2026-11-29 11:00": len(late)}
    later = ask("placements-per-pod-hour", since_hour="2026-11-29 11:00", until_hour="2026-11-29 12:00")
    assert {r["hour"] for r in later} == {"2026-11-29 11:00"} and sum(r["placements"] for r in later) == len(late)


def test_the_bind_conflict_rate_counts_every_bind_result(ask: Ask, generated: Generated) -> None:
    results = Counter(p["result"] for _, p in payloads(generated, "bind"))
    [row] = ask("bind-conflict-rate", since=PHASE1)
    assert row["binds"] == sum(results.values())
    assert row["conflicts"] == results["conflict"] and row["errors"] == results["error"]
    assert results["ok"] == len(generated.truth.placed)
    assert float(row["conflict_pct"]) == pytest.approx(100 * results["conflict"] / row["binds"], abs=0.05)
    [later] = ask("bind-conflict-rate", since=PHASE2)
    assert later["binds"] < row["binds"]


def test_what_the_scheduler_saw_of_a_pod_at_a_time_is_its_latest_observation(ask: Ask) -> None:
    assert ask("pod-at-time", namespace=NS, pod="gpu-001", at=PHASE1 - timedelta(minutes=1)) == []
    [before] = ask("pod-at-time", namespace=NS, pod="gpu-001", at=PHASE2 - timedelta(minutes=1))
    [after] = ask("pod-at-time", namespace=NS, pod="gpu-001", at=END)
    assert (before["event"], bool(before["ready"]), bool(before["terminating"])) == ("ADDED", True, False)
    assert (after["event"], bool(after["ready"])) == ("MODIFIED", False)
    assert after["lsn"] > before["lsn"]
    assert before["capacity"] == after["capacity"] == '[["example.com/gpu",1],["runs",4]]'
    assert before["runtime"] == "gpu" and before["heartbeat"].startswith("2026-11-29T11:59:55")


def test_what_a_pod_held_at_a_time_is_every_run_placed_on_it_and_not_ended(ask: Ask, generated: Generated) -> None:
    pods = sorted(set(generated.truth.placed.values()))
    assert pods
    for pod in pods:
        held = ask("pod-held-at-time", namespace=NS, pod=pod, at=END)
        assert {r["run"] for r in held} == {run for run, p in generated.truth.placed.items() if p == pod}
        assert all(r["ended_at"] is None for r in held)
        assert ask("pod-held-at-time", namespace=NS, pod=pod, at=PHASE1 - timedelta(minutes=1)) == []


def test_the_decisions_of_a_window_are_exactly_its_cycles_with_their_messages(ask: Ask, generated: Generated) -> None:
    cycles = [r for r in generated.records if r.kind == "cycle"]
    since, until = PHASE2, END
    rows = ask("decisions-in-window", since=since, until=until)
    expected = [(r.lsn, r.payload["result"], r.payload["message"]) for r in cycles if since <= r.recorded_at < until]
    assert expected and [(r["lsn"], r["result"], r["reason"]) for r in rows] == expected
    assert len(ask("decisions-in-window", since=PHASE1, until=END)) == len(cycles)


def test_churn_is_the_placements_whose_previous_cycle_had_another_top_candidate(ask: Ask, generated: Generated) -> None:
    by_run: dict[str, list[dict[str, Any]]] = {}
    expected = set()
    for lsn, p in payloads(generated, "cycle"):
        previous = by_run.setdefault(p["run_uid"], [])
        if p["result"] == "scheduled" and previous and previous[-1]["candidates"] \
                and previous[-1]["candidates"][0]["pod"] != p["chosen"]:
            expected.add((lsn, previous[-1]["candidates"][0]["pod"]))
        previous.append(p)
    rows = ask("churn", since=PHASE1, until=END + timedelta(hours=1))
    assert {(r["lsn"], r["previous_top"]) for r in rows} == expected
    assert all(r["pod"] != r["previous_top"] for r in rows)


def test_the_conflicts_of_a_window_are_its_lost_races_and_troubled_binds(ask: Ask, generated: Generated) -> None:
    lost = {lsn for lsn, p in payloads(generated, "cycle") if p["result"] == "conflict"}
    troubled = {lsn for lsn, p in payloads(generated, "bind") if p["result"] != "ok"}
    assert lost or troubled, "the workload injects 409s"
    rows = ask("conflicts-in-window", since=PHASE1, until=END + timedelta(hours=1))
    assert {r["lsn"] for r in rows if r["what"] == "cycle conflict"} == lost
    assert {r["lsn"] for r in rows if r["what"].startswith("bind ")} == troubled
    assert ask("conflicts-in-window", since=END + timedelta(hours=1), until=END + timedelta(hours=2)) == []


def test_the_slowest_cycles_are_the_ten_longest_recorded_durations(ask: Ask, generated: Generated) -> None:
    rows = ask("slowest-cycles")
    expected = sorted(((-p["duration_us"], lsn) for lsn, p in payloads(generated, "cycle")))[:10]
    assert [(-r["duration_us"], r["lsn"]) for r in rows] == expected


def test_the_longest_waits_are_the_runs_placed_an_hour_and_a_half_after_first_pending(
        ask: Ask, generated: Generated) -> None:
    rows = ask("longest-waits")
    late = generated.truth.pending_after_phase1 & set(generated.truth.placed)
    assert late, "the workload must place some Runs in phase 2"
    assert {r["run"] for r in rows[: len(late)]} == late
    for r in rows[: len(late)]:
        assert 5399 <= int(r["waited_s"]) <= 5401
        assert r["pending_cycles"] >= 1 and "insufficient capacity" in r["first_reason"]
        assert r["pod"] == generated.truth.placed[r["run"]]
        assert _instant(r["placed_at"]) - _instant(r["first_pending"]) > timedelta(hours=1)
    assert all(int(r["waited_s"]) < 60 for r in rows[len(late):])


def test_rejections_by_reason_sum_the_recorded_rejection_counts(ask: Ask, generated: Generated) -> None:
    expected: Counter[tuple[str, str]] = Counter()
    cycles: Counter[tuple[str, str]] = Counter()
    for _, p in payloads(generated, "cycle"):
        for plugin, reason, n in p["rejections"]:
            expected[(plugin, reason)] += n
            cycles[(plugin, reason)] += 1
    rows = ask("rejections-by-reason")
    assert {(r["plugin"], r["reason"]): r["pods_rejected"] for r in rows} == dict(expected)
    assert {(r["plugin"], r["reason"]): r["cycles"] for r in rows} == dict(cycles)
    assert {"insufficient capacity", "runtime pod not ready"} <= {r["reason"] for r in rows}
    assert [r["pods_rejected"] for r in rows] == sorted((r["pods_rejected"] for r in rows), reverse=True)


def test_pending_by_reason_matches_the_pending_runs_of_the_api(ask: Ask, generated: Generated) -> None:
    rows = ask("pending-by-reason")
    assert {r["reason"]: r["runs"] for r in rows} == Counter(generated.truth.pending.values())


def test_decisions_by_incarnation_count_every_cycle(ask: Ask, generated: Generated) -> None:
    [row] = ask("decisions-by-incarnation")
    assert row["incarnation"] == generated.records[0].incarnation
    assert row["cycles"] == len(payloads(generated, "cycle"))
    assert row["config_hash"] == generated.records[0].payload["config_hash"]


def test_history_lag_is_empty_when_the_writer_derived_every_batch_inline(ask: Ask) -> None:
    # A follow writer's lag, and the indexer closing it: tests/journal/test_history_follow.py.
    assert ask("history-lag") == []


# -- the views themselves ------------------------------------------------------------------


def test_the_declared_views_match_the_migrated_ones_column_for_column(history_url: str) -> None:
    engine = engines.create_engine(history_url)
    try:
        inspector = sa.inspect(engine)
        assert views.VIEW_NAMES <= set(inspector.get_view_names())
        for view in views.VIEWS:
            assert [c["name"] for c in inspector.get_columns(view.name)] == [c.name for c in view.columns]
    finally:
        engine.dispose()


def test_autogenerate_would_see_the_views_as_missing_tables_without_the_hook(history_url: str) -> None:
    engine = engines.create_engine(history_url)
    try:
        with engine.connect() as conn:
            unhooked = compare_metadata(MigrationContext.configure(conn), views.metadata)
            hooked = compare_metadata(MigrationContext.configure(conn, opts={"include_object": views.include_object}),
                                      views.metadata)
    finally:
        engine.dispose()
    assert sorted(d[1].name for d in unhooked) == sorted(views.VIEW_NAMES)
    assert all(d[0] == "add_table" for d in unhooked)
    assert hooked == []


def _select(url: str, table: sa.Table, *columns: str) -> list[tuple[Any, ...]]:
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            stmt = sa.select(*[table.c[c] for c in columns]).order_by(*[table.c[c] for c in columns])
            return [tuple(row) for row in conn.execute(stmt)]
    finally:
        engine.dispose()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, list) else str(value)


def test_cycle_candidates_hold_every_recorded_score_with_raw_as_compact_json(
        history_url: str, generated: Generated) -> None:
    expected = sorted(
        (lsn, rank, c["pod"], c["total"], plugin, _compact(raw), norm)
        for lsn, p in payloads(generated, "cycle")
        for rank, c in enumerate(p["candidates"], 1)
        for plugin, raw, norm in c["scores"])
    got = _select(history_url, views.cycle_candidates, "lsn", "rank", "pod", "total", "plugin", "raw", "normalized")
    assert got == expected
    assert any(raw.startswith("[") for *_, raw, _ in got)


def test_placements_take_the_runtime_of_the_runs_latest_mutation_in_the_snapshot(
        history_url: str, generated: Generated) -> None:
    runtimes: dict[str, list[tuple[int, str]]] = {}
    for lsn, p in payloads(generated, "mutation"):
        if p["kind"] == "Run":
            runtimes.setdefault(p["uid"], []).append((lsn, p["object"]["runtime"]))
    expected = sorted(
        (lsn, p["run"], max(m for m in runtimes[p["run_uid"]] if m[0] <= p["snapshot_lsn"])[1], p["chosen"],
         p["total"], p["result"])
        for lsn, p in payloads(generated, "cycle") if p["chosen"] is not None)
    assert _select(history_url, views.placements, "lsn", "run", "runtime", "pod", "total", "outcome") == expected


def test_pod_observations_and_bind_results_mirror_their_records(history_url: str, generated: Generated) -> None:
    pods = sorted((lsn, p["name"], p["event"], p["object"]["ready"], _compact(p["object"]["capacity"]))
                  for lsn, p in payloads(generated, "mutation") if p["kind"] == "Pod")
    assert _select(history_url, views.pod_observations, "lsn", "name", "event", "ready", "capacity") == pods
    binds = sorted((lsn, p["run_uid"], p["result"]) for lsn, p in payloads(generated, "bind"))
    assert _select(history_url, views.bind_results, "lsn", "run_uid", "result") == binds
