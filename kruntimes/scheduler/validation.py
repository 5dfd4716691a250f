"""PreFilter validation of a Run's scheduler-visible inputs, and the bounds of a Run.

The API layer validates objects when they are read (quantities, names, schema)
and records what it found in `RunInfo.problems`. This module checks the same
rules that matter to the planner once more on the projection itself, because a
projection can also come from a hand-written file, the journal, or a test: a bad
value must become a terminal Failed with an actionable message (SPEC §3.2 step 2),
never a wrong placement or an exception in a worker.

The bounds below are the single source for the models, the CRD and this check, so
that no single Run makes an unbounded journal record or planner cycle (issue 12).
Lengths are Kubernetes' own (a label value or name part is at most 63 characters, a
DNS subdomain prefix at most 253, so a qualified name at most 317); the counts are
kruntimes' choice, generous for real use, and they cap a Run's projection near 1 MB
(4 affinity lists x 8 terms x 16 labels/expressions x 16 values) against the journal's
4 MiB record limit. docs/api-bounds.md lists them for users.
"""

from __future__ import annotations

from typing import Any

from kruntimes.scheduler.projection import OPERATORS, RunInfo, Selector, Term

MAX_MESSAGE = 1000

# Kubernetes lengths.
MAX_NAME_PART = 63  # a label value, a DNS label, the name part of a qualified name
MAX_QUALIFIED_NAME = 253 + 1 + MAX_NAME_PART  # prefix/name: resource names and label keys
MAX_RUNTIME_NAME = 63  # a Runtime's name is also its pods' kruntimes.io/runtime label value
MAX_WORKSPACE_NAME = 63
MAX_QUANTITY = 2**63 - 1  # int64, as Kubernetes' Quantity.Value() (SPEC §2.2)
# kruntimes' counts.
MAX_RESOURCES = 32  # entries of spec.resources.requests and of a pod's capacity
MAX_TERMS = 8  # required or preferred terms in each of runAffinity and runAntiAffinity
MAX_MATCH_LABELS = 16  # matchLabels entries of one selector
MAX_EXPRESSIONS = 16  # matchExpressions of one selector
MAX_VALUES = 16  # values of one matchExpressions entry


def validate_run(run: RunInfo) -> str | None:
    """None when the Run can be planned, else one bounded, actionable message."""
    problems = list(run.problems)
    if not run.runtime:
        problems.append("spec.runtime is required: name the Runtime this Run should run on")
    elif len(run.runtime) > MAX_RUNTIME_NAME:
        problems.append(f"spec.runtime: must be at most {MAX_RUNTIME_NAME} characters")
    if run.workspace is not None and len(run.workspace) > MAX_WORKSPACE_NAME:
        problems.append(f"spec.workspace: must be at most {MAX_WORKSPACE_NAME} characters")
    problems += _request_problems(run)
    if run.devices is not None:
        problems += _device_problems(run.devices)
    aff = run.affinity
    if aff.empty:  # the common case: nothing below would add a problem
        return _message(problems)
    for label, terms in (("runAffinity.required", aff.required), ("runAntiAffinity.required", aff.required_anti)):
        problems += _count(f"spec.affinity.{label}", len(terms), MAX_TERMS)
        for i, term in enumerate(terms[:MAX_TERMS]):
            problems += _term_problems(f"spec.affinity.{label}[{i}]", term)
    for label, weighted in (("runAffinity.preferred", aff.preferred),
                            ("runAntiAffinity.preferred", aff.preferred_anti)):
        problems += _count(f"spec.affinity.{label}", len(weighted), MAX_TERMS)
        for i, wt in enumerate(weighted[:MAX_TERMS]):
            where = f"spec.affinity.{label}[{i}]"
            if type(wt.weight) is not int or not 1 <= wt.weight <= 100:
                problems.append(f"{where}.weight: must be between 1 and 100 (got {_shown(wt.weight)})")
            problems += _term_problems(f"{where}.term", wt.term)
    return _message(problems)


def _message(problems: list[str]) -> str | None:
    if not problems:
        return None
    message = "invalid Run: " + "; ".join(problems)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    return message


def _request_problems(run: RunInfo) -> list[str]:
    # The `runs` default is added after the user's map was bounded: it does not count.
    written = sum(1 for resource, _ in run.requests if resource != "runs")
    problems = _count("spec.resources.requests", written, MAX_RESOURCES)
    for resource, amount in run.requests[:MAX_RESOURCES + 1]:
        if len(resource) > MAX_QUALIFIED_NAME:
            problems.append(f"{_request(resource)}: a resource name is at most {MAX_QUALIFIED_NAME} characters")
        elif type(amount) is not int or not 0 <= amount <= MAX_QUANTITY:
            problems.append(f"{_request(resource)}: must be a non-negative whole number of at most {MAX_QUANTITY}")
    return problems


