"""Runtime Pod capacity annotations: the one reader and the one writer (SPEC §2.1, §2.3).

A Runtime's logical capacity reaches its pods as annotations. Seed 000 wrote one
annotation per resource, ``kruntimes.io/capacity.<resource>``, but a real API server
refuses that key for a prefixed resource (``kruntimes.io/capacity.example.com/gpu``
holds two ``/``). So the Runtime controller writes ONE annotation,
``kruntimes.io/capacity``, holding a JSON object of resource name → quantity string
with sorted keys (re-projection is then idempotent), and every reader (scheduler,
runtimed, simulate) accepts both forms: a pod's capacity is their union.

Malformed, and the pod is unschedulable: a value that is not a JSON object of strings,
a key that is not a qualified resource name, a bad quantity (SPEC §2.2, so nothing
above 2^63-1), or one resource declared twice with different values (in both forms,
or twice inside the JSON object; the same value twice is harmless). The planner gets a
reason from the small fixed set `PROBLEMS`, never the user's text, so a reason can be
a metric label and a journal value; the detail goes to the log.

Both this reader and `render` live here, once, so that the controller, runtimed and
the scheduler can never disagree on the format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from kruntimes.api import names, quantity
from kruntimes.api.fields import CAPACITY_ANNOTATION, CAPACITY_ANNOTATION_PREFIX
from kruntimes.scheduler import validation

MALFORMED = "malformed capacity annotation"
NOT_AN_OBJECT = f"{MALFORMED}: not a JSON object of strings"
BAD_NAME = f"{MALFORMED}: a resource name is not a qualified name"
BAD_QUANTITY = f"{MALFORMED}: a quantity is not a whole number from 0 to 2^63-1"
CONFLICT = f"{MALFORMED}: a resource is declared twice with different values"
TOO_MANY = f"{MALFORMED}: more than {validation.MAX_RESOURCES} resources"
#: Every reason `read` can give: bounded, so safe for a projection, a journal or a label.
PROBLEMS = (NOT_AN_OBJECT, BAD_NAME, BAD_QUANTITY, CONFLICT, TOO_MANY)


class InvalidCapacity(ValueError):
    """A capacity that cannot be read or written; ``reason`` is one of `PROBLEMS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class CapacityReading:
    """What a pod's annotations declare.

    ``resources`` holds every declaration that could be read; when ``problem`` is set the
    pod is unschedulable whatever they say, and ``detail`` tells a person why.
    """

    resources: dict[str, int]
    problem: str | None = None
    detail: str | None = None


def read(annotations: Mapping[Any, Any]) -> CapacityReading:
    """The capacity both annotation forms declare (SPEC §2.1); never raises.

    Keys that are not strings are ignored (no API server stores one). Checks run in a
    fixed order (the JSON form, then per-resource keys sorted) so the same annotations
    always give the same first problem.
    """
    declared: dict[str, int] = {}
    problems: list[InvalidCapacity] = []
    if CAPACITY_ANNOTATION in annotations:
        try:
            declared.update(_read_json(annotations[CAPACITY_ANNOTATION]))
        except InvalidCapacity as exc:
            problems.append(exc)
    for key in sorted(k for k in annotations if isinstance(k, str) and k.startswith(CAPACITY_ANNOTATION_PREFIX)):
        resource = key[len(CAPACITY_ANNOTATION_PREFIX):]
        try:
            count = _entry(resource, annotations[key], where=f"annotation {_shown(key)}")
        except InvalidCapacity as exc:
            problems.append(exc)
            continue
        if resource in declared and declared[resource] != count:
            problems.append(InvalidCapacity(CONFLICT, f"{resource} is {declared[resource]} in "
                                                      f"{CAPACITY_ANNOTATION} but {count} in {_shown(key)}"))
            continue
        declared[resource] = count
    if len(declared) > validation.MAX_RESOURCES and not problems:
        problems.append(InvalidCapacity(TOO_MANY, f"{len(declared)} resources declared"))
    if problems:
        return CapacityReading(dict(sorted(declared.items())), problems[0].reason, problems[0].detail)
    return CapacityReading(dict(sorted(declared.items())))


def parse(annotations: Mapping[Any, Any]) -> dict[str, int]:
    """The declared capacity, or `InvalidCapacity` when the annotations are malformed."""
    reading = read(annotations)
    if reading.problem is not None:
        raise InvalidCapacity(reading.problem, reading.detail or reading.problem)
    return reading.resources


def render(resources: Mapping[str, int | str]) -> str:
    """The ``kruntimes.io/capacity`` value for ``resources``: compact JSON, keys sorted.

    ``resources`` holds counts or quantity strings (a Runtime's ``spec.capacity``);
    counts are written as decimal strings (``{"example.com/gpu":"1","runs":"4"}``), so
    `read` gives back exactly ``resources``; anything it would refuse raises instead.
    """
    if len(resources) > validation.MAX_RESOURCES:
        raise InvalidCapacity(TOO_MANY, f"{len(resources)} resources given")
    rendered: dict[str, str] = {}
    for name, count in resources.items():
        rendered[name] = str(_entry(name, count, where="capacity"))
    return json.dumps(rendered, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def annotations(resources: Mapping[str, int | str]) -> dict[str, str]:
    """The annotation a Runtime Pod carries for ``resources`` (what the controller writes)."""
    return {CAPACITY_ANNOTATION: render(resources)}


def _read_json(value: object) -> dict[str, int]:
    if not isinstance(value, str):
        raise InvalidCapacity(NOT_AN_OBJECT, f"{CAPACITY_ANNOTATION} must be a string holding a JSON object")
    try:
        pairs = json.loads(value, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidCapacity(NOT_AN_OBJECT, f"{CAPACITY_ANNOTATION} is not JSON: {str(exc)[:80]}") from None
    if not isinstance(pairs, _Pairs) or not all(isinstance(v, str) for _, v in pairs):
        raise InvalidCapacity(NOT_AN_OBJECT, f"{CAPACITY_ANNOTATION} must be a JSON object of quantity strings "
                                             '(e.g. {"example.com/gpu":"1","runs":"4"})')
    declared: dict[str, int] = {}
    for resource, text in pairs:
        count = _entry(resource, text, where=CAPACITY_ANNOTATION)
        if declared.get(resource, count) != count:
            raise InvalidCapacity(CONFLICT, f"{_shown(resource)} appears twice in {CAPACITY_ANNOTATION} "
                                            "with different values")
        declared[resource] = count
    return declared


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs, duplicates kept (``json`` would keep the last)."""


def _entry(resource: str, value: object, *, where: str) -> int:
    problem = names.qualified_name_error(resource)
    if problem is not None:
        raise InvalidCapacity(BAD_NAME, f"{where}: {problem}")
    try:
        return quantity.parse_count(value)
    except quantity.InvalidQuantity as exc:
        raise InvalidCapacity(BAD_QUANTITY, f"{where}: {resource}: {exc}") from None


def _shown(text: str) -> str:
    return quantity.describe_input(text, 72)
