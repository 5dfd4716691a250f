"""Capacity annotations (SPEC §2.1, amended 2026-12-01): both forms read, one form written."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.api import capacity
from kruntimes.api.fields import CAPACITY_ANNOTATION as JSON_KEY

KEY = "kruntimes.io/capacity."
INT64_MAX = 2**63 - 1


def test_the_json_form_is_read() -> None:
    reading = capacity.read({JSON_KEY: '{"example.com/gpu":"1","runs":"4"}'})
    assert reading == capacity.CapacityReading({"example.com/gpu": 1, "runs": 4})


def test_the_per_resource_keys_of_seed_000_are_still_read() -> None:
    assert capacity.read({KEY + "runs": "4", KEY + "gpu": "1k"}).resources == {"gpu": 1000, "runs": 4}


def test_a_pods_capacity_is_the_union_of_both_forms() -> None:
    reading = capacity.read({JSON_KEY: '{"example.com/gpu":"2"}', KEY + "runs": "3", "other": "x"})
    assert reading.resources == {"example.com/gpu": 2, "runs": 3} and reading.problem is None


def test_one_resource_in_both_forms_with_the_same_value_is_not_a_conflict() -> None:
    reading = capacity.read({JSON_KEY: '{"lic":"1k","runs":"4"}', KEY + "lic": "1000", KEY + "runs": 4})
    assert reading.problem is None and reading.resources == {"lic": 1000, "runs": 4}


def test_no_capacity_annotation_declares_nothing() -> None:
    assert capacity.read({"unrelated": "1"}) == capacity.CapacityReading({})


MALFORMED: list[tuple[str, dict[Any, Any], str]] = [
    ("a key whose resource part is not a qualified name (issue 12 defect 1)", {KEY + "_x": "1"}, capacity.BAD_NAME),
    ("a per-resource key with an empty resource", {KEY: "1"}, capacity.BAD_NAME),
    ("a per-resource key with two slashes", {KEY + "a.io/b/c": "1"}, capacity.BAD_NAME),
    ("a JSON key that is not a qualified name", {JSON_KEY: '{"bad name!":"1"}'}, capacity.BAD_NAME),
    ("a JSON value that is not JSON", {JSON_KEY: "runs=4"}, capacity.NOT_AN_OBJECT),
    ("an empty JSON value", {JSON_KEY: ""}, capacity.NOT_AN_OBJECT),
    ("a JSON array", {JSON_KEY: '["runs"]'}, capacity.NOT_AN_OBJECT),
    ("a JSON string", {JSON_KEY: '"4"'}, capacity.NOT_AN_OBJECT),
    ("a JSON number as a quantity", {JSON_KEY: '{"runs":4}'}, capacity.NOT_AN_OBJECT),
    ("a nested JSON object", {JSON_KEY: '{"runs":{"n":"4"}}'}, capacity.NOT_AN_OBJECT),
    ("a mapping instead of a JSON string (offline YAML)", {JSON_KEY: {"runs": "4"}}, capacity.NOT_AN_OBJECT),
    ("JSON nested a hundred thousand deep", {JSON_KEY: "[" * 100_000}, capacity.NOT_AN_OBJECT),
    ("a JSON integer of 5,000 digits", {JSON_KEY: '{"runs":' + "9" * 5000 + "}"}, capacity.NOT_AN_OBJECT),
    ("a fractional quantity", {KEY + "runs": "500m"}, capacity.BAD_QUANTITY),
    ("a negative quantity in JSON", {JSON_KEY: '{"runs":"-1"}'}, capacity.BAD_QUANTITY),
    ("a quantity above 2^63-1 in JSON", {JSON_KEY: json.dumps({"runs": str(INT64_MAX + 1)})}, capacity.BAD_QUANTITY),
    ("a quantity above 2^63-1 in a key", {KEY + "runs": str(INT64_MAX + 1)}, capacity.BAD_QUANTITY),
    ("a boolean quantity", {KEY + "runs": True}, capacity.BAD_QUANTITY),
    ("one resource in both forms with different values", {JSON_KEY: '{"runs":"4"}', KEY + "runs": "5"},
     capacity.CONFLICT),
    ("one resource twice in the JSON object with different values", {JSON_KEY: '{"runs":"4","runs":"5"}'},
     capacity.CONFLICT),
    ("more resources than the bound", {JSON_KEY: json.dumps({f"r{i}": "1" for i in range(33)})}, capacity.TOO_MANY),
]


@pytest.mark.parametrize("annotations, problem", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_capacity_is_one_bounded_reason(annotations: dict[Any, Any], problem: str) -> None:
    reading = capacity.read(annotations)
    assert reading.problem == problem and reading.detail
    with pytest.raises(capacity.InvalidCapacity) as refused:
        capacity.parse(annotations)
    assert refused.value.reason == problem


def test_the_same_annotations_always_give_the_same_first_problem() -> None:
    annotations = {KEY + "z": "x", KEY + "_a": "1", JSON_KEY: "[]"}
    assert capacity.read(annotations) == capacity.read(dict(reversed(annotations.items())))
    assert capacity.read(annotations).problem == capacity.NOT_AN_OBJECT


def test_twice_the_same_value_in_the_json_object_is_harmless() -> None:
    assert capacity.read({JSON_KEY: '{"runs":"4","runs":"4"}'}).resources == {"runs": 4}


def test_render_writes_compact_json_with_sorted_keys() -> None:
    assert capacity.render({"runs": 4, "example.com/gpu": 1}) == '{"example.com/gpu":"1","runs":"4"}'
    assert capacity.annotations({"runs": 4}) == {JSON_KEY: '{"runs":"4"}'}


@pytest.mark.parametrize("resources", [{"bad name!": 1}, {"runs": -1}, {"runs": True}, {"runs": INT64_MAX + 1},
                                       {f"r{i}": 1 for i in range(33)}],
                         ids=["a bad resource name", "a negative count", "a boolean", "a count above 2^63-1",
                              "more resources than the bound"])
def test_render_refuses_what_a_reader_would_refuse(resources: dict[str, Any]) -> None:
    with pytest.raises(capacity.InvalidCapacity):
        capacity.render(resources)


_NAMES = st.from_regex(r"([a-z]{1,8}\.[a-z]{2,4}/)?[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)


@given(st.dictionaries(_NAMES, st.integers(0, INT64_MAX), max_size=32))
def test_what_render_writes_read_gives_back_exactly(resources: dict[str, int]) -> None:
    written = capacity.render(resources)
    assert capacity.read({JSON_KEY: written}) == capacity.CapacityReading(dict(sorted(resources.items())))
    assert capacity.render(dict(reversed(resources.items()))) == written


_VALUES = st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none(), st.floats(),
                    st.lists(st.text(max_size=3), max_size=2),
                    st.dictionaries(st.text(max_size=3), st.text(max_size=3)))
_KEYS = st.one_of(st.just(JSON_KEY), st.text(max_size=12).map(lambda t: KEY + t), st.text(max_size=12), st.integers())
_JSON_TEXT = st.dictionaries(st.text(max_size=12), st.one_of(st.text(max_size=6), st.integers()), max_size=4).map(
    json.dumps)


@given(st.dictionaries(_KEYS, st.one_of(_VALUES, _JSON_TEXT), max_size=6))
def test_any_annotations_are_read_without_raising(annotations: dict[Any, Any]) -> None:
    reading = capacity.read(annotations)
    assert reading.problem is None or reading.problem in capacity.PROBLEMS
    assert all(isinstance(k, str) and type(v) is int and 0 <= v <= INT64_MAX for k, v in reading.resources.items())


def test_no_example_doc_or_demo_writes_a_capacity_key_a_real_api_server_refuses() -> None:
    # `kruntimes.io/capacity.example.com/gpu` holds two '/': the JSON form is used instead.
    root = Path(__file__).resolve().parents[2]
    files = [root / "README.md", root / "kruntimes" / "demo.py", root / "kruntimes" / "demo_workload.py",
             *(p for d in ("docs", "deploy") for p in (root / d).rglob("*") if p.suffix in (".md", ".yaml", ".json"))]
    refused = re.compile(r"kruntimes\.io/capacity\.[A-Za-z0-9._-]*/")
    assert [str(p.relative_to(root)) for p in files if refused.search(p.read_text())] == []


def test_the_demo_pods_carry_the_json_capacity_annotation() -> None:
    from kruntimes import demo_workload
    pods = demo_workload.generate().pods
    gpu = next(p for p in pods if "example.com/gpu" in p["metadata"]["annotations"].get(JSON_KEY, ""))
    assert json.loads(gpu["metadata"]["annotations"][JSON_KEY]) == {"example.com/gpu": "2", "runs": "8"}
    assert not any(k.startswith(KEY) for p in pods for k in p["metadata"]["annotations"])
