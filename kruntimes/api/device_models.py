"""The device parts of the API (SPEC §7): `Runtime.spec.devices`, `Run.spec.devices`,
`Run.status.devices` and the cluster-scoped `RuntimeDeviceClass`, as pydantic models.

They live apart from `models` because they are one concept (device claims) and
`models` is already near its size bound. The rules themselves are `kruntimes.devices`'
(one implementation for the API, the scheduler, runtimed and replay): every model here
runs the matching `kruntimes.devices` parser on the document as written, before its own
fields, so a user sees the same bounded, actionable message wherever the object is
judged. The typed fields exist for the CRD: a structural schema with every string,
list and map bounded, so the API server can check immutability (`self == oldSelf`)
within its CEL cost budget.

Inventories (`Runtime.spec.devices`) and `status.devices` are kept free-form in the CRD
(`x-kubernetes-preserve-unknown-fields`): their shapes (tagged attribute values, request
policies) are checked by `kruntimes.devices`, never by the server, and neither is
immutable. The server keeps them whole instead of pruning what it cannot describe.
"""

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, model_validator

from kruntimes.api import quantity
from kruntimes.api.fields import PRESERVE_UNKNOWN, invalid
from kruntimes.api.fields import Object as _Object
from kruntimes.api.fields import Spec as _Spec
from kruntimes.devices import cel_rules, claims, runtime_spec
from kruntimes.wire import DEVICES_ANNOTATION

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_MAX_QUALIFIED = 317  # a DNS subdomain (253), '/', a C identifier (63)
_MAX_QUANTITY = 64

DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=_DNS_LABEL)]
ClassName = Annotated[str, Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN)]
QualifiedName = Annotated[str, Field(min_length=1, max_length=_MAX_QUALIFIED)]
# As a ResourceList value (fields.Count's schema); its value is judged by `kruntimes.devices`.
Quantity = Annotated[str | int, WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}],
                                                "pattern": quantity.QUANTITY_PATTERN,
                                                "x-kubernetes-int-or-string": True})]
_BOUNDED_KEYS: dict[str, Any] = {"x-kubernetes-validations": [{
    "rule": f"self.all(k, size(k) <= {_MAX_QUALIFIED})",
    "message": f"capacity names are at most {_MAX_QUALIFIED} characters"}]}


def _rejected(error: Exception) -> Exception:
    return invalid("invalid_devices", str(error))


class CelExpression(_Spec):
    """One CEL expression over the `device` variable (SPEC §7.4)."""

    expression: str = Field(max_length=cel_rules.MAX_BYTES,
                            description=f"A CEL boolean over `device`, at most {cel_rules.MAX_BYTES} bytes.")


class DeviceSelector(_Spec):
    """A selector a device must satisfy."""

    cel: CelExpression = Field(description="The CEL expression.")


