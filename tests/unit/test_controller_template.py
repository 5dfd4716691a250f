"""A Runtime's pod template: unknown fields are the server's to judge, a shape no pod can be built from
is reported in Runtime.status, and so is a pod the server refuses (issue 23 item 8, SPEC §4.2)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import pytest

from kruntimes.controller import template
from kruntimes.controller.apply import apply
from kruntimes.controller.reconcile import RuntimeSpecView, reconcile
from kruntimes.scheduler import status as st
from tests.unit.test_controller_apply import FakeApi

NOW = datetime(2026, 12, 4, 12, tzinfo=timezone.utc)
CONTAINER = {"name": "runtime", "image": "example.com/python:1"}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("case, tmpl, expected", [
    ("a plain template is fine", {"spec": {"containers": [CONTAINER]}}, None),
    ("a typo in a container is the server's to judge", {"spec": {"containers": [{**CONTAINER, "imagePullPolicyy": 1}]}},
     None),
    ("a pod field newer than the client is passed through", {"spec": {"containers": [CONTAINER],
                                                                       "resourceClaims2": [{"x": {"y": 1}}]}}, None),
    ("a template without a spec is the server's to judge", {"metadata": {"labels": {"app": "python"}}}, None),
    ("a template that is not an object", ["spec"], "spec.template must be an object (a pod template)"),
    ("metadata that is not an object", {"metadata": "x"}, "spec.template.metadata must be an object"),
    ("labels that are not strings", {"metadata": {"labels": {"tier": 1}}},
     "spec.template.metadata.labels must be a map of strings"),
    ("annotations that are a list", {"metadata": {"annotations": ["a"]}},
     "spec.template.metadata.annotations must be a map of strings"),
    ("a spec that is a string", {"spec": "x"}, "spec.template.spec must be an object"),
    ("containers that are not a list", {"spec": {"containers": "runtime"}}, "spec.template.spec.containers must be a list"),
    ("a container that is not an object", {"spec": {"containers": [CONTAINER, "sidecar"]}},
     "spec.template.spec.containers[1] must be an object"),
    ("a volume that is not an object", {"spec": {"containers": [CONTAINER], "volumes": [1]}},
     "spec.template.spec.volumes[0] must be an object"),
    ("env that is not a list", {"spec": {"containers": [{**CONTAINER, "env": {"A": "1"}}]}},
     "spec.template.spec.containers[0].env must be a list"),
    ("a mount that is not an object", {"spec": {"containers": [{**CONTAINER, "volumeMounts": ["/x"]}]}},
     "spec.template.spec.containers[0].volumeMounts[0] must be an object"),
    ("a template nested 100 levels deep", {"spec": {"containers": [CONTAINER], "x": nested(100)}},
     "spec.template is nested deeper than 64 levels"),
], ids=lambda v: v if isinstance(v, str) and " " in v else "")
def test_the_template_shape_the_controller_builds_pods_from(case: str, tmpl: Any, expected: str | None) -> None:
    assert template.problem(tmpl) == expected


def runtime(tmpl: Any, generation: int = 1, conditions: tuple[dict[str, Any], ...] = ()) -> RuntimeSpecView:
    return RuntimeSpecView(namespace="team", name="python", uid="uid-rt", generation=generation, replicas=2,
                           template=tmpl if isinstance(tmpl, dict) else {}, capacity={"runs": 1},
                           conditions=conditions, template_problem=template.problem(tmpl))


def condition(status: dict[str, Any]) -> tuple[str, str, str]:
    found = next(c for c in status["conditions"] if c["type"] == "TemplateValid")
    return found["status"], found["reason"], found["message"]


def test_no_pod_is_built_from_a_template_of_the_wrong_shape_and_the_status_says_what_to_fix() -> None:
    plan = reconcile(runtime({"spec": {"containers": "runtime"}}), [], [], NOW)
    assert plan.create == ()
    assert condition(plan.status) == ("False", "InvalidTemplate", "spec.template.spec.containers must be a list; "
                                      "no Runtime Pod is created until spec.template is fixed")


def test_pods_are_built_from_a_template_with_unknown_fields_which_they_keep() -> None:
    tmpl = {"spec": {"containers": [{**CONTAINER, "imagePullPolicyy": "Always"}], "hostUsers2": False}}
    plan = reconcile(runtime(tmpl), [], [], NOW)
    assert len(plan.create) == 2 and condition(plan.status)[:2] == ("True", "Valid")
    assert plan.create[0]["spec"]["hostUsers2"] is False
    assert plan.create[0]["spec"]["containers"][0]["imagePullPolicyy"] == "Always"


class RefusingApi(FakeApi):
    """The API server refusing every pod, as it does a template it finds invalid."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = True

    def create_pod(self, namespace: str, body: dict[str, Any]) -> str:
        if self.refusing:
            self.calls.append("create")
            raise st.Refused('Pod "python-" is invalid: spec.containers[0].image: Required value')
        return super().create_pod(namespace, body)


def test_a_pod_the_server_refuses_is_reported_until_a_pod_of_a_newer_spec_is_created() -> None:
    api, tmpl = RefusingApi(), {"spec": {"containers": [{"name": "runtime"}]}}
    first = runtime(tmpl)
    done = apply(reconcile(first, [], [], NOW), first, None, api, NOW)
    assert api.calls == ["create", "status"] and done.errors  # one refusal is enough: no second pod is tried
    refused = api.runtime_statuses[-1]
    assert condition(refused) == ("False", "PodRefused", "the API server refused a Runtime Pod built from "
                                  'spec.template: Pod "python-" is invalid: spec.containers[0].image: Required value')
    # The next pass of the same generation keeps the refusal (its status is what it observes) ...
    again = runtime(tmpl, conditions=tuple(refused["conditions"]))
    assert condition(reconcile(again, [], [], NOW).status)[:2] == ("False", "PodRefused")
    # ... and a fixed spec's first pod turns it True.
    api.refusing = False
    fixed = dataclasses.replace(runtime({"spec": {"containers": [CONTAINER]}}, generation=2),
                                conditions=tuple(refused["conditions"]))
    done = apply(reconcile(fixed, [], [], NOW), fixed, refused, api, NOW)
    assert len(done.created) == 2 and condition(api.runtime_statuses[-1])[:2] == ("True", "Valid")
