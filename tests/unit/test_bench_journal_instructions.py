"""bench/journal_instructions.py: its settings schedule the same workload, and its count is read right.

The benchmark's ratio only means something if every setting runs the same cycles
and the setup-only run stops before the first. Behaviour only; no instruction
count is asserted.
"""

from __future__ import annotations

import pytest

from bench import journal_instructions as bench


def test_every_setting_schedules_the_same_cycles_and_setup_only_schedules_none() -> None:
    cycles = {setting: bench.child(setting, every=60, setup_only=False) for setting in bench.SETTINGS}
    assert len(set(cycles.values())) == 1 and cycles["journal off"] > 50
    assert bench.child("own share", every=60, setup_only=True) == 0


def test_the_count_is_read_from_callgrind_s_closing_lines() -> None:
    stderr = "==4242== Events    : Ir\n==4242== Collected : 3686355891\n==4242==\n==4242== I   refs:      3,686,355,891\n"
    assert bench.collected(stderr) == 3_686_355_891
    with pytest.raises(RuntimeError, match="no instruction count"):
        bench.collected("valgrind: command not found\n")