class CapacityRequests(_Spec):
    """Consumable capacity a request takes of each device."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict, max_length=32, json_schema_extra=_BOUNDED_KEYS,
        description="Capacity name to quantity (e.g. gpu.example.com/memory: 20Gi).")


class _Alternative(_Spec):
    device_class_name: ClassName = Field(description="The RuntimeDeviceClass whose selectors a device must satisfy.")
    selectors: list[DeviceSelector] | None = Field(
        default=None, max_length=claims.MAX_SELECTORS,
        description=f"Further selectors, all must hold; at most {claims.MAX_SELECTORS}.")
    allocation_mode: Literal["ExactCount", "All"] | None = Field(
        default=None, description="ExactCount (default) or All (every matching device, at least one).")
    count: int | None = Field(default=None, ge=1, le=claims.MAX_COUNT,
                              description=f"ExactCount: devices wanted, 1 to {claims.MAX_COUNT} (default 1).")
    capacity: CapacityRequests | None = Field(default=None, description="Consumable capacity asked of each device.")


class ExactDeviceRequest(_Alternative):
    """The one way a request is satisfied."""


class DeviceSubRequest(_Alternative):
    """One `firstAvailable` alternative, tried in order."""

    name: DnsLabel = Field(description="Alternative name, unique in its request; results say request/alternative.")


class DeviceRequest(_Spec):
    """One request: `exactly` or an ordered `firstAvailable` list."""

    name: DnsLabel = Field(description="Request name, unique in the Run; KRUNTIMES_DEVICES is keyed by it.")
    exactly: ExactDeviceRequest | None = Field(default=None, description="The devices wanted.")
    first_available: list[DeviceSubRequest] | None = Field(
        default=None, min_length=1, max_length=claims.MAX_ALTERNATIVES,
        description=f"1 to {claims.MAX_ALTERNATIVES} alternatives, the first that can be allocated wins.")


class DeviceConstraint(_Spec):
    """matchAttribute or distinctAttribute across the named requests (empty: all)."""

    requests: list[Annotated[str, Field(max_length=127)]] | None = Field(
        default=None, max_length=claims.MAX_REQUESTS * (claims.MAX_ALTERNATIVES + 1),
        description='Requests it covers: "req" or "req/alternative"; empty means all.')
    match_attribute: QualifiedName | None = Field(default=None, description="Every device has this same value.")
    distinct_attribute: QualifiedName | None = Field(default=None, description="No two devices share a value.")


class DeviceClaimSpec(_Spec):
    """`Run.spec.devices` (SPEC §7.3): what devices of its Runtime Pod the Run needs; immutable."""

    requests: list[DeviceRequest] = Field(
        min_length=1, max_length=claims.MAX_REQUESTS, description=f"1 to {claims.MAX_REQUESTS} requests, in order.")
    constraints: list[DeviceConstraint] | None = Field(
        default=None, max_length=claims.MAX_CONSTRAINTS, description=f"At most {claims.MAX_CONSTRAINTS}.")

    @model_validator(mode="before")
    @classmethod
    def _claim_rules(cls, data: Any) -> Any:
        try:
            claims.parse_claim(data)
        except claims.InvalidClaim as exc:
            raise _rejected(exc) from None
        return data


def check_runtime_devices(value: dict[str, Any]) -> dict[str, Any]:
    """`Runtime.spec.devices` as written, if `kruntimes.devices.runtime_spec` accepts it (SPEC §7.1)."""
    try:
        runtime_spec.parse(value)
    except runtime_spec.InvalidRuntimeDevices as exc:
        raise _rejected(exc) from None
    return value


RUNTIME_DEVICES_DESCRIPTION = (
    "Devices of EACH Runtime Pod (SPEC §7.1): driver, devices (name, attributes, capacity, "
    "allowMultipleAllocations, consumesCounters), sharedCounters, env (variable → attribute) and "
    "publisher: Controller (default: projected onto every pod as kruntimes.io/devices) or Runtimed "
    "(runtimed publishes the output of discover).")
RUNTIME_DEVICES_SCHEMA: dict[str, Any] = {**PRESERVE_UNKNOWN, "type": "object"}


class DeviceClassSpec(_Spec):
    """What every device of the class satisfies."""

    selectors: list[DeviceSelector] = Field(
        default_factory=list, max_length=claims.MAX_CLASS_SELECTORS,
        description=f"At most {claims.MAX_CLASS_SELECTORS} selectors, all must hold.")


class ClusterObjectMeta(_Object):
    """Metadata of a cluster-scoped object: no namespace."""

    name: str = Field(description="Object name.")
    uid: str | None = Field(default=None, description="Server-assigned unique id.")
    resource_version: str | None = Field(default=None, description="Opaque version for optimistic concurrency.")
    generation: int | None = Field(default=None, description="Spec generation.")


class RuntimeDeviceClass(_Object):
    """A cluster-scoped class of devices Runs name in `deviceClassName` (SPEC §7.2)."""

    api_version: Literal["kruntimes.io/v1alpha1"] = Field(
        default="kruntimes.io/v1alpha1", description="Always kruntimes.io/v1alpha1.")
    kind: Literal["RuntimeDeviceClass"] = Field(default="RuntimeDeviceClass", description="Always RuntimeDeviceClass.")
    metadata: ClusterObjectMeta = Field(description="Standard object metadata.")
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec, description="The class's selectors.")

    @model_validator(mode="before")
    @classmethod
    def _class_rules(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
            try:
                claims.parse_class(data["metadata"].get("name"), data["metadata"].get("generation"),
                                   data.get("spec", {}))
            except claims.InvalidDeviceClass as exc:
                raise _rejected(exc) from None
        return data
