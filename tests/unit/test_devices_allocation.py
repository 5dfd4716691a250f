"""Deterministic first-fit device allocation on one pod: results, steps and reasons (SPEC §7.5, §7.6)."""

from __future__ import annotations

import pytest

from kruntimes.devices import allocation, cel_engine, claims, inventory_codec, usage

G = "gpu.example.com"
ENGINE = cel_engine.Engine()


def inv(*devices: dict, counters: list | None = None):  # type: ignore[no-untyped-def]
    return inventory_codec.parse_document({"driver": G, "devices": list(devices), "sharedCounters": counters or []})


def gpu(name: str, numa: int = 0, model: str = "a100", **extra: object) -> dict:
    return {"name": name, "attributes": {"numa": {"int": numa}, "model": {"string": model}}, **extra}


def sel(expression: str) -> list[dict]:
    return [{"cel": {"expression": expression}}]


CLASSES = {"gpu": claims.parse_class("gpu", 1, {"selectors": sel(f'has(device.attributes["{G}"].model)')}),
           "any": claims.parse_class("any", 1, {})}


def claim(*requests: dict, constraints: list | None = None) -> claims.DeviceClaim:
    return claims.parse_claim({"requests": list(requests), "constraints": constraints or []})


def exactly(name: str = "gpu", count: int = 1, cls: str = "gpu", **fields: object) -> dict:
    return {"name": name, "exactly": {"deviceClassName": cls, "count": count, **fields}}


def run(inventory, c, holders=(), classes=CLASSES, budget=None):  # type: ignore[no-untyped-def]
    return allocation.allocate(inventory, list(holders), c, classes, ENGINE, budget or allocation.CycleBudget())


def picked(outcome) -> list[str]:  # type: ignore[no-untyped-def]
    assert isinstance(outcome, allocation.Allocation), outcome
    return [f"{r.request}={r.device}" for r in outcome.results]


FOUR = inv(gpu("g0", 0), gpu("g1", 1), gpu("g2", 0), gpu("g3", 1))


def test_first_fit_takes_devices_in_inventory_order() -> None:
    outcome = run(FOUR, claim(exactly(count=2)))
    assert picked(outcome) == ["gpu=g0", "gpu=g1"] and outcome.steps == 2


def test_a_held_device_is_skipped_at_the_cost_of_a_step() -> None:
    outcome = run(FOUR, claim(exactly(count=2)), holders=[usage.Holder("g0")])
    assert picked(outcome) == ["gpu=g1", "gpu=g2"] and outcome.steps == 3


def test_match_attribute_backtracks_to_the_first_solution_in_search_order() -> None:
    # g0 (numa 0) then g1 (numa 1, refused), g2 (numa 0, taken): 3 steps.
    outcome = run(FOUR, claim(exactly(count=2), constraints=[{"matchAttribute": f"{G}/numa"}]))
    assert picked(outcome) == ["gpu=g0", "gpu=g2"] and outcome.steps == 3


def test_the_prune_stops_before_positions_too_few_to_finish() -> None:
    # Three devices on one NUMA node, g0 busy: slot 0 tries g0 (busy), takes g1; slot 1 tries g2
    # (numa 0, refused) and stops before g3 (1 position left < 2 slots); slot 0 stops before g2
    # (2 positions < 3 slots). Three steps, not the six a search without the prune would take.
    outcome = run(FOUR, claim(exactly(count=3), constraints=[{"matchAttribute": f"{G}/numa"}]),
                  holders=[usage.Holder("g0")])
    assert outcome == allocation.Rejection(allocation.UNSATISFIABLE, 3)


def test_distinct_attribute_refuses_a_repeated_value() -> None:
    outcome = run(FOUR, claim(exactly(count=2), constraints=[{"distinctAttribute": f"{G}/numa"}]))
    assert picked(outcome) == ["gpu=g0", "gpu=g1"]


def test_a_device_lacking_the_constrained_attribute_is_refused() -> None:
    inventory = inv({"name": "bare", "attributes": {"model": {"string": "x"}}}, gpu("g1", 1))
    outcome = run(inventory, claim(exactly(count=1), constraints=[{"matchAttribute": f"{G}/numa"}]))
    assert picked(outcome) == ["gpu=g1"] and outcome.steps == 2


