"""CEL engines side by side on device selectors (SPEC §7.4, issue 26 item 4).

Three Python CEL engines, each given the same device inventory and the same
selectors (attribute compare, quantity, semver, RE2 `matches`, `cel.bind`,
`lowerAscii`), with kruntimes' `quantity`/`semver` functions registered where the
engine lets Python register functions. For each (engine, selector) it prints the
compile time, the mean evaluation time over the devices, and whether the engine
compiled and evaluated it with the expected verdicts (the pure-Python reference
below). A benchmark, not a test: it asserts nothing and prints a table.

    python bench/cel_engines.py                  # 2,000 devices
    python bench/cel_engines.py --devices 500    # quicker

Only cel-expr-python (the engine) and cel-python (the test oracle, `.[test]`) are
kruntimes dependencies; `pip install common-expression-language==0.10.0` to measure
the third, which is otherwise listed as not installed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from importlib import metadata

from kruntimes.devices import quantities, semver

D = "gpu.example.com"
SELECTORS = {
    "attribute compare": f'device.attributes["{D}"].model == "a100" && device.attributes["{D}"].numa == 1',
    "quantity": f'device.capacity["{D}"].memory >= quantity("40Gi")',
    "semver": f'device.attributes["{D}"].driver.isGreaterThan(semver("1.2.0"))',
    "matches (RE2)": f'device.attributes["{D}"].model.matches("^a1[0-9]+$")',
    "cel.bind": f'cel.bind(g, device.attributes["{D}"], g.model == "h100" && g.numa == 0)',
    "lowerAscii": f'device.attributes["{D}"].vendor.lowerAscii() == "acme"',
    "unknown domain (has)": 'has(device.attributes["other.example.com"].x)',
}


def make_devices(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [{
        "driver": D,
        "attributes": {D: {"model": rng.choice(["a100", "h100", "t4"]), "numa": rng.randrange(2),
                           "vendor": rng.choice(["ACME", "Acme", "other"]),
                           "driver": f"1.{rng.randrange(4)}.{rng.randrange(3)}"}},
        "capacity": {D: {"memory": rng.choice([16, 40, 80]) * 2**30}},
        "allowMultipleAllocations": False,
    } for _ in range(n)]


def expected(name: str, dev: dict) -> bool:
    a, c = dev["attributes"][D], dev["capacity"][D]
    return {
        "attribute compare": a["model"] == "a100" and a["numa"] == 1,
        "quantity": c["memory"] >= 40 * 2**30,
        "semver": semver.parse(a["driver"]).compare(semver.parse("1.2.0")) > 0,
        "matches (RE2)": re.fullmatch(r"a1[0-9]+", a["model"]) is not None,
        "cel.bind": a["model"] == "h100" and a["numa"] == 0,
        "lowerAscii": a["vendor"].lower() == "acme",
        "unknown domain (has)": False,
    }[name]


# Versions cross into engines without opaque types as a map; comparing maps is then
# the same as comparing versions (build metadata dropped, numeric identifiers as ints).
def version_map(v: semver.Version) -> dict:
    return {"major": v.major, "minor": v.minor, "patch": v.patch, "prerelease": list(v.prerelease)}


def from_map(m) -> semver.Version:
    return semver.Version(int(m["major"]), int(m["minor"]), int(m["patch"]),
                          tuple(int(p) if isinstance(p, int) else str(p) for p in m["prerelease"]))


def with_versions(dev: dict, convert) -> dict:
    attrs = {D: dict(dev["attributes"][D], driver=convert(semver.parse(dev["attributes"][D]["driver"])))}
    # Unknown domains read as empty maps (SPEC §7.4): add the literal domains selectors name.
    attrs["other.example.com"] = {}
    return dict(dev, attributes=attrs)


class CelExprPython:
    name = "cel-expr-python"

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_bindings, ext_strings
        t = cel.Type
        member = [("isGreaterThan", lambda a, b: from_map(a).compare(from_map(b)) > 0, t.BOOL)]
        functions = [cel.FunctionDecl("quantity", [cel.Overload("quantity_string", t.INT, [t.STRING],
                                                               impl=quantities.parse_count)]),
                     cel.FunctionDecl("semver", [cel.Overload("semver_string", t.Map(t.STRING, t.DYN), [t.STRING],
                                                             impl=lambda s: version_map(semver.parse(s)))])]
        for fname, impl, rtype in member:
            functions.append(cel.FunctionDecl(fname, [cel.Overload(
                f"map_{fname}", rtype, [t.Map(t.STRING, t.DYN), t.Map(t.STRING, t.DYN)], is_member=True, impl=impl)]))
        self.env = cel.NewEnv(variables={"device": t.DYN}, functions=functions,
                              extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings()])

    def device(self, dev: dict):
        return with_versions(dev, version_map)

    def compile(self, expr: str):
        return self.env.compile(expr)

    def evaluate(self, program, device) -> object:
        value = program.eval(data={"device": device})
        return value.value() if value.type().name() == "BOOL" else ("error", str(value.value()))


class CommonExpressionLanguage:
    name = "common-expression-language"

    def __init__(self) -> None:
        import cel
        self.cel = cel
        self.context = cel.Context()
        self.context.add_function("quantity", quantities.parse_count)
        self.context.add_function("semver", lambda s: version_map(semver.parse(s)))
        self.context.add_function("isGreaterThan", lambda a, b: from_map(a).compare(from_map(b)) > 0)
        self.context.add_function("lowerAscii", lambda s: s.lower())

    def device(self, dev: dict):
        return with_versions(dev, version_map)

    def compile(self, expr: str):
        return self.cel.compile(expr)

    def evaluate(self, program, device) -> object:
        self.context.add_variable("device", device)
        return program.execute(self.context)


class CelPython:
    name = "cel-python (celpy)"

    def __init__(self) -> None:
        import celpy
        from celpy import celtypes
        self.celpy, self.celtypes = celpy, celtypes
        self.environment = celpy.Environment()
        self.functions = {
            "quantity": lambda s: celtypes.IntType(quantities.parse_count(str(s))),
            "semver": lambda s: semver.parse(str(s)),
            "isGreaterThan": lambda a, b: celtypes.BoolType(a.compare(b) > 0),
            "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
        }

    def device(self, dev: dict):
        converted = self.celpy.json_to_cel(with_versions(dev, lambda v: "placeholder"))
        converted[self.celtypes.StringType("attributes")][self.celtypes.StringType(D)][
            self.celtypes.StringType("driver")] = semver.parse(dev["attributes"][D]["driver"])
        return {"device": converted}

    def compile(self, expr: str):
        return self.environment.program(self.environment.compile(expr), functions=self.functions)

    def evaluate(self, program, device) -> object:
        return program.evaluate(device)


def measure(engine, devices: list[dict]) -> list[tuple[str, str, float, float, str]]:
    prepared = [engine.device(d) for d in devices]
    rows = []
    for name, expr in SELECTORS.items():
        start = time.perf_counter()
        try:
            for _ in range(20):
                program = engine.compile(expr)
        except Exception as exc:  # noqa: BLE001 - the table reports what the engine lacks
            rows.append((engine.name, name, float("nan"), float("nan"), f"compile fails: {str(exc).splitlines()[0][:60]}"))
            continue
        compile_us = (time.perf_counter() - start) / 20 * 1e6
        wrong = errors = 0
        first_error = ""
        start = time.perf_counter()
        for dev, raw in zip(prepared, devices):
            try:
                verdict = engine.evaluate(program, dev)
            except Exception as exc:  # noqa: BLE001
                verdict = ("error", str(exc))
            if isinstance(verdict, tuple):
                errors += 1
                first_error = first_error or str(verdict[1]).splitlines()[0][:60]
            elif bool(verdict) != expected(name, raw):
                wrong += 1
        eval_us = (time.perf_counter() - start) / len(devices) * 1e6
        note = "ok" if not (wrong or errors) else f"{wrong} wrong, {errors} errors ({first_error})"
        rows.append((engine.name, name, compile_us, eval_us, note))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2000)
    args = parser.parse_args()
    devices = make_devices(args.devices)
    versions = {}
    for label, package in [("cel-expr-python", "cel-expr-python"),
                           ("common-expression-language", "common-expression-language"),
                           ("cel-python (celpy)", "cel-python")]:
        try:
            versions[label] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[label] = "not installed"
    print(f"{args.devices:,} devices, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"{'engine':28} {'selector':22} {'compile µs':>11} {'eval µs':>9}  result")
    for engine_type in (CelExprPython, CommonExpressionLanguage, CelPython):
        if versions[engine_type.name] == "not installed":
            print(f"{engine_type.name:28} (not installed)")
            continue
        for engine, name, compile_us, eval_us, note in measure(engine_type(), devices):
            print(f"{engine:28} {name:22} {compile_us:11.1f} {eval_us:9.2f}  {note}")


if __name__ == "__main__":
    main()
