"""The Run and Runtime API models and their user-facing validation messages (SPEC §2)."""

import json
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kruntimes.api import errors, models


def run(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "r", "namespace": "ns"}, "spec": spec, **extra}


def with_runtime(**spec: Any) -> dict[str, Any]:
    return run({"runtime": "rt", **spec})


def term(**fields: Any) -> dict[str, Any]:
    return {"topologyKey": models.RUNTIME_POD_TOPOLOGY, **fields}


def affinity(**rules: Any) -> dict[str, Any]:
    return {"runAffinity": rules}


def required_selector(**selector: Any) -> dict[str, Any]:
    """A Run with one required affinity term using ``selector``."""
    return with_runtime(affinity=affinity(required=[term(labelSelector=selector)]))


def invalid_run_message(body: dict[str, Any]) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        models.Run.model_validate(body)
    return errors.describe_validation_error(caught.value)


REQUESTS = [
    ({}, {"runs": 1}, "omitted resources request one run"),
    ({"resources": None}, {"runs": 1}, "null resources request one run"),
    ({"resources": {}}, {"runs": 1}, "resources without requests request one run"),
    ({"resources": {"requests": None}}, {"runs": 1}, "null requests request one run"),
    (
        {"resources": {"requests": {"example.com/gpu": "1"}}},
        {"example.com/gpu": 1, "runs": 1},
        "omitted runs defaults to one beside other resources",
    ),
    ({"resources": {"requests": {"runs": "3"}}}, {"runs": 3}, "explicit runs is kept"),
    (
        {"resources": {"requests": {"runs": "0", "example.com/gpu": 1}}},
        {"example.com/gpu": 1},
        "explicit zero runs means no runs request",
    ),
    (
        {"resources": {"requests": {"example.com/gpu": "0"}}},
        {"runs": 1},
        "a zero request is dropped",
    ),
    (
        {"resources": {"requests": {"runs": "1000m", "b.io/x": "1k", "a.io/y": "1Ki"}}},
        {"a.io/y": 1024, "b.io/x": 1000, "runs": 1},
        "quantities are parsed and names sorted",
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"), [c[:2] for c in REQUESTS], ids=[c[2] for c in REQUESTS]
)
def test_run_requests_are_defaulted_parsed_and_zero_free(
    spec: dict[str, Any], expected: dict[str, int]
) -> None:
    parsed = models.Run.model_validate(with_runtime(**spec))
    assert parsed.spec.resources.requests == expected
    assert list(parsed.spec.resources.requests) == sorted(expected)


VALID_RUNS = [
    (with_runtime(mode={"task": {"args": ["echo", "hi"]}}), "a task Run is valid"),
    (with_runtime(mode={"function": {"entry": "main", "any": [1]}}), "a function Run is valid"),
    (with_runtime(mode={"function": {}}), "an empty function mode is a function"),
    (
        required_selector(),
        "an empty selector is valid",
    ),
    (with_runtime(affinity=affinity(required=[term()])), "a missing selector is valid"),
    (
        with_runtime(
            affinity={
                "runAntiAffinity": {
                    "preferred": [
                        {"weight": 1, "term": term(labelSelector={"matchLabels": {"a": ""}})},
                        {"weight": 100, "term": term()},
                    ]
                }
            }
        ),
        "weights 1 and 100 are valid",
    ),
    (
        with_runtime(
            affinity=affinity(
                required=[
                    term(
                        labelSelector={
                            "matchExpressions": [
                                {"key": "app", "operator": "In", "values": ["a"]},
                                {"key": "example.com/t", "operator": "NotIn", "values": ["b"]},
                                {"key": "x", "operator": "Exists"},
                                {"key": "y", "operator": "DoesNotExist", "values": []},
                            ]
                        }
                    )
                ]
            )
        ),
        "every selector operator is valid with the right values",
    ),
    (with_runtime(workspace="ws"), "a workspace is valid"),
    (
        run(
            {"runtime": "rt"},
            status={
                "phase": "Scheduled",
                "assignment": {"podName": "p", "podUID": "u"},
                "conditions": [{"type": "Scheduled", "status": "True", "future": 1}],
                "somethingNew": True,
            },
        ),
        "unknown status fields are ignored",
    ),
    (
        {"metadata": {"name": "r", "managedFields": []}, "spec": {"runtime": "rt"}},
        "unknown metadata fields are ignored",
    ),
]


@pytest.mark.parametrize("body", [c[0] for c in VALID_RUNS], ids=[c[1] for c in VALID_RUNS])
def test_valid_runs_are_accepted(body: dict[str, Any]) -> None:
    models.Run.model_validate(body)


INVALID_RUNS = [
    (
        with_runtime(resources={"requests": {"example.com/gpu": "500m"}}),
        'spec.resources.requests["example.com/gpu"]: quantity "500m" is not a '
        "non-negative whole number",
        "a fractional request names its resource",
    ),
    (
        with_runtime(resources={"requests": {"runs": "-1"}}),
        'spec.resources.requests["runs"]: quantity "-1" is not',
        "a negative request is rejected",
    ),
    (
        with_runtime(resources={"requests": {"bad name!": "1"}}),
        'spec.resources.requests["bad name!"]: resource name "bad name!" is not a valid '
        "Kubernetes qualified name",
        "a bad resource name is rejected",
    ),
    (
        with_runtime(resources={"requests": {"runs": 1}, "limits": {"runs": 1}}),
        "spec.resources: limits are not supported",
        "limits are rejected",
    ),
    (
        run({"workspace": "w"}),
        "spec.runtime: is required",
        "a missing runtime is rejected",
    ),
    (with_runtime(runtime=""), "spec.runtime: must not be empty", "an empty runtime is rejected"),
    (
        run({"runtme": "rt"}),
        'spec.runtme: unknown field; did you mean "runtime"?',
        "a spec typo is caught with a suggestion",
    ),
    (
        with_runtime(mode={"service": {}}),
        'spec.mode must set exactly one of "task" or "function" (got "service")',
        "an unknown mode is rejected",
    ),
    (
        with_runtime(mode={"task": {"args": ["x"]}, "function": {}}),
        'spec.mode must set exactly one of "task" or "function"',
        "both modes are rejected",
    ),
    (
        with_runtime(mode={}),
        'spec.mode must set exactly one of "task" or "function"',
        "an empty mode is rejected",
    ),
    (
        with_runtime(mode={"task": {"args": []}}),
        "spec.mode.task.args: must not be empty",
        "a task without args is rejected",
    ),
    (
        with_runtime(affinity=affinity(preferred=[{"weight": 0, "term": term()}])),
        "spec.affinity.runAffinity.preferred[0].weight: must be between 1 and 100 (got 0)",
        "weight 0 is rejected",
    ),
    (
        with_runtime(affinity=affinity(preferred=[{"weight": 101, "term": term()}])),
        "spec.affinity.runAffinity.preferred[0].weight: must be between 1 and 100 (got 101)",
        "weight 101 is rejected",
    ),
    (
        with_runtime(affinity=affinity(required=[{"topologyKey": "kubernetes.io/hostname"}])),
        'spec.affinity.runAffinity.required[0].topologyKey: topologyKey "kubernetes.io/hostname"'
        ' is not supported: the only topologyKey is "kruntimes.io/runtime-pod"',
        "a wrong topologyKey is rejected",
    ),
    (
        with_runtime(affinity=affinity(required=[{"labelSelector": {}}])),
        "spec.affinity.runAffinity.required[0].topologyKey: is required",
        "a missing topologyKey is rejected",
    ),
    (
        required_selector(matchExpressions=[{"key": "a", "operator": "Is"}]),
        "matchExpressions[0].operator: must be one of 'In', 'NotIn', 'Exists' or "
        "'DoesNotExist' (got \"Is\")",
        "a bad operator is rejected",
    ),
    (
        required_selector(matchExpressions=[{"key": "a", "operator": "Exists", "values": ["x"]}]),
        'matchExpressions[0]: operator "Exists" takes no values',
        "values with Exists are rejected",
    ),
    (
        required_selector(matchExpressions=[{"key": "a", "operator": "In"}]),
        'matchExpressions[0]: operator "In" needs at least one entry in values',
        "In without values is rejected",
    ),
    (
        required_selector(matchLabels={"bad key!": "a"}),
        'labelSelector.matchLabels["bad key!"]: label key "bad key!" is not a valid',
        "a bad label key is rejected",
    ),
    (
        required_selector(matchLabels={"a": "b c"}),
        'labelSelector.matchLabels["a"]: label value "b c" is not valid',
        "a bad label value is rejected",
    ),
    (
        with_runtime(affinity={"runAfinity": {}}),
        'spec.affinity.runAfinity: unknown field; did you mean "runAffinity"?',
        "an affinity typo is caught",
    ),
    (
        with_runtime(status={"phase": "Done"}),
        "spec.status: unknown field",
        "status nested under spec is an unknown spec field",
    ),
    (
        {"apiVersion": "kruntimes.io/v1", "metadata": {"name": "r"}, "spec": {"runtime": "rt"}},
        "apiVersion: must be one of 'kruntimes.io/v1alpha1'",
        "a wrong apiVersion is rejected",
    ),
]


@pytest.mark.parametrize(
    ("body", "fragment"), [c[:2] for c in INVALID_RUNS], ids=[c[2] for c in INVALID_RUNS]
)
def test_invalid_runs_get_one_actionable_message(body: dict[str, Any], fragment: str) -> None:
    message = invalid_run_message(body)
    assert message.startswith("invalid Run: ")
    assert fragment in message


def test_the_message_for_a_bad_weight_is_exactly_the_documented_one() -> None:
    body = with_runtime(affinity=affinity(preferred=[{"weight": 0, "term": term()}]))
    assert invalid_run_message(body) == (
        "invalid Run: spec.affinity.runAffinity.preferred[0].weight: "
        "must be between 1 and 100 (got 0)"
    )


def test_problems_are_listed_in_path_order_whatever_the_input_order() -> None:
    requests = {"z.io/a": "0.5", "a.io/b": "x", "m.io/c": "-1"}
    forward = invalid_run_message(with_runtime(resources={"requests": requests}))
    backward = invalid_run_message(
        with_runtime(resources={"requests": dict(reversed(requests.items()))})
    )
    assert forward == backward
    assert forward.index('"a.io/b"') < forward.index('"m.io/c"') < forward.index('"z.io/a"')


def test_many_problems_are_cut_to_a_bounded_message() -> None:
    requests = {f"r{i}": "bad" for i in range(500)}
    message = invalid_run_message(with_runtime(resources={"requests": requests}))
    assert len(message) <= errors.MAX_MESSAGE_CHARS
    assert message.endswith("more")
    assert " … and " in message


def test_fields_may_be_given_by_python_name_too() -> None:
    parsed = models.Run.model_validate(
        {
            "api_version": models.API_VERSION,
            "metadata": {"name": "r", "resource_version": "7"},
            "spec": {"runtime": "rt"},
            "status": {"assignment": {"pod_name": "p", "pod_uid": "u"}},
        }
    )
    assert parsed.metadata.resource_version == "7"
    assert parsed.status is not None and parsed.status.assignment is not None
    assert parsed.status.assignment.pod_uid == "u"


def test_a_run_dumps_back_to_camel_case_wire_form() -> None:
    body = run(
        {"runtime": "rt", "mode": {"function": {"entryPoint": "f"}}},
        status={
            "phase": "Running",
            "assignment": {"podName": "p", "podUID": "u"},
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "lastTransitionTime": "2024-01-31T12:00:00Z",
                }
            ],
        },
    )
    wire = models.Run.model_validate(body).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert wire["apiVersion"] == "kruntimes.io/v1alpha1" and wire["kind"] == "Run"
    assert wire["spec"]["resources"] == {"requests": {"runs": 1}}
    assert wire["spec"]["mode"] == {"function": {"entryPoint": "f"}}
    assert wire["status"]["assignment"] == {"podName": "p", "podUID": "u"}
    assert wire["status"]["conditions"][0]["lastTransitionTime"] == "2024-01-31T12:00:00Z"
    assert wire["status"]["released"] is False


