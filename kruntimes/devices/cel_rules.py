"""The static rules every device selector passes before any engine sees it (SPEC §7.4).

A selector is user text that the scheduler evaluates against every device of every
candidate pod, so its cost must be known before it runs: no runtime meter and no wall
clock may decide a placement (replay must reach the same verdicts). kruntimes' own
tokenizer enforces, independently of the engine:

- at most 4 KiB (UTF-8);
- only the calls §7.4 lists (global or member form), and no comprehension macros
  (`all`, `exists`, `exists_one`, `map`, `filter`), which are the only loops CEL has;
- `cel.bind` binds only `device.attributes["<domain>"]` or `device.capacity["<domain>"]`,
  so a bound value is never a string built by the expression (no doubling chains);
- literal `quantity("…")` / `semver("…")` arguments parse (a typo fails the Run once,
  here, rather than erring on every device);
- cost = tokens + 64 × (scanning calls + `in`) ≤ 10,000, where a scanning call is one
  whose work grows with a string's length.

With these, evaluation is linear in the expression. A rejection is `SelectorRejected`,
whose message says what to change; the Run that carries it fails terminally (§3.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kruntimes.devices import quantities, semver

MAX_BYTES = 4096
MAX_COST = 10_000
SCAN_WEIGHT = 64

ALLOWED_CALLS = frozenset({
    "has", "size", "int", "string", "startsWith", "endsWith", "contains", "matches",
    "lowerAscii", "upperAscii", "quantity", "semver", "compareTo", "isGreaterThan",
    "isLessThan", "asInteger", "major", "minor", "patch",
})
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Calls whose work grows with the length of a string (or list) they read.
SCANNING_CALLS = frozenset({"startsWith", "endsWith", "contains", "matches", "lowerAscii", "upperAscii"})

# One alternative per token kind; order matters (triple quotes before single, floats
# before ints, two-character operators before one-character ones). Raw strings have
# no escapes (CEL's lexer ends `r"\"` at the second quote), so a backslash there
# must not hide the tokens that follow.
_TOKEN = re.compile(r"""
    (?P<space>[ \t\n\r\f]+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*")
                |[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"
                |'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))
  | (?P<number>(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|\.[0-9]+(?:[eE][+-]?[0-9]+)?
                |0[xX][0-9a-fA-F]+[uU]?|[0-9]+[uU]?))
  | (?P<ident>[_A-Za-z][_A-Za-z0-9]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[<>!+\-*/%?:.,\[\](){}])
""", re.VERBOSE | re.DOTALL)


class SelectorRejected(ValueError):
    """A selector that breaks a static rule; the message says which and what to do."""


@dataclass(frozen=True)
class Token:
    kind: str  # "string", "number", "ident" or "op"
    text: str
    offset: int


@dataclass(frozen=True)
class Checked:
    """What the rules learnt of an accepted selector."""

    expression: str
    cost: int
    # Domains the expression indexes with a literal (`attributes["d"]`, `capacity["d"]`):
    # the engine shows each as an empty map where a device lacks it (§7.4).
    domains: frozenset[str]
    # Literal `matches` patterns as written (token text): the engine compiles each once,
    # so a bad pattern fails the selector, as upstream's compile-time regex check does.
    patterns: tuple[str, ...] = ()


def tokenize(expression: str) -> list[Token]:
    """The tokens of ``expression`` (spaces and comments dropped), else SelectorRejected."""
    tokens: list[Token] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            shown = expression[position:position + 12]
            raise SelectorRejected(f"unexpected text {shown!r} at offset {position} "
                                   "(an unterminated string, or a character CEL does not have)")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append(Token(kind, match.group(), position))
        position = match.end()
    return tokens


def check(expression: object) -> Checked:
    """Apply every static rule to ``expression``; return what was learnt, else SelectorRejected."""
    if not isinstance(expression, str):
        raise SelectorRejected(f"a selector expression must be a string, not {type(expression).__name__}")
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise SelectorRejected(f"the expression is {size:,} bytes; at most {MAX_BYTES:,} are allowed")
    if not expression.strip():
        raise SelectorRejected("the expression is empty")
    tokens = tokenize(expression)
    scans = 0
    domains: set[str] = set()
    patterns: list[str] = []
    for i, token in enumerate(tokens):
        if token.kind == "ident" and token.text == "in":
            scans += 1
        if token.kind == "ident" and token.text in ("attributes", "capacity") and _is_member(tokens, i):
            domain = _literal_index(tokens, i + 1)
            if domain is not None:
                domains.add(domain)
        if not (token.kind == "ident" and _next_is(tokens, i + 1, "(")):
            continue
        name = token.text
        if name in MACROS:
            raise SelectorRejected(f"comprehension macros are not allowed ({name!r} at offset {token.offset}): "
                                   "compare attributes directly, e.g. device.attributes[\"d\"].x == 1")
        if name == "bind" and _is_member(tokens, i) and tokens[i - 2].text == "cel" and not _is_member(tokens, i - 2):
            _check_bind(tokens, i + 2)
            continue
        if name not in ALLOWED_CALLS:
            raise SelectorRejected(f"the call {name!r} at offset {token.offset} is not allowed; allowed: "
                                   + ", ".join(sorted(ALLOWED_CALLS)) + ", cel.bind")
        if name in SCANNING_CALLS:
            scans += 1
        if name == "matches" and i + 3 < len(tokens) and tokens[i + 2].kind == "string" and _next_is(tokens, i + 3, ")"):
            patterns.append(tokens[i + 2].text)
        if name in ("quantity", "semver") and not _is_member(tokens, i):
            _check_literal_argument(name, tokens, i + 2)
    cost = len(tokens) + SCAN_WEIGHT * scans
    if cost > MAX_COST:
        raise SelectorRejected(f"the expression costs {cost:,} (tokens + {SCAN_WEIGHT} per scanning call or "
                               f"'in'); at most {MAX_COST:,} is allowed")
    return Checked(expression, cost, frozenset(domains), tuple(patterns))


def _next_is(tokens: list[Token], i: int, text: str) -> bool:
    return i < len(tokens) and tokens[i].kind == "op" and tokens[i].text == text


def _is_member(tokens: list[Token], i: int) -> bool:
    return i > 0 and tokens[i - 1].kind == "op" and tokens[i - 1].text == "."


def _plain_string(token: Token) -> str | None:
    """The value of a string literal without prefix or escapes, else None."""
    if token.kind != "string" or token.text[0] not in "'\"" or "\\" in token.text:
        return None
    quote = 3 if token.text[:3] in ("'''", '"""') else 1
    return token.text[quote:-quote]


def _literal_index(tokens: list[Token], i: int) -> str | None:
    """The domain of `[ "<d>" ]` starting at ``i``, if it is written so."""
    if _next_is(tokens, i, "[") and i + 2 < len(tokens) and _next_is(tokens, i + 2, "]"):
        return _plain_string(tokens[i + 1])
    return None


def _check_bind(tokens: list[Token], i: int) -> None:
    """`cel.bind(name, device.attributes["d"] | device.capacity["d"], body)`, from the name on."""
    shape = [t.text for t in tokens[i:i + 9]]
    ok = (len(shape) == 9 and tokens[i].kind == "ident" and shape[1] == "," and shape[2] == "device"
          and shape[3] == "." and shape[4] in ("attributes", "capacity") and shape[5] == "["
          and _plain_string(tokens[i + 6]) is not None and shape[7] == "]" and shape[8] == ",")
    if not ok:
        offset = tokens[min(i, len(tokens) - 1)].offset if tokens else 0
        raise SelectorRejected(f"cel.bind at offset {offset} may bind only device.attributes[\"<domain>\"] "
                               "or device.capacity[\"<domain>\"], e.g. "
                               "cel.bind(g, device.attributes[\"gpu.example.com\"], g.model == \"a100\")")


def _check_literal_argument(name: str, tokens: list[Token], i: int) -> None:
    """A `quantity("…")`/`semver("…")` whose only argument is a literal must parse."""
    if not (i < len(tokens) and tokens[i].kind == "string" and _next_is(tokens, i + 1, ")")):
        return
    value = _plain_string(tokens[i])
    if value is None:
        raise SelectorRejected(f"the {name}() argument at offset {tokens[i].offset} must be a plain string "
                               f"literal (no prefix or escapes), e.g. {name}(\"{'40Gi' if name == 'quantity' else '1.2.3'}\")")
    try:
        quantities.parse_count(value) if name == "quantity" else semver.parse(value)
    except ValueError as exc:
        raise SelectorRejected(f"{name}({tokens[i].text[:72]}) at offset {tokens[i].offset} does not parse: {exc}") from exc
