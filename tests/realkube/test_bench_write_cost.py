"""bench/write_cost.py on the real server, small: every kind of write lands, and the policies come back.

Behaviour only; its figures are never asserted. It deletes every admission policy
binding for one measurement and applies them again: a run that left them off would
measure the other kinds without the policies a deployment has, so the script checks
both, and this runs it.
"""

from __future__ import annotations

import re

import pytest

from bench import write_cost
from tests.realkube.fixtures import bin_dir_or_skip


def test_a_small_run_measures_every_kind_of_write(capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir_or_skip()
    assert write_cost.main(["--writes", "60", "--rounds", "1", "--settle", "1", "--nodes", "5"]) == 0
    out = capsys.readouterr().out
    assert "admission policy bindings: kruntimes-controller-run-status" in out
    for kind in write_cost.KINDS:
        row = re.search(rf"^\| {re.escape(kind)} \| (\S+) \|", out, re.MULTILINE)
        assert row is not None, out
        assert float(row[1].replace(",", "")) > 0
