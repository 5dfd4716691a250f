"""bench/replay.py: its synthetic histories are valid journals, and a quick run prints both tables.

Timings are never asserted; what is asserted is that the benchmark measures real
replays: every generated cycle replays identically and the farthest cycle applies
one checkpoint interval of records.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import replay as bench
from kruntimes.journal.store.backends import Journal
from replay import verify


def test_a_generated_history_replays_identically_and_has_checkpoints(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    shape = bench.generate(url, target=3000, runtimes=3, pods_per_runtime=5, capacity=2, checkpoint_every=500,
                           checkpoint_size_ratio=0)
    assert shape["records"] >= 3000 and shape["cycles"] > 300
    journal = Journal.open(url, create=False)
    try:
        report = verify.verify(journal)
        distances = bench._cycles_with_distance(journal)
    finally:
        journal.close()
    assert report.ok and report.replayed == shape["cycles"] and report.stats.checkpoints_compared >= 5
    assert max(d for _, d in distances) < 500 + 20


def test_a_quick_run_prints_both_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--quick", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Replay one cycle vs journal length" in out and "median ms" in out
    assert "verify throughput" in out and "target >= 500 cycles/s with 1 worker" in out
    assert "2 workers vs 1:" in out and "modelled for idle cores" in out
