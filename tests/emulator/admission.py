"""The ValidatingAdmissionPolicies of ``deploy/`` that the emulator enforces: the scheduler's term fence.

SPEC §3.6 (amended 2026-12-04): a write to ``runs/status`` that sets or changes an
assignment is refused unless ``status.assignment.term`` equals the scheduler Lease's
``spec.leaseTransitions``; writes that keep the assignment, or carry none, pass. A real
server runs the CEL of ``deploy/base/scheduler-fence-policy.yaml`` with the Lease its
binding's ``paramRef`` names as ``params``; this is the same check in Python (the
policy's own test evaluates the CEL beside it, case by case), answered as the API
server answers a denying policy: 403 Forbidden, naming the policy and its binding.

``Fence.lease`` is the binding's paramRef, read from the deploy file; tests point it
at their own namespace's Lease, as a user would edit the binding. No Lease there:
every write passes (``parameterNotFoundAction: Allow``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import yaml

from tests.emulator.statuses import ApiError

POLICY_FILE = Path(__file__).resolve().parents[2] / "deploy" / "base" / "scheduler-fence-policy.yaml"


def _policy() -> tuple[str, str, tuple[str, str]]:
    """The policy's name, its message and its binding's paramRef (namespace, name)."""
    documents = [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]
    policy = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding")
    ref = binding["spec"]["paramRef"]
    message = " ".join(policy["spec"]["validations"][0]["message"].split())
    return policy["metadata"]["name"], message, (ref["namespace"], ref["name"])


NAME, MESSAGE, DEFAULT_LEASE = _policy()


def refusal(obj: dict[str, Any], old: dict[str, Any], lease: dict[str, Any] | None) -> str | None:
    """The policy's message when it refuses replacing ``old`` by ``obj``; None when it lets it through."""
    if lease is None:
        return None  # parameterNotFoundAction: Allow
    assignment = (obj.get("status") or {}).get("assignment")
    if assignment is None:
        return None
    if assignment == (old.get("status") or {}).get("assignment"):
        return None
    current = (lease.get("spec") or {}).get("leaseTransitions", 0)
    if "term" in assignment and assignment["term"] == current:
        return None
    return MESSAGE


class Fence:
    """The fence policy as bound in one emulator: which Lease is its param."""

    def __init__(self) -> None:
        self.lease: tuple[str, str] | None = DEFAULT_LEASE

    def check(self, obj: dict[str, Any], old: dict[str, Any],
              read_lease: Callable[[str, str], dict[str, Any] | None]) -> None:
        """(Store lock held.) Raise the server's 403 when the policy denies this runs/status write."""
        message = refusal(obj, old, read_lease(*self.lease) if self.lease is not None else None)
        if message is not None:
            name = old["metadata"]["name"]
            raise ApiError(403, "Forbidden", f'runs.kruntimes.io "{name}" is forbidden: ValidatingAdmissionPolicy '
                                             f"'{NAME}' with binding '{NAME}' denied request: {message}",
                           {"name": name, "group": "kruntimes.io", "kind": "runs"})
