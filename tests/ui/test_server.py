"""The web view over HTTP, without a browser: read-only, escaped, local assets, clear errors."""

from __future__ import annotations

import hashlib
import re
import urllib.error
import urllib.request
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli
from kruntimes.cli import ui_cmd
from kruntimes.journal import errors
from kruntimes.journal.history import pods as history_pods
from kruntimes.journal.history import stored
from kruntimes.journal.store import backends
from kruntimes.ui import busy, markup, run_page, server, timeline
from tests.ui.conftest import DemoJournal, Served, whatif_window

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _get(served: Served, path: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(served.base + path, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode("utf-8")


PAGES = ("/", "/timeline", "/waits", "/whatif", "/pod", "/integrity")


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_with_a_policy_that_allows_only_this_servers_scripts(served: Served, path: str) -> None:
    status, headers, body = _get(served, path)
    assert status == 200
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "http://" not in body.replace(served.base, "") and "https://" not in body
    assert '<script src="/static/plotly.min.js"' in body


def test_plotly_is_served_from_the_installed_package_byte_for_byte(served: Served) -> None:
    with urllib.request.urlopen(served.base + "/static/plotly.min.js", timeout=60) as response:
        served_js = response.read()
    assert served_js == resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()
    assert _get(served, "/static/../../etc/passwd")[0] == 404


def test_the_view_refuses_anything_but_reading(served: Served) -> None:
    status, headers, _ = _get(served, "/timeline", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_the_journal_cannot_be_written_through_the_views_connection(served: Served) -> None:
    with pytest.raises(sa.exc.OperationalError, match="readonly|read-only"):
        with served.app.reader.journal.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM journal_records"))


def test_serving_every_page_leaves_the_journal_file_as_it_was(served: Served, demo_journal: DemoJournal) -> None:
    before = hashlib.sha256(demo_journal.path.read_bytes()).hexdigest()
    for path in PAGES + ("/integrity?verify=1",):
        assert _get(served, path)[0] == 200
    assert hashlib.sha256(demo_journal.path.read_bytes()).hexdigest() == before


def test_a_malformed_window_is_a_400_naming_the_parameter(served: Served) -> None:
    status, _, body = _get(served, "/timeline?since=yesterday-ish")
    assert status == 400 and "since" in body and "RFC 3339" in body
    status, _, body = _get(served, "/timeline?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z")
    assert status == 400 and "must be before until" in body
    status, _, body = _get(served, "/timeline?per=100000")
    assert status == 400 and "per must be between 1 and 200" in body


def test_more_query_fields_than_any_page_takes_is_a_400_saying_so_not_a_traceback(served: Served) -> None:
    query = "&".join(f"f{i}=1" for i in range(server.MAX_QUERY_FIELDS + 1))
    for path in ("/timeline", "/integrity"):
        status, _, body = _get(served, f"{path}?{query}")
        assert status == 400 and f"more than {server.MAX_QUERY_FIELDS} query parameters" in body
        assert "Traceback" not in body
    assert _get(served, "/timeline?" + "&".join(f"f{i}=1" for i in range(server.MAX_QUERY_FIELDS)))[0] == 200


EXPENSIVE = [
    ("a replay verify asked while another runs", busy.VERIFY, "/integrity?verify=1"),
    ("a what-if replay asked while another runs", busy.WHATIF, "/whatif?run=1"),
]


@pytest.mark.parametrize("why,kind,path", EXPENSIVE, ids=[c[0] for c in EXPENSIVE])
def test_expensive_work_runs_one_at_a_time_per_kind_and_the_next_is_a_429_saying_so(
        served: Served, why: str, kind: str, path: str) -> None:
    if kind == busy.WHATIF:  # a window the page replays (the demo's whole journal may hold more cycles)
        since, until = whatif_window(served.app.reader)
        path = markup.url("/whatif", run=1, since=since, until=until)
    with busy.one_at_a_time(served.app.memory, kind):  # the one running now
        status, headers, body = _get(served, path)
        assert status == 429 and headers["Retry-After"] == str(busy.RETRY_AFTER_SECONDS)
        assert f"a {kind} is already running in this view (one at a time)" in body and "Traceback" not in body
        other = next(p for k, p in [(c[1], c[2]) for c in EXPENSIVE] if k != kind)
        assert _get(served, other)[0] == 200  # another kind, and the cheap pages, are not held back
        assert _get(served, "/timeline")[0] == 200
    assert _get(served, path)[0] == 200  # once it has finished


def test_what_if_refuses_a_weight_for_a_plugin_the_scheduler_has_not(served: Served) -> None:
    status, _, body = _get(served, "/whatif?w.NoSuchPlugin=3&run=1")
    assert status == 400 and "w.NoSuchPlugin" in body and "LeastLoaded" in body


def test_what_if_names_the_score_plugins_when_asked_to_disable_an_unknown_one(served: Served) -> None:
    status, _, body = _get(served, "/whatif?disable=NoSuchPlugin&run=1")
    assert status == 400 and "NoSuchPlugin" in body and "LeastLoaded" in body


def test_an_unknown_run_is_a_404_and_its_name_comes_back_escaped(served: Served) -> None:
    status, _, body = _get(served, "/run/demo/" + urllib.request.quote(HOSTILE, safe=""))
    assert status == 404
    assert "<script>alert" not in body and "&lt;script&gt;alert" in body


def test_a_replay_of_something_that_is_not_a_cycle_or_of_another_epoch_is_a_404(served: Served) -> None:
    status, _, body = _get(served, "/replay/1")
    assert status == 404 and "not a cycle" in body
    with served.app.reader.journal.engine.connect() as conn:
        lsn = conn.execute(sa.text("SELECT MIN(lsn) FROM journal_records WHERE kind = 'cycle'")).scalar()
    assert _get(served, f"/replay/{lsn}?fragment=1")[0] == 200
    status, _, body = _get(served, f"/replay/{lsn}?epoch=no-such-epoch")
    assert status == 404 and "of epoch no-such-epoch" in body


def test_the_lanes_are_paged(served: Served) -> None:
    status, _, body = _get(served, "/timeline?per=5&lanes=5")
    assert status == 200 and "lanes 6–10 of" in body and 'id="lanes-previous"' in body


class _HostileReader:
    """A reader whose records were written by someone hostile: every name and message is markup."""

    def run_records(self, namespace: str, name: str) -> list[stored.Record]:
        at = datetime(2026, 12, 1, tzinfo=timezone.utc)
        run = {"event": "MODIFIED", "kind": "Run", "name": name, "namespace": namespace, "uid": HOSTILE,
               "object": {"phase": "Pending", "pod_name": HOSTILE, "pending_message": HOSTILE, "runtime": HOSTILE,
                          "requests": [[HOSTILE, 1]]}}
        cycle = {"namespace": namespace, "run": name, "run_uid": HOSTILE, "result": "unschedulable",
                 "status": "unschedulable", "message": HOSTILE, "rejections": [[HOSTILE, HOSTILE, 3]],
                 "candidates": [{"pod": HOSTILE, "total": 1, "scores": [[HOSTILE, HOSTILE, 1]]}], "chosen": HOSTILE}
        return [stored.Record(1, at, "mutation", "i", run), stored.Record(2, at, "cycle", "i", cycle)]

    def run_waits(self, namespace: str, run_uids: list[str]) -> dict[str, Any]:
        at = datetime(2026, 12, 1, tzinfo=timezone.utc)
        return {"first_seen_at": at, "first_cycle_at": at, "queued_us": 0, "unschedulable_us": 5,
                "still_unschedulable": True}


def test_names_and_messages_from_the_journal_are_shown_as_text_never_as_markup() -> None:
    page = run_page.render(_HostileReader(), None, "demo", HOSTILE).decode()  # type: ignore[arg-type]
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") >= 8


def test_figure_data_cannot_close_its_script_element() -> None:
    html = markup.figure("f", {"data": [{"name": "</script><script>alert(1)</script>"}]})
    assert html.count("</script>") == 1 and "\\u003c/script>" in html


def test_the_lane_colours_follow_the_runtime_names_not_the_order_they_appear_in() -> None:
    assert timeline.colours(["b", "a", "c"]) == timeline.colours(["c", "b", "a"])
    assert len(set(timeline.colours(["a", "b", "c"]).values())) == 3


def test_the_command_says_in_one_line_when_there_is_no_journal(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ui", "--journal", f"sqlite:///{tmp_path}/missing.db"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kruntimes ui: no journal at") and "\n" not in err
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("listen", ["8080", "localhost:", ":80", "host:99999", "host:http"])
def test_a_listen_address_without_a_port_is_a_usage_error(listen: str, demo_journal: DemoJournal,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ui", "--journal", demo_journal.url, "--listen", listen]) == 2
    assert "--listen must be HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize("listen,warned", [("127.0.0.1:0", False), ("localhost:0", False), ("0.0.0.0:0", True)],
                         ids=["loopback", "localhost", "every address"])
def test_serving_beyond_this_machine_warns_at_start_up(listen: str, warned: bool, demo_journal: DemoJournal,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C, right after the start-up lines

    monkeypatch.setattr(server._Server, "serve_forever", interrupted)
    assert cli.main(["ui", "--journal", demo_journal.url, "--listen", listen]) == 0
    err = capsys.readouterr().err
    assert ("warning: 0.0.0.0 is reachable from other machines" in err) is warned
    assert "kruntimes ui: serving " in err


def test_loopback_addresses_of_both_families_are_this_machine_only() -> None:
    assert ui_cmd.local("::1") and ui_cmd.local("127.0.0.2") and not ui_cmd.local("10.0.0.1")
    assert not ui_cmd.local("::") and not ui_cmd.local("kruntimes-ui.example")


def test_the_view_listens_on_this_machine_only_unless_told_otherwise() -> None:
    args = cli.build_parser().parse_args(["ui"])
    assert args.listen == "127.0.0.1:8080"
    assert server.ROUTES  # and routes exist for the pages linked from the navigation
    linked = {href for _, href in markup.NAV}
    assert all(any(p.fullmatch(href) for p, _ in server.ROUTES) for href in linked)


def test_an_offset_past_the_last_lane_shows_the_last_page_of_lanes(served: Served) -> None:
    status, _, body = _get(served, "/timeline?per=10&lanes=100000")
    assert status == 200
    found = re.search(r"lanes ([0-9,]+)–([0-9,]+) of ([0-9,]+) pods", body)
    assert found is not None and found.group(2) == found.group(3) and 'id="lanes-next"' not in body


def test_an_epoch_a_spool_recovery_closed_is_listed_as_a_spool_episode() -> None:
    from collections import namedtuple

    from kruntimes.ui import integrity_page

    Row = namedtuple("Row", "epoch first_lsn head_lsn head_hash algorithm key_id started_at end_lsn end_reason")
    at = datetime(2026, 12, 1, tzinfo=timezone.utc)

    class _Reader:
        def epochs(self) -> list[Row]:
            return [Row("e-live", 1, 90, "h", "sha256", None, at, 91, "shutdown"),
                    Row("e-lost", 92, 140, "h", "sha256", None, at, 141, "recovered")]

    html = integrity_page._spool(_Reader())  # type: ignore[arg-type]
    assert "e-lost" in html and "92–140" in html and "e-live" not in html


def test_the_run_page_prints_scores_as_the_cli_does(served: Served, demo_journal: DemoJournal,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    placed = demo_journal.report.latest_placement
    assert placed is not None
    status, _, body = _get(served, f"/run/{placed['namespace']}/{placed['run']}")
    assert cli.main(["history", "run", f"{placed['namespace']}/{placed['run']}", "--journal", demo_journal.url,
                     "-o", "wide"]) == 0
    cli_out = capsys.readouterr().out
    # The placing cycle's candidates, which `history run` prints (the page shows every cycle's).
    card = body.split(f'id="cycle-{placed["lsn"]}"', 1)[1].split("</section>", 1)[0]
    shown = re.findall(r"\d+ \([0-9/]+ Σ[0-9/]+\)", card)
    assert status == 200 and shown and all(s in cli_out for s in shown)  # LeastLoaded's "5/4 Σ7/4" form
    assert "(raw [" not in body and "scores: normalised 0-100 (raw) ×weight" in body


def test_the_health_paths_answer_liveness_without_the_journal_and_readiness_with_it(served: Served) -> None:
    for path in server.HEALTH:
        status, headers, body = _get(served, path)
        assert (status, body) == (200, "ok\n") and headers["Content-Type"].startswith("text/plain")

    class _Away:
        def history_lag(self) -> list[Any]:
            raise errors.JournalUnavailable("cannot read the history's progress (sqlite): gone")

    app = server.App(_Away())  # type: ignore[arg-type]
    assert app.respond("GET", "/healthz", "")[0] == "200 OK"
    status, _, body = app.respond("GET", "/readyz", "")
    assert status == "503 Service Unavailable" and b"the journal does not answer" in body


def test_the_pod_list_shows_each_pod_as_its_newest_observation_at_t_says(
        served: Served, demo_journal: DemoJournal) -> None:
    # Pods the demo's controller creates become ready after they are added: a list built
    # from added and deleted pods alone showed some of them "not ready" at the journal's end.
    bounds = served.app.reader.bounds()
    assert bounds is not None
    status, _, body = _get(served, markup.url("/pod", at=bounds.last_at, per=1000))
    assert status == 200
    table = body[body.index('id="pods"'):]
    rows = re.findall(r"<tr><td><a [^>]*>([^<]+)</a></td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>", table)
    assert len(rows) > 10
    journal = backends.Journal.open(demo_journal.url, create=False)
    try:
        for pod, state, heartbeat in rows:
            namespace, name = pod.split("/")
            seen = history_pods.pod_observations(journal, namespace, name, at=bounds.last_at, limit=1)[0]
            assert state.startswith("ready" if seen["ready"] else "not ready"), pod
            assert seen["heartbeat"] is None or seen["heartbeat"] in heartbeat, pod
    finally:
        journal.close()
