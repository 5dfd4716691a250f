"""The `kruntimes.io/devices` annotation: parse, bound and digest a pod's device inventory (SPEC §7.1).

The controller writes the annotation from `Runtime.spec.devices`, runtimed publishes it
from `discover`, `simulate` reads it from files and replay reads it from the journal;
all four meet here, so one text always means one `Inventory` and one digest. The text
is canonical JSON (keys sorted, device order kept) and `inventoryDigest` is the SHA-256
of the canonical text, whatever spacing or key order a publisher used.

Anything malformed (bad JSON, a bound exceeded, a duplicate name, an undeclared counter,
a bad quantity, version or attribute) raises `InvalidInventory`; SPEC §7.1 makes the
pod unusable for Runs WITH device requests only (reason `invalid device inventory`).
Quantities are parsed by `kruntimes.devices.quantities`, so replay needs no Kubernetes client.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from kruntimes.devices import inventory, quantities, semver

MAX_TEXT_BYTES = 64 * 1024
MAX_DEVICES = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
MAX_COUNTER_USES = 2
MAX_STRING = 64
MAX_VERSION = 64
MAX_VALID_VALUES = 10
INT64 = (-(2**63), 2**63 - 1)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_TOP_KEYS = {"driver", "sharedCounters", "devices"}
_DEVICE_KEYS = {"name", "driver", "attributes", "capacity", "allowMultipleAllocations", "consumesCounters"}
_TAGS = ("string", "int", "bool", "version")


class InvalidInventory(ValueError):
    """A device inventory that breaks SPEC §7.1; the message says where (never unbounded)."""


def canonical_text(document: object) -> str:
    """Canonical JSON: keys sorted, lists (device order) kept, no spaces, UTF-8 kept."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_annotation(text: object) -> inventory.Inventory:
    """The inventory an annotation value declares, else InvalidInventory."""
    if not isinstance(text, str):
        raise InvalidInventory("the annotation value must be a string of JSON")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise InvalidInventory(f"the annotation is larger than {MAX_TEXT_BYTES:,} bytes")
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidInventory(f"the annotation is not JSON: {str(exc)[:120]}") from None
    return parse_document(document)


