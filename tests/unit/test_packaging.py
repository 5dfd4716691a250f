"""The journal's Alembic scripts live at the top-level migrations/ and ship in the wheel.

A wheel installs them as ``kruntimes.migrations`` (pyproject.toml maps the directory),
so ``kruntimes db upgrade`` works from an installed kruntimes; ``alembic.ini`` at the
repository root runs the very same scripts with the plain ``alembic`` command.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import setuptools

from kruntimes.journal.store import migrate

ROOT = Path(__file__).resolve().parents[2]


def _listed_packages() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def test_every_package_directory_is_listed_for_the_wheel() -> None:
    found = set(setuptools.find_packages(str(ROOT), include=["kruntimes*", "replay*"]))
    assert found <= set(_listed_packages())


def test_a_checkout_migrates_from_the_top_level_migrations_directory() -> None:
    assert migrate.SCRIPT_LOCATION == ROOT / "migrations"
    assert not (ROOT / "kruntimes" / "journal" / "migrations").exists()


def test_the_revision_ids_existing_journals_carry_are_unchanged() -> None:
    names = sorted(p.stem for p in (ROOT / "migrations" / "versions").glob("0*.py"))
    assert names[:2] == ["0001_journal_records", "0002_history_views"]


def test_the_wheel_installs_the_migration_scripts_inside_the_package(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, timeout=300, capture_output=True)
    (wheel,) = tmp_path.glob("kruntimes-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kruntimes/migrations/env.py", "kruntimes/migrations/script.py.mako",
            "kruntimes/migrations/versions/0001_journal_records.py",
            "kruntimes/migrations/versions/0002_history_views.py"} <= names
    assert not any(name.startswith("migrations/") for name in names)


def test_alembic_upgrades_a_journal_from_the_repository_root(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head"],
                   cwd=ROOT, env=env, check=True, timeout=120, capture_output=True)
    assert migrate.current_revision(url) == migrate.head_revision()


def test_the_readme_shows_how_to_install_the_postgresql_driver_with_an_extra_that_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "pip install 'kruntimes[postgres]'" in readme  # what the error without the driver says too
    shown = set(re.findall(r"pip install '[^'\[]*\[([a-z,]+)\]'", readme))
    assert "postgres" in shown and {e for group in shown for e in group.split(",")} <= set(extras)
