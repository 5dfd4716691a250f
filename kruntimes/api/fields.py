"""The building blocks of the API models: field types and base classes (wire names from `kruntimes.wire`).

Every rule a single field obeys lives here once - whole-number quantities,
qualified resource names, label keys and values, affinity weights, the one
topology key, Runtime and workspace names - as an annotated type that carries both
its validator and the JSON schema the CRD needs, bounds included (their values come
from `scheduler.validation`, the one place PreFilter and the CRD share; issue 12).
`models` composes them into Run and Runtime.
"""

import re
from typing import Annotated, Any

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, Strict,
                      WithJsonSchema, model_validator)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from kruntimes.api import names, quantity
from kruntimes.scheduler import validation as bounds
# The wire names, defined once on the ground floor and re-exported for the models' callers.
from kruntimes.wire import (  # noqa: F401
    API_VERSION, CAPACITY_ANNOTATION, CAPACITY_ANNOTATION_PREFIX, GROUP, HEARTBEAT_ANNOTATION, RUNS_RESOURCE,
    RUNTIME_LABEL, RUNTIME_POD_TOPOLOGY, VERSION)

# Schema of a free-form mapping the CRD must keep as written (pod template, function).
PRESERVE_UNKNOWN: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


def invalid(error_type: str, message: str) -> PydanticCustomError:
    """A validation error whose message is ``message`` verbatim.

    The message travels in the context, not the template, so braces in user input
    (a label value ``{x}``) are never taken for template placeholders.
    """
    return PydanticCustomError(error_type, "{detail}", {"detail": message})


def _check_count(value: object) -> int:
    try:
        return quantity.parse_count(value)
    except quantity.InvalidQuantity as exc:
        raise invalid("invalid_quantity", str(exc)) from exc


def _check_resource_name(name: str) -> str:
    problem = names.qualified_name_error(name)
    if problem is not None:
        raise invalid("invalid_resource_name", problem)
    return name


def _check_label_key(key: str) -> str:
    problem = names.qualified_name_error(
        key, what="label key", example='"app" or "example.com/team"'
    )
    if problem is not None:
        raise invalid("invalid_label_key", problem)
    return key


def _check_label_value(value: str) -> str:
    problem = names.label_value_error(value)
    if problem is not None:
        raise invalid("invalid_label_value", problem)
    return value


def _check_object_name(name: str, *, field: str, bound: int) -> str:
    # A DNS-1123 subdomain of at most `bound` characters; the length is checked first by
    # the schema (max_length), so the pattern only ever sees a short string.
    if not _DNS1123_SUBDOMAIN.fullmatch(name):
        shown = quantity.describe_input(name)
        raise invalid(f"invalid_{field}_name",
                      f"{shown} is not a valid {field} name: use at most {bound} lowercase letters, "
                      "digits, '-' or '.', starting and ending with a letter or digit (e.g. \"python\")")
    return name


def check_runtime_name(name: str) -> str:
    """``name`` if it can name a Runtime (its pods' label value too), else a validation error."""
    if len(name) > bounds.MAX_RUNTIME_NAME:
        raise invalid("runtime_name_too_long", f"a Runtime name is at most {bounds.MAX_RUNTIME_NAME} characters")
    return _check_object_name(name, field="Runtime", bound=bounds.MAX_RUNTIME_NAME)


def _check_workspace_name(name: str) -> str:
    return _check_object_name(name, field="workspace", bound=bounds.MAX_WORKSPACE_NAME)


def _check_weight(weight: int) -> int:
    if not 1 <= weight <= 100:
        raise invalid("invalid_weight", f"must be between 1 and 100 (got {weight})")
    return weight


def check_topology_key(key: str) -> str:
    if key != RUNTIME_POD_TOPOLOGY:
        shown = quantity.describe_input(key)
        raise invalid(
            "unsupported_topology_key",
            f"topologyKey {shown} is not supported: the only topologyKey is "
            f'"{RUNTIME_POD_TOPOLOGY}" (same Runtime Pod)',
        )
    return key


