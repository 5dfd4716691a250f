"""Semantic versions (semver 2.0) as device attribute values and as CEL `semver(s)` values.

SPEC §7.1 types a `version` attribute as semver 2.0, and §7.4 lets selectors compare
versions with upstream's `semver` library (`compareTo`, `isGreaterThan`, `isLessThan`,
`major`/`minor`/`patch`). Upstream parses strictly (blang/semver `Parse`): no leading
`v`, no missing parts, no leading zeros; ordering follows semver 2.0 §11 and ignores
build metadata, and so does equality. Parts are bounded to int64 because CEL's `major()`
returns an int.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PART = 2**63 - 1

_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    rf"(?:-({_IDENT}(?:\.{_IDENT})*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?",
    re.ASCII,
)


class InvalidVersion(ValueError):
    """Text that is not a semver 2.0 version (or whose numbers exceed int64)."""


@dataclass(frozen=True, order=False)
class Version:
    """One parsed version; ``prerelease`` holds ints for numeric identifiers, str otherwise."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    def compare(self, other: Version) -> int:
        """-1, 0 or 1 as semver 2.0 §11 orders the two (build metadata never counts)."""
        left, right = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if left != right:
            return -1 if left < right else 1
        if self.prerelease == other.prerelease:
            return 0
        # A version without pre-release identifiers has the higher precedence.
        if not self.prerelease:
            return 1
        if not other.prerelease:
            return -1
        for a, b in zip(self.prerelease, other.prerelease):
            if a == b:
                continue
            if isinstance(a, int) and isinstance(b, int):
                return -1 if a < b else 1
            if isinstance(a, int):  # numeric identifiers are lower than alphanumeric ones
                return -1
            if isinstance(b, int):
                return 1
            return -1 if a < b else 1
        return -1 if len(self.prerelease) < len(other.prerelease) else 1


def parse(text: object) -> Version:
    """The version ``text`` names, else InvalidVersion."""
    if not isinstance(text, str):
        raise InvalidVersion(f"a version must be a string, not {type(text).__name__}")
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise InvalidVersion(f"{text[:72]!r} is not a semantic version (semver 2.0, e.g. \"1.2.3\" or \"2.0.0-rc.1\")")
    parts = [int(match[i]) for i in (1, 2, 3)]
    if max(parts) > MAX_PART:
        raise InvalidVersion(f"{text[:72]!r} has a number above {MAX_PART}")
    prerelease = tuple(int(p) if p.isdigit() else p for p in match[4].split(".")) if match[4] else ()
    return Version(parts[0], parts[1], parts[2], prerelease)
