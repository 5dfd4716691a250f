"""PreFilter validation of a Run's scheduler-visible inputs.

The API layer validates objects when they are read (quantities, names, schema)
and records what it found in `RunInfo.problems`. This module checks the same
rules that matter to the planner once more on the projection itself, because a
projection can also come from a hand-written file, the journal, or a test: a bad
value must become a terminal Failed with an actionable message, never a wrong
placement or an exception in a worker.
"""

from __future__ import annotations

from kruntimes.scheduler.projection import OPERATORS, RunInfo, Selector, Term

MAX_MESSAGE = 1000


def validate_run(run: RunInfo) -> str | None:
    """None when the Run can be planned, else one bounded, actionable message."""
    problems = list(run.problems)
    if not run.runtime:
        problems.append("spec.runtime is required: name the Runtime this Run should run on")
    for resource, amount in run.requests:
        if type(amount) is not int or amount < 0:
            problems.append(f"spec.resources.requests[{resource!r}]: must be a non-negative whole number")
    aff = run.affinity
    for label, terms in (("runAffinity.required", aff.required), ("runAntiAffinity.required", aff.required_anti)):
        for i, term in enumerate(terms):
            problems += _term_problems(f"spec.affinity.{label}[{i}]", term)
    for label, weighted in (("runAffinity.preferred", aff.preferred),
                            ("runAntiAffinity.preferred", aff.preferred_anti)):
        for i, wt in enumerate(weighted):
            where = f"spec.affinity.{label}[{i}]"
            if type(wt.weight) is not int or not 1 <= wt.weight <= 100:
                problems.append(f"{where}.weight: must be between 1 and 100 (got {wt.weight!r})")
            problems += _term_problems(f"{where}.term", wt.term)
    if not problems:
        return None
    message = "invalid Run: " + "; ".join(problems)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    return message


def _term_problems(where: str, term: Term) -> list[str]:
    return _selector_problems(f"{where}.labelSelector", term.selector) if term.selector else []


def _selector_problems(where: str, selector: Selector) -> list[str]:
    problems = []
    for j, req in enumerate(selector.match_expressions):
        at = f"{where}.matchExpressions[{j}]"
        if req.operator not in OPERATORS:
            problems.append(f"{at}.operator: {req.operator!r} is not one of {', '.join(OPERATORS)}")
        elif req.operator in ("In", "NotIn") and not req.values:
            problems.append(f"{at}.values: operator {req.operator} needs at least one value")
        elif req.operator in ("Exists", "DoesNotExist") and req.values:
            problems.append(f"{at}.values: operator {req.operator} takes no values")
    return problems
