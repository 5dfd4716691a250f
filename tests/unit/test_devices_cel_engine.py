"""Device selectors: compiled once, judged per device as match, no_match or error (SPEC §7.4)."""

from __future__ import annotations

import json

import pytest

from kruntimes.devices import cel_engine, inventory, inventory_codec

G = "gpu.example.com"
A = f'device.attributes["{G}"]'
C = f'device.capacity["{G}"]'


def devices(*entries: dict) -> tuple[inventory.Device, ...]:
    return inventory_codec.parse_document({"driver": G, "devices": list(entries)}).devices


(A100, T4) = devices(
    {"name": "gpu-0", "attributes": {"model": {"string": "A100"}, "numa": {"int": 1}, "nvlink": {"bool": True},
                                     "driver": {"version": "1.10.0-rc.1+build.5"},
                                     "pci.example.com/slot": {"string": "0000:3b"}},
     "capacity": {"memory": {"value": "40Gi"}}},
    {"name": "gpu-1", "driver": "other.example.com", "attributes": {"model": {"string": "t4"}},
     "capacity": {"memory": {"value": "16Gi"}}, "allowMultipleAllocations": True},
)

VERDICTS: list[tuple[str, str, inventory.Device, str]] = [
    ("a string attribute that matches", f'{A}.model == "A100"', A100, "match"),
    ("an int attribute that does not match", f'{A}.numa == 0', A100, "no_match"),
    ("a bool attribute", f'{A}.nvlink', A100, "match"),
    ("an attribute of another domain", 'device.attributes["pci.example.com"].slot.startsWith("0000")', A100, "match"),
    ("a short attribute name lives in the device driver's domain",
     'device.attributes["other.example.com"].model == "t4"', T4, "match"),
    ("a capacity against a quantity", f'{C}.memory >= quantity("20Gi")', A100, "match"),
    ("compareTo on a capacity, as upstream writes it", f'{C}.memory.compareTo(quantity("40Gi")) == 0', A100, "match"),
    ("a version is greater than its pre-release", f'semver("1.10.0").isGreaterThan({A}.driver)', A100, "match"),
    ("versions compare numerically, not as text", f'{A}.driver.isGreaterThan(semver("1.9.0"))', A100, "match"),
    ("build metadata never counts in equality", f'{A}.driver == semver("1.10.0-rc.1")', A100, "match"),
    ("major, minor and patch", f'{A}.driver.major() == 1 && {A}.driver.minor() == 10 && {A}.driver.patch() == 0',
     A100, "match"),
    ("RE2 matches", f'{A}.model.matches("^[A-Z][0-9]+$")', A100, "match"),
    ("lowerAscii", f'{A}.model.lowerAscii() == "a100"', A100, "match"),
    ("cel.bind", f'cel.bind(g, {A}, g.model == "A100" && g.numa == 1)', A100, "match"),
    ("the driver", f'device.driver == "{G}"', A100, "match"),
    ("allowMultipleAllocations", "device.allowMultipleAllocations", T4, "match"),
    ("an unknown domain is an empty map, so has() guards it", f'has({A}.model)', T4, "no_match"),
    ("a missing key in a known domain is an error", f'{A}.cores > 2', A100, "error"),
    ("a missing key in an unknown domain is an error", f'{A}.model == "t4"', T4, "error"),
    ("an error on the left of || is absorbed by a true right side", f'{A}.cores > 2 || true', A100, "match"),
    ("a non-boolean result is an error", f'{A}.model', A100, "error"),
    ("an int overflow is an error", f'{A}.numa + 9223372036854775807 > 0', A100, "error"),
    ("a bad semver at run time is an error", f'semver({A}.model).major() == 1', A100, "error"),
    ("a version method on a string is an error", f'{A}.model.major() == 1', A100, "error"),
    ("CEL never sees the device name", 'device.name == "gpu-0"', A100, "error"),
]


@pytest.mark.parametrize("expression,device,verdict", [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS])
def test_a_selector_gives_the_verdict_upstream_would(expression: str, device: inventory.Device, verdict: str) -> None:
    engine = cel_engine.Engine()
    assert engine.verdict(engine.compile(expression), device) == verdict


INVALID: list[tuple[str, str, str]] = [
    ("a static rule", '[1].exists(x, x == 1)', "comprehension macros"),
    ("a type error the checker sees", '"a" == 1', "does not compile"),
    ("an unknown identifier", 'gpu.model == "x"', "does not compile"),
    ("a result that is not a boolean", '1 + 2', "must be a boolean"),
    ("a literal matches() pattern RE2 refuses", f'{A}.model.matches("(")', "not a valid RE2 expression"),
    ("a lookahead, which RE2 does not have", f'{A}.model.matches("a(?=b)")', "not a valid RE2 expression"),
    ("nesting deeper than the engine's recursion limit", "(" * 100 + "true" + ")" * 100, "does not compile"),
]


@pytest.mark.parametrize("expression,message", [v[1:] for v in INVALID], ids=[v[0] for v in INVALID])
def test_a_selector_that_cannot_run_is_invalid_once_for_all_devices(expression: str, message: str) -> None:
    engine = cel_engine.Engine()
    for _ in range(2):  # the failure is cached, and raised again
        with pytest.raises(cel_engine.SelectorInvalid, match=message):
            engine.compile(expression)


def test_each_expression_and_device_content_is_evaluated_once() -> None:
    same = [dict(name=f"gpu-{i}", attributes={"numa": {"int": i % 2}}) for i in range(8)]
    engine = cel_engine.Engine()
    selector = engine.compile(f'{A}.numa == 1')
    verdicts = [engine.verdict(selector, d) for d in devices(*same) for _ in range(3)]
    assert verdicts.count("match") == 12 and engine.evaluations == 2
    assert engine.evaluations_by_result == {"match": 1, "no_match": 1, "error": 0}


def test_the_same_text_compiles_once_per_process() -> None:
    engine = cel_engine.Engine()
    assert engine.compile(f'{A}.numa == 1') is engine.compile(f'{A}.numa == 1')


def test_the_engine_and_its_version_are_named_for_the_configuration_record() -> None:
    name, version = cel_engine.ENGINE
    assert name == "cel-expr-python" and version == "0.1.3"
    assert json.loads(json.dumps(cel_engine.ENGINE)) == [name, version]


def test_the_process_shares_one_engine() -> None:
    assert cel_engine.shared() is cel_engine.shared()