def test_metadata_defaults_to_the_default_namespace_and_empty_maps() -> None:
    meta = models.ObjectMeta.model_validate({"name": "r", "labels": None})
    assert (meta.namespace, meta.labels, meta.annotations) == ("default", {}, {})


def test_the_api_constants_are_the_documented_ones() -> None:
    assert models.API_VERSION == "kruntimes.io/v1alpha1"
    assert (models.GROUP, models.VERSION) == ("kruntimes.io", "v1alpha1")
    assert models.RUNTIME_LABEL == "kruntimes.io/runtime"
    assert models.CAPACITY_ANNOTATION_PREFIX == "kruntimes.io/capacity."
    assert models.HEARTBEAT_ANNOTATION == "kruntimes.io/runtimed-heartbeat"
    assert models.RUNTIME_POD_TOPOLOGY == "kruntimes.io/runtime-pod"


def runtime(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "rt"}, "spec": {"template": {"spec": {}}, **spec}}


CAPACITIES = [
    ({}, {}, "omitted capacity is empty, without an implicit runs entry"),
    ({"capacity": {"resources": None}}, {}, "null capacity resources are empty"),
    (
        {"capacity": {"resources": {"runs": "4", "example.com/gpu": 1, "b.io/x": "2k"}}},
        {"b.io/x": 2000, "example.com/gpu": 1, "runs": 4},
        "capacity quantities are parsed and sorted",
    ),
    (
        {"capacity": {"resources": {"runs": "0"}}},
        {"runs": 0},
        "zero capacity is kept because it admits nothing",
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"), [c[:2] for c in CAPACITIES], ids=[c[2] for c in CAPACITIES]
)
def test_runtime_capacity_is_parsed(spec: dict[str, Any], expected: dict[str, int]) -> None:
    parsed = models.Runtime.model_validate(runtime(spec))
    assert parsed.spec.capacity.resources == expected
    assert list(parsed.spec.capacity.resources) == sorted(expected)


INVALID_RUNTIMES = [
    (
        runtime({"capacity": {"resources": {"runs": "1.5"}}}),
        'spec.capacity.resources["runs"]: quantity "1.5" is not a non-negative whole number',
        "a fractional capacity is rejected",
    ),
    (
        runtime({"capacity": {"resources": {"bad name!": 1}}}),
        'spec.capacity.resources["bad name!"]: resource name "bad name!"',
        "a bad capacity resource name is rejected",
    ),
    (runtime({"replicas": -1}), "spec.replicas: must be at least 0 (got -1)", "negative replicas"),
    (
        {"metadata": {"name": "rt"}, "spec": {"replicas": 1}},
        "spec.template: is required",
        "a Runtime without a template is rejected",
    ),
    (
        runtime({"capacty": {}}),
        'spec.capacty: unknown field; did you mean "capacity"?',
        "a Runtime spec typo is caught",
    ),
]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [c[:2] for c in INVALID_RUNTIMES],
    ids=[c[2] for c in INVALID_RUNTIMES],
)
def test_invalid_runtimes_get_one_actionable_message(body: dict[str, Any], fragment: str) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        models.Runtime.model_validate(body)
    message = errors.describe_validation_error(caught.value, kind="Runtime")
    assert message.startswith("invalid Runtime: ")
    assert fragment in message


