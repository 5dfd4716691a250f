"""kruntimes' selector tokenizer never lets a call through that a CEL parser sees (SPEC §7.4).

The static rules work on tokens, so a lexing mistake (a quote, a raw string, a comment
or a triple-quoted string read differently from CEL) could hide a macro or a
forbidden call from them. Random text built from CEL's tricky fragments: whenever the
rules accept it and celpy's parser (an independent lexer and grammar) parses it, every
call in celpy's tree must be one the rules allow.
"""

from __future__ import annotations

import celpy
import lark
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from kruntimes.devices import cel_rules

FRAGMENTS = ["device", ".", "attributes", "[", "]", '"d"', "'d'", "(", ")", ",", " ", "\n", "x", "1", "true",
             "&&", "||", "!", "+", "==", "?", ":", "exists", "all", "map", "filter", "exists_one", "timestamp",
             "has", "size", "startsWith", "matches", "cel", "bind", "r", "R", "b", '"', "'", '"""', "'''", "\\",
             "//", "in", "[1]", "{", "}", "0x1", "1u", "1.5", "e", "-"]
SOUP = st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join)
NAMES = st.sampled_from(["exists", "all", "map", "filter", "exists_one", "timestamp", "bind", "size", "has",
                         "startsWith", "matches", "quantity"])
# A call wrapped in short soups, so quotes, raw strings and comments around it can trap a lexer.
CALL = st.builds(lambda before, receiver, name, args, after: f"{before}{receiver}{name}({args}){after}",
                 SOUP, st.sampled_from(["", "x.", "[1].", "cel.", '"s".', "device.attributes.", ")."]), NAMES,
                 st.sampled_from(["", "x", "x, x > 0", '"1"', "v, true", "a, device.attributes[\"d\"], a"]), SOUP)
TEXTS = st.one_of(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=24).map("".join), CALL,
                  st.builds(lambda a, b: a + " && " + b, CALL, CALL))
ENVIRONMENT = celpy.Environment()


def calls(tree: lark.Tree) -> list[tuple[str, str | None]]:
    """(name, receiver identifier if a plain identifier) of every call in a celpy parse tree."""
    found = []
    for node in tree.iter_subtrees():
        if node.data in ("ident_arg", "dot_ident_arg"):
            found.append((str(node.children[0]), None))
        elif node.data == "member_dot_arg":
            receiver = node.children[0]
            primary = receiver.children[0] if isinstance(receiver, lark.Tree) and receiver.children else None
            ident = primary.children[0] if isinstance(primary, lark.Tree) and primary.data == "primary" else None
            name = ident.children[0] if isinstance(ident, lark.Tree) and ident.data == "ident" else None
            found.append((str(node.children[1]), str(name) if name is not None else None))
    return found


@settings(max_examples=3000, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(TEXTS)
def test_every_call_a_parser_sees_in_an_accepted_selector_is_allowed(text: str) -> None:
    try:
        cel_rules.check(text)
    except cel_rules.SelectorRejected:
        return
    try:
        tree = ENVIRONMENT.compile(text)
    except Exception:  # noqa: BLE001 - not CEL at all: the engine refuses it too
        return
    note(text)
    for name, receiver in calls(tree):
        assert name in cel_rules.ALLOWED_CALLS or (name == "bind" and receiver == "cel"), (name, receiver)