# A quantity on the wire (int or string, like a Kubernetes ResourceList entry), an int
# in Python. The schema is what controller-gen emits for resource.Quantity.
Count = Annotated[
    int,
    PlainValidator(_check_count),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": quantity.QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
# The qualified-name and label-value grammars as JSON-schema patterns (apimachinery's
# IsQualifiedName / IsValidLabelValue; the part lengths are checked by the validators).
_DNS1123_SUBDOMAIN_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_PATTERN, re.ASCII)
_NAME_PART_PATTERN = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_PATTERN = f"^({_DNS1123_SUBDOMAIN_PATTERN}/)?{_NAME_PART_PATTERN}$"
LABEL_VALUE_PATTERN = f"^({_NAME_PART_PATTERN})?$"

# Map keys carry no JSON schema (a structural CRD has no propertyNames); the validators
# check their grammar and part lengths, and KEYS_ARE_QUALIFIED_NAMES bounds them in the CRD.
ResourceName = Annotated[str, AfterValidator(_check_resource_name)]
MapLabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelKey = Annotated[
    str,
    Field(max_length=bounds.MAX_QUALIFIED_NAME, json_schema_extra={"pattern": QUALIFIED_NAME_PATTERN}),
    AfterValidator(_check_label_key),
]
LabelValue = Annotated[
    str,
    Field(max_length=bounds.MAX_NAME_PART, json_schema_extra={"pattern": LABEL_VALUE_PATTERN}),
    AfterValidator(_check_label_value),
]
# A Runtime's name is also its pods' `kruntimes.io/runtime` label value: a DNS subdomain
# that fits a label value. A workspace name follows the same rule.
RuntimeName = Annotated[
    str,
    Field(min_length=1, max_length=bounds.MAX_RUNTIME_NAME,
          json_schema_extra={"pattern": f"^{_DNS1123_SUBDOMAIN_PATTERN}$"}),
    AfterValidator(check_runtime_name),
]
WorkspaceName = Annotated[
    str,
    Field(min_length=1, max_length=bounds.MAX_WORKSPACE_NAME,
          json_schema_extra={"pattern": f"^{_DNS1123_SUBDOMAIN_PATTERN}$"}),
    AfterValidator(_check_workspace_name),
]
# Bounds of a task's command line: generous for a real command, small enough that the
# stored Run stays far below etcd's 1.5 MiB object limit. Longer programs belong in the image.
MAX_ARGS = 256
MAX_ARG_CHARS = 4096
Arg = Annotated[str, Field(max_length=MAX_ARG_CHARS)]

# Map keys cannot carry a schema of their own in a structural CRD: a CEL rule bounds them.
KEYS_ARE_QUALIFIED_NAMES: dict[str, Any] = {"x-kubernetes-validations": [{
    "rule": f"self.all(k, size(k) <= {bounds.MAX_QUALIFIED_NAME})",
    "message": f"keys must be qualified names of at most {bounds.MAX_QUALIFIED_NAME} characters",
}]}


def _none_as_empty(value: object) -> object:
    """Treat an explicit ``null`` map as an omitted one, as Kubernetes clients do."""
    return {} if value is None else value


# A map where ``null`` means the same as omitted.
NullAsEmpty = BeforeValidator(_none_as_empty)
# Strict, as the CRD's `type: integer` (SPEC §2.2): "10" and true are not weights.
Weight = Annotated[
    int,
    Strict(),
    AfterValidator(_check_weight),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 100}),
]


class Object(BaseModel):
    """camelCase on the wire; unknown fields ignored (metadata, status, top level)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Spec(Object):
    """A user-written part of the API: unknown fields are errors, so typos surface."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_is_omitted(cls, value: Any) -> Any:
        # The API server prunes a null of a non-nullable field before validation (CRD
        # structural schemas), so `required: null` in a file means what it means in a
        # cluster: omitted.
        if isinstance(value, dict) and None in value.values():
            return {k: v for k, v in value.items() if v is not None}
        return value
