"""One device workload through the product (`kruntimes.devices.allocation`) and the model; the differences.

Compared per pod, in pod-name order: allocated or rejected; the results (request
label, device, consumed capacity) in order; the DevicePreference raw score; the
reason; the steps charged. Then the cycle's steps left.
"""

from __future__ import annotations

from kruntimes.devices import allocation, cel_engine, claims, inventory_codec, usage
from tests.model import devices_model

ENGINE = cel_engine.Engine()


def product(workload: dict, memo: allocation.SearchMemo | None = None) -> tuple[list, int]:
    classes: dict = {}
    for name, spec in workload["classes"].items():
        try:
            classes[name] = claims.parse_class(name, 1, spec)
        except claims.InvalidDeviceClass as exc:
            classes[name] = exc
    claim = claims.parse_claim(workload["claim"])
    budget = allocation.CycleBudget(remaining=workload["cycle_steps"], search_steps=workload["search_steps"])
    outcomes = []
    for pod in workload["pods"]:
        inv = inventory_codec.parse_document(pod["inventory"])
        holders = [usage.Holder(h["device"], None if h.get("consumed") is None
                                     else tuple(sorted(h["consumed"].items()))) for h in pod["holders"]]
        outcome = allocation.allocate(inv, holders, claim, classes, ENGINE, budget, memo)
        if isinstance(outcome, allocation.Allocation):
            outcomes.append(("allocated", [(r.request, r.device, None if r.consumed is None else list(r.consumed))
                                           for r in outcome.results], outcome.preference, outcome.steps))
        else:
            outcomes.append(("rejected", outcome.reason, outcome.steps))
    return outcomes, budget.remaining


def model(workload: dict) -> tuple[list, int]:
    outcomes, remaining = devices_model.allocate_pods(workload["pods"], workload["claim"], workload["classes"],
                                                      workload["search_steps"], workload["cycle_steps"])
    return [tuple(o) for o in outcomes], remaining


def differences(workload: dict) -> list[str]:
    (mine, left), (theirs, model_left) = product(workload), model(workload)
    found = [f"{pod['name']}: product {a} model {b}" for pod, a, b in zip(workload["pods"], mine, theirs) if a != b]
    if left != model_left:
        found.append(f"cycle steps left: product {left} model {model_left}")
    return found
