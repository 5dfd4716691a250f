"""A Run's device claim (`Run.spec.devices`, SPEC §7.3) and the classes it names (§7.2), validated.

The claim is immutable like `resources`, so it is parsed and bounded once, here, into
values the allocator reads: requests in order, each with its alternatives (one for
`exactly`, 1..8 for `firstAvailable`), and the constraints. Every selector passes the
static rules of §7.4 (`cel_rules`); compiling it is the engine's job. A claim that breaks
a rule raises `InvalidClaim`: the Run fails terminally with the message (§3.2). A
`RuntimeDeviceClass` that breaks one raises `InvalidDeviceClass`: Runs that name it
stay Pending with `device class invalid` (§7.2).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

from kruntimes.devices import cel_rules, inventory_codec, quantities

MAX_REQUESTS = 8
MAX_ALTERNATIVES = 8
MAX_SELECTORS = 8
MAX_CONSTRAINTS = 8
MAX_COUNT = 32
MAX_TOTAL_COUNT = 32
MAX_SELECTOR_BYTES_PER_RUN = 32 * 1024
MAX_CLASS_SELECTORS = 8

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)
_UNSUPPORTED = ("adminAccess", "tolerations", "config")
_ALTERNATIVE_KEYS = {"deviceClassName", "selectors", "allocationMode", "count", "capacity"}

Mode = Literal["ExactCount", "All"]


class InvalidClaim(ValueError):
    """`Run.spec.devices` breaks SPEC §7.3/§7.4: the Run fails terminally with this message."""


class InvalidDeviceClass(ValueError):
    """A RuntimeDeviceClass whose selectors break SPEC §7.2/§7.4."""


@dataclass(frozen=True)
class Alternative:
    """One way to satisfy a request: the `exactly` body, or one `firstAvailable` entry."""

    name: str | None  # None for `exactly`
    class_name: str
    selectors: tuple[str, ...]
    mode: Mode
    count: int  # ExactCount: 1..32; All: 0 (every candidate, at least one)
    capacity: tuple[tuple[str, int], ...]  # requested capacity, sorted; names as written

    @property
    def smallest_count(self) -> int:
        return self.count if self.mode == "ExactCount" else 1


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Alternative, ...]
    first_available: bool


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # "req" or "req/alt"; empty: every request
    attribute: str  # fully qualified
    kind: Literal["match", "distinct"]

    def covers(self, request: str, alternative: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (alternative is not None and f"{request}/{alternative}" in self.requests)


@dataclass(frozen=True)
class DeviceClaim:
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    digest: str  # SHA-256 of the canonical spec: part of the allocator's search key


@dataclass(frozen=True)
class DeviceClass:
    name: str
    generation: int
    selectors: tuple[str, ...]
    digest: str


def _digest(document: object) -> str:
    return hashlib.sha256(inventory_codec.canonical_text(document).encode()).hexdigest()


def _label(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise InvalidClaim(f"{where} must be a DNS label (lowercase letters, digits and '-', at most 63), e.g. gpu")
    return value


def _list(value: object, where: str, low: int, high: int) -> list[Any]:
    if not isinstance(value, list) or not low <= len(value) <= high:
        raise InvalidClaim(f"{where} must be a list of {low} to {high} entries")
    return value


def _selectors(value: object, where: str, error: type[ValueError], limit: int) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > limit:
        raise error(f"{where} must be a list of at most {limit} selectors")
    expressions = []
    for i, entry in enumerate(value):
        cel = entry.get("cel") if isinstance(entry, dict) and set(entry) == {"cel"} else None
        expression = cel.get("expression") if isinstance(cel, dict) and set(cel) == {"expression"} else None
        if not isinstance(expression, str):
            raise error(f"{where}[{i}] must be {{cel: {{expression: \"...\"}}}}")
        try:
            cel_rules.check(expression)
        except cel_rules.SelectorRejected as exc:
            raise error(f"{where}[{i}]: {exc}") from None
        expressions.append(expression)
    return tuple(expressions)


def _alternative(value: object, where: str, name: str | None) -> Alternative:
    if not isinstance(value, dict):
        raise InvalidClaim(f"{where} must be an object")
    for field in _UNSUPPORTED:
        if field in value:
            raise InvalidClaim(f"{where}.{field} is not supported by kruntimes (SPEC §7.3); remove it")
    unknown = sorted(set(value) - _ALTERNATIVE_KEYS - ({"name"} if name is not None else set()))
    if unknown:
        raise InvalidClaim(f"{where} has an unknown field {unknown[0][:72]!r}")
    class_name = value.get("deviceClassName")
    if not isinstance(class_name, str) or len(class_name) > 253 or not _DNS_SUBDOMAIN.fullmatch(class_name):
        raise InvalidClaim(f"{where}.deviceClassName must name a RuntimeDeviceClass (a DNS subdomain)")
    selectors = _selectors(value.get("selectors", []), f"{where}.selectors", InvalidClaim, MAX_SELECTORS)
    mode = value.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise InvalidClaim(f"{where}.allocationMode must be ExactCount or All")
    if mode == "All":
        if "count" in value:
            raise InvalidClaim(f"{where}.count must be absent with allocationMode All")
        count = 0
    else:
        count = value.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise InvalidClaim(f"{where}.count must be an integer from 1 to {MAX_COUNT}")
    return Alternative(name, class_name, selectors, mode, count, _capacity_requests(value.get("capacity"), where))


def _capacity_requests(value: object, where: str) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or set(value) - {"requests"} or not isinstance(value.get("requests", {}), dict):
        raise InvalidClaim(f"{where}.capacity must be {{requests: {{name: quantity}}}}")
    requests = []
    for key, qty in value.get("requests", {}).items():
        problem = inventory_codec.qualified_name_error(key)
        if problem is not None:
            raise InvalidClaim(f"{where}.capacity.requests: the name {str(key)[:72]!r} {problem}")
        if isinstance(qty, bool) or not isinstance(qty, (str, int)):
            raise InvalidClaim(f"{where}.capacity.requests[{key}] must be a quantity such as \"20Gi\"")
        try:
            requests.append((key, quantities.parse_count(str(qty))))
        except quantities.InvalidCount as exc:
            raise InvalidClaim(f"{where}.capacity.requests[{key}]: {exc}") from None
    return tuple(sorted(requests))


def _request(value: object, i: int) -> Request:
    where = f"spec.devices.requests[{i}]"
    if not isinstance(value, dict):
        raise InvalidClaim(f"{where} must be an object")
    name = _label(value.get("name"), f"{where}.name")
    where = f"spec.devices.requests[{i}] ({name})"
    bodies = [k for k in ("exactly", "firstAvailable") if k in value]
    unknown = sorted(set(value) - {"name", "exactly", "firstAvailable"})
    if unknown:
        if unknown[0] in _UNSUPPORTED:
            raise InvalidClaim(f"{where}.{unknown[0]} is not supported by kruntimes (SPEC §7.3); remove it")
        raise InvalidClaim(f"{where} has an unknown field {unknown[0][:72]!r}")
    if len(bodies) != 1:
        raise InvalidClaim(f"{where} must have exactly one of exactly or firstAvailable")
    if bodies[0] == "exactly":
        return Request(name, (_alternative(value["exactly"], f"{where}.exactly", None),), False)
    alternatives = []
    for j, entry in enumerate(_list(value["firstAvailable"], f"{where}.firstAvailable", 1, MAX_ALTERNATIVES)):
        alt_name = _label(entry.get("name") if isinstance(entry, dict) else None, f"{where}.firstAvailable[{j}].name")
        if any(a.name == alt_name for a in alternatives):
            raise InvalidClaim(f"{where}.firstAvailable: the name {alt_name!r} is used twice")
        alternatives.append(_alternative(entry, f"{where}.firstAvailable[{j}]", alt_name))
    return Request(name, tuple(alternatives), True)


def _constraint(value: object, i: int, requests: tuple[Request, ...]) -> Constraint:
    where = f"spec.devices.constraints[{i}]"
    if not isinstance(value, dict) or set(value) - {"requests", "matchAttribute", "distinctAttribute"}:
        raise InvalidClaim(f"{where} must be {{requests?, matchAttribute | distinctAttribute}}")
    kinds = [k for k in ("matchAttribute", "distinctAttribute") if k in value]
    if len(kinds) != 1:
        raise InvalidClaim(f"{where} must have exactly one of matchAttribute or distinctAttribute")
    attribute = value[kinds[0]]
    if inventory_codec.qualified_name_error(attribute) is not None or "/" not in attribute:
        raise InvalidClaim(f"{where}.{kinds[0]} must be a fully qualified attribute name, e.g. gpu.example.com/numa")
    names = value.get("requests", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidClaim(f"{where}.requests must be a list of request names")
    known = {r.name for r in requests} | {f"{r.name}/{a.name}" for r in requests if r.first_available
                                          for a in r.alternatives}
    for name in names:
        if name not in known:
            raise InvalidClaim(f"{where}.requests names {name[:72]!r}, which is no request (\"req\" or \"req/alternative\")")
    if len(set(names)) != len(names):
        raise InvalidClaim(f"{where}.requests lists a request twice")
    return Constraint(tuple(names), attribute, "match" if kinds[0] == "matchAttribute" else "distinct")


def parse_claim(spec: object) -> DeviceClaim:
    """The claim `Run.spec.devices` declares, else InvalidClaim (SPEC §7.3)."""
    if not isinstance(spec, dict) or set(spec) - {"requests", "constraints"}:
        raise InvalidClaim("spec.devices must be {requests, constraints?}")
    requests: list[Request] = []
    for i, raw in enumerate(_list(spec.get("requests"), "spec.devices.requests", 1, MAX_REQUESTS)):
        request = _request(raw, i)
        if any(r.name == request.name for r in requests):
            raise InvalidClaim(f"spec.devices.requests: the name {request.name!r} is used twice")
        requests.append(request)
    total = sum(min(a.smallest_count for a in r.alternatives) for r in requests)
    if total > MAX_TOTAL_COUNT:
        raise InvalidClaim(f"the requests ask for at least {total} devices; at most {MAX_TOTAL_COUNT} are allowed")
    size = sum(len(s.encode("utf-8", "surrogatepass")) for r in requests for a in r.alternatives for s in a.selectors)
    if size > MAX_SELECTOR_BYTES_PER_RUN:
        raise InvalidClaim(f"the selectors are {size:,} bytes together; at most {MAX_SELECTOR_BYTES_PER_RUN:,} are allowed")
    raw_constraints = spec.get("constraints", [])
    if not isinstance(raw_constraints, list) or len(raw_constraints) > MAX_CONSTRAINTS:
        raise InvalidClaim(f"spec.devices.constraints must be a list of at most {MAX_CONSTRAINTS}")
    constraints = tuple(_constraint(c, i, tuple(requests)) for i, c in enumerate(raw_constraints))
    return DeviceClaim(tuple(requests), constraints, _digest(spec))


def parse_class(name: object, generation: object, spec: object) -> DeviceClass:
    """A RuntimeDeviceClass's selectors, else InvalidDeviceClass (SPEC §7.2)."""
    if not isinstance(name, str) or not name:
        raise InvalidDeviceClass("a RuntimeDeviceClass needs metadata.name")
    if not isinstance(spec, dict) or set(spec) - {"selectors", "config"}:
        raise InvalidDeviceClass(f"RuntimeDeviceClass {name[:72]!r}: spec must be {{selectors}}")
    if "config" in spec:
        raise InvalidDeviceClass(f"RuntimeDeviceClass {name[:72]!r}: spec.config is not supported by kruntimes")
    selectors = _selectors(spec.get("selectors", []), f"RuntimeDeviceClass {name[:72]!r} spec.selectors",
                           InvalidDeviceClass, MAX_CLASS_SELECTORS)
    gen = generation if isinstance(generation, int) and not isinstance(generation, bool) else 0
    return DeviceClass(name, gen, selectors, _digest({"name": name, "selectors": list(selectors)}))

