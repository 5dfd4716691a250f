"""The Runtime controller's admission policy (deploy/base/controller-policy.yaml, SPEC §4.2 with §3.6),
evaluated with cel-python against the writes it must allow and refuse.

The harness evaluates a ValidatingAdmissionPolicy as the API server does (matchConditions,
then variables in order, then validations; an evaluation error refuses: failurePolicy
Fail); tests/realkube/test_identities.py sends the same writes to the real server.
"""

from __future__ import annotations

import pytest
import yaml

from tests.emulator.admission import Decision, judge
from tests.unit.manifests import DEPLOY, Object
from tests.unit.test_runtimed_policy import request

celpy = pytest.importorskip("celpy", reason="pip install cel-python (the test extra)")

POLICY_FILE = DEPLOY / "base" / "controller-policy.yaml"
CONTROLLER = "system:serviceaccount:kruntimes-system:kruntimes-controller"


def admit(req: Object, obj: Object, old: Object) -> Decision:
    documents = yaml.safe_load_all(POLICY_FILE.read_text())
    [policy] = [d for d in documents if d and d["kind"] == "ValidatingAdmissionPolicy"]
    activation = {"request": celpy.json_to_cel(req), "object": celpy.json_to_cel(obj),
                  "oldObject": celpy.json_to_cel(old)}
    return judge(policy["spec"], activation)


def run(status: Object | None) -> Object:
    obj: Object = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "a", "namespace": "t"},
                   "spec": {"runtime": "python"}}
    if status is not None:
        obj["status"] = status
    return obj


PLACED = {"phase": "Running", "assignment": {"podName": "python-0", "podUID": "u0", "term": 3}}
LOST = {"phase": "Failed", "assignment": PLACED["assignment"], "reason": "RuntimePodLost"}
CASES = [
    ("ending a Run, its assignment kept, passes", run(LOST), run(PLACED), True),
    ("ending a Pending Run passes", run({"phase": "Failed"}), run({"phase": "Pending"}), True),
    ("placing a Pending Run is refused", run(PLACED), run({"phase": "Pending"}), False),
    ("placing a Run without status is refused", run(PLACED), run(None), False),
    ("moving a Run to another pod is refused",
     run({**PLACED, "assignment": {"podName": "python-1", "podUID": "u1", "term": 3}}), run(PLACED), False),
    ("changing an assignment's term is refused",
     run({**PLACED, "assignment": {**PLACED["assignment"], "term": 4}}), run(PLACED), False),
    ("removing an assignment is refused", run({"phase": "Pending"}), run(PLACED), False),
]


@pytest.mark.parametrize("obj, old, allowed", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_controller_policy(obj: Object, old: Object, allowed: bool) -> None:
    decision = admit(request(CONTROLLER, namespace="t", pod=None, pod_uid=None), obj, old)
    assert decision.matched
    assert (decision.refusals == []) is allowed, decision.refusals


@pytest.mark.parametrize("username", ["system:serviceaccount:kruntimes-system:kruntimes-scheduler",
                                      "system:serviceaccount:t:kruntimes-runtimed", "admin"])
def test_it_applies_to_the_controller_alone(username: str) -> None:
    assert not admit(request(username, namespace="t", pod=None, pod_uid=None), run(PLACED),
                     run({"phase": "Pending"})).matched
