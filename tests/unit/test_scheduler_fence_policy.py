"""The scheduler's term fence (deploy/base/scheduler-fence-policy.yaml, SPEC §3.6), evaluated with cel-python
and as the API emulator judges it as bound (the param looked up, a missing one letting writes through).

As the API server runs a ValidatingAdmissionPolicy with a param: the binding's Lease
is `params`, the variables are evaluated in order, then the validation; false refuses
with the message, an evaluation error refuses too (`failurePolicy: Fail`); no Lease
lets every write through (`parameterNotFoundAction: Allow`).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.emulator import admission
from tests.emulator.admission import judge
from tests.unit.manifests import DEPLOY, Object, build, find

celpy = pytest.importorskip("celpy", reason="pip install cel-python (the test extra)")

POLICY_FILE = DEPLOY / "base" / "scheduler-fence-policy.yaml"


def _documents() -> list[Object]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


def admitted(obj: Object, old: Object, lease: Object | None) -> bool:
    """The policy's answer to a runs/status UPDATE with `lease` as its param."""
    if lease is None:
        return True
    [policy] = [d for d in _documents() if d["kind"] == "ValidatingAdmissionPolicy"]
    activation: dict[str, Any] = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                                  "params": celpy.json_to_cel(lease)}
    return judge(policy["spec"], activation).refusals == []


def run(status: Object | None) -> Object:
    obj: Object = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "a", "namespace": "t"},
                   "spec": {"runtime": "python"}}
    if status is not None:
        obj["status"] = status
    return obj


def lease(transitions: int | None) -> Object:
    spec: Object = {"holderIdentity": "scheduler-b", "leaseDurationSeconds": 15}
    if transitions is not None:
        spec["leaseTransitions"] = transitions
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kruntimes-scheduler"},
            "spec": spec}


def assigned(term: int | None = None, pod: str = "python-0", phase: str = "Scheduled") -> Object:
    assignment: Object = {"podName": pod, "podUID": f"uid-{pod}"}
    if term is not None:
        assignment["term"] = term
    return {"phase": phase, "assignment": assignment}


PENDING = {"phase": "Pending"}
CASES = [
    ("a bind in the lease's term passes", assigned(2), PENDING, lease(2), True),
    ("a bind in an earlier term is refused", assigned(1), PENDING, lease(2), False),
    ("a bind in a later term is refused", assigned(3), PENDING, lease(2), False),
    ("a bind without a term is refused", assigned(), PENDING, lease(2), False),
    ("a bind of a Run without any status yet passes in the term", assigned(0), None, lease(None), True),
    ("a lease without leaseTransitions is term 0", assigned(0), PENDING, lease(None), True),
    ("moving an assignment in an old term is refused", assigned(1, pod="python-1"), assigned(1), lease(2), False),
    ("runtimed keeping an old term's assignment passes", assigned(1, phase="Running"), assigned(1), lease(2), True),
    ("runtimed keeping an assignment without a term passes", assigned(phase="Running"), assigned(), lease(2), True),
    ("a write without an assignment passes", PENDING, assigned(1), lease(2), True),
    ("with no lease every write passes", assigned(1), PENDING, None, True),
]


@pytest.mark.parametrize("case, new, old, param, allowed", CASES, ids=[c[0] for c in CASES])
def test_the_policy_and_the_emulator_judge_each_status_write_alike(
        case: str, new: Object, old: Object | None, param: Object | None, allowed: bool) -> None:
    assert admitted(run(new), run(old), param) is allowed
    assert (admission.refusal(run(new), run(old), param) is None) is allowed


def test_the_binding_names_the_deployed_scheduler_lease_and_lets_writes_through_without_it() -> None:
    objects = build("base")
    deployment = find(objects, "Deployment", "kruntimes-scheduler")
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "scheduler"]
    binding = find(objects, "ValidatingAdmissionPolicyBinding", "kruntimes-scheduler-fence")
    ref = binding["spec"]["paramRef"]
    assert f"--leader-elect-resource-name={ref['name']}" in container["args"]
    assert ref["namespace"] == find(objects, "Namespace", "kruntimes-system")["metadata"]["name"]
    assert ref["parameterNotFoundAction"] == "Allow" and binding["spec"]["validationActions"] == ["Deny"]
    policy = find(objects, "ValidatingAdmissionPolicy", "kruntimes-scheduler-fence")
    assert policy["spec"]["paramKind"] == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
