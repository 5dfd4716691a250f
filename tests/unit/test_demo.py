"""`kruntimes demo` runs the whole lifecycle end to end, its journal replays, and its summary adds up."""

import importlib.util
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from kruntimes import demo, demo_watch, demo_workload
from kruntimes.cli.main import main
from kruntimes.journal.store import engines


def test_the_demo_workload_has_the_promised_shape() -> None:
    w = demo_workload.generate()
    assert len(w.pods) >= 200 and len(w.runs) >= 5000
    assert len({(r["metadata"]["namespace"], r["metadata"]["name"]) for r in w.runtimes}) >= 3
    assert all(r["spec"]["mode"]["task"]["args"][0] != "sh" for r in w.runs)  # argv, never a shell


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[demo.Report, str]:
    """One small run of the whole lifecycle (a tenth of the workload), journaled, shared by the tests below."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo')}/journal.db"
    return demo.run(workers=2, conflict_rate=0.05, scale=0.1, journal=url), url


def test_every_run_is_executed_and_ends_or_stays_pending_saying_why(journaled: tuple[demo.Report, str]) -> None:
    report, _ = journaled
    assert sum(report.phases.values()) == report.runs
    assert set(report.phases) <= {"Succeeded", "Failed", "Pending"}  # nothing left Scheduled or Running
    assert report.phases["Pending"] == 3  # the Runs asking for more GPUs than any pod has
    assert all(reason.startswith("0/") and "insufficient capacity" in reason
               for _, reason in report.pending_reasons)
    assert {runtime for runtime, _ in report.pending_reasons} == {"demo/trainer"}  # which runtime each belongs to
    reasons = Counter(reason for reason, _ in report.failed_reasons.elements())
    # Every ended Run ran a process but the invalid ones, and perhaps some of those on the lost
    # pod: a Run placed there but not yet admitted when it went ends RuntimePodLost unexecuted.
    executable = report.phases["Succeeded"] + report.phases["Failed"] - 20
    assert executable - reasons["RuntimePodLost"] <= report.processes <= executable
    assert reasons["InvalidConfiguration"] == 20
    assert reasons["ProcessFailed"] == 3  # the batch tasks that exit 3
    assert reasons["RuntimePodLost"] >= 1  # the Runs on the trainer pod deleted mid-run
    assert report.pod_lost is not None and report.pod_lost.startswith("demo/trainer-")
    assert all(message.startswith("invalid Run: spec.") for reason, message in report.failed_reasons
               if reason == "InvalidConfiguration")


def test_runtimed_never_exceeds_a_pods_capacity_and_released_capacity_goes_to_pending_runs(
        journaled: tuple[demo.Report, str]) -> None:
    report, _ = journaled
    assert report.overcommitted == 0
    for per_resource in report.peak_utilisation.values():
        for used, capacity in per_resource.values():
            assert used <= capacity
    # The trainer's GPUs are over-subscribed, yet every Run that fits was placed: GPUs freed by
    # Runs that ended went to Runs placed after them. (Whether a Run waited parked for them, the
    # `capacity_released` wake-up, is timing: on a loaded machine the scheduler reaches each
    # trainer Run only after earlier ones ended. test_placement and test_core_loop pin that down.)
    _, url = journaled
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            placed = set(conn.execute(sa.text("SELECT DISTINCT run FROM history_cycles WHERE namespace = 'demo' "
                                              "AND run LIKE 'train-%' AND status = 'scheduled'")).scalars())
    finally:
        engine.dispose()
    demand = {r["metadata"]["name"]: int(r["spec"]["resources"]["requests"].get("example.com/gpu", 0))
              for r in demo_workload.generate(scale=0.1).runs if r["spec"]["runtime"] == "trainer"}
    fits = {name for name, gpus in demand.items() if not name.startswith("train-huge-")}
    assert placed == fits
    used, gpus = report.peak_utilisation["demo/trainer"]["example.com/gpu"]
    assert sum(demand[name] for name in placed) > gpus >= used
    assert report.injected_conflicts > 0 and report.results["conflict"] > 0


def test_the_summary_shows_runs_by_phase_over_time_from_pending_to_ended(journaled: tuple[demo.Report, str]) -> None:
    report, _ = journaled
    first, last = report.timeline[0][1], report.timeline[-1][1]
    assert first["Succeeded"] < last["Succeeded"]
    assert last == report.phases
    assert any(phases["Running"] > 0 or phases["Scheduled"] > 0 for _, phases in report.timeline)
    assert len(demo_watch.rows(report.timeline, 10)) == min(10, len(report.timeline))


def test_the_demo_journals_every_decision_and_answers_two_history_questions(
        journaled: tuple[demo.Report, str]) -> None:
    report, _ = journaled
    assert report.records > report.cycles  # pod and Run events, reserves and binds besides the cycles
    (why, candidates), (pending, by_reason) = report.history
    assert why.startswith("Why was ") and candidates and candidates[0]["rank"] == 1
    placed = why.split(" placed on ")[1].split("?")[0]
    assert candidates[0]["pod"] == placed
    assert sum(row["runs"] for row in by_reason) == report.phases["Pending"]


def test_replay_verify_passes_on_the_demo_journal(journaled: tuple[demo.Report, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, url = journaled
    assert main(["replay", "verify", "--journal", url]) == 0
    assert " 0 diverged" in capsys.readouterr().out


@pytest.mark.parametrize(("url", "says"), [
    ("mysql://db/kruntimes", "unsupported journal URL"),
    ("postgresql://nobody@127.0.0.1:1/none", "cannot use the journal at postgresql://nobody@127.0.0.1:1/none"),
], ids=["an unsupported database", "a PostgreSQL server that does not answer"])
def test_a_journal_the_demo_cannot_use_is_one_line_and_exit_code_2(
        url: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--journal", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kruntimes demo: ") and says in err[0]
    assert "--no-journal" in err[0] or "use sqlite:///PATH" in err[0]


def test_a_postgresql_url_without_its_driver_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'kruntimes\[postgres\]'"):
        engines.parse_url("postgresql://db/kruntimes")


@pytest.mark.parametrize("command", [["demo"], ["scheduler", "--kubeconfig", "/nonexistent"]])
def test_a_journal_key_file_too_short_to_key_the_chain_is_one_line_naming_the_flag_and_exit_code_2(
        command: list[str], tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    key = tmp_path / "key"
    key.write_bytes(b"short")
    code = main([*command, "--journal", f"sqlite:///{tmp_path}/j.db", "--journal-key-file", str(key)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--journal-key-file" in err[0] and "use at least 32" in err[0]


def test_the_same_seed_gives_the_same_summary(journaled: tuple[demo.Report, str]) -> None:
    report, _ = journaled
    again = demo.run(workers=3, conflict_rate=0.02, scale=0.1)  # other timing, other conflicts, no journal
    assert again.summary() == report.summary() and again.summary_digest() == report.summary_digest()
    assert report.summary()["failed"] and report.summary()["pending"]  # it does say something


def test_the_commands_the_demo_prints_answer_on_its_journal(journaled: tuple[demo.Report, str],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    report, url = journaled
    placed = report.latest_placement
    assert placed is not None
    at = (placed["decided_at"] + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert main(["history", "pod", f"{placed['namespace']}/{placed['pod']}", "--at", at, "--journal", url]) == 0
    assert placed["pod"] in capsys.readouterr().out
    assert main(["replay", "cycle", "--last", "--journal", url]) == 0
    assert main(["replay", "cycle", str(placed["lsn"]), "--journal", url]) == 0


def test_the_demo_summary_explains_a_tie_and_prints_the_pending_table_once(
        journaled: tuple[demo.Report, str], capsys: pytest.CaptureFixture[str]) -> None:
    from kruntimes.cli import demo_cmd
    from rich.console import Console

    report, _ = journaled
    demo_cmd._print(Console(width=200), report)
    out = capsys.readouterr().out
    assert out.count("Pending Runs") == 1 and "demo/trainer" in out and "the journal agrees" in out
    # "Pending" is explained as history and the UI split it: unschedulable apart from waiting in queue.
    pending = report.phases.get("Pending", 0)
    assert f"{pending} still pending ({pending} unschedulable, 0 waiting in queue)" in out
    assert f"{pending} Runs unschedulable at the end" in out and "Pending counts both waits" in out
    (_, candidates), _ = report.history
    if len(candidates) > 1 and candidates[0]["total"] == candidates[1]["total"]:
        assert "ties go to the smallest pod name" in out
    assert f"summary {report.summary_digest()}" in out


class _Scripted:
    """Runs, pods, kubelet and queue for `demo._settle`: the Runs move one step each time it looks."""

    def __init__(self, steps: list[list[tuple[str, ...]]]) -> None:
        self.steps, self.step = steps, 0
        self.writes, self.deleted = 0, []
        self.queue = self

    def runs(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(namespace="demo", name=f"r{i}", key=("demo", f"r{i}"), phase=phase,
                                runtime="trainer" if pod else "batch", pod_name=pod or None,
                                active=phase in ("Scheduled", "Running") and bool(pod))
                for i, (phase, pod, *_) in enumerate(self.steps[min(self.step, len(self.steps) - 1)])]

    def status(self, key: tuple[str, str]) -> dict[str, list[dict[str, str]]]:
        """A Run's conditions: a step's entry (phase, pod, reason) ended with that reason."""
        entry = self.steps[min(self.step, len(self.steps) - 1)][int(key[1][1:])]
        return {"conditions": [{"type": "Completed", "reason": entry[2], "message": ""}]} if len(entry) > 2 else {}

    def delete(self, namespace: str, name: str) -> None:
        self.deleted.append(f"{namespace}/{name}")

    def busy(self) -> bool:  # the kubelet: asked once a look, after the deletion; the Runs move on
        self.step += 1
        return False

    def idle(self) -> bool:
        return True

    def __len__(self) -> int:
        return 0

    def processing_count(self) -> int:
        return 0


def settle(script: _Scripted) -> str | None:
    return demo._settle(script, script, script, script, None, None, None, timeout=10)  # type: ignore[arg-type]


def test_the_demo_deletes_a_trainer_pod_at_the_first_look_after_a_third_ended_with_a_trainer_run_running() -> None:
    # A third of the Runs ended while the trainer's Run was only Scheduled (a loaded machine
    # draws that gap): the pod is lost at the next look, when the Run is Running, not never.
    script = _Scripted([
        [("Succeeded", ""), ("Scheduled", "trainer-0"), ("Pending", "")],
        [("Succeeded", ""), ("Running", "trainer-0"), ("Pending", "")],
        [("Succeeded", ""), ("Failed", "trainer-0"), ("Failed", "")],
    ])
    assert settle(script) == "demo/trainer-0"
    assert script.deleted == ["demo/trainer-0"]


def test_the_demo_says_so_when_no_trainer_run_ran_after_a_third_ended() -> None:
    script = _Scripted([
        [("Succeeded", ""), ("Pending", ""), ("Pending", "")],
        [("Succeeded", ""), ("Succeeded", ""), ("Failed", "")],
    ])
    assert settle(script) == "none (no trainer Run was running)"
    assert script.deleted == []


def test_when_every_run_of_the_deleted_pod_ended_on_its_own_another_busy_trainer_pod_is_deleted() -> None:
    # The demo promises a Run lost with its pod, but the first end written wins: a Run can
    # end Succeeded just before its pod goes. Then another busy trainer pod is deleted.
    script = _Scripted([
        [("Succeeded", ""), ("Running", "trainer-a"), ("Running", "trainer-b")],
        [("Succeeded", ""), ("Succeeded", "trainer-a"), ("Running", "trainer-b")],
        [("Succeeded", ""), ("Succeeded", "trainer-a"), ("Failed", "trainer-b", "RuntimePodLost")],
    ])
    assert settle(script) == "demo/trainer-b"
    assert script.deleted == ["demo/trainer-a", "demo/trainer-b"]
