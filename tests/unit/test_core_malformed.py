"""Malformed Runs (SPEC §2.2, §3.2 step 2): terminal Failed with an actionable message, never a crash."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from kruntimes.api import ingest
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler import status as st
from kruntimes.scheduler import validation
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.projection import Requirement, Selector
from tests.builders import NOW, Harness, affinity, expr, pod, run

TOPO = "kruntimes.io/runtime-pod"


def _failed_message(h: Harness, name: str) -> str:
    status = h.api.status(("ns", name))
    assert status is not None, f"{name}: no status written"
    assert status["phase"] == "Failed"
    assert status["completionTime"] == st.rfc3339(NOW)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Completed"]["reason"] == st.REASON_INVALID
    assert conditions["Scheduled"]["status"] == "False"
    return conditions["Completed"]["message"]


# -- projections built by hand (a file, the journal, a test): PreFilter re-validates ------------

def _sel_with(req: Requirement) -> Selector:
    return Selector(match_expressions=(req,))


PROJECTION_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("a negative request amount", dict(raw_requests=(("runs", -1),)),
     "spec.resources.requests['runs']: must be a non-negative whole number"),
    ("a bool request amount", dict(raw_requests=(("example.com/gpu", True), ("runs", 1))),
     "spec.resources.requests['example.com/gpu']: must be a non-negative whole number"),
    ("a fractional request amount", dict(raw_requests=(("runs", 1.5),)),
     "spec.resources.requests['runs']: must be a non-negative whole number"),
    ("a textual request amount", dict(raw_requests=(("runs", "2"),)),
     "spec.resources.requests['runs']: must be a non-negative whole number"),
    ("a missing runtime", dict(runtime=""), "spec.runtime is required"),
    ("an unknown selector operator", dict(affinity=affinity(required=[_sel_with(expr("k", "Near", "x"))])),
     "spec.affinity.runAffinity.required[0].labelSelector.matchExpressions[0].operator: 'Near' is not one of"),
    ("a lower-case selector operator", dict(affinity=affinity(anti=[_sel_with(expr("k", "in", "x"))])),
     "spec.affinity.runAntiAffinity.required[0].labelSelector.matchExpressions[0].operator"),
    ("In without values", dict(affinity=affinity(required=[_sel_with(expr("k", "In"))])),
     "spec.affinity.runAffinity.required[0].labelSelector.matchExpressions[0].values: operator In needs"),
    ("NotIn without values", dict(affinity=affinity(anti=[_sel_with(expr("k", "NotIn"))])),
     "spec.affinity.runAntiAffinity.required[0].labelSelector.matchExpressions[0].values: operator NotIn"),
    ("Exists with values", dict(affinity=affinity(required=[_sel_with(expr("k", "Exists", "x"))])),
     "matchExpressions[0].values: operator Exists takes no values"),
    ("DoesNotExist with values", dict(affinity=affinity(anti=[_sel_with(expr("k", "DoesNotExist", "x"))])),
     "matchExpressions[0].values: operator DoesNotExist takes no values"),
    ("preferred weight 0", dict(affinity=affinity(preferred=[(0, Selector())])),
     "spec.affinity.runAffinity.preferred[0].weight: must be between 1 and 100 (got 0)"),
    ("preferred weight 101", dict(affinity=affinity(preferred=[(5, Selector()), (101, Selector())])),
     "spec.affinity.runAffinity.preferred[1].weight: must be between 1 and 100 (got 101)"),
    ("preferred anti-affinity weight 0", dict(affinity=affinity(preferred_anti=[(0, Selector())])),
     "spec.affinity.runAntiAffinity.preferred[0].weight: must be between 1 and 100 (got 0)"),
    ("a bool preferred weight", dict(affinity=affinity(preferred_anti=[(True, Selector())])),
     "spec.affinity.runAntiAffinity.preferred[0].weight"),
    ("a bad operator in a preferred term", dict(affinity=affinity(preferred=[(5, _sel_with(expr("k", "Gt", "1")))])),
     "spec.affinity.runAffinity.preferred[0].term.labelSelector.matchExpressions[0].operator"),
    ("a problem found when the object was read",
     dict(problems=('spec.mode must set exactly one of "task" or "function" (got "weird")',)),
     'spec.mode must set exactly one of "task" or "function"'),
]


@pytest.mark.parametrize("kwargs, expected", [c[1:] for c in PROJECTION_CASES], ids=[c[0] for c in PROJECTION_CASES])
def test_a_malformed_run_becomes_terminal_failed_with_a_message_naming_the_field(kwargs, expected: str) -> None:
    h = Harness()
    h.add_pods(pod("p"))
    h.create(run("bad", **kwargs))
    assert h.drain() == [(("ns", "bad"), "invalid")]
    message = _failed_message(h, "bad")
    assert message.startswith("invalid Run: ")
    assert expected in message
    assert len(h.cache.assumed) == 0 and h.cache.usage("ns", "p") == {}


def test_every_problem_of_a_run_is_reported_in_one_message() -> None:
    h = Harness()
    h.add_pods(pod("p"))
    h.create(run("bad", problems=("first problem", "second problem"), raw_requests=(("runs", -2),),
                 affinity=affinity(preferred=[(0, Selector())])))
    h.drain()
    message = _failed_message(h, "bad")
    for part in ("first problem", "second problem", "spec.resources.requests['runs']",
                 "spec.affinity.runAffinity.preferred[0].weight"):
        assert part in message


def test_the_failure_message_is_bounded_in_length() -> None:
    r = run("bad", problems=tuple(f"problem {i}: " + "x" * 50 for i in range(100)))
    message = validation.validate_run(r)
    assert message is not None and len(message) <= validation.MAX_MESSAGE


def test_a_valid_run_has_no_problems() -> None:
    r = run("ok", affinity=affinity(required=[_sel_with(expr("k", "In", "a"))], preferred=[(1, Selector()),
                                                                                          (100, None)]))
    assert validation.validate_run(r) is None


def test_a_zero_request_is_not_malformed() -> None:
    assert validation.validate_run(run("ok", raw_requests=(("runs", 0),))) is None


# -- objects read from the API: the ingest layer records problems, PreFilter fails the Run -----------

def _spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": "rt", "mode": {"task": {"args": ["true"]}}}
    spec.update(over)
    return spec


def _req(**requests: Any) -> dict[str, Any]:
    return {"requests": requests}


def _term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"labelSelector": {"matchExpressions": list(exprs)}, "topologyKey": TOPO}


OBJECT_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("a negative quantity", _spec(resources=_req(runs="-1")), 'spec.resources.requests["runs"]'),
    ("a fractional quantity", _spec(resources=_req(runs="500m")), 'spec.resources.requests["runs"]'),
    ("a decimal quantity", _spec(resources=_req(**{"example.com/gpu": "1.5"})),
     'spec.resources.requests["example.com/gpu"]'),
    ("a non-numeric quantity", _spec(resources=_req(runs="abc")), 'spec.resources.requests["runs"]'),
    ("a boolean quantity", _spec(resources=_req(runs=True)), 'spec.resources.requests["runs"]'),
    ("a bad resource name", _spec(resources=_req(**{"bad name!": "1"})), 'spec.resources.requests["bad name!"]'),
    ("a missing runtime", {"mode": {"task": {"args": []}}}, "spec.runtime"),
    ("an unknown mode", _spec(mode={"daemon": {}}), "spec.mode"),
    ("a bad selector operator",
     _spec(affinity={"runAffinity": {"required": [_term({"key": "a", "operator": "Near", "values": ["x"]})]}}),
     "spec.affinity.runAffinity.required[0].labelSelector.matchExpressions[0].operator"),
    ("In without values",
     _spec(affinity={"runAntiAffinity": {"required": [_term({"key": "a", "operator": "In"})]}}),
     "spec.affinity.runAntiAffinity.required[0].labelSelector.matchExpressions[0]"),
    ("Exists with values",
     _spec(affinity={"runAffinity": {"required": [_term({"key": "a", "operator": "Exists", "values": ["x"]})]}}),
     "spec.affinity.runAffinity.required[0].labelSelector.matchExpressions[0]"),
    ("preferred weight 0",
     _spec(affinity={"runAffinity": {"preferred": [{"weight": 0, "term": {"labelSelector": {}, "topologyKey": TOPO}}]}}),
     "spec.affinity.runAffinity.preferred[0].weight"),
    ("preferred weight 101",
     _spec(affinity={"runAntiAffinity": {"preferred": [{"weight": 101,
                                                        "term": {"labelSelector": {}, "topologyKey": TOPO}}]}}),
     "spec.affinity.runAntiAffinity.preferred[0].weight"),
    ("an unsupported topologyKey",
     _spec(affinity={"runAffinity": {"required": [{"labelSelector": {}, "topologyKey": "zone"}]}}),
     "spec.affinity.runAffinity.required[0].topologyKey"),
]


@pytest.mark.parametrize("spec, field", [c[1:] for c in OBJECT_CASES], ids=[c[0] for c in OBJECT_CASES])
def test_a_malformed_run_object_becomes_terminal_failed_naming_the_field(spec: dict[str, Any], field: str) -> None:
    info = ingest.run_info({"metadata": {"name": "bad", "namespace": "ns", "uid": "u-bad"}, "spec": spec})
    assert info.problems
    h = Harness()
    h.add_pods(pod("p"))
    h.create(info)
    assert h.drain() == [(("ns", "bad"), "invalid")]
    assert field in _failed_message(h, "bad")


# -- with real worker threads ---------------------------------------------------------------------------

def test_malformed_runs_never_raise_out_of_a_worker(caplog) -> None:
    escaped: list[BaseException] = []
    previous_hook = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    cache = ClusterCache()
    api = MemoryApi(conflict_rate=0.2, seed=7)
    s = Scheduler(cache, api, clock=lambda: NOW)
    api.watchers.append(s.on_run)
    s.on_pod(pod("p", capacity={"runs": 100}))
    bad = [run(f"bad-{i:02d}", **kwargs) for i, (_, kwargs, _) in enumerate(PROJECTION_CASES)]
    good = [run(f"good-{i:02d}") for i in range(5)]
    caplog.set_level(logging.WARNING, logger="kruntimes.scheduler.loop")
    try:
        s.start(3)
        for r in bad + good:
            api.create(r)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            phases = {r.name: r.phase for r in api.runs()}
            if all(phases[r.name] == "Failed" for r in bad) and all(phases[r.name] == "Scheduled" for r in good):
                break
            time.sleep(0.005)
        workers = [t for t in threading.enumerate() if t.name.startswith("kruntimes-worker-")]
        assert len(workers) == 3 and all(t.is_alive() for t in workers)
    finally:
        s.stop()
        api.close()
        threading.excepthook = previous_hook
    phases = {r.name: r.phase for r in api.runs()}
    assert {phases[r.name] for r in bad} == {"Failed"}
    assert {phases[r.name] for r in good} == {"Scheduled"}
    assert escaped == []
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
