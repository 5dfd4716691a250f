"""Device selectors compiled once and judged per device: true, false or error (SPEC §7.4).

The engine is `cel-expr-python` (cel-cpp), pinned exactly in pyproject.toml; its name
and version are part of the scheduler's configuration (`ENGINE`), so replay can report
a different one instead of hiding it. Each expression passes `cel_rules.check` and is
compiled once per process; a verdict is memoised by (expression, device content
digest), so a cycle evaluates each distinct (expression, device content) pair at most
once and never by name: CEL never sees the device name.

The `device` variable is upstream's: `driver`, `attributes[domain][id]`,
`capacity[domain][id]` (an int here), `allowMultipleAllocations`. An unknown domain is
an empty map (`has()` guards work); a missing key is an error. cel-cpp cannot carry
opaque Python values, so a version (a `version` attribute, or `semver(s)`) crosses as
the map `{major, minor, patch, prerelease}`: map equality is then version equality
(build metadata never counts), and the version methods are registered on maps. The
map shows only where upstream would refuse: `size(v)` is 4 and `v.major` reads a field;
`==` and the methods answer as upstream's.
Domains are shown as empty maps when the expression names them with a literal
(`attributes["d"]`); a domain computed at run time that the device lacks is an error
(no match, flagged) where upstream would read an empty map.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_strings

from kruntimes.devices import cel_rules, inventory, quantities, semver

ENGINE = ("cel-expr-python", metadata.version("cel-expr-python"))

Verdict = Literal["match", "no_match", "error"]

# Bounds the memo; clearing it changes no verdict (each is a pure function of its key).
MEMO_LIMIT = 1 << 20


class SelectorInvalid(ValueError):
    """A selector that breaks the static rules or does not compile: the Run fails (§3.2)."""


@dataclass(frozen=True)
class Selector:
    expression: str
    domains: frozenset[str]
    program: Any  # a compiled cel-expr-python Expression


def version_value(version: semver.Version) -> dict[str, object]:
    return {"major": version.major, "minor": version.minor, "patch": version.patch,
            "prerelease": list(version.prerelease)}


def _version(value: object) -> semver.Version:
    if not (isinstance(value, dict) and set(value) == {"major", "minor", "patch", "prerelease"}):
        raise ValueError("not a version")
    return semver.Version(value["major"], value["minor"], value["patch"], tuple(value["prerelease"]))


def _compare(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _functions() -> list[Any]:
    t = cel.Type
    version = t.Map(t.STRING, t.DYN)

    def member(name: str, result: Any, on_versions: Any, on_ints: Any, arity: int) -> Any:
        overloads = [cel.Overload(f"version_{name}", result, [version] * arity, is_member=True, impl=on_versions)]
        if on_ints is not None:
            overloads.append(cel.Overload(f"int_{name}", result, [t.INT] * arity, is_member=True, impl=on_ints))
        return cel.FunctionDecl(name, overloads)

    return [
        cel.FunctionDecl("quantity", [cel.Overload("quantity_string", t.INT, [t.STRING], impl=quantities.parse_count)]),
        cel.FunctionDecl("semver", [cel.Overload("semver_string", version, [t.STRING],
                                                 impl=lambda s: version_value(semver.parse(s)))]),
        member("compareTo", t.INT, lambda a, b: _version(a).compare(_version(b)), _compare, 2),
        member("isGreaterThan", t.BOOL, lambda a, b: _version(a).compare(_version(b)) > 0, lambda a, b: a > b, 2),
        member("isLessThan", t.BOOL, lambda a, b: _version(a).compare(_version(b)) < 0, lambda a, b: a < b, 2),
        # quantity(s) is already an int here; asInteger keeps upstream selectors working.
        cel.FunctionDecl("asInteger", [cel.Overload("int_asInteger", t.INT, [t.INT], is_member=True, impl=lambda a: a)]),
        member("major", t.INT, lambda v: _version(v).major, None, 1),
        member("minor", t.INT, lambda v: _version(v).minor, None, 1),
        member("patch", t.INT, lambda v: _version(v).patch, None, 1),
    ]


def device_value(device: inventory.Device) -> dict[str, object]:
    """The `device` variable's content for one device (no name), versions as maps."""
    view = inventory.content_view(device.driver, (), device.capacity, device.allow_multiple_allocations)
    attributes: dict[str, dict[str, object]] = {}
    for name, value in device.attributes:
        domain, ident = name.rsplit("/", 1)
        attributes.setdefault(domain, {})[ident] = version_value(value) if isinstance(value, semver.Version) else value
    view["attributes"] = attributes
    return view


