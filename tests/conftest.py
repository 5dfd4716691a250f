"""Fixtures every suite may use.

`default_recursion_limit`: cel-python (the device-selector oracle and the policy tests'
CEL evaluator) raises the interpreter's recursion limit to 2,500 for the whole process
when an `Environment` is built, and test modules build one at import. Tests about what a
production process does with deeply nested JSON (which never loads cel-python) must run
at the interpreter's own limit, or a 2,000-level object decodes where in production it
would not.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

#: Read before any test module is imported (the root conftest loads first).
INTERPRETER_RECURSION_LIMIT = sys.getrecursionlimit()


@pytest.fixture
def default_recursion_limit() -> Iterator[int]:
    """The interpreter's own recursion limit for the test's duration, restored after."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(INTERPRETER_RECURSION_LIMIT)
    try:
        yield INTERPRETER_RECURSION_LIMIT
    finally:
        sys.setrecursionlimit(before)
