"""JSON as deep as the API server takes it: decode, encode and copy without recursion limits.

Kubernetes decodes request bodies nested up to 10,000 levels (Go's encoding/json
refuses deeper with "exceeded max depth") and stores and serves them like any other.
Python's `json` and `copy.deepcopy` recurse and give up near 1,000 levels (deepcopy
far earlier), so a hostile Run made the emulator answer 500 where a real server
answers 201 (issue 23 item 6). Each function here takes the fast C path and only
falls back to an iterative walk when that path runs out of recursion.
"""

from __future__ import annotations

import copy as _copy
import json
import re
from typing import Any, Iterator

#: Go's encoding/json limit, which the API server's decoder inherits.
MAX_DEPTH = 10_000

_TOKEN = re.compile(r'\s*(?:("[^"\\]*(?:\\.[^"\\]*)*")|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)'
                    r'|(true|false|null)|([\[\]{},:]))', re.DOTALL)
_LITERALS = {"true": True, "false": False, "null": None}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class TooDeep(ValueError):
    """A body nested deeper than the API server accepts."""


def loads(data: bytes | str) -> Any:
    """`json.loads` as Go's decoder reads JSON, for any depth up to `MAX_DEPTH` (deeper: `TooDeep`).

    Like Go's decoder (and so the API server), it replaces invalid UTF-8 and lone
    UTF-16 surrogates (`"\\ud800"` unpaired) with U+FFFD, where Python would keep a
    surrogate that no UTF-8 answer can carry (issue 23 item 11).
    """
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    try:
        value = json.loads(text)
    except RecursionError:
        value = _parse(text)
    return _without_lone_surrogates(value) if _SURROGATE_ESCAPE.search(text) else value


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """`json.dumps` (default separators, ASCII), for any depth."""
    try:
        return json.dumps(value, sort_keys=sort_keys)
    except RecursionError:
        return "".join(_encode(value, sort_keys))


def copy(value: Any) -> Any:
    """`copy.deepcopy` of a JSON value, for any depth."""
    try:
        return _copy.deepcopy(value)
    except RecursionError:
        return _copy_iteratively(value)


def _parse(text: str) -> Any:
    stack: list[Any] = []  # open containers; a dict's pending key is pushed after it
    keys: list[str | None] = []
    position, end = 0, len(text.rstrip())
    result: Any = None
    done = False
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None or done:
            raise ValueError(f"invalid JSON at character {position}")
        position = match.end()
        string, number, literal, mark = match.groups()
        if mark in ("[", "{"):
            if len(stack) >= MAX_DEPTH:
                raise TooDeep("exceeded max depth")
            stack.append([] if mark == "[" else {})
            keys.append(None)
            continue
        if mark in (",", ":"):
            continue  # the grammar is the C parser's job on every ordinary body; here only depth matters
        if mark in ("]", "}"):
            if not stack:
                raise ValueError(f"invalid JSON at character {match.start()}")
            keys.pop()
            value = stack.pop()
        elif string is not None:
            value = json.loads(string)
            if stack and isinstance(stack[-1], dict) and keys[-1] is None:
                keys[-1] = value
                continue
        elif number is not None:
            value = json.loads(number)
        else:
            value = _LITERALS[literal]
        if not stack:
            result, done = value, True
        elif isinstance(stack[-1], list):
            stack[-1].append(value)
        else:
            stack[-1][keys[-1]] = value
            keys[-1] = None
    if stack or not done:
        raise ValueError("invalid JSON: unexpected end of data")
    return result


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with every surrogate left in a string (json.loads pairs the valid ones) as U+FFFD."""
    def fixed(item: Any) -> Any:
        return _SURROGATE.sub("\ufffd", item) if isinstance(item, str) else item

    root = [value]
    pending: list[Any] = [root]
    while pending:
        container = pending.pop()
        if isinstance(container, dict):
            items = list(container.items())
            container.clear()
            for key, child in items:
                container[fixed(key)] = fixed(child)
                if isinstance(child, (dict, list)):
                    pending.append(child)
        else:
            for index, child in enumerate(container):
                container[index] = fixed(child)
                if isinstance(child, (dict, list)):
                    pending.append(child)
    return root[0]


def _encode(value: Any, sort_keys: bool) -> Iterator[str]:
    stack: list[Iterator[Any]] = [iter([(None, value)])]
    closers: list[str] = [""]
    first: list[bool] = [True]
    while stack:
        item = next(stack[-1], stack)
        if item is stack:
            stack.pop()
            first.pop()
            yield closers.pop()
            continue
        key, child = item
        if not first[-1]:
            yield ", "
        first[-1] = False
        if key is not None:
            yield json.dumps(key) + ": "
        if isinstance(child, dict):
            yield "{"
            stack.append(iter(sorted(child.items()) if sort_keys else child.items()))
            closers.append("}")
            first.append(True)
        elif isinstance(child, (list, tuple)):
            yield "["
            stack.append(iter((None, c) for c in child))
            closers.append("]")
            first.append(True)
        else:
            yield json.dumps(child)


def _copy_iteratively(value: Any) -> Any:
    def shell(item: Any) -> Any:
        return {} if isinstance(item, dict) else [] if isinstance(item, list) else item

    root = shell(value)
    if root is value:
        return value
    pending = [(value, root)]
    while pending:
        source, target = pending.pop()
        children = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in children:
            made = shell(child)
            if isinstance(target, dict):
                target[key] = made
            else:
                target.append(made)
            if made is not child:
                pending.append((child, made))
    return root
