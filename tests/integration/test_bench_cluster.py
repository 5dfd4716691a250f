"""bench/cluster.py end to end on a small cluster: every Run bound, and every bind's Event written.

Its figures compare kruntimes with kube-scheduler, which writes a Scheduled Event for
every pod it binds; the comparison is only fair if kruntimes does too, so the run
counts them. Behaviour only; timings are never asserted.
"""

from __future__ import annotations

import re

import pytest

from bench import cluster as bench


def test_a_small_run_binds_every_run_and_writes_an_event_for_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--pods", "20", "--runs", "300", "--journal-modes", "off", "--no-ceiling",
                       "--in-process", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    counts = re.search(r"cycles / binds / conflicts / outcomes unknown / errors\s+(\S+) / (\S+) / (\d+) / (\d+) / "
                       r"(\d+)", out)
    assert counts is not None, out
    cycles, binds, conflicts, unknown, errors = (int(g.replace(",", "")) for g in counts.groups())
    assert binds + unknown == 300 and errors == 0
    events = re.search(r"Events written by the last bind / in all\s+(\S+) / (\S+) \((\S+) dropped", out)
    assert events is not None, out
    assert int(events[2].replace(",", "")) == 300 and events[3] == "0"
