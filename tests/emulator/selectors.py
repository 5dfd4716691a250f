"""Label and field selectors in the API's query-string syntax, with Kubernetes semantics.

Labels: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists),
``!k`` (does not exist), ``k>n``/``k<n``; comma means AND. ``!=`` and ``notin`` also
match objects without the key, as the API documentation says. Fields ("Field
Selectors"): ``=``, ``==`` and ``!=`` on the fields the resource supports -
``metadata.name`` and ``metadata.namespace`` everywhere, pods the fields of the pod
registry (``spec.nodeName``, ``status.phase``, ...), a custom resource the
``selectableFields`` of its CRD - and any other field is a 400 ("field label not
supported"), as is a selector that does not parse; a missing field reads as "".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")
_COMPARE = re.compile(r"^\s*([^\s=!<>]+)\s*(==|=|!=|>|<)\s*(\S*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s=!<>(),]+)\s*$")
COMMON_FIELDS = ("metadata.name", "metadata.namespace")
# The pod registry's field set (pkg/registry/core/pod: ToSelectableFields).
POD_FIELDS = COMMON_FIELDS + ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                              "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
                              "status.nominatedNodeName")
NAMESPACE_FIELDS = ("metadata.name", "status.phase")


class SelectorError(ValueError):
    """The selector does not parse; the message reads like the API server's."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # =, !=, in, notin, exists, !, >, <
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number = int(value or "")
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.operator == ">" else number < bound


def parse_labels(text: str | None) -> tuple[Requirement, ...]:
    """The requirements of a ``labelSelector``; empty or missing selects everything."""
    if not text or not text.strip():
        return ()
    return tuple(_requirement(part) for part in _split(text))


def matches(requirements: tuple[Requirement, ...], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


def parse_fields(text: str | None, supported: tuple[str, ...] = COMMON_FIELDS,
                 custom: bool = False) -> tuple[tuple[str, bool, str], ...]:
    """``(field, equal, value)`` triples of a ``fieldSelector`` over the ``supported`` fields."""
    if not text or not text.strip():
        return ()
    out = []
    for part in _split(text):
        found = _COMPARE.match(part)
        if not found or found.group(2) not in ("=", "==", "!="):
            raise SelectorError(f'invalid selector: "{text}"; can\'t understand "{part}"')
        field_name, operator, value = found.groups()
        if field_name not in supported:
            if custom:  # the custom resource handler words it so
                known = ", ".join(f'"{f}"' for f in supported)
                raise SelectorError(f'"{field_name}" is not a known field selector: only {known}')
            raise SelectorError(f'field label not supported: {field_name}')
        out.append((field_name, operator != "!=", value))
    return tuple(out)


def fields_match(requirements: tuple[tuple[str, bool, str], ...], obj: dict[str, Any]) -> bool:
    for field_name, equal, value in requirements:
        actual: Any = obj
        for part in field_name.split("."):
            actual = actual.get(part) if isinstance(actual, dict) else None
        text = "" if actual is None else ("true" if actual else "false") if isinstance(actual, bool) else str(actual)
        if (text == value) != equal:
            return False
    return True


def _split(text: str) -> list[str]:
    """Split on the commas that are not inside ``( )``."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _requirement(part: str) -> Requirement:
    found = _SET.match(part)
    if found:
        key, operator, inner = found.groups()
        values = tuple(v.strip() for v in inner.split(","))
        if values == ("",):
            raise SelectorError(f"unable to parse requirement: for '{operator}', set must be non-empty")
        return _checked(Requirement(key, operator, values))
    found = _COMPARE.match(part)
    if found:
        key, operator, value = found.groups()
        if operator in (">", "<") and not re.fullmatch(r"-?\d+", value):
            raise SelectorError(f"unable to parse requirement: for '{operator}', value must be an integer")
        return _checked(Requirement(key, "=" if operator == "==" else operator, (value,)))
    found = _EXISTS.match(part)
    if found:
        negated, key = found.groups()
        return _checked(Requirement(key, "!" if negated else "exists"))
    raise SelectorError(f"unable to parse requirement: found '{part.strip()}', expected a requirement")


def _checked(requirement: Requirement) -> Requirement:
    if not _KEY.match(requirement.key) or len(requirement.key.rsplit("/", 1)[-1]) > 63:
        raise SelectorError(f"unable to parse requirement: invalid label key \"{requirement.key}\"")
    for value in requirement.values:
        if requirement.operator not in (">", "<") and not _VALUE.match(value):
            raise SelectorError(f"unable to parse requirement: invalid label value: \"{value}\"")
    return requirement
