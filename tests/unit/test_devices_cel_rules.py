"""The static rules every device selector passes before an engine sees it (SPEC §7.4)."""

from __future__ import annotations

import pytest

from kruntimes.devices import cel_rules

D = 'device.attributes["gpu.example.com"]'

ACCEPTED: list[tuple[str, str]] = [
    ("an attribute compared with a literal", f'{D}.model == "a100"'),
    ("a capacity compared with a quantity", 'device.capacity["gpu.example.com"].memory >= quantity("40Gi")'),
    ("a version compared with semver", f'{D}.driver.isGreaterThan(semver("1.2.0-rc.1"))'),
    ("a has() guard on an unknown domain", 'has(device.attributes["other.example.com"].x)'),
    ("cel.bind of an attribute domain", f'cel.bind(g, {D}, g.model == "a100" && g.numa == 0)'),
    ("cel.bind of a capacity domain", 'cel.bind(c, device.capacity["gpu.example.com"], c.memory > 0)'),
    ("every string call", f'{D}.model.startsWith("a") && {D}.model.endsWith("0") && {D}.model.contains("10")'
                          f' && {D}.model.matches("^a[0-9]+$") && {D}.model.lowerAscii() == {D}.model.upperAscii()'),
    ("size, int and string", f'size({D}.model) == int("4") && string({D}.numa) == "0"'),
    ("the version accessors", f'{D}.driver.major() == 1 && {D}.driver.minor() >= 2 && {D}.driver.patch() < 9'),
    ("compareTo and asInteger", 'device.capacity["d"].m.compareTo(quantity("1Gi")) >= 0 && quantity("1").asInteger() == 1'),
    ("'in' over a list literal", f'{D}.model in ["a100", "h100"]'),
    ("a call name inside a string is not a call", f'{D}.model == "exists(x)"'),
    ("a comment that names a macro", f'{D}.numa == 0 // not .all(x, x)'),
    ("a raw string with a backslash", f'{D}.model.matches(r"a\\d+")'),
    ("a triple-quoted string with a quote inside", f'{D}.model == """a"b"""'),
    ("a quantity of a non-literal argument (checked at run time)", f'quantity({D}.model) > 0'),
    ("the driver and allowMultipleAllocations", 'device.driver == "gpu.example.com" && !device.allowMultipleAllocations'),
]


@pytest.mark.parametrize("expression", [e for _, e in ACCEPTED], ids=[n for n, _ in ACCEPTED])
def test_an_upstream_style_selector_is_accepted(expression: str) -> None:
    assert cel_rules.check(expression).cost <= cel_rules.MAX_COST


REJECTED: list[tuple[str, object, str]] = [
    ("a selector over 4 KiB", f'{D}.model == "' + "a" * 4090 + '"', "at most 4,096"),
    ("4 KiB counted in UTF-8 bytes, not characters", f'{D}.model == "' + "é" * 2030 + '"', "at most 4,096"),
    ("an empty expression", "   ", "empty"),
    ("not a string", 42, "must be a string"),
    ("the all() macro", 'device.attributes.all(d, d == "x")', "comprehension macros"),
    ("the exists() macro", '["a"].exists(x, x == "a")', "comprehension macros"),
    ("the exists_one() macro", '[1].exists_one(x, x == 1)', "comprehension macros"),
    ("the map() macro", 'size([1].map(x, x)) == 1', "comprehension macros"),
    ("the filter() macro", 'size([1].filter(x, x > 0)) == 1', "comprehension macros"),
    ("a macro written with a comment before its parenthesis", '[1].exists // hidden\n (x, x == 1)', "comprehension macros"),
    ("a macro hidden after a raw string ending in a backslash", 'r"\\" + [1].exists(x, x == 1) + ""', "comprehension"),
    ("a call outside the list", 'timestamp("2026-01-01T00:00:00Z") == timestamp("2026-01-01T00:00:00Z")', "'timestamp'"),
    ("a conversion outside the list", 'double(1) == 1.0', "'double'"),
    ("bind called on something other than cel", 'x.bind(a, 1, a == 1)', "'bind'"),
    ("cel.bind of a built string", 'cel.bind(s, "ab" + "cd", s + s == "x")', "may bind only"),
    ("cel.bind of a bound variable (doubling chain)", f'cel.bind(a, {D}, cel.bind(b, a.model + a.model, b == ""))',
     "may bind only"),
    ("cel.bind of a whole device", 'cel.bind(d, device, d.driver == "x")', "may bind only"),
    ("cel.bind of a computed domain", 'cel.bind(g, device.attributes["a" + "b"], g.x == 1)', "may bind only"),
    ("a literal quantity that is not a whole number", 'device.capacity["d"].m >= quantity("1.5")', "does not parse"),
    ("a literal quantity that is not a quantity", 'device.capacity["d"].m >= quantity("lots")', "does not parse"),
    ("a literal semver with a leading v", f'{D}.v.isLessThan(semver("v1.2.3"))', "does not parse"),
    ("a literal semver with a missing part", f'{D}.v.isLessThan(semver("1.2"))', "does not parse"),
    ("a literal with escapes passed to quantity", 'quantity("4\\x30") > 1', "plain string literal"),
    ("a cost above 10,000 from scanning calls",
     "||".join(["s.contains(s)"] * 150), "costs 10,649"),
    ("a cost above 10,000 from 'in'", "||".join(["1 in s"] * 150), "costs 10,199"),
    ("an unterminated string", f'{D}.model == "a100', "unexpected text"),
    ("a character CEL does not have", f'{D}.model == #x', "unexpected text"),
    ("a backtick-quoted field", 'device.attributes["d"].`a.b` == 1', "unexpected text"),
]


@pytest.mark.parametrize("expression,message", [(e, m) for _, e, m in REJECTED], ids=[n for n, _, _ in REJECTED])
def test_a_selector_breaking_a_static_rule_is_rejected_with_a_reason(expression: object, message: str) -> None:
    with pytest.raises(cel_rules.SelectorRejected, match=message.replace("(", r"\(")):
        cel_rules.check(expression)


def test_the_cost_is_tokens_plus_64_per_scanning_call_or_in() -> None:
    expression = 'device.attributes["d"].m.contains("x") && "a" in ["a"]'
    tokens = cel_rules.tokenize(expression)
    assert cel_rules.check(expression).cost == len(tokens) + 64 * 2


def test_the_literal_domains_an_expression_indexes_are_known() -> None:
    checked = cel_rules.check('has(device.attributes["a.com"].x) && device.capacity["b.com"].y > 0 '
                              '&& cel.bind(g, device.attributes["c.com"], g.z)')
    assert checked.domains == {"a.com", "b.com", "c.com"}


TRIPLE = "'" * 3
HOSTILE = ["(" * 4000, '"' * 4001, "\\" * 4000, TRIPLE + "a" * 4000, "a." * 2000, "\x00" * 4000,
           "r" + TRIPLE + "\\" * 4000, '"\\' * 1365, "!" * 4096, "-" * 4096]


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: repr(h[:8]) + f"x{len(h)}")
def test_hostile_text_is_either_rejected_or_tokenized_within_the_bounds(hostile: str) -> None:
    # Text that passes is still refused by the engine where CEL has no meaning for it
    # (tests/unit/test_devices_cel_engine.py); the rules only promise a bounded cost.
    try:
        checked = cel_rules.check(hostile)
    except cel_rules.SelectorRejected:
        return
    assert checked.cost <= cel_rules.MAX_COST
