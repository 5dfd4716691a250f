"""Kubernetes name rules for resource names, label keys and label values.

A Run's resource names (``runs``, ``example.com/gpu``) and its selectors' label keys are
Kubernetes qualified names; label values follow the label-value rule. These mirror
apimachinery's ``IsQualifiedName`` and ``IsValidLabelValue`` so that what kruntimes
accepts is what the API server would accept. Each check returns a message rather than
raising, so callers can phrase the failure for their own field.
"""

import re

from kruntimes.api import quantity

_NAME_MAX = 63
_PREFIX_MAX = 253
# Long enough to show any valid name part whole, short enough to keep messages bounded.
_SHOWN_MAX = 72
# Anchored with fullmatch and re.ASCII: Kubernetes means ASCII letters and digits only.
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)
_DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII
)

_CHARSET = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"


def qualified_name_error(
    name: str, *, what: str = "resource name", example: str = '"runs" or "example.com/gpu"'
) -> str | None:
    """Return None if ``name`` is a Kubernetes qualified name, else why it is not.

    A qualified name is an optional DNS-1123 subdomain prefix (≤253 characters) and
    ``/``, then a name part of ≤63 alphanumerics, ``-``, ``_`` or ``.``.
    """
    problem = _qualified_name_problem(name)
    if problem is None:
        return None
    shown = quantity.describe_input(name, _SHOWN_MAX)
    return f"{what} {shown} is not a valid Kubernetes qualified name: {problem} (e.g. {example})"


def label_value_error(value: str) -> str | None:
    """Return None if ``value`` is a valid label value (empty allowed), else why not."""
    if not isinstance(value, str):
        return f"label value {quantity.describe_input(value, _SHOWN_MAX)} must be a string"
    if value == "":
        return None
    if len(value) > _NAME_MAX:
        problem = f"must be at most {_NAME_MAX} characters"
    elif not _NAME_PART.fullmatch(value):
        problem = f"must consist of {_CHARSET}"
    else:
        return None
    shown = quantity.describe_input(value, _SHOWN_MAX)
    return f'label value {shown} is not valid: {problem} (e.g. "gpu" or "team-a")'


def _qualified_name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return "it must be a string"
    parts = name.split("/")
    if len(parts) > 2:
        return "it may contain at most one '/'"
    if len(parts) == 2:
        prefix, part = parts
        if not prefix:
            return "the prefix before '/' must not be empty"
        if len(prefix) > _PREFIX_MAX:
            return f"the prefix must be at most {_PREFIX_MAX} characters"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return "the prefix must be a lowercase DNS subdomain such as example.com"
    else:
        part = name
    if not part:
        return "the name part must not be empty"
    if len(part) > _NAME_MAX:
        return f"the name part must be at most {_NAME_MAX} characters"
    if not _NAME_PART.fullmatch(part):
        return f"the name part must consist of {_CHARSET}"
    return None