def parse_document(document: object) -> inventory.Inventory:
    """The inventory of an already decoded annotation (or `Runtime.spec.devices` part), else InvalidInventory."""
    top = _object(document, "the inventory", _TOP_KEYS)
    driver = _driver(top.get("driver"), "driver")
    counter_sets = _counter_sets(top.get("sharedCounters", []))
    raw_devices = top.get("devices", [])
    if not isinstance(raw_devices, list):
        raise InvalidInventory("devices must be a list")
    if len(raw_devices) > MAX_DEVICES:
        raise InvalidInventory(f"{len(raw_devices)} devices; at most {MAX_DEVICES} are allowed")
    devices = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_devices):
        device = _device(raw, i, driver, counter_sets)
        if device.name in seen:
            raise InvalidInventory(f"devices[{i}]: the name {device.name!r} is used twice")
        seen.add(device.name)
        devices.append(device)
    text = canonical_text(document)
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise InvalidInventory(f"the canonical annotation is larger than {MAX_TEXT_BYTES:,} bytes")
    sets = tuple((name, tuple(sorted(values.items()))) for name, values in sorted(counter_sets.items()))
    return inventory.Inventory(driver, tuple(devices), sets, hashlib.sha256(text.encode()).hexdigest(), text)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key[:72]!r} appears twice in one object")
        result[key] = value
    return result


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _object(value: object, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInventory(f"{where} must be a JSON object")
    unknown = sorted(k for k in value if k not in allowed)
    if unknown:
        raise InvalidInventory(f"{where} has an unknown field {unknown[0][:72]!r} (allowed: {', '.join(sorted(allowed))})")
    return value


def _driver(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise InvalidInventory(f"{where} must be a DNS subdomain of at most 63 characters, e.g. gpu.example.com")
    return value


def _label(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise InvalidInventory(f"{where} must be a DNS label (lowercase letters, digits and '-', at most 63)")
    return value


def qualified_name_error(name: object) -> str | None:
    """Why ``name`` is not an attribute/capacity name (upstream `QualifiedName`), or None."""
    if not isinstance(name, str):
        return "must be a string"
    domain, slash, ident = name.rpartition("/")
    if slash and (len(domain) > 63 or not _DNS_SUBDOMAIN.fullmatch(domain)):
        return "has a domain that is not a DNS subdomain of at most 63 characters"
    if len(ident) > 32 or not _C_IDENTIFIER.fullmatch(ident):
        return "must end in a C identifier of at most 32 characters (e.g. gpu.example.com/memory)"
    return None


def _quantity(value: object, where: str) -> int:
    # A string only (as the capacity annotation, §2.1): one inventory, one canonical text.
    if not isinstance(value, str):
        raise InvalidInventory(f"{where} must be a quantity string such as \"40Gi\"")
    try:
        return quantities.parse_count(value)
    except quantities.InvalidCount as exc:
        raise InvalidInventory(f"{where}: {exc}") from None


def _counter_map(value: object, where: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise InvalidInventory(f"{where} must be an object of counter name to quantity")
    if len(value) > MAX_COUNTERS:
        raise InvalidInventory(f"{where} has {len(value)} counters; at most {MAX_COUNTERS} are allowed")
    return {_label(name, f"{where} name"): _quantity(qty, f"{where}[{name}]") for name, qty in value.items()}


def _counter_sets(value: object) -> dict[str, dict[str, int]]:
    if not isinstance(value, list):
        raise InvalidInventory("sharedCounters must be a list")
    if len(value) > MAX_COUNTER_SETS:
        raise InvalidInventory(f"{len(value)} counter sets; at most {MAX_COUNTER_SETS} are allowed")
    sets: dict[str, dict[str, int]] = {}
    for i, raw in enumerate(value):
        entry = _object(raw, f"sharedCounters[{i}]", {"name", "counters"})
        name = _label(entry.get("name"), f"sharedCounters[{i}].name")
        if name in sets:
            raise InvalidInventory(f"sharedCounters[{i}]: the counter set {name!r} is declared twice")
        sets[name] = _counter_map(entry.get("counters", {}), f"sharedCounters[{i}].counters")
    return sets


def _attribute(value: object, where: str) -> inventory.AttributeValue:
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in _TAGS:
        raise InvalidInventory(f"{where} must be one of {{\"string\"|\"int\"|\"bool\"|\"version\": value}}")
    (tag, raw), = value.items()
    if tag == "string":
        if not isinstance(raw, str) or len(raw) > MAX_STRING:
            raise InvalidInventory(f"{where}: a string attribute is at most {MAX_STRING} characters")
        return raw
    if tag == "int":
        if isinstance(raw, bool) or not isinstance(raw, int) or not INT64[0] <= raw <= INT64[1]:
            raise InvalidInventory(f"{where}: an int attribute is a JSON integer within int64")
        return raw
    if tag == "bool":
        if not isinstance(raw, bool):
            raise InvalidInventory(f"{where}: a bool attribute is true or false")
        return raw
    if not isinstance(raw, str) or len(raw) > MAX_VERSION:
        raise InvalidInventory(f"{where}: a version attribute is a semver string of at most {MAX_VERSION} characters")
    try:
        return semver.parse(raw)
    except semver.InvalidVersion as exc:
        raise InvalidInventory(f"{where}: {exc}") from None


def _policy(value: object, where: str, capacity: int) -> inventory.RequestPolicy:
    entry = _object(value, where, {"default", "validValues", "validRange"})
    if "validValues" in entry and "validRange" in entry:
        raise InvalidInventory(f"{where}: validValues and validRange are alternatives; give one")
    default = _quantity(entry["default"], f"{where}.default") if "default" in entry else None
    policy = inventory.RequestPolicy(default=default)
    if "validValues" in entry:
        raw = entry["validValues"]
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_VALID_VALUES:
            raise InvalidInventory(f"{where}.validValues must list 1 to {MAX_VALID_VALUES} quantities")
        values = tuple(_quantity(v, f"{where}.validValues[{i}]") for i, v in enumerate(raw))
        if any(a >= b for a, b in zip(values, values[1:])):
            raise InvalidInventory(f"{where}.validValues must be strictly ascending")
        if values[-1] > capacity:
            raise InvalidInventory(f"{where}.validValues exceed the capacity value")
        policy = inventory.RequestPolicy(default=default, valid_values=values)
        if default is None:
            raise InvalidInventory(f"{where}.default is required with validValues")
    elif "validRange" in entry:
        rng = _object(entry["validRange"], f"{where}.validRange", {"min", "max", "step"})
        if "min" not in rng:
            raise InvalidInventory(f"{where}.validRange.min is required")
        low = _quantity(rng["min"], f"{where}.validRange.min")
        high = _quantity(rng["max"], f"{where}.validRange.max") if "max" in rng else None
        step = _quantity(rng["step"], f"{where}.validRange.step") if "step" in rng else None
        if high is not None and high < low:
            raise InvalidInventory(f"{where}.validRange.max is below its min")
        if step == 0:
            raise InvalidInventory(f"{where}.validRange.step must be positive")
        if max(low + (step or 0), high or 0) > capacity:  # upstream: min + step and max within the value
            raise InvalidInventory(f"{where}.validRange exceeds the capacity value")
        policy = inventory.RequestPolicy(default=default, minimum=low, maximum=high, step=step)
        if default is None:
            raise InvalidInventory(f"{where}.default is required with validRange")
    if default is not None and (policy.round(default) != default or default > capacity):
        raise InvalidInventory(f"{where}.default is not a valid amount of its own policy within the value")
    return policy


def _device(raw: object, i: int, driver: str, counter_sets: dict[str, dict[str, int]]) -> inventory.Device:
    entry = _object(raw, f"devices[{i}]", _DEVICE_KEYS)
    name = _label(entry.get("name"), f"devices[{i}].name")
    where = f"device {name!r}"
    own_driver = _driver(entry["driver"], f"{where} driver") if "driver" in entry else driver
    raw_attributes = entry.get("attributes", {})
    raw_capacity = entry.get("capacity", {})
    if not isinstance(raw_attributes, dict) or not isinstance(raw_capacity, dict):
        raise InvalidInventory(f"{where}: attributes and capacity must be objects")
    if len(raw_attributes) + len(raw_capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise InvalidInventory(f"{where} has {len(raw_attributes) + len(raw_capacity)} attributes and capacities; "
                               f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} are allowed")
    names: set[str] = set()
    attributes: list[tuple[str, inventory.AttributeValue]] = []
    capacity: list[tuple[str, inventory.Capacity]] = []
    for key, value in raw_attributes.items():
        full = _unique_name(key, where, own_driver, names)
        attributes.append((full, _attribute(value, f"{where} attribute {key!r}")))
    for key, value in raw_capacity.items():
        full = _unique_name(key, where, own_driver, names)
        cap = _object(value, f"{where} capacity {key!r}", {"value", "requestPolicy"})
        amount = _quantity(cap.get("value"), f"{where} capacity {key!r} value")
        if "requestPolicy" in cap and entry.get("allowMultipleAllocations") is not True:
            raise InvalidInventory(f"{where} capacity {key!r}: a requestPolicy needs allowMultipleAllocations: true")
        policy = _policy(cap["requestPolicy"], f"{where} capacity {key!r} requestPolicy", amount) \
            if "requestPolicy" in cap else None
        capacity.append((full, inventory.Capacity(amount, policy)))
    multiple = entry.get("allowMultipleAllocations", False)
    if not isinstance(multiple, bool):
        raise InvalidInventory(f"{where}: allowMultipleAllocations must be true or false")
    uses = _counter_uses(entry.get("consumesCounters", []), where, counter_sets)
    attributes.sort(key=lambda a: a[0])
    capacity.sort(key=lambda c: c[0])
    view = inventory.content_view(own_driver, tuple(attributes), tuple(capacity), multiple)
    return inventory.Device(name, own_driver, tuple(attributes), tuple(capacity), multiple, uses,
                            inventory.content_digest(view))


def _unique_name(key: object, where: str, driver: str, names: set[str]) -> str:
    problem = qualified_name_error(key)
    if problem is not None:
        raise InvalidInventory(f"{where}: the name {str(key)[:72]!r} {problem}")
    assert isinstance(key, str)
    full = inventory.qualify(key, driver)
    if full in names:
        raise InvalidInventory(f"{where}: {full!r} is declared twice (attribute and capacity names share one space)")
    names.add(full)
    return full


def _counter_uses(value: object, where: str, counter_sets: dict[str, dict[str, int]]) -> tuple[inventory.CounterUse, ...]:
    if not isinstance(value, list) or len(value) > MAX_COUNTER_USES:
        raise InvalidInventory(f"{where}: consumesCounters is a list of at most {MAX_COUNTER_USES}")
    uses = []
    for j, raw in enumerate(value):
        entry = _object(raw, f"{where} consumesCounters[{j}]", {"counterSet", "counters"})
        set_name = entry.get("counterSet")
        if set_name not in counter_sets:
            raise InvalidInventory(f"{where} consumesCounters[{j}]: counter set {str(set_name)[:72]!r} is not declared")
        counters = _counter_map(entry.get("counters", {}), f"{where} consumesCounters[{j}].counters")
        undeclared = sorted(set(counters) - set(counter_sets[set_name]))
        if undeclared:
            raise InvalidInventory(f"{where}: counter {undeclared[0]!r} is not declared in counter set {set_name!r}")
        uses.append(inventory.CounterUse(set_name, tuple(sorted(counters.items()))))
    return tuple(uses)