def test_values_of_another_type_never_match() -> None:
    inventory = inv({"name": "a", "attributes": {"k": {"int": 1}}}, {"name": "b", "attributes": {"k": {"bool": True}}},
                    {"name": "c", "attributes": {"k": {"int": 1}}})
    outcome = run(inventory, claim(exactly(count=2, cls="any"), constraints=[{"matchAttribute": f"{G}/k"}]))
    assert picked(outcome) == ["gpu=a", "gpu=c"]


def test_first_available_takes_the_first_alternative_that_fits_and_scores_its_index() -> None:
    c = claim({"name": "nic", "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu", "selectors": sel(f'device.attributes["{G}"].model == "h100"')},
        {"name": "busy", "deviceClassName": "gpu", "selectors": sel(f'device.attributes["{G}"].numa == 0')},
        {"name": "any", "deviceClassName": "gpu"}]})
    outcome = run(FOUR, c, holders=[usage.Holder("g0"), usage.Holder("g2")])
    assert picked(outcome) == ["nic/any=g1"] and outcome.preference == -2


def test_all_mode_takes_every_candidate() -> None:
    outcome = run(FOUR, claim({"name": "all", "exactly": {"deviceClassName": "gpu", "allocationMode": "All",
                                                          "selectors": sel(f'device.attributes["{G}"].numa == 1')}}))
    assert picked(outcome) == ["all=g1", "all=g3"]


def test_all_mode_with_one_candidate_busy_is_insufficient() -> None:
    outcome = run(FOUR, claim({"name": "all", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}),
                  holders=[usage.Holder("g3")])
    assert outcome == allocation.Rejection(allocation.INSUFFICIENT, 0)


SHARED = inv({"name": "s", "allowMultipleAllocations": True, "attributes": {"model": {"string": "a100"}},
              "capacity": {"memory": {"value": "50Gi", "requestPolicy": {"default": "10Gi", "validRange": {
                  "min": "10Gi", "step": "10Gi"}}}}})


def test_a_multi_allocatable_device_is_shared_by_rounded_requests() -> None:
    c = claim(exactly(name="a", capacity={"requests": {"memory": "15Gi"}}),
              exactly(name="b", capacity={"requests": {"memory": "15Gi"}}))
    outcome = run(SHARED, c, holders=[usage.Holder("s", ((f"{G}/memory", 10 * 2**30),))])
    assert picked(outcome) == ["a=s", "b=s"]
    assert outcome.results[0].consumed == ((f"{G}/memory", 20 * 2**30),)
    too_much = run(SHARED, c, holders=[usage.Holder("s", ((f"{G}/memory", 20 * 2**30),))])
    assert too_much == allocation.Rejection(allocation.INSUFFICIENT, 2)


def test_an_unrequested_capacity_takes_the_policy_default() -> None:
    outcome = run(SHARED, claim(exactly()))
    assert outcome.results[0].consumed == ((f"{G}/memory", 10 * 2**30),)


def test_a_malformed_holder_entry_takes_the_whole_shared_device() -> None:
    assert run(SHARED, claim(exactly()), holders=[usage.Holder("s")]) == allocation.Rejection(allocation.INSUFFICIENT, 0)


def test_shared_counters_limit_devices_on_first_use() -> None:
    board = [{"name": "board", "counters": {"mem": "2"}}]
    use = [{"counterSet": "board", "counters": {"mem": "1"}}]
    inventory = inv(gpu("g0", consumesCounters=use), gpu("g1", consumesCounters=use), gpu("g2", consumesCounters=use),
                    counters=board)
    assert picked(run(inventory, claim(exactly(count=2)))) == ["gpu=g0", "gpu=g1"]
    # Each alone fits the board, so the pre-check passes; together with held g2 they do not.
    assert run(inventory, claim(exactly(count=2)), holders=[usage.Holder("g2")]) == \
        allocation.Rejection(allocation.INSUFFICIENT, 5)


