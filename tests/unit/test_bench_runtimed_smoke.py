"""bench/runtimed_admission.py and bench/heartbeat_journal.py run, tiny, and print their tables.

Behaviour only: each measures what it says on a handful of Runs and pods; no
timing is asserted.
"""

from __future__ import annotations

import pytest

from bench import heartbeat_journal, runtimed_admission


def test_the_admission_benchmark_claims_and_starts_every_run_with_both_executors_and_prints_the_latencies(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert runtimed_admission.main(["--runs", "3", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "observed→Running p50" in out and "assigned→Running p50" in out and "assigned→started p50" in out
    assert all(f"{mode:<22} {executor:<15}     3 " in out for mode in runtimed_admission.MODES
               for executor in runtimed_admission.EXECUTORS)  # every Run measured, before and after the split


def test_the_heartbeat_benchmark_counts_renewals_and_compares_them_with_scheduling_records(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert heartbeat_journal.main(["--pods", "20", "--rounds", "2", "--demo-scale", "0.03"]) == 0
    out = capsys.readouterr().out
    assert "every renewal journaled (before)" in out and "renewals held (now)" in out
    assert "demo scheduling records" in out and "of the demo's scheduling record rate" in out


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert runtimed_admission.percentile(values, 50) == 50.0
    assert runtimed_admission.percentile(values, 99) == 99.0
    assert runtimed_admission.percentile([7.0], 99) == 7.0