def _request(resource: str) -> str:
    return f"spec.resources.requests[{_shown(resource)}]"


def _count(where: str, count: int, bound: int) -> list[str]:
    return [f"{where}: at most {bound} entries are allowed (got {count})"] if count > bound else []


def _term_problems(where: str, term: Term) -> list[str]:
    return _selector_problems(f"{where}.labelSelector", term.selector) if term.selector else []


def _selector_problems(where: str, selector: Selector) -> list[str]:
    problems = _count(f"{where}.matchLabels", len(selector.match_labels), MAX_MATCH_LABELS)
    for key, value in selector.match_labels[:MAX_MATCH_LABELS]:
        problems += _label_problems(f"{where}.matchLabels[{_shown(key)}]", key, (value,))
    problems += _count(f"{where}.matchExpressions", len(selector.match_expressions), MAX_EXPRESSIONS)
    for j, req in enumerate(selector.match_expressions[:MAX_EXPRESSIONS]):
        at = f"{where}.matchExpressions[{j}]"
        if req.operator not in OPERATORS:
            problems.append(f"{at}.operator: {_shown(req.operator)} is not one of {', '.join(OPERATORS)}")
        elif req.operator in ("In", "NotIn") and not req.values:
            problems.append(f"{at}.values: operator {req.operator} needs at least one value")
        elif req.operator in ("Exists", "DoesNotExist") and req.values:
            problems.append(f"{at}.values: operator {req.operator} takes no values")
        problems += _count(f"{at}.values", len(req.values), MAX_VALUES)
        problems += _label_problems(at, req.key, req.values[:MAX_VALUES])
    return problems


def _label_problems(where: str, key: str, values: tuple[str, ...]) -> list[str]:
    problems = []
    if len(key) > MAX_QUALIFIED_NAME:
        problems.append(f"{where}: a label key is at most {MAX_QUALIFIED_NAME} characters")
    if any(len(value) > MAX_NAME_PART for value in values):
        problems.append(f"{where}: a label value is at most {MAX_NAME_PART} characters")
    return problems


def _shown(value: object, limit: int = 40) -> str:
    """A user value for a message, cut before it is rendered so its size never matters."""
    if isinstance(value, str):
        return repr(value[:limit] + "…") if len(value) > limit else repr(value)
    if isinstance(value, (bool, float)) or (isinstance(value, int) and value.bit_length() <= 64):
        return repr(value)
    return f"a {type(value).__name__}"


def _device_problems(text: str) -> list[str]:
    """The Run's own selectors must compile (SPEC §7.4): a Run that breaks that fails, it never waits."""
    # Deferred: the API models import this module for its bounds, and must not load the CEL engine.
    # Kept once imported: an import statement costs a cycle of a claim more than the look-up below.
    global _CEL
    if _CEL is None:
        from kruntimes.devices import cel_engine
        _CEL = cel_engine
    engine = _CEL.shared()
    known = _CHECKED.get(text)  # a claim is judged once per engine: a Run retried, or its twins
    if known is not None and known[0] is engine:
        return list(known[1])
    problems = _judge_claim(text, engine)
    if len(_CHECKED) >= 4096:
        _CHECKED.clear()
    _CHECKED[text] = (engine, problems)
    return list(problems)


_CHECKED: dict[str, tuple[object, list[str]]] = {}
_CEL: Any = None  # kruntimes.devices.cel_engine, once a claim was validated


def _judge_claim(text: str, engine: Any) -> list[str]:
    from kruntimes.devices import cel_engine, claims
    from kruntimes.scheduler import device_state
    try:
        claim = device_state.claim_of(text)
    except (claims.InvalidClaim, ValueError) as exc:  # the API model normally refuses it first
        return [str(exc)[:300]]
    for r, request in enumerate(claim.requests):
        for a, alt in enumerate(request.alternatives):
            for s, expression in enumerate(alt.selectors):
                try:
                    engine.compile(expression)
                except cel_engine.SelectorInvalid as exc:
                    where = f"requests[{r}]" + (f".firstAvailable[{a}]" if request.first_available else ".exactly")
                    return [f"spec.devices.{where}.selectors[{s}]: {exc}"]
    return []
