"""bench/planner.py: its naive baseline decides exactly like the real planner.

The benchmark's ratio only means something if both sides do the same work: the
naive model (usage rebuilt from the Run list every cycle, fresh views) must choose
the same pods, with the same verdicts and scores, as the incremental cluster cache
for the same Runs. Behaviour only; timings are never asserted.
"""

from __future__ import annotations

import pytest

from bench import planner as bench


@pytest.mark.parametrize(("pods", "active", "runs"), [
    (1, 0, 10),
    (4, 10, 30),
    (12, 60, 80),
    (30, 500, 120),
], ids=lambda v: str(v))
def test_the_naive_baseline_chooses_the_same_pods_as_the_real_planner(pods: int, active: int, runs: int) -> None:
    real, naive = bench.compare_choices(pods, active, runs)
    assert [o.chosen for o in naive] == [o.chosen for o in real]
    assert [(o.rejections, o.feasible, o.totals) for o in naive] == [(o.rejections, o.feasible, o.totals) for o in real]
    assert all(o.chosen is not None for o in real), "every measured Run places"


def test_the_workload_mixes_resources_so_gpu_runs_are_filtered_to_gpu_pods() -> None:
    real, _ = bench.compare_choices(pods=8, active=40, n_runs=16)
    gpu_pods = {bench._pod_name(i) for i in range(8) if i % 4 == 0}
    asked = {r.name for r, _ in zip(bench.pending_runs(), range(16)) if r.requests == bench.WITH_GPU}
    gpu = [o for o in real if o.run_name in asked]
    assert gpu and all(o.chosen in gpu_pods and set(o.feasible) == gpu_pods for o in gpu)
    assert any(o.chosen not in gpu_pods for o in real)


def test_a_quick_run_prints_the_table_and_the_growth_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--cells", "8x40,8x200", "--budget", "0.01", "--max-cycles", "20"]) == 0
    out = capsys.readouterr().out
    assert "real cycles/s" in out and "naive cycles/s" in out and "ratio real/naive" in out
    assert "Per-cycle cost growth" in out


def test_cells_parse_from_the_command_line() -> None:
    assert bench.parse_cells("1000x10000, 5_000x100_000") == [(1000, 10000), (5000, 100000)]


def test_the_device_targets_child_measures_every_figure_the_table_prints() -> None:
    from bench import planner_devices
    figures = planner_devices.child(0.01, quick=True)
    assert figures["cold evals"] <= figures["distinct pairs"]
    lines = planner_devices.table({"before": figures, "after": figures})
    assert [line.split("  ")[0] for line in lines[1:1 + len(planner_devices.TARGETS)]] == \
        [name for name, *_ in planner_devices.TARGETS]
    assert all(line.rstrip().endswith(("yes", ")")) for line in lines[1:1 + len(planner_devices.TARGETS)])
