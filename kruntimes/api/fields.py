"""The building blocks of the API models: wire constants, field types and base classes.

Every rule a single field obeys lives here once - whole-number quantities,
qualified resource names, label keys and values, affinity weights, the one
topology key - as an annotated type that carries both its validator and the JSON
schema the CRD needs. `models` composes them into Run and Runtime.
"""

from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainValidator, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from kruntimes.api import names, quantity

GROUP = "kruntimes.io"
VERSION = "v1alpha1"
# Final, so that type checkers see the literal the `apiVersion` Literal fields expect.
API_VERSION: Final = "kruntimes.io/v1alpha1"
RUNTIME_LABEL = "kruntimes.io/runtime"
CAPACITY_ANNOTATION_PREFIX = "kruntimes.io/capacity."
HEARTBEAT_ANNOTATION = "kruntimes.io/runtimed-heartbeat"
RUNTIME_POD_TOPOLOGY = "kruntimes.io/runtime-pod"
# The built-in resource every Run requests (SPEC §2.2) and every pod declares (§2.3).
RUNS_RESOURCE = "runs"

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
ResourceName = Annotated[str, AfterValidator(_check_resource_name)]
LabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]


def _none_as_empty(value: object) -> object:
    """Treat an explicit ``null`` map as an omitted one, as Kubernetes clients do."""
    return {} if value is None else value


# A map where ``null`` means the same as omitted.
NullAsEmpty = BeforeValidator(_none_as_empty)
Weight = Annotated[
    int,
    AfterValidator(_check_weight),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 100}),
]


class Object(BaseModel):
    """camelCase on the wire; unknown fields ignored (metadata, status, top level)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Spec(Object):
    """A user-written part of the API: unknown fields are errors, so typos surface."""

    model_config = ConfigDict(extra="forbid")
