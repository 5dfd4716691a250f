"""Fixtures every suite may use.

`default_recursion_limit`: cel-python (the device-selector oracle and the policy tests'
CEL evaluator) raises the interpreter's recursion limit to 2,500 for the whole process
when an `Environment` is built, and test modules build one at import. Tests about what a
production process does with deeply nested JSON (which never loads cel-python) must run
at the interpreter's own limit, or a 2,000-level object decodes where in production it
would not.

`root_log_handlers` (every test): a command run in-process sets up logging as a process
does (`logging.basicConfig`: a handler on the stderr pytest captures for that test). Left
on the root logger, it writes a later test's log lines to a closed stream, and logging
prints "--- Logging error ---" into whatever that test captures (seen failing
tests/ui/test_bench_ui.py after tests/journal, tests/unit and tests/replay in one session).
"""

from __future__ import annotations

import logging
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


@pytest.fixture(autouse=True)
def root_log_handlers() -> Iterator[None]:
    """The root logger's handlers and level as they were before the test, after it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)  # not closed: its stream is pytest's
    root.setLevel(level)
