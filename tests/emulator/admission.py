"""The ValidatingAdmissionPolicies of ``deploy/base`` that the emulator enforces, evaluated from their own CEL.

Every ``deploy/base/*policy*.yaml`` is loaded as deployed: runtimed's two (a runtimed
writes only its own pod's Runs, forward, and only its own pod's heartbeat, and its
pod's device inventory where the controller made it the publisher; SPEC §4.1, §7.1), the Runtime controller's (it never places a Run; §4.2) and the scheduler's
term fence (§3.6). A write is judged as the API server judges it:

- a policy applies to the request when one of its ``resourceRules`` matches
  (operation, group, resource with subresource), and a param it names exists
  (``parameterNotFoundAction: Allow``; ``Admission.bind_param`` points a binding's
  paramRef at a test's own Lease, as a user would edit the binding);
- ``judge`` evaluates it: matchConditions, the variables in order, every validation;
  an evaluation error refuses (``failurePolicy: Fail``). It is the one evaluator the
  policies' own tests use (tests/unit/test_*_policy.py), with cel-python, which
  shares the core language the policies keep to;
- a refusal is answered as the API server answers it: the first failing validation's
  message, ``ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
  request: ...``, with the validation's ``reason`` (the fence's Forbidden: 403) or
  Invalid (422) when it gives none.

Who asks is the request's ``userInfo`` (``Identity``): the emulator's bearer tokens
(``Emulator.identity``) name a user, a ServiceAccount's with its pod's claims in
``extra`` as a bound token carries them; a request without a token is the cluster
admin, whom only the fence judges.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import celpy
import yaml

from tests.emulator.statuses import ApiError

DEPLOY_BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
POLICY_FILES = tuple(sorted(DEPLOY_BASE.glob("*policy*.yaml")))
FENCE = "kruntimes-scheduler-fence"

Object = dict[str, Any]

# One environment for the process: building one raises the interpreter's recursion
# limit (tests/conftest.py says why that matters), so it is built once, at import.
_ENVIRONMENT = celpy.Environment()


class Decision(NamedTuple):
    matched: bool
    refusals: list[str]


@functools.lru_cache(maxsize=None)
def _program(expression: str) -> Any:
    return _ENVIRONMENT.program(_ENVIRONMENT.compile(expression))


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """One CEL expression's value (compiled once per expression)."""
    return _program(expression).evaluate(activation)


