"""A Runtime's pod template, judged before the controller builds pods from it (SPEC §4.2; issue 23 item 8).

The template is a Kubernetes pod template, and the API server is its judge: fields
the controller does not know (a typo, or a pod field newer than the Python client's
models) are passed through for the server to keep or prune, exactly as `kubectl
create` would; the controller never validates the pod against the client's models,
which refused such a template with a traceback on every pass.

What the controller must check itself is only the shape it reads and edits to add
what kruntimes owns (labels, annotations, the runtimed container, its env, mounts and
work volume): where that shape is wrong, building a pod would fail, so the Runtime
reports the problem in `status.conditions` (type `TemplateValid`) and no pod is
created until `spec.template` is fixed. A template the server refuses is reported
the same way, with the server's message (`apply`).
"""

from __future__ import annotations

from typing import Any, Mapping

from kruntimes import wire

CONDITION_TEMPLATE = wire.CONDITION_TEMPLATE_VALID
REASON_VALID = "Valid"
REASON_INVALID = "InvalidTemplate"
REASON_REFUSED = "PodRefused"
#: Nesting allowed in a template; a real pod spec stays far below, and copying it never runs out of stack.
MAX_DEPTH = 64
#: A condition message at most this long (the server's Status message can be long).
MESSAGE_LIMIT = 1024


def problem(template: Any) -> str | None:
    """Why pods cannot be built from `template` (a path and what it must be), or None."""
    if not isinstance(template, Mapping):
        return "spec.template must be an object (a pod template)"
    if _deeper_than(template, MAX_DEPTH):
        return f"spec.template is nested deeper than {MAX_DEPTH} levels"
    meta = template.get("metadata")
    if meta is not None:
        if not isinstance(meta, Mapping):
            return "spec.template.metadata must be an object"
        for part in ("labels", "annotations"):
            found = _string_map_problem(meta.get(part), f"spec.template.metadata.{part}")
            if found:
                return found
    spec = template.get("spec")
    if spec is None:
        return None  # the server says what a pod without a spec lacks
    if not isinstance(spec, Mapping):
        return "spec.template.spec must be an object"
    for part in ("containers", "volumes"):
        found = _objects_problem(spec.get(part), f"spec.template.spec.{part}")
        if found:
            return found
    for i, container in enumerate(spec.get("containers") or []):
        for part in ("env", "volumeMounts"):
            found = _objects_problem(container.get(part), f"spec.template.spec.containers[{i}].{part}")
            if found:
                return found
    return None


def bounded(message: str) -> str:
    """`message` cut to `MESSAGE_LIMIT` characters."""
    return message if len(message) <= MESSAGE_LIMIT else message[:MESSAGE_LIMIT - 3] + "..."


def _string_map_problem(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return f"{path} must be a map of strings"
    return None


def _objects_problem(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, list):
        return f"{path} must be a list"
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            return f"{path}[{i}] must be an object"
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, Mapping):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return False