class Engine:
    """One per process: the compiled selectors and the verdict memo."""

    def __init__(self) -> None:
        self._env = cel.NewEnv(variables={"device": cel.Type.DYN}, functions=_functions(),
                               extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings()])
        self._lock = threading.Lock()
        self._compiled: dict[str, Selector | SelectorInvalid] = {}
        self._verdicts: dict[tuple[str, str], Verdict] = {}
        self._values: dict[str, dict[str, object]] = {}
        # Engine evaluations (memo misses) by verdict: device_selector_evaluations_total{result} (§7.8).
        self.evaluations_by_result: dict[Verdict, int] = {"match": 0, "no_match": 0, "error": 0}

    def compile(self, expression: object) -> Selector:
        """The compiled selector, else SelectorInvalid (cached either way)."""
        key = expression if isinstance(expression, str) else repr(type(expression))
        with self._lock:
            known = self._compiled.get(key)
            if known is None:
                known = self._compile(expression)
                self._compiled[key] = known
        if isinstance(known, SelectorInvalid):
            raise SelectorInvalid(str(known))  # a fresh one: re-raising one instance grows its traceback
        return known

    def _compile(self, expression: object) -> Selector | SelectorInvalid:
        try:
            checked = cel_rules.check(expression)
        except cel_rules.SelectorRejected as exc:
            return SelectorInvalid(str(exc))
        try:
            program = self._env.compile(checked.expression)
        except Exception as exc:  # noqa: BLE001 - the engine's own error type is not public
            first = str(exc).replace("INVALID_ARGUMENT: ", "").splitlines()[0][:200]
            return SelectorInvalid(f"the expression does not compile: {first}")
        if program.return_type() not in (cel.Type.BOOL, cel.Type.DYN):
            return SelectorInvalid(f"the expression must be a boolean, not {program.return_type().name().lower()}")
        for pattern in checked.patterns:
            try:
                probe = self._env.compile(f'"".matches({pattern})').eval()
            except Exception:  # noqa: BLE001
                probe = None
            if probe is None or probe.type() != cel.Type.BOOL:
                return SelectorInvalid(f"the matches() pattern {pattern[:72]} is not a valid RE2 expression")
        return Selector(checked.expression, checked.domains, program)

    def verdict(self, selector: Selector, device: inventory.Device) -> Verdict:
        """Whether ``selector`` holds for ``device``: match, no_match, or error (no match, flagged)."""
        key = (selector.expression, device.content_digest)
        known = self._verdicts.get(key)
        if known is not None:
            return known
        known = self._evaluate(selector, device)
        self.evaluations_by_result[known] += 1
        if len(self._verdicts) >= MEMO_LIMIT:
            self._verdicts.clear()
        self._verdicts[key] = known
        return known

    @property
    def evaluations(self) -> int:
        return sum(self.evaluations_by_result.values())

    def _evaluate(self, selector: Selector, device: inventory.Device) -> Verdict:
        value = self._values.get(device.content_digest)
        if value is None:
            if len(self._values) >= MEMO_LIMIT:
                self._values.clear()
            value = self._values[device.content_digest] = device_value(device)
        attributes, capacity = value["attributes"], value["capacity"]
        assert isinstance(attributes, dict) and isinstance(capacity, dict)
        missing = [d for d in selector.domains if d not in attributes or d not in capacity]
        if missing:
            value = dict(value, attributes={**{d: {} for d in missing}, **attributes},
                         capacity={**{d: {} for d in missing}, **capacity})
        try:
            result = selector.program.eval(data={"device": value})
        except Exception:  # noqa: BLE001 - any failure of one device is that device's error
            return "error"
        if result.type() != cel.Type.BOOL:
            return "error"
        return "match" if result.value() else "no_match"


_SHARED: Engine | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> Engine:
    """The process's engine: every caller compiles into, and memoises in, the same one."""
    global _SHARED
    engine = _SHARED  # made once: every cycle of a claim asks, and needs no lock to read it
    if engine is not None:
        return engine
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = Engine()
        return _SHARED
