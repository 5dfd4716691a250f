"""The bounds and strict types of a Run (issue 12 defects 5 and 9, docs/api-bounds.md).

The largest Run the models accept still makes a journal record far below the
journal's limit, the bounds the docs promise are the ones the code enforces, and
loosely typed values get a message that says what is wrong with them.
"""

import json
import re
from pathlib import Path
from typing import Any

import pydantic
import pytest

from kruntimes.api import crds, errors, fields, ingest, models
from kruntimes.journal import codec, records
from kruntimes.scheduler import validation as bounds

ROOT = Path(__file__).resolve().parents[2]
TOPO = models.RUNTIME_POD_TOPOLOGY


def _key(i: int) -> str:
    # A qualified name of the full 317 characters: a 253-character DNS prefix, "/", 63 characters.
    prefix = (".".join(["p" * 62] * 4) + f".{i:02d}")[:253]
    return f"{prefix}/{'n' * 61}{i:02d}"


def _largest_selector() -> dict[str, Any]:
    return {"matchLabels": {_key(i): "v" * 63 for i in range(bounds.MAX_MATCH_LABELS)},
            "matchExpressions": [{"key": _key(i), "operator": "In",
                                  "values": [f"{j:02d}" + "v" * 61 for j in range(bounds.MAX_VALUES)]}
                                 for i in range(bounds.MAX_EXPRESSIONS)]}


def _largest_run() -> dict[str, Any]:
    term = {"labelSelector": _largest_selector(), "topologyKey": TOPO}
    rules = {"required": [term] * bounds.MAX_TERMS,
             "preferred": [{"weight": 100, "term": term}] * bounds.MAX_TERMS}
    return {"metadata": {"name": "largest", "namespace": "ns", "uid": "u"},
            "spec": {"runtime": "r" * bounds.MAX_RUNTIME_NAME, "workspace": "w" * bounds.MAX_WORKSPACE_NAME,
                     "resources": {"requests": {_key(i): str(bounds.MAX_QUANTITY)
                                                for i in range(bounds.MAX_RESOURCES)}},
                     "mode": {"task": {"args": ["x" * fields.MAX_ARG_CHARS] * fields.MAX_ARGS}},
                     "affinity": {"runAffinity": rules, "runAntiAffinity": rules}}}


def test_the_largest_valid_run_is_accepted_and_makes_a_record_under_one_mebibyte() -> None:
    info = ingest.run_info(_largest_run())
    assert info.problems == () and bounds.validate_run(info) is None
    size = len(json.dumps(codec.run_to(info)).encode())
    assert 500_000 < size < 1024 * 1024 < records.DEFAULT_MAX_PAYLOAD_BYTES


def test_the_documented_bounds_are_the_enforced_ones() -> None:
    text = (ROOT / "docs" / "api-bounds.md").read_text()
    documented = {name: int(value) for name, value in re.findall(r"`(MAX_[A-Z_]+)` \| (\d+)", text)}
    enforced = {name: getattr(bounds, name, None) or getattr(fields, name) for name in documented}
    assert documented == enforced
    assert {"MAX_TERMS", "MAX_EXPRESSIONS", "MAX_VALUES", "MAX_MATCH_LABELS", "MAX_RESOURCES",
            "MAX_RUNTIME_NAME", "MAX_WORKSPACE_NAME", "MAX_ARGS", "MAX_ARG_CHARS"} <= set(documented)


def _weighted(weight: Any) -> dict[str, Any]:
    return {"runtime": "rt", "affinity": {"runAffinity": {"preferred": [
        {"weight": weight, "term": {"topologyKey": TOPO}}]}}}


@pytest.mark.parametrize("spec, message", [
    (_weighted("10"), "spec.affinity.runAffinity.preferred[0].weight: must be a whole number written without "
                      'quotes, not a string (got "10")'),
    (_weighted(True), "spec.affinity.runAffinity.preferred[0].weight: must be a whole number written without "
                      "quotes, not a boolean (got true)"),
    (_weighted(10.0), "spec.affinity.runAffinity.preferred[0].weight: must be a whole number (got 10.0)"),
    ({"runtime": "rt", "resources": {"requests": {"runs": str(2**63)}}},
     'spec.resources.requests["runs"]: quantity "9223372036854775808" is too large (at most 9223372036854775807)'),
], ids=["a weight written as a string is malformed", "a boolean weight is malformed",
        "a weight written as a float is malformed", "a quantity above 2^63-1 is malformed"])
def test_loosely_typed_values_are_malformed_with_a_message_saying_why(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError) as refused:
        models.Run.model_validate({"metadata": {"name": "r"}, "spec": spec})
    assert errors.describe_validation_error(refused.value) == f"invalid Run: {message}"


def test_a_runtime_whose_name_cannot_be_its_pods_label_value_is_refused() -> None:
    body = {"metadata": {"name": "r" * 64}, "spec": {"template": {}}}
    with pytest.raises(pydantic.ValidationError) as refused:
        models.Runtime.model_validate(body)
    assert "a Runtime name is at most 63 characters" in errors.describe_validation_error(refused.value, kind="Runtime")
    models.Runtime.model_validate({**body, "metadata": {"name": "r" * 63}})
    [rule] = crds.openapi_schema(models.Runtime)["x-kubernetes-validations"]
    assert rule["rule"] == "size(self.metadata.name) <= 63"
