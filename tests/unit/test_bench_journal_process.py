"""bench/journal_process.py: the scheduler's writer stores every record in either history mode.

Behaviour only; timings are never asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from bench import journal_process
from bench.history_workload import journal_records
from kruntimes.journal.store import backends


@pytest.mark.parametrize("history", ["inline", "follow"])
def test_the_writer_stores_every_record_and_the_history_rows_only_inline(history: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"
    recs = journal_records(1200)
    rate, child_cpu, sender_cpu = journal_process.run(url, recs, history, batch=100)
    assert rate > 0 and child_cpu > 0 and sender_cpu >= 0
    journal = backends.Journal.open(url, create=False)
    try:
        with journal.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM journal_records")).scalar() == len(recs)
            cycles = conn.execute(sa.text("SELECT count(*) FROM history_cycles")).scalar()
        assert (cycles > 0) == (history == "inline")
        assert bool(journal.history_lag()) == (history == "follow")
    finally:
        journal.close()
