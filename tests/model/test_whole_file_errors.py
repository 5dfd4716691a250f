"""Input `simulate` must refuse as a whole, naming the documents (issue 12 #4, #6).

Kept apart from the differential test, whose workloads are always acceptable:
here a whole-file error is the expected outcome, not a Run decision.
"""

from __future__ import annotations

import copy
import random
import re
from datetime import date, datetime

import pytest

from kruntimes.simulate import InputError, load_documents, simulate
from tests.model import planner, workloads
from tests.model.workloads import NOW, pod, run


def _simulate(documents: list[dict]) -> None:
    simulate(load_documents([("w.yaml", workloads.to_yaml(documents))]), NOW)


def _workload(seed: int) -> list[dict]:
    """A random acceptable workload with at least one Pod and one Run to duplicate."""
    return [pod("p9", capacity={"runs": "2"})] + workloads.workload(random.Random(seed)) + [run("r9")]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["Pod", "Run"])
def test_a_duplicate_object_is_an_error_naming_both_documents(kind: str, seed: int) -> None:
    documents = _workload(seed)
    picks = [i for i, d in enumerate(documents) if d["kind"] == kind]
    original = random.Random(seed).choice(picks)
    duplicate = copy.deepcopy(documents[original])
    # Same kind/namespace/name; an omitted namespace is "default": spell it out or drop it.
    meta = duplicate["metadata"]
    if meta.get("namespace", "default") == "default":
        meta.pop("namespace", None) if seed % 2 else meta.update(namespace="default")
    if kind == "Run":
        duplicate["spec"]["workspace"] = "changed"  # a duplicate need not be identical
    at = random.Random(seed).randint(original + 1, len(documents))
    documents.insert(at, duplicate)
    with pytest.raises(planner.ModelInputError):
        planner.simulate(documents, NOW)
    with pytest.raises(InputError) as raised:
        _simulate(documents)
    named = {int(n) for n in re.findall(r"document (\d+)", str(raised.value))}
    assert {original + 1, at + 1} <= named


def test_a_pod_and_a_run_of_the_same_name_are_not_duplicates() -> None:
    _simulate([pod("x"), run("x")])


@pytest.mark.parametrize("created", [
    "yesterday", "2026-11-29T12:00:00", "2026-11-29", "2026-13-01T00:00:00Z", "", "2026-11-29T12:00Z",
    date(2026, 11, 29),               # an unquoted YAML date: no time, no zone
    datetime(2026, 11, 29, 12, 0),    # an unquoted YAML timestamp without a zone: no instant
], ids=repr)
def test_an_unparsable_creation_time_is_an_error_naming_the_document(created: object) -> None:
    documents = [pod("p"), run("ok"), run("bad", created=created)]
    with pytest.raises(planner.ModelInputError):
        planner.simulate(documents, NOW)
    with pytest.raises(InputError, match=r"document 3\b"):
        _simulate(documents)
