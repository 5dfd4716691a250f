"""Projections survive the journal exactly: decode(encode(x)) == x, through canonical JSON."""

import json
from datetime import datetime, timezone

import pytest

from kruntimes import canonical, demo_workload
from kruntimes.api import ingest
from kruntimes.journal import codec
from kruntimes.scheduler.projection import (Affinity, Assumption, PodInfo, Requirement, RunInfo, Selector, Term,
                                            WeightedTerm)

AFFINITY = Affinity(
    required=(Term(Selector(match_labels=(("a", "b"),))), Term(None)),
    required_anti=(Term(Selector(match_expressions=(Requirement("k", "In", ("x", "y")),))),),
    preferred=(WeightedTerm(7, Term(Selector())),),
    preferred_anti=(WeightedTerm(100, Term(Selector(match_expressions=(Requirement("z", "DoesNotExist"),)))),),
)


def _through_json(d: dict) -> dict:  # type: ignore[type-arg]
    return json.loads(canonical.text(d))


def test_every_demo_pod_and_run_round_trips() -> None:
    w = demo_workload.generate()
    for obj in w.pods:
        pod = ingest.pod_info(obj)
        assert pod is not None
        # A pod record names its device inventory by digest; the text is a record of its own (SPEC §7.8).
        inventories = {} if pod.devices is None else {codec.inventory_digest(pod.devices): pod.devices}
        assert codec.pod_from(_through_json(codec.pod_to(pod)), inventories) == pod
    assert any(obj["spec"].get("devices") for obj in w.runs)  # the demo's GPU Runs: claims round-trip too
    for obj in w.runs:
        run = ingest.run_info(obj)
        assert codec.run_from(_through_json(codec.run_to(run))) == run


@pytest.mark.parametrize("value", [
    RunInfo("ns", "r", "u", "rt", labels=(("app", "ü"),), affinity=AFFINITY, workspace="w", phase="Running",
            pod_name="p", pod_uid=None, released=True, pending_message="0/1", problems=("bad",)),
    PodInfo("ns", "p", "u", "rt", ready=True, heartbeat=datetime(2026, 1, 1, tzinfo=timezone.utc),
            capacity=(("example.com/gpu", 2), ("runs", 4)), capacity_problem="malformed capacity annotation"),
    Assumption("ns", "u", "r", "p", "pu", (("runs", 1),), (("a", "b"),), AFFINITY, None),
], ids=["a run with every field set round-trips", "a pod round-trips", "an assumption round-trips"])
def test_projections_round_trip(value: object) -> None:
    to, back = {RunInfo: (codec.run_to, codec.run_from), PodInfo: (codec.pod_to, codec.pod_from),
                Assumption: (codec.assumption_to, codec.assumption_from)}[type(value)]
    assert back(_through_json(to(value))) == value
