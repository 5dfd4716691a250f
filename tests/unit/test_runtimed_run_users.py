"""Each Run as a user of its own, from the range the Runtime Pod gives (SPEC §4.1, amended 2026-12-04)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kruntimes.runtimed import run_users
from kruntimes.runtimed.run_users import BadUserRange, RunUsers, RunUsersExhausted

RANGES = [
    ("a range of many users", "20000-20999", range(20000, 21000)),
    ("a range of one user written once", "20000", range(20000, 20001)),
    ("a range of one user written twice", "20000-20000", range(20000, 20001)),
]


@pytest.mark.parametrize("why,text,users", RANGES, ids=[c[0] for c in RANGES])
def test_a_range_is_first_to_last_inclusive(why: str, text: str, users: range) -> None:
    assert run_users.parse_range(text) == users


@pytest.mark.parametrize("text", ["", "lots", "20-10", "0-10", "-5", "1-2147483648"],
                         ids=["empty", "not a number", "backwards", "root among them", "negative", "past 2^31-1"])
def test_a_range_that_is_not_one_of_unprivileged_users_is_refused(text: str) -> None:
    with pytest.raises(BadUserRange):
        run_users.parse_range(text)


def test_each_run_gets_the_lowest_user_no_executing_run_holds_and_gives_it_back() -> None:
    users = RunUsers(range(100, 103))
    assert [users.take(uid) for uid in ("a", "b", "c")] == [100, 101, 102]
    assert users.take("b") == 101  # the same Run asking again keeps its user
    with pytest.raises(RunUsersExhausted, match="all 3 users of the range 100-102"):
        users.take("d")
    users.give_back("a")
    assert users.take("d") == 100


def test_a_runs_working_directory_is_0700_and_its_parents_let_others_pass_but_not_list(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    workdir = root / "team" / "train-uid-1"
    run_users.prepare_workdir(root, workdir, None)
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in (root, root / "team")] == [0o711, 0o711]
    assert workdir.stat().st_uid == os.getuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_with_a_user_the_directory_is_that_users(tmp_path: Path) -> None:
    workdir = tmp_path / "runs" / "team" / "train-uid-1"
    run_users.prepare_workdir(tmp_path / "runs", workdir, 20007)
    assert (workdir.stat().st_uid, workdir.stat().st_gid) == (20007, 20007)
