"""cel-python (`celpy`) as a device-selector oracle: upstream's `device` variable, written plainly.

Used by the engine's oracle test (tests/property/test_devices_cel_oracle.py) and by the
second implementation of §7.5 (`devices_model`). Nothing here imports kruntimes'
device code: an unknown domain reads as an empty map through `DomainMap`, versions are
`OracleVersion` objects ordered by semver 2.0 §11 written again here, and quantities come
from the API layer's Kubernetes-client parser.
"""

from __future__ import annotations

import json
import re

import celpy
from celpy import celtypes

from kruntimes.api import quantity as api_quantity

G = "gpu.example.com"


class DomainMap(celtypes.MapType):
    """Upstream's attributes/capacity map: an unknown domain reads as an empty map."""

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def _identifier(part: str) -> tuple[int, int | str]:
    return (0, int(part)) if part.isdigit() else (1, part)


class OracleVersion:
    """semver 2.0 §11, written again here: (major, minor, patch, pre-release precedence)."""

    def __init__(self, text: str) -> None:
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?", str(text))
        if match is None or any(len(p) > 1 and p[0] == "0" for p in match.groups()[:3]):
            raise ValueError(f"bad version {text}")
        self.core = tuple(int(p) for p in match.groups()[:3])
        self.pre = tuple(_identifier(p) for p in match[4].split(".")) if match[4] else None

    def key(self) -> tuple:
        # No pre-release sorts after any pre-release; shorter pre-release first when a prefix.
        return (self.core, (1,) if self.pre is None else (0, self.pre))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OracleVersion) and self.key() == other.key()


def _cmp(a, b) -> celtypes.IntType:  # type: ignore[no-untyped-def]
    if isinstance(a, OracleVersion) and isinstance(b, OracleVersion):
        x, y = a.key(), b.key()
    elif isinstance(a, celtypes.IntType) and isinstance(b, celtypes.IntType):
        x, y = int(a), int(b)
    else:
        raise TypeError("no such overload")
    return celtypes.IntType((x > y) - (x < y))


FUNCTIONS = {
    "quantity": lambda s: celtypes.IntType(api_quantity.parse_count(str(s))),
    "semver": lambda s: OracleVersion(str(s)),
    "compareTo": _cmp,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_cmp(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_cmp(a, b) < 0),
    "major": lambda v: celtypes.IntType(v.core[0]),
    "minor": lambda v: celtypes.IntType(v.core[1]),
    "patch": lambda v: celtypes.IntType(v.core[2]),
    "lowerAscii": lambda s: celtypes.StringType(re.sub("[A-Z]", lambda m: m.group().lower(), str(s))),
    "upperAscii": lambda s: celtypes.StringType(re.sub("[a-z]", lambda m: m.group().upper(), str(s))),
}


def oracle_device(entry: dict) -> celtypes.MapType:
    driver = entry.get("driver", G)
    attributes: dict = {}
    for name, tagged in entry.get("attributes", {}).items():
        domain, _, ident = name.rpartition("/")
        (tag, value), = tagged.items()
        value = {"string": celtypes.StringType, "int": celtypes.IntType, "bool": celtypes.BoolType,
                 "version": OracleVersion}[tag](value)
        attributes.setdefault(celtypes.StringType(domain or driver), celtypes.MapType())[celtypes.StringType(ident)] = value
    capacity: dict = {}
    for name, cap in entry.get("capacity", {}).items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(celtypes.StringType(domain or driver), celtypes.MapType())[
            celtypes.StringType(ident)] = celtypes.IntType(api_quantity.parse_count(cap["value"]))
    return celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): DomainMap(attributes),
        celtypes.StringType("capacity"): DomainMap(capacity),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(entry.get("allowMultipleAllocations", False)),
    })


ENVIRONMENT = celpy.Environment()
_PROGRAMS: dict[str, object] = {}
_VERDICTS: dict[tuple[str, str], str] = {}


def oracle_verdict(expression: str, entry: dict, driver: str = G) -> str:
    """match, no_match or error for one device entry of an annotation (its name never matters)."""
    content = dict(entry, driver=entry.get("driver", driver))
    content.pop("name", None)
    key = (expression, json.dumps(content, sort_keys=True))
    if key not in _VERDICTS:
        _VERDICTS[key] = _evaluate(expression, content)
    return _VERDICTS[key]


def _evaluate(expression: str, entry: dict) -> str:
    program = _PROGRAMS.get(expression)
    if program is None:
        program = _PROGRAMS[expression] = ENVIRONMENT.program(ENVIRONMENT.compile(expression), functions=FUNCTIONS)
    try:
        result = program.evaluate({"device": oracle_device(entry)})  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - celpy raises some errors and returns others
        return "error"
    if not isinstance(result, celtypes.BoolType):
        return "error"
    return "match" if result else "no_match"