def test_runtime_keeps_its_pod_template_as_written() -> None:
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}
    parsed = models.Runtime.model_validate(runtime({"template": template, "replicas": 3}))
    assert parsed.spec.template == template and parsed.spec.replicas == 3


@pytest.mark.parametrize(
    "model", [models.Run, models.Runtime], ids=["Run schema generates", "Runtime schema generates"]
)
def test_json_schema_generation_works_and_describes_every_field(
    model: type[pydantic.BaseModel],
) -> None:
    schema = model.model_json_schema(by_alias=True)
    json.dumps(schema)
    for definition in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in definition.get("properties", {}).items():
            assert prop.get("description"), f"{definition['title']}.{name} lacks a description"


def test_the_run_schema_marks_quantities_as_int_or_string() -> None:
    schema = models.Run.model_json_schema(by_alias=True)
    requests = schema["$defs"]["ResourceRequirements"]["properties"]["requests"]
    assert requests["additionalProperties"]["x-kubernetes-int-or-string"] is True


# Field names of the Run API, so generated inputs reach deep into the models.
_FIELD_NAMES = [
    *("runtime", "resources", "requests", "limits", "runs", "mode", "task", "args"),
    *("function", "affinity", "runAffinity", "runAntiAffinity", "required", "preferred"),
    *("weight", "term", "labelSelector", "matchLabels", "matchExpressions", "key"),
    *("operator", "values", "topologyKey", "workspace"),
]

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(_FIELD_NAMES) | st.text(max_size=10),
            inner,
            max_size=4,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=300)
@given(_JSON, _JSON)
def test_describing_any_invalid_input_never_raises_and_stays_bounded(
    spec: Any, status: Any
) -> None:
    cases: list[tuple[str, type[pydantic.BaseModel], Any]] = [
        ("Run", models.Run, {"metadata": {"name": "r"}, "spec": spec, "status": status}),
        ("Runtime", models.Runtime, {"metadata": status, "spec": spec}),
        ("Unknown", models.Run, spec),
    ]
    for kind, model, body in cases:
        try:
            model.model_validate(body)
        except pydantic.ValidationError as exc:
            message = errors.describe_validation_error(exc, kind=kind)
            assert message.startswith(f"invalid {kind}: ")
            assert len(message) <= errors.MAX_MESSAGE_CHARS
