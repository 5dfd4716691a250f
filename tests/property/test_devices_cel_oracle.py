"""The device selector engine against cel-python (`celpy`) as an oracle (SPEC §7.4).

Random selectors from the allowed grammar, random devices: the product's verdict
(cel-expr-python behind `kruntimes.devices.cel_engine`) must equal the oracle's. The
oracle is built independently: celpy, upstream's device variable with a map that
answers an empty map for an unknown domain, version values as objects with their own
semver ordering, and `quantity` from the API layer's Kubernetes-client parser.

`cel.bind` reaches celpy (which has no such macro) with the binding substituted back.
Left out of the grammar, with the reason: a comparison of an attribute with a literal of another type (cel-cpp and upstream's
cel-go answer false by heterogeneous equality, celpy errs: each attribute id keeps one
type on every device, as upstream expects of attribute names).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from kruntimes.devices import cel_engine, inventory_codec
from tests.model.devices_oracle import oracle_verdict

G, P = "gpu.example.com", "pci.example.com"
A, C = f'device.attributes["{G}"]', f'device.capacity["{G}"]'
MODELS = ["a100", "A100", "h100", "t4", "", "x-1"]
VERSIONS = ["1.0.0", "1.2.0", "1.10.0", "1.2.0-rc.1", "1.2.0-rc.10", "1.2.0-alpha", "2.0.0+b1", "0.9.9-1.a"]
QUANTITIES = ["0", "1", "16Gi", "40Gi", "1k", "1000m", "80G"]
PATTERNS = ["^a", "[0-9]+$", "^[A-Za-z][0-9]+$", "1", "^$"]


# ---- devices --------------------------------------------------------------------------

# Mostly present, sometimes missing: a missing key is an error, which should not drown the rest.
PRESENT = st.integers(0, 5).map(bool)


@st.composite
def device_entries(draw: st.DrawFn, index: int) -> dict:
    attributes: dict[str, dict] = {}
    if draw(PRESENT):
        attributes["model"] = {"string": draw(st.sampled_from(MODELS))}
    if draw(PRESENT):
        attributes["numa"] = {"int": draw(st.integers(-2, 3))}
    if draw(PRESENT):
        attributes["nvlink"] = {"bool": draw(st.booleans())}
    if draw(PRESENT):
        attributes["driver"] = {"version": draw(st.sampled_from(VERSIONS))}
    if draw(PRESENT):
        attributes[f"{P}/slot"] = {"string": draw(st.sampled_from(["0000:3b", "0001:00"]))}
    entry: dict = {"name": f"dev-{index}", "attributes": attributes,
                   "allowMultipleAllocations": draw(st.booleans())}
    if draw(PRESENT):
        entry["capacity"] = {"memory": {"value": draw(st.sampled_from(QUANTITIES))}}
    if not draw(PRESENT):
        entry["driver"] = "other.example.com"
    return entry


# ---- selectors ------------------------------------------------------------------------

def _lit(values: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(values).map(lambda v: '"' + v + '"')


ATOMS = st.one_of(
    st.builds(lambda op, v: f"{A}.model {op} {v}", st.sampled_from(["==", "!="]), _lit(MODELS)),
    st.builds(lambda op, n: f"{A}.numa {op} {n}", st.sampled_from(["==", "<", ">=", "!="]), st.integers(-2, 3)),
    st.just(f"{A}.nvlink"),
    st.sampled_from([f"has({A}.model)", f"has({A}.numa)", f'has(device.attributes["{P}"].slot)',
                     'has(device.attributes["unknown.example.com"].x)', f"has({C}.memory)"]),
    st.builds(lambda f, v: f"{A}.model.{f}({v})", st.sampled_from(["startsWith", "endsWith", "contains"]),
              _lit(["a", "A", "100", "", "t"])),
    st.builds(lambda p: f'{A}.model.matches("{p}")', st.sampled_from(PATTERNS)),
    st.builds(lambda f, v: f"{A}.model.{f}() == {v}", st.sampled_from(["lowerAscii", "upperAscii"]), _lit(MODELS)),
    st.builds(lambda n: f"size({A}.model) > {n}", st.integers(0, 4)),
    st.builds(lambda op, q: f'{C}.memory {op} quantity("{q}")', st.sampled_from([">=", "<", "=="]),
              st.sampled_from(QUANTITIES)),
    st.builds(lambda q, k: f'{C}.memory.compareTo(quantity("{q}")) == {k}', st.sampled_from(QUANTITIES),
              st.integers(-1, 1)),
    st.builds(lambda f, v: f'{A}.driver.{f}(semver("{v}"))', st.sampled_from(["isGreaterThan", "isLessThan"]),
              st.sampled_from(VERSIONS)),
    st.builds(lambda v, k: f'{A}.driver.compareTo(semver("{v}")) == {k}', st.sampled_from(VERSIONS),
              st.integers(-1, 1)),
    st.builds(lambda f, n: f"{A}.driver.{f}() == {n}", st.sampled_from(["major", "minor", "patch"]),
              st.integers(0, 10)),
    st.builds(lambda a, b: f"{A}.model in [{a}, {b}]", _lit(MODELS), _lit(MODELS)),
    st.builds(lambda n: f'string({A}.numa) == "{n}"', st.integers(-1, 2)),
    st.builds(lambda d: f'device.driver == "{d}"', st.sampled_from([G, "other.example.com"])),
    st.sampled_from(["device.allowMultipleAllocations", "true", "false"]),
    st.builds(lambda v: f'device.attributes["{P}"].slot == {v}', _lit(["0000:3b", "0001:00"])),
)

# Pairs (what the engine gets, what the oracle gets): celpy has no cel.bind, so a bound
# expression reaches the oracle with the binding substituted back, which is what it means.
PAIRS = st.recursive(ATOMS.map(lambda a: (a, a)), lambda inner: st.one_of(
    st.builds(lambda a, b: (f"({a[0]} && {b[0]})", f"({a[1]} && {b[1]})"), inner, inner),
    st.builds(lambda a, b: (f"({a[0]} || {b[0]})", f"({a[1]} || {b[1]})"), inner, inner),
    st.builds(lambda a: (f"!({a[0]})", f"!({a[1]})"), inner),
    st.builds(lambda c, a, b: (f"({c[0]} ? {a[0]} : {b[0]})", f"({c[1]} ? {a[1]} : {b[1]})"), inner, inner, inner),
    # Uses of the domain become `g.`; a nested binding's own `{A},` stays what it binds.
    inner.map(lambda a: (f"cel.bind(g, {A}, {a[0].replace(A + '.', 'g.')})", a[1])),
), max_leaves=6)


ENGINE = cel_engine.Engine()


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(PAIRS, st.lists(st.integers(0, 10**6), min_size=1, max_size=4).flatmap(
    lambda seeds: st.tuples(*[device_entries(i) for i in range(len(seeds))])))
def test_the_engine_agrees_with_the_celpy_oracle(pair: tuple[str, str], entries: tuple[dict, ...]) -> None:
    expression, meaning = pair
    note(expression)
    inventory = inventory_codec.parse_document({"driver": G, "devices": list(entries)})
    selector = ENGINE.compile(expression)
    for entry, device in zip(entries, inventory.devices):
        note(repr(entry))
        assert ENGINE.verdict(selector, device) == oracle_verdict(meaning, entry)
