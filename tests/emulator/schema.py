"""Admission of custom resources the way the API server does it with the committed CRDs.

The emulator loads ``deploy/crds/*.yaml`` - the files an operator applies - so a test
against it also exercises the CRDs. On every create, update and patch of a Run or
Runtime, in the API server's order:

1. prune unknown fields (and ``null`` values of non-nullable fields), except under
   ``x-kubernetes-preserve-unknown-fields``; pruned paths come back for a Warning header;
2. apply ``default`` values to missing fields;
3. validate against the OpenAPI schema (``jsonschema``'s draft 4 validator: the parts a
   CRD uses are draft 4, and it ignores the ``x-kubernetes-*`` keys), ``format:
   date-time`` included (a malformed timestamp is a 422, as from the API server);
4. evaluate the ``x-kubernetes-validations`` rules wherever they sit (under
   ``properties``, ``items`` and ``additionalProperties``): plain rules on every write,
   transition rules (those naming ``oldSelf``) on update only, where both the old and
   the new value exist. Only the rule shapes the CRDs use are understood
   (``self == oldSelf``, ``has(self.f) == has(oldSelf.f)``, ``self.all(k, size(k) <= N)``
   and ``size(self.metadata.name) <= N``); loading a CRD with any other rule fails, so
   a new rule cannot go unenforced here without someone noticing.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import jsonschema
import yaml

from tests.emulator import validation


DEFAULT_CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"

_HAS = re.compile(r"^has\(self\.(\w+)\) == has\(oldSelf\.(\w+)\)$")
_ALL_KEYS_AT_MOST = re.compile(r"^self\.all\((\w+), size\(\1\) <= (\d+)\)$")
_NAME_AT_MOST = re.compile(r"^size\(self\.metadata\.name\) <= (\d+)$")
Rule = Callable[[Any, Any], bool]
# Path steps that stand for every element of a list (``items``) or map (``additionalProperties``).
_EACH_ITEM, _EACH_VALUE = "[*]", "{*}"


@dataclass(frozen=True)
class _Rule:
    path: tuple[str, ...]
    rule: str
    message: str
    check: Rule
    transition: bool


class CustomResourceSchema:
    """The version schema of one CRD, ready to admit objects."""

    def __init__(self, crd: dict[str, Any]) -> None:
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        self.kind = crd["spec"]["names"]["kind"]
        self.schema = version["schema"]["openAPIV3Schema"]
        # ``format: date-time`` is checked as the API server's OpenAPI validation does.
        self._validator = jsonschema.Draft4Validator(self.schema, format_checker=_FORMATS)
        self.selectable_fields = tuple(f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or [])
        self._rules = list(_collect_rules(self.schema, ()))
        self._part_validators: dict[str, Any] = {}

    def admit(self, obj: dict[str, Any], old: dict[str, Any] | None) -> tuple[list[str], list[str]]:
        """Prune and default ``obj`` in place; (pruned field paths, problems)."""
        pruned: list[str] = []
        for key in [k for k in obj if k not in ("apiVersion", "kind", "metadata")]:
            child = self.schema.get("properties", {}).get(key)
            if child is None:
                pruned.append(key)
                del obj[key]
            else:
                obj[key] = _prune(obj[key], child, key, pruned)
        for key, value in list(obj.items()):
            if value is None:
                del obj[key]
        _default(obj, self.schema, top=True)
        problems: list[str] = []
        for error in sorted(self._validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
            where = ".".join(str(p) for p in error.absolute_path) or "<root>"
            problems.append(f"{where}: Invalid value: {error.message}")
        return pruned, problems + self._rule_problems(obj, old, None)


    def admit_part(self, obj: dict[str, Any], old: dict[str, Any], part: str) -> tuple[list[str], list[str]]:
        """`admit` of one top-level part (``status``) when the rest of ``obj`` is ``old``'s, already admitted.

        What `admit` says of that part, without walking the rest again: pruning and
        defaults are per top-level key; a validation error belongs to the part its
        path starts with; a rule is evaluated where its path leads.
        """
        pruned: list[str] = []
        child = self.schema.get("properties", {}).get(part)
        if part in obj:
            if child is None:
                pruned.append(part)
                del obj[part]
            else:
                obj[part] = _prune(obj[part], child, part, pruned)
            if part in obj and obj[part] is None:
                del obj[part]
        if child is None:
            return pruned, []
        if part not in obj and "default" in child:
            obj[part] = copy.deepcopy(child["default"])
        if part not in obj:
            return pruned, self._rule_problems(obj, old, part)
        _default(obj[part], child)
        validator = self._part_validators.get(part)
        if validator is None:
            validator = self._part_validators[part] = jsonschema.Draft4Validator(child, format_checker=_FORMATS)
        problems = []
        for error in sorted(validator.iter_errors(obj[part]), key=lambda e: [str(p) for p in e.absolute_path]):
            where = ".".join([part, *(str(p) for p in error.absolute_path)])
            problems.append(f"{where}: Invalid value: {error.message}")
        return pruned, problems + self._rule_problems(obj, old, part)

    def _rule_problems(self, obj: dict[str, Any], old: dict[str, Any] | None, part: str | None) -> list[str]:
        """The x-kubernetes-validations problems (of the rules under ``part`` only, when given)."""
        problems: list[str] = []
        for rule in self._rules:
            if part is not None and rule.path[:1] != (part,):
                continue
            if rule.transition:
                if old is None or _EACH_ITEM in rule.path or _EACH_VALUE in rule.path:
                    continue
                new_value, old_value = _at(obj, rule.path), _at(old, rule.path)
                # Transition rules run only where both the old and the new value exist.
                if new_value is not _MISSING and old_value is not _MISSING and not rule.check(new_value, old_value):
                    problems.append(f"{'.'.join(rule.path)}: Invalid value: \"object\": {rule.message}")
                continue
            for where, value in _each(obj, rule.path, ()):
                if not rule.check(value, None):
                    problems.append(f"{'.'.join(where) or '<root>'}: Invalid value: \"object\": {rule.message}")
        return problems


def load(directory: Path = DEFAULT_CRD_DIR) -> dict[tuple[str, str], CustomResourceSchema]:
    """(group, plural) → schema for every CRD file in ``directory``."""
    files = tuple((path, path.stat().st_mtime_ns) for path in sorted(directory.glob("*.yaml")))
    return dict(_load(files))


@functools.lru_cache(maxsize=8)
def _load(files: tuple[tuple[Path, int], ...]) -> dict[tuple[str, str], CustomResourceSchema]:
    # Cached per file version: parsing the YAML and building validators for every
    # emulator would cost more than most tests.
    schemas = {}
    for path, _ in files:
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                schemas[(crd["spec"]["group"], crd["spec"]["names"]["plural"])] = CustomResourceSchema(crd)
    return schemas


_MISSING = object()
_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("date-time")(validation.is_date_time)


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _each(obj: Any, path: tuple[str, ...], where: tuple[str, ...]) -> Any:
    """(concrete path, value) for every value ``path`` reaches in ``obj``, through wildcards."""
    if not path:
        yield where, obj
        return
    step, rest = path[0], path[1:]
    if step == _EACH_ITEM:
        for i, item in enumerate(obj if isinstance(obj, list) else ()):
            yield from _each(item, rest, where[:-1] + (f"{where[-1] if where else ''}[{i}]",))
    elif step == _EACH_VALUE:
        for key, item in (obj.items() if isinstance(obj, dict) else ()):
            yield from _each(item, rest, where + (str(key),))
    elif isinstance(obj, dict) and step in obj:
        yield from _each(obj[step], rest, where + (step,))


def _compile(rule: str) -> Rule:
    if rule == "self == oldSelf":
        return lambda new, old: bool(new == old)
    found = _HAS.match(rule)
    if found and found.group(1) == found.group(2):
        field = found.group(1)
        return lambda new, old: (field in new) == (field in old)
    found = _ALL_KEYS_AT_MOST.match(rule)
    if found:
        limit = int(found.group(2))
        return lambda new, old: not isinstance(new, dict) or all(len(k) <= limit for k in new)
    found = _NAME_AT_MOST.match(rule)
    if found:
        limit = int(found.group(1))
        return lambda new, old: len(str(_at(new, ("metadata", "name")) or "")) <= limit
    raise NotImplementedError(
        f"the API emulator cannot evaluate the CEL rule {rule!r}; teach tests/emulator/schema.py "
        "its meaning so the emulator keeps enforcing what the CRD does")


def _collect_rules(schema: dict[str, Any], path: tuple[str, ...]) -> Any:
    for entry in schema.get("x-kubernetes-validations", []):
        rule = entry["rule"]
        yield _Rule(path, rule, entry.get("message", rule), _compile(rule), "oldSelf" in rule)
    for name, child in schema.get("properties", {}).items():
        yield from _collect_rules(child, path + (name,))
    for nested, step in (("items", _EACH_ITEM), ("additionalProperties", _EACH_VALUE)):
        if isinstance(schema.get(nested), dict):
            yield from _collect_rules(schema[nested], path + (step,))


def _prune(value: Any, schema: dict[str, Any], path: str, pruned: list[str]) -> Any:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = {}
        for key, child in value.items():
            if child is None and not (properties or {}).get(key, {}).get("nullable"):
                continue
            if properties is not None and key in properties:
                out[key] = _prune(child, properties[key], f"{path}.{key}", pruned)
            elif isinstance(extra, dict):
                out[key] = _prune(child, extra, f"{path}.{key}", pruned)
            else:
                pruned.append(f"{path}.{key}")
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(item, schema["items"], f"{path}[{i}]", pruned) for i, item in enumerate(value)]
    return value


def _default(value: Any, schema: dict[str, Any], top: bool = False) -> None:
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if top and key == "metadata":
                continue
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                _default(value[key], child)
        if isinstance(schema.get("additionalProperties"), dict):
            for child_value in value.values():
                _default(child_value, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])