def judge(spec: Object, activation: dict[str, Any]) -> Decision:
    """A policy spec's answer given its activation: matchConditions, then the variables in order, then every
    validation; an evaluation error refuses (failurePolicy: Fail)."""
    if not all(evaluate(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return Decision(False, [])
    variables = celpy.celtypes.MapType()
    for variable in spec.get("variables", []):  # each may use the ones before it
        activation["variables"] = variables
        value = evaluate(variable["expression"], activation)
        variables = celpy.celtypes.MapType({**variables, celpy.celtypes.StringType(variable["name"]): value})
    activation["variables"] = variables
    refusals = []
    for validation in spec["validations"]:
        try:
            allowed = bool(evaluate(validation["expression"], activation))
        except celpy.CELEvalError as exc:  # failurePolicy: Fail
            allowed, validation = False, {"message": f"evaluation error: {exc.args[0]}"}
        if not allowed:
            refusals.append(" ".join(validation["message"].split()))
    return Decision(True, refusals)


def to_cel(value: Any) -> Any:
    """A JSON value as CEL sees it; a value nested too deeply for cel-python's recursive conversion keeps
    its upper levels (the API server's CEL reads objects lazily; no deployed policy reads so deep)."""
    try:
        return celpy.json_to_cel(value)
    except RecursionError:
        return celpy.json_to_cel(_bounded(value, 64))


def _bounded(value: Any, depth: int) -> Any:
    """``value`` with every array or object below ``depth`` levels replaced by a string (no recursion)."""
    top: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(value, top, 0, 0)]
    while stack:
        item, parent, key, level = stack.pop()
        if isinstance(item, (dict, list)) and level >= depth:
            parent[key] = "(nested too deeply)"
        elif isinstance(item, dict):
            parent[key] = {}
            stack.extend((v, parent[key], k, level + 1) for k, v in item.items())
        elif isinstance(item, list):
            parent[key] = [None] * len(item)
            stack.extend((v, parent[key], i, level + 1) for i, v in enumerate(item))
        else:
            parent[key] = item
    return top[0]


@dataclass(frozen=True)
class Identity:
    """The ``userInfo`` of a request, as the API server's authenticator fills it."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    extra: dict[str, list[str]] = field(default_factory=dict)

    def user_info(self) -> Object:
        info: Object = {"username": self.username, "uid": f"uid-{self.username}", "groups": list(self.groups)}
        if self.extra:  # omitempty
            info["extra"] = {key: list(values) for key, values in self.extra.items()}
        return info


#: Requests without a token: the cluster admin (the kubeconfig the tests use).
ADMIN = Identity("kubernetes-admin", ("system:masters", "system:authenticated"))


def service_account(namespace: str, name: str, pod: tuple[str, str] | None = None) -> Identity:
    """A ServiceAccount's identity; ``pod`` (name, uid): a token bound to that pod, its claims in ``extra``."""
    extra = {} if pod is None else {"authentication.kubernetes.io/pod-name": [pod[0]],
                                    "authentication.kubernetes.io/pod-uid": [pod[1]]}
    return Identity(f"system:serviceaccount:{namespace}:{name}",
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
                    extra)


@dataclass
class Policy:
    """One deployed policy and its binding."""

    name: str
    binding: str
    spec: Object
    param: tuple[str, str] | None  # the binding's paramRef (namespace, name), a Lease; None: no param

    def applies(self, operation: str, group: str, resource: str) -> bool:
        return any(operation in rule.get("operations", []) and group in rule.get("apiGroups", [])
                   and resource in rule.get("resources", [])
                   for rule in self.spec["matchConstraints"]["resourceRules"])

    def reason(self, message: str) -> str:
        given = next((v.get("reason") for v in self.spec["validations"]
                      if " ".join(v["message"].split()) == message), None)
        return given or "Invalid"


def _policies() -> dict[str, Policy]:
    documents = [d for path in POLICY_FILES for d in yaml.safe_load_all(path.read_text()) if d]
    bindings = {d["spec"]["policyName"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    policies = {}
    for policy in (d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"):
        binding = bindings[policy["metadata"]["name"]]
        assert binding["spec"]["validationActions"] == ["Deny"], binding
        assert policy["spec"]["failurePolicy"] == "Fail", policy
        ref = binding["spec"].get("paramRef")
        assert ref is None or ref.get("parameterNotFoundAction") == "Allow", binding
        policies[policy["metadata"]["name"]] = Policy(
            policy["metadata"]["name"], binding["metadata"]["name"], policy["spec"],
            (ref["namespace"], ref["name"]) if ref else None)
    return policies


_CODES = {"Forbidden": 403, "Invalid": 422}


class Admission:
    """The deployed policies as bound in one emulator."""

    def __init__(self) -> None:
        self.policies = _policies()

    def bind_param(self, policy: str, namespace: str, name: str) -> None:
        """Point ``policy``'s binding at the Lease ``namespace/name``."""
        self.policies[policy].param = (namespace, name)

    def check(self, operation: str, group: str, resource: str, kind: str, name: str, namespace: str,
              identity: Identity, obj: Object, old: Object | None,
              read_param: Callable[[str, str], Object | None]) -> None:
        """(Store lock held.) Raise the server's answer when a policy denies this write."""
        base: dict[str, Any] | None = None
        for policy in self.policies.values():
            if not policy.applies(operation, group, resource):
                continue
            param = read_param(*policy.param) if policy.param is not None else None
            if policy.param is not None and param is None:
                continue  # parameterNotFoundAction: Allow
            if base is None:  # converted once, for the first policy that applies
                request = {"operation": operation, "namespace": namespace, "name": name,
                           "userInfo": identity.user_info()}
                base = {"request": to_cel(request), "object": to_cel(obj),
                        "oldObject": to_cel(old) if old is not None else None}
            activation = dict(base)
            if param is not None:
                activation["params"] = to_cel(param)
            try:
                refusals = judge(policy.spec, activation).refusals
            except Exception as exc:  # noqa: BLE001 - an error anywhere in the policy: failurePolicy Fail
                refusals = [f"evaluation error: {exc}"]
            if refusals:
                reason = policy.reason(refusals[0])
                message = (f'{resource.split("/")[0]}{"." + group if group else ""} "{name}" is forbidden: '
                           f"ValidatingAdmissionPolicy '{policy.name}' with binding '{policy.binding}' "
                           f"denied request: {refusals[0]}")
                raise ApiError(_CODES.get(reason, 422), reason, message,
                               {"name": name, "group": group, "kind": kind, "causes": [{"message": message}]})


def refusal(obj: Object, old: Object, lease: Object | None) -> str | None:
    """The fence's message when it refuses replacing ``old`` by ``obj`` with ``lease`` as its param; None when
    it lets the write through (no Lease: every write passes)."""
    admission = Admission()
    try:
        admission.check("UPDATE", "kruntimes.io", "runs/status", "runs", "a", "t", ADMIN, obj, old,
                        lambda namespace, name: lease)
    except ApiError as exc:
        return exc.message
    return None
