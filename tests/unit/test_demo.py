"""`kruntimes demo` runs end to end and its summary adds up."""

from kruntimes import demo


def test_the_demo_workload_has_the_promised_shape() -> None:
    w = demo.generate()
    assert len(w.pods) >= 200 and len(w.runs) >= 5000
    assert len({(p["metadata"]["namespace"], p["metadata"]["labels"]["kruntimes.io/runtime"]) for p in w.pods}) >= 3


def test_the_demo_places_most_runs_fails_the_invalid_ones_and_never_overcommits() -> None:
    report = demo.run(workers=4, conflict_rate=0.05)
    assert sum(report.phases.values()) == report.runs
    assert report.phases["Failed"] == 20
    assert report.phases["Scheduled"] > 4000
    assert report.phases["Succeeded"] > 0
    assert report.injected_conflicts > 0 and report.results["conflict"] >= report.injected_conflicts
    assert report.wakeups.get("capacity_released", 0) > 0
    for per_resource in report.utilisation.values():
        for used, capacity in per_resource.values():
            assert used <= capacity
    assert all(reason.startswith("0/") for reason in report.pending_reasons)
    assert all(reason.startswith("invalid Run: spec.") for reason in report.failed_reasons)
