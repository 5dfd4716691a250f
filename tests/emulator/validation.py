"""Field validation the API server applies before it stores an object, for the emulator's store.

What is checked, and the upstream rule each follows:

- object metadata (``ValidateObjectMeta``): a name that is an RFC 1123 subdomain (a
  label for cluster-scoped objects), label keys and values of the label syntax,
  annotation keys that are qualified names (``ValidateAnnotations``: at most one ``/``,
  a DNS subdomain prefix, a name part of at most 63 characters; checked lowercased)
  and annotations of at most 256 KiB in all;
- an update of a custom resource must name the ``resourceVersion`` it read
  ("metadata.resourceVersion: Invalid value: 0: must be specified for an update", as 1.37 says:
  custom resources do not allow unconditional updates, pods and Leases do);
- Leases (``ValidateLeaseSpec``): ``leaseDurationSeconds`` and ``leaseTransitions`` are
  integers, the duration greater than 0 and the transitions not negative;
  ``acquireTime``/``renewTime`` are MicroTimes, RFC 3339 with exactly six fractional
  digits. A value of the wrong JSON type or an unparsable time never reaches
  validation: decoding the typed object fails first, which is a 400, not a 422;
- ``format: date-time`` in a CRD schema (the OpenAPI ``strfmt`` date-time: RFC 3339, a
  ``T`` or ``t`` between date and time, optional fraction, ``Z`` or an offset).
"""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from tests.emulator.resources import Resource
from tests.emulator.statuses import ApiError

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


#: apimachinery's TotalAnnotationSizeLimitB.
ANNOTATIONS_SIZE_LIMIT = 256 * 1024


def is_date_time(value: Any) -> bool:
    """True for an RFC 3339 date-time as the OpenAPI ``date-time`` format accepts it."""
    found = _DATE_TIME.match(value) if isinstance(value, str) else None
    if not found:
        return False
    year, month, day, hour, minute, second = (int(part) for part in found.groups()[:6])
    try:
        date(year, month, day)
    except ValueError:
        return False
    return hour <= 23 and minute <= 59 and second <= 59


def metadata(resource: Resource, meta: dict[str, Any]) -> None:
    name = meta.get("name")
    problems = []
    pattern, what = (_DNS_LABEL, "RFC 1123 label") if not resource.namespaced else (_SUBDOMAIN, "RFC 1123 subdomain")
    if not name:
        problems.append("metadata.name: Required value: name or generateName is required")
    elif not isinstance(name, str) or len(name) > 253 or not pattern.match(name):
        problems.append(f'metadata.name: Invalid value: "{name}": a lowercase {what} must consist of lower case '
                        "alphanumeric characters, '-' or '.'")
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if (prefix and not _SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(label) or len(label) > 63:
            problems.append(f'metadata.labels: Invalid value: "{key}": name part must consist of alphanumeric '
                            "characters, '-', '_' or '.'")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string '
                            "or consist of alphanumeric characters, '-', '_' or '.'")
    problems += annotation_problems(meta.get("annotations") or {})
    if problems:
        raise invalid(resource, {"metadata": meta}, problems)




def is_qualified_name(key: str) -> bool:
    parts = key.split("/")
    if len(parts) > 2 or (len(parts) == 2 and (not parts[0] or len(parts[0]) > 253
                                               or not _SUBDOMAIN.match(parts[0]))):
        return False
    return len(parts[-1]) <= 63 and bool(_LABEL_NAME.match(parts[-1]))


def annotation_problems(annotations: dict[str, Any]) -> list[str]:
    problems = [f'metadata.annotations: Invalid value: "{key}": a valid label key must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an alphanumeric character with an "
                "optional DNS subdomain prefix and '/'"
                for key in annotations if not is_qualified_name(key.lower())]
    # apimachinery's ValidateAnnotationsSize: keys and values together, in bytes.
    size = sum(len(str(key).encode()) + len(value.encode() if isinstance(value, str) else b"")
               for key, value in annotations.items())
    if size > ANNOTATIONS_SIZE_LIMIT:
        problems.append(f"metadata.annotations: Too long: may not be more than {ANNOTATIONS_SIZE_LIMIT} bytes")
    return problems


def update_names_a_version(resource: Resource, name: str, meta: dict[str, Any]) -> None:
    """Custom resources refuse an unconditional update (PUT without ``resourceVersion``)."""
    if resource.custom and not meta.get("resourceVersion"):
        raise invalid(resource, {"metadata": {"name": name}},
                      ["metadata.resourceVersion: Invalid value: 0: must be specified for an update"])


