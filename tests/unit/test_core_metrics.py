"""Metrics (SPEC §3.8): every label value comes from a declared, bounded set, never from user data.

The declared sets are everything a code path can produce: `metrics.RESULTS`,
`STAGES`, `SOURCES`, and each registered Filter plugin's `reasons` (the framework
refuses any other reason). The test drives a scheduler through every one of those
values with namespaces, pods, Runs, labels, workspaces and resource names that all
carry a marker, then scrapes the registry: the marker never appears, and every
label value is in its declared set.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kruntimes.scheduler import metrics, status as st
from kruntimes.scheduler.config import DEFAULT_FILTERS
from kruntimes.scheduler.registry import REGISTRY
from tests.builders import NOW, Harness, affinity, pod, run, sel
from tests.unit.test_core_loop import _FillsThePodAfterPlanning

M = "zq7marker"
NS, RT = f"{M}-ns", f"{M}-rt"
RES, LABEL = f"{M}.example.com/res", f"{M}.example.com/key"

FILTER_REASONS = {name: set(REGISTRY[name]().reasons) for name in DEFAULT_FILTERS}
DECLARED_LABELS = {
    "kruntimes_scheduler_schedule_results": {"result"},
    "kruntimes_scheduler_filter_rejections": {"plugin", "reason"},
    "kruntimes_scheduler_reservation_conflicts": {"stage"},
    "kruntimes_scheduler_pending_run_wakeups": {"source"},
    "kruntimes_scheduler_scheduling_cycle_duration_seconds": set(),
    "kruntimes_scheduler_queue_duration_seconds": set(),
    "kruntimes_scheduler_pending_runs": {"state"},
    "kruntimes_scheduler_unfittable_runs": set(),
    # SPEC §7.8: counted only by cycles of Runs with devices.
    "kruntimes_scheduler_device_selector_evaluations": {"result"},
    "kruntimes_scheduler_device_searches": {"result"},
    "kruntimes_scheduler_device_search_steps": set(),
}


class _FailOnce:
    """A binder that fails the first write of each named Run with the given exception."""

    def __init__(self, api, failures: dict[str, Exception]) -> None:
        self.api, self.failures = api, dict(failures)

    def update_status(self, r, body) -> None:
        exc = self.failures.pop(r.name.removeprefix(f"{M}-"), None)
        if exc is not None:
            raise exc
        self.api.update_status(r, body)


def _m(name: str) -> str:
    return f"{M}-{name}"


def _drive() -> Harness:
    h = Harness()
    full = {"runs": 1, RES: 1}
    roomy = {"runs": 10, RES: 5}
    h.add_pods(
        pod(_m("not-ready"), ns=NS, runtime=RT, ready=False, capacity=roomy),
        pod(_m("terminating"), ns=NS, runtime=RT, terminating=True, capacity=roomy),
        pod(_m("stale"), ns=NS, runtime=RT, heartbeat=NOW - timedelta(hours=1), capacity=roomy),
        pod(_m("bad-capacity"), ns=NS, runtime=RT, capacity=roomy, capacity_problem="malformed capacity annotation"),
        pod(_m("full"), ns=NS, runtime=RT, capacity=full),
        pod(_m("open-1"), ns=NS, runtime=RT, capacity=roomy),
        pod(_m("open-2"), ns=NS, runtime=RT, capacity=roomy),
    )
    h.create(
        run(_m("x"), ns=NS, runtime=RT, phase="Running", on=_m("full"), pod_uid=f"uid-{NS}-{_m('full')}",
            labels={LABEL: _m("x")}, workspace=_m("ws"), requests={"runs": 1, RES: 1}),
        run(_m("y"), ns=NS, runtime=RT, phase="Running", on=_m("open-1"), pod_uid=f"uid-{NS}-{_m('open-1')}",
            labels={LABEL: _m("y")}, requests={RES: 1}),
        run(_m("z"), ns=NS, runtime=RT, phase="Running", on=_m("open-2"), pod_uid=f"uid-{NS}-{_m('open-2')}",
            labels={LABEL: _m("z")}, requests={RES: 1}, affinity=affinity(anti=[sel(**{LABEL: _m("victim")})])),
    )
    h.drain()
    h.scheduler.binder = _FailOnce(h.api, {"bind-conflict": st.Conflict(M), "bind-error": st.ApiError(M)})
    h.create(
        run(_m("placed"), ns=NS, runtime=RT, labels={LABEL: _m("placed")}, requests={"runs": 1, RES: 1}),
        run(_m("not-offered"), ns=NS, runtime=RT, requests={"runs": 1, f"{M}.example.com/other": 1}),
        run(_m("workspace"), ns=NS, runtime=RT, workspace=_m("ws")),
        run(_m("affinity"), ns=NS, runtime=RT, labels={LABEL: _m("loner")},
            affinity=affinity(required=[sel(**{LABEL: _m("absent")})])),
        run(_m("anti"), ns=NS, runtime=RT, affinity=affinity(anti=[sel(**{LABEL: _m("y")}),
                                                                    sel(**{LABEL: _m("placed")})])),
        run(_m("victim"), ns=NS, runtime=RT, labels={LABEL: _m("victim")},
            affinity=affinity(anti=[sel(**{LABEL: _m("y")})])),
        run(_m("invalid"), ns=NS, runtime=RT, problems=(f"spec.resources.requests[{RES!r}]: {M} is malformed",)),
        run(_m("bind-conflict"), ns=NS, runtime=RT, labels={LABEL: _m("c")}),
        run(_m("bind-error"), ns=NS, runtime=RT, labels={LABEL: _m("e")}),
    )
    h.drain(retries=True)
    # A reserve conflict: another cycle takes the chosen pod between plan and reserve.
    h.scheduler.planner = _FillsThePodAfterPlanning(h.cache.config, h.cache,
                                                    run(_m("intruder"), ns=NS, runtime=RT, uid=_m("uid-intruder")))
    h.scheduler.binder = h.api
    h.create(run(_m("reserve-conflict"), ns=NS, runtime=RT, labels={LABEL: _m("r")}))
    h.drain(retries=True)
    # Wake-ups from every source.
    h.scheduler.on_pod(pod(_m("not-ready"), ns=NS, runtime=RT, capacity={"runs": 10, RES: 5}), event="MODIFIED")
    h.api.finish((NS, _m("x")), "Succeeded", NOW)
    h.drain(retries=True)
    h.create(run(_m("cohort"), ns=NS, runtime=RT, labels={LABEL: _m("absent")}))  # the target "affinity" waits for
    h.drain(retries=True)
    return h


@pytest.fixture(scope="module")
def scraped() -> tuple[str, list]:
    h = _drive()
    text = generate_latest(h.metrics.registry).decode()
    return text, list(text_string_to_metric_families(text))


def test_no_label_value_ever_carries_user_data(scraped) -> None:
    text, _ = scraped
    assert M not in text
    assert M.upper() not in text.upper()


def test_every_label_value_is_in_its_declared_bounded_set(scraped) -> None:
    _, families = scraped
    assert {f.name.removesuffix("_created") for f in families} == set(DECLARED_LABELS)
    for family in families:
        for sample in family.samples:
            labels = dict(sample.labels)
            labels.pop("le", None)  # histogram bucket bounds: numbers from code
            assert set(labels) <= DECLARED_LABELS[family.name.removesuffix("_created")], sample
            if "result" in labels:
                assert labels["result"] in _RESULT_SETS.get(family.name.removesuffix("_created"), metrics.RESULTS)
            if "stage" in labels:
                assert labels["stage"] in metrics.STAGES
            if "state" in labels:
                assert labels["state"] in metrics.PENDING_STATES
            if "source" in labels:
                assert labels["source"] in metrics.SOURCES
            if "plugin" in labels:
                assert labels["reason"] in FILTER_REASONS[labels["plugin"]], sample


_RESULT_SETS = {"kruntimes_scheduler_device_selector_evaluations": metrics.SELECTOR_RESULTS,
                "kruntimes_scheduler_device_searches": metrics.SEARCH_RESULTS}
# Emitted only for Runs with devices: tests/unit/test_scheduler_devices.py drives those.
DEVICE_ONLY = {"device_class"}


def _values(families, metric: str, label: str) -> set[str]:
    return {dict(s.labels)[label] for f in families if f.name == metric for s in f.samples
            if s.name.endswith("_total") and s.value > 0}


def test_the_drive_produced_every_declared_label_value(scraped) -> None:
    # Proves the scrape above was not vacuous: every bounded value was actually emitted.
    _, families = scraped
    assert _values(families, "kruntimes_scheduler_schedule_results", "result") == set(metrics.RESULTS)
    assert _values(families, "kruntimes_scheduler_reservation_conflicts", "stage") == set(metrics.STAGES)
    assert _values(families, "kruntimes_scheduler_pending_run_wakeups", "source") == set(metrics.SOURCES) - DEVICE_ONLY
    pairs = {(dict(s.labels)["plugin"], dict(s.labels)["reason"]) for f in families
             if f.name == "kruntimes_scheduler_filter_rejections" for s in f.samples
             if s.name.endswith("_total") and s.value > 0}
    assert pairs == {(p, r) for p, reasons in FILTER_REASONS.items() for r in reasons if p != "DeviceAllocation"}


def test_the_declared_sets_are_constants_of_the_code() -> None:
    for values in (metrics.RESULTS, metrics.STAGES, metrics.SOURCES, *FILTER_REASONS.values()):
        assert values and all(isinstance(v, str) and v.isascii() for v in values)
    assert set(metrics.SOURCES) == {"runtime_pod", "capacity_released", "affinity_target", "device_class"}
    assert set(metrics.STAGES) == {"reserve", "bind"}


@pytest.mark.parametrize("call", ["result", "conflict", "wakeup"])
@pytest.mark.parametrize("value", [M, None, 3], ids=["a user string", "None", "a number"])
def test_the_metrics_helpers_refuse_an_undeclared_label_value(call: str, value: object) -> None:
    m = metrics.SchedulerMetrics()
    with pytest.raises(metrics.UndeclaredLabelValue) as refused:
        getattr(m, call)(value)
    assert M not in str(refused.value)
    assert M not in generate_latest(m.registry).decode()


def test_the_label_bounds_hold_under_python_dash_o() -> None:
    # `assert` statements vanish under -O; the bound must not.
    code = ("from kruntimes.scheduler import metrics\n"
            "m = metrics.SchedulerMetrics()\n"
            "for call in ('result', 'conflict', 'wakeup'):\n"
            "    try:\n"
            "        getattr(m, call)('zq7marker')\n"
            "    except metrics.UndeclaredLabelValue:\n"
            "        continue\n"
            "    raise SystemExit(call + ' accepted an undeclared value')\n")
    done = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout + done.stderr


def test_device_work_counted_between_scrapes_is_what_the_scrape_reports() -> None:
    m = metrics.SchedulerMetrics()
    sample = m.registry.get_sample_value
    m.device_cycle(10, (1, 0, 0, 2), {"match": 3, "no_match": 0, "error": 0}, {"match": 1, "no_match": 0, "error": 0})
    m.device_cycle(70, (0, 1, 0, 0), {"match": 3, "no_match": 1, "error": 0}, {"match": 3, "no_match": 0, "error": 0})
    assert sample("kruntimes_scheduler_device_search_steps_count") == 2
    assert sample("kruntimes_scheduler_device_search_steps_sum") == 80
    assert sample("kruntimes_scheduler_device_search_steps_bucket", {"le": "16.0"}) == 1
    assert [sample("kruntimes_scheduler_device_searches_total", {"result": r}) for r in metrics.SEARCH_RESULTS] \
        == [1, 1, None, 2]
    assert sample("kruntimes_scheduler_device_selector_evaluations_total", {"result": "match"}) == 2
    assert sample("kruntimes_scheduler_device_selector_evaluations_total", {"result": "error"}) is None
    m.device_cycle(5, (1, 0, 0, 0), {"match": 3}, {"match": 3})
    assert sample("kruntimes_scheduler_device_search_steps_count") == 3
    assert sample("kruntimes_scheduler_device_searches_total", {"result": "allocated"}) == 2
    assert sample("kruntimes_scheduler_device_selector_evaluations_total", {"result": "no_match"}) == 1
    with pytest.raises(metrics.UndeclaredLabelValue):
        m.device_cycle(0, (0, 0, 0, 0), {f"{M}-verdict": 1}, {})