def test_a_device_the_pod_lacks_counts_nowhere() -> None:
    assert picked(run(FOUR, claim(exactly()), holders=[usage.Holder("gone")])) == ["gpu=g0"]


REASONS: list[tuple[str, dict, list, dict, str]] = [
    ("a class that does not exist", exactly(cls="nope"), [], CLASSES, allocation.CLASS_NOT_FOUND),
    ("a class whose selector does not compile", exactly(cls="bad"), [],
     {"bad": claims.parse_class("bad", 1, {"selectors": sel('"a" == 1')})}, allocation.CLASS_INVALID),
    ("a class that failed validation", exactly(cls="bad"), [],
     {"bad": claims.InvalidDeviceClass("nine selectors")}, allocation.CLASS_INVALID),
    ("no device matches the selectors", exactly(selectors=sel(f'device.attributes["{G}"].model == "t4"')), [], CLASSES,
     allocation.NO_MATCHING_DEVICE),
    ("too few devices are free", exactly(count=2), [usage.Holder(n) for n in ("g0", "g1", "g2")], CLASSES,
     allocation.INSUFFICIENT),
    ("a selector errs on a device and nothing fits", exactly(selectors=sel(f'device.attributes["{G}"].cores > 1')), [],
     CLASSES, allocation.SELECTOR_ERROR),
]


@pytest.mark.parametrize("request_,holders,classes,reason", [r[1:] for r in REASONS], ids=[r[0] for r in REASONS])
def test_a_pod_that_cannot_allocate_gives_one_bounded_reason(request_: dict, holders: list, classes: dict,
                                                             reason: str) -> None:
    outcome = run(FOUR, claim(request_), holders=holders, classes=classes)
    assert isinstance(outcome, allocation.Rejection) and outcome.reason == reason


def test_a_search_over_its_step_budget_is_a_search_limit() -> None:
    c = claim(exactly(count=3), constraints=[{"matchAttribute": f"{G}/numa"}])
    assert run(FOUR, c, budget=allocation.CycleBudget(search_steps=3)) == allocation.Rejection(allocation.SEARCH_LIMIT, 3)


def test_a_search_key_is_charged_once_per_cycle_and_the_cycle_budget_runs_out() -> None:
    budget = allocation.CycleBudget(remaining=5)
    c = claim(exactly(count=2), constraints=[{"matchAttribute": f"{G}/numa"}])
    first = run(FOUR, c, budget=budget)
    again = run(FOUR, c, budget=budget)  # same key: same outcome, no charge
    assert first == again and budget.remaining == 2
    other = run(inv(gpu("h0", 0), gpu("h1", 1), gpu("h2", 1)), c, budget=budget)
    assert other == allocation.Rejection(allocation.SEARCH_LIMIT, 2) and budget.remaining == 0


def test_reserve_recheck_passes_on_the_usage_the_search_saw_and_fails_when_a_device_was_taken() -> None:
    c = claim(exactly(count=2), constraints=[{"matchAttribute": f"{G}/numa"}])
    outcome = run(FOUR, c)
    assert isinstance(outcome, allocation.Allocation)
    assert allocation.recheck(FOUR, [], c, outcome.results)
    assert not allocation.recheck(FOUR, [usage.Holder("g2")], c, outcome.results)


def test_reserve_recheck_refuses_a_device_gone_from_the_inventory() -> None:
    c = claim(exactly())
    outcome = run(FOUR, c)
    assert not allocation.recheck(inv(gpu("other")), [], c, outcome.results)  # type: ignore[union-attr]


def test_reserve_recheck_counts_shared_capacity_taken_since() -> None:
    c = claim(exactly(capacity={"requests": {"memory": "30Gi"}}))
    outcome = run(SHARED, c)
    assert allocation.recheck(SHARED, [], c, outcome.results)  # type: ignore[union-attr]
    assert not allocation.recheck(SHARED, [usage.Holder("s", ((f"{G}/memory", 30 * 2**30),))], c,
                                  outcome.results)  # type: ignore[union-attr]
