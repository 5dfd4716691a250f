"""Plugin scores as every command and page prints them: one form, one legend, named fields in JSON.

Below both the CLI and the web view (pure standard library), so that the two cannot
print one score two ways (issue 27: the Run page showed ``raw [9,40,9,40]`` where the
CLI showed ``1/5 Σ1/5``).

A score prints as ``normalised (raw) ×weight``. LeastLoaded's raw score is the exact
projected utilisation (usage + request) / capacity of the most-used resource and its
sum over resources, recorded as four integers; it prints as ``5/4 Σ7/4`` and reads
"the fullest resource would be at 5/4 of its capacity (over it), 7/4 summed". In JSON
it is ``{"max": "5/4", "sum": "7/4"}``, never the positional array the journal keeps.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

LEGEND = ("scores: normalised 0-100 (raw) ×weight; LeastLoaded raw 5/4 Σ7/4 = (usage+request)/capacity of the "
          "fullest resource (above 1 is over capacity), Σ summed over resources; PreferredRunAffinity raw = "
          "the weights of matching preferred terms")


def _raw_value(raw: Any) -> Any:
    """The raw score as a value: the journal's views hand it over as JSON text."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _fraction(numerator: int, denominator: int) -> str:
    return str(Fraction(numerator, denominator)) if denominator else f"{numerator}/0"


def named(plugin: str, raw: Any) -> Any:
    """The raw score with named fields (LeastLoaded's four integers become max and sum)."""
    value = _raw_value(raw)
    if plugin == "LeastLoaded" and isinstance(value, list) and len(value) == 4:
        return {"max": _fraction(value[0], value[1]), "sum": _fraction(value[2], value[3])}
    return value


def raw_text(plugin: str, raw: Any) -> str:
    value = named(plugin, raw)
    if isinstance(value, dict) and set(value) == {"max", "sum"}:
        return f"{value['max']} Σ{value['sum']}"
    if isinstance(value, list):
        return "/".join(map(str, value))
    return str(value)


def text(plugin: str, normalized: Any, raw: Any, weight: Any = None) -> str:
    """``normalised (raw) ×weight``; without a known weight the ``×`` part is left out."""
    return f"{normalized} ({raw_text(plugin, raw)})" + ("" if weight is None else f" ×{weight}")


def with_named_raws(value: Any) -> Any:
    """A JSON document with named fields where the journal's payloads keep positional arrays.

    Recorded cycles hold ``scores`` as ``[plugin, raw, normalised]`` (or, in the
    configuration, ``[plugin, weight]``) and ``rejections`` as ``[plugin, reason, pods]``;
    printed, each becomes an object, and every raw score is named (see ``named``).
    """
    if isinstance(value, list):
        return [with_named_raws(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: with_named_raws(v) for k, v in value.items()}
    for key, fields in _POSITIONAL.items():
        found = value.get(key)
        if isinstance(found, list) and found and all(isinstance(s, list) for s in found):
            shapes = {len(s) for s in found}
            if len(shapes) == 1 and shapes.pop() in fields:
                out[key] = [dict(zip(fields[len(s)], s)) for s in found]
    found = out.get("scores")
    if isinstance(found, list) and all(isinstance(s, dict) and "plugin" in s for s in found):
        out["scores"] = [s if "raw" not in s else {**s, "raw": named(s["plugin"], s["raw"])} for s in found]
    elif isinstance(found, dict) and all(isinstance(s, dict) and "raw" in s for s in found.values()):
        out["scores"] = {p: {**s, "raw": named(p, s["raw"])} for p, s in found.items()}
    return out


# The positional arrays of recorded payloads, by key and length: their field names.
_POSITIONAL: dict[str, dict[int, tuple[str, ...]]] = {
    "scores": {3: ("plugin", "raw", "normalized"), 2: ("plugin", "weight")},
    "rejections": {3: ("plugin", "reason", "pods")},
}
