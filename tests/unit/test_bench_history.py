"""bench/history.py: its journal is a busy cluster's, and every documented question gets asked of it.

Behaviour only; timings are never asserted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench import history as bench
from bench import history_workload
from kruntimes.journal.history import runs as history_runs
from kruntimes.journal.store import backends


def test_the_workload_writes_what_the_scheduler_writes_in_time_order() -> None:
    made = list(history_workload.workload(5000))
    assert len(made) == 5000
    assert [at for at, _, _ in made] == sorted(at for at, _, _ in made)
    kinds = Counter(kind for _, kind, _ in made)
    assert kinds["mutation"] > kinds["cycle"] > 0 and kinds["bind"] > 0 and kinds["incarnation"] == 1
    results = Counter(p["result"] for _, kind, p in made if kind == "cycle")
    assert results["scheduled"] > results["unschedulable"] > 0


def test_a_small_journal_answers_every_question_of_the_docs_and_of_history(tmp_path: Path) -> None:
    url, seconds, built = bench.ensure("sqlite", 6000, tmp_path, "", rebuild=False)
    assert seconds is not None and built == 6000
    assert bench.ensure("sqlite", 6000, tmp_path, "", rebuild=False)[1:] == (None, 0)  # kept, not built again
    journal = backends.Journal.open(url, create=False)
    try:
        p = bench.parameters(journal)
        asked = dict(bench.questions(journal, p))
        assert set(bench.doc_queries()) <= set(asked)
        assert asked["placement-of-run"]() >= 1 and asked["why-placed"]() >= 5
        assert history_runs.run_placement(journal, p["namespace"], p["run"])["pod"] == p["pod"]
    finally:
        journal.close()
    assert set(bench.time_questions(url, repeat=1)) == set(asked)