def lease(resource: Resource, obj: dict[str, Any]) -> None:
    """Decode (400) then validate (422) a Lease's spec."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise _undecodable(resource, "spec", "object", spec)
    for field in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _undecodable(resource, f"spec.{field}", "int32", value)
    for field in ("acquireTime", "renewTime"):
        value = spec.get(field)
        if value is not None and not (isinstance(value, str) and _MICRO_TIME.match(value) and is_date_time(value)):
            raise ApiError(400, "BadRequest",
                           f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" as '
                           f'"2006-01-02T15:04:05.000000Z07:00": cannot parse spec.{field}')
    problems = []
    if spec.get("leaseDurationSeconds") is not None and spec["leaseDurationSeconds"] <= 0:
        problems.append(f"spec.leaseDurationSeconds: Invalid value: {spec['leaseDurationSeconds']}: "
                        "must be greater than 0")
    if spec.get("leaseTransitions") is not None and spec["leaseTransitions"] < 0:
        problems.append(f"spec.leaseTransitions: Invalid value: {spec['leaseTransitions']}: "
                        "must be greater than or equal to 0")
    if problems:
        raise invalid(resource, obj, problems)


# events.k8s.io/v1 (ValidateEventCreate / ValidateEventUpdate for the v1 API).
_EVENT_IMMUTABLE = ("eventTime", "action", "reason", "reportingController", "reportingInstance", "regarding",
                    "related", "type")
_EVENT_FIELD_LIMIT = 128
_EVENT_NOTE_LIMIT = 1024


def event(resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Decode (400) then validate (422) an events.k8s.io/v1 Event, as the API server does for v1."""
    # eventTime and series.lastObservedTime are MicroTimes (exactly six fractional digits),
    # the deprecated timestamps plain Times.
    series = obj.get("series")
    if series is not None and not isinstance(series, dict):
        raise _undecodable(resource, "series", "v1.EventSeries", series)
    times = [(field, obj.get(field), field == "eventTime")
             for field in ("eventTime", "deprecatedFirstTimestamp", "deprecatedLastTimestamp")]
    times.append(("series.lastObservedTime", (series or {}).get("lastObservedTime"), True))
    for field, value, micro in times:
        if value is not None and not (isinstance(value, str) and is_date_time(value)
                                      and (not micro or _MICRO_TIME.match(value))):
            raise ApiError(400, "BadRequest", f'Event in version "v1" cannot be handled as a Event: parsing time '
                                              f'"{value}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse {field}')
    problems = []
    if not obj.get("eventTime"):
        problems.append("eventTime: Required value")
    # The wording is the server's own (1.37), odd empty value included.
    if obj.get("type") not in ("Normal", "Warning"):
        problems.append(f'type: Invalid value: "": has invalid value: {obj.get("type") or ""}')
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    regarding = (obj.get("regarding") or {}).get("namespace") or ""
    if (regarding and regarding != namespace) or (not regarding and namespace not in ("", "default")):
        problems.append(f'involvedObject.namespace: Invalid value: "{regarding}": does not match event.namespace')
    controller = obj.get("reportingController") or ""
    if not controller:
        problems.append("reportingController: Required value")
    elif "/" not in controller or not _SUBDOMAIN.match(controller.split("/", 1)[0]):
        problems.append(f'reportingController: Invalid value: "{controller}": must be a domain-prefixed path '
                        "(such as \"acme.io/foo\")")
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        value = obj.get(field) or ""
        if not value and field != "reportingController":
            problems.append(f"{field}: Required value")
        elif len(value) > _EVENT_FIELD_LIMIT:
            problems.append(f"{field}: Too long: may not be longer than {_EVENT_FIELD_LIMIT}")
    if len((obj.get("note") or "").encode()) > _EVENT_NOTE_LIMIT:
        problems.append(f"note: Too long: may not be longer than {_EVENT_NOTE_LIMIT}")
    if series is not None:
        if not isinstance(series.get("count"), int) or series["count"] < 2:
            problems.append(f"series.count: Invalid value: {series.get('count')}: should be at least 2")
        if not series.get("lastObservedTime"):
            problems.append("series.lastObservedTime: Required value")
    if old is not None:
        # The server quotes the new value (a string; other values are printed as Go does).
        problems += [f"{field}: Invalid value: {json.dumps(obj.get(field))}: field is immutable"
                     for field in _EVENT_IMMUTABLE if obj.get(field) != old.get(field)]
    if problems:
        raise invalid(resource, obj, problems)


def _undecodable(resource: Resource, field: str, wanted: str, value: Any) -> ApiError:
    return ApiError(400, "BadRequest",
                    f'{resource.kind} in version "{resource.version}" cannot be handled as a {resource.kind}: '
                    f"json: cannot unmarshal {type(value).__name__} into Go struct field {field} of type {wanted}")


def invalid(resource: Resource, obj: dict[str, Any], problems: list[str]) -> ApiError:
    name = (obj.get("metadata") or {}).get("name") or ""
    kind = f"{resource.kind}.{resource.group}" if resource.group and resource.custom else resource.kind
    causes = [{"reason": "FieldValueInvalid", "message": p, "field": p.split(":", 1)[0]} for p in problems]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {"; ".join(problems)}',
                    {"name": name, "group": resource.group, "kind": resource.kind, "causes": causes})
