"""Every page of `kruntimes ui`, loaded from the demo's journal in a real headless Chromium.

Each test loads a page, waits until its script drew every figure, checks that the
browser logged no error (an exception, a refused script, a failed asset), checks the
elements and the values against the journal read another way (the history views of
``kruntimes.journal.history``, or replay called directly), and writes a screenshot to
``test-artifacts/ui/``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import sqlalchemy as sa
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from bench import replay as generator
from kruntimes.journal.history import pods as history_pods
from kruntimes.journal.history import runs as history_runs
from kruntimes.journal.history import waits as history_waits
from kruntimes.journal.store import backends
from kruntimes.ui import markup, queries, server, timeline, waits_page, whatif_page
from replay import source, whatif
from tests.ui import browser
from tests.ui.conftest import DemoJournal, Served, whatif_window


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    yield from browser.chrome()


@pytest.fixture(scope="module")
def journal(demo_journal: DemoJournal) -> Iterator[backends.Journal]:
    j = backends.Journal.open(demo_journal.url, create=False)
    yield j
    j.close()


def _scalar(journal: backends.Journal, sql: str, **params: Any) -> Any:
    with journal.engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def _open(driver: Any, served: Served, path: str) -> None:
    driver.get_log("browser")  # start each page with an empty console
    driver.get(served.base + path)
    browser.wait_until_drawn(driver)


def _text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def test_the_timeline_draws_every_pod_of_the_demo_and_every_bind_in_its_window(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    _open(driver, served, "/timeline?per=200")
    assert browser.console_errors(driver) == []
    pods = _scalar(journal, "SELECT COUNT(*) FROM (SELECT DISTINCT namespace, name FROM pod_observations) p")
    assert f"of {pods} pods" in _text(driver, ".pager")
    runtimes = {r for (r,) in journal.engine.connect().execute(sa.text("SELECT DISTINCT runtime FROM pod_observations"))}
    legend = _text(driver, ".legend")
    assert all(f"{rt} (" in legend for rt in runtimes)
    bars = driver.execute_script("return document.getElementById('lanes').data.reduce((n, t) => n + t.x.length, 0)")
    placed = _scalar(journal, "SELECT COUNT(*) FROM journal_records WHERE kind = 'reserve'")
    assert 0 < bars <= placed
    since = driver.find_element(By.NAME, "since").get_attribute("value")
    until = driver.find_element(By.NAME, "until").get_attribute("value")
    binds = _scalar(journal, "SELECT COUNT(*) FROM bind_results WHERE recorded_at >= :a AND recorded_at < :b",
                    a=_sqlite_time(since), b=_sqlite_time(until))
    per_second = driver.execute_script(
        "return document.getElementById('binds').data.reduce((n, t) => n + t.y.reduce((a, b) => a + b, 0), 0)")
    step = (_parse(until) - _parse(since)).total_seconds() / timeline.BUCKETS
    assert per_second * step == pytest.approx(binds, rel=0.001)
    utilisation = driver.execute_script("return document.getElementById('utilisation').data.map(t => t.name)")
    assert "runs" in utilisation
    browser.screenshot(driver, "timeline")


def _parse(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _sqlite_time(iso: str) -> str:
    return iso.replace("T", " ").replace("Z", "")


def test_dragging_across_the_lanes_zooms_the_timeline_to_that_window(driver: Any, served: Served) -> None:
    _open(driver, served, "/timeline")
    since = driver.find_element(By.NAME, "since").get_attribute("value")
    start = markup.iso(_parse(since) + timedelta(seconds=2))
    end = markup.iso(_parse(since) + timedelta(seconds=4))
    driver.execute_script("Plotly.relayout('lanes', {'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]})",
                          start.replace("Z", ""), end.replace("Z", ""))
    WebDriverWait(driver, 20).until(lambda d: "since=" in d.current_url)
    browser.wait_until_drawn(driver)
    query = parse_qs(urlparse(driver.current_url).query)
    assert query["since"][0].startswith(start[:19]) and query["until"][0].startswith(end[:19])
    assert browser.console_errors(driver) == []


def test_clicking_a_bar_opens_the_story_of_that_run(driver: Any, served: Served) -> None:
    _open(driver, served, "/timeline")
    href = driver.execute_script("return document.getElementById('lanes').data[0].customdata[0][2]")
    assert href.startswith("/run/")
    driver.execute_script(
        "const f = document.getElementById('lanes');"
        "f.emit('plotly_click', {points: [{customdata: f.data[0].customdata[0]}]})")
    WebDriverWait(driver, 20).until(lambda d: urlparse(d.current_url).path == href)
    assert driver.find_element(By.ID, "summary")


def _cards(cycles: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The history's cycles grouped as the Run page should show them: consecutive identical decisions together."""
    cards: list[list[dict[str, Any]]] = []
    same = ("result", "chosen", "total", "message", "pods_feasible", "pods_evaluated")
    for c in cycles:
        if cards and all(cards[-1][-1][k] == c[k] for k in same):
            cards[-1].append(c)
        else:
            cards.append([c])
    return cards


def test_a_pending_runs_page_shows_its_identical_cycles_as_one_card(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    # The Pending Run whose same decision repeats longest. How often the demo retries a Run that
    # fits nowhere follows its pods' events, so timing: a loaded machine gave 2 in a row where
    # this once asked for more than 2; eight demos sampled gave 2 or 3 (one 32, under contention).
    with journal.engine.connect() as conn:
        pending = conn.execute(sa.text(
            "SELECT DISTINCT run FROM history_cycles WHERE status = 'unschedulable' ORDER BY run")).scalars().all()
    stories = {name: history_runs.run_cycles(journal, "demo", name) for name in pending}
    name = max(pending, key=lambda n: (max(map(len, _cards(stories[n]))), len(stories[n])))
    cycles = stories[name]
    cards = _cards(cycles)
    longest = max(cards, key=len)
    assert len(longest) > 1, "the demo retries some Pending Run for the same reason"
    _open(driver, served, f"/run/demo/{name}")
    assert browser.console_errors(driver) == []
    assert _text(driver, "h2:nth-of-type(2)") == f"Cycles ({len(cycles)})"
    sections = driver.find_elements(By.CSS_SELECTOR, "section.cycle")
    assert len(sections) == len(cards) < len(cycles)
    repeated = driver.find_elements(By.CSS_SELECTOR, "section.cycle.repeated")
    assert [int(s.get_attribute("data-cycles")) for s in repeated] == [len(c) for c in cards if len(c) > 1]
    shown = next(s for s in repeated if int(s.get_attribute("data-cycles")) == len(longest))
    says = (f"{len(longest)} cycles from {markup.when(longest[0]['decided_at'])} to "
            f"{markup.when(longest[-1]['decided_at'])}: {longest[-1]['message']}")
    assert shown.find_element(By.CSS_SELECTOR, "p.repeated").text == says
    # Every cycle the story links to still has its anchor.
    anchors = {a.get_attribute("id") for a in driver.find_elements(By.CSS_SELECTOR, "section.cycle [id^=cycle-], "
                                                                                   "section.cycle[id^=cycle-]")}
    assert {f"cycle-{c['lsn']}" for c in cycles} <= anchors
    shown.find_element(By.CSS_SELECTOR, "a.replay").click()
    WebDriverWait(driver, 60).until(lambda d: "identical" in shown.find_element(By.CSS_SELECTOR, ".verdict-slot").text)
    driver.execute_script("arguments[0].scrollIntoView()", shown)
    browser.screenshot(driver, "run-repeated-cycles")


def _run_with_a_conflict(journal: backends.Journal) -> tuple[str, str]:
    with journal.engine.connect() as conn:
        row = conn.execute(sa.text(
            "SELECT c.namespace, c.run FROM cycles c WHERE c.result = 'conflict' AND EXISTS "
            "(SELECT 1 FROM cycles s WHERE s.run_uid = c.run_uid AND s.result = 'scheduled') ORDER BY c.lsn LIMIT 1"
        )).one()
    return row[0], row[1]


def test_a_runs_page_tells_its_story_and_replays_a_cycle_on_demand(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    namespace, name = _run_with_a_conflict(journal)
    story = history_runs.run_history(journal, namespace, name)
    _open(driver, served, f"/run/{namespace}/{name}")
    assert browser.console_errors(driver) == []
    sections = driver.find_elements(By.CSS_SELECTOR, "section.cycle")
    cards = _cards(story["cycles"])
    assert len(sections) == len(cards)
    results = [s.find_element(By.CSS_SELECTOR, ".result").text for s in sections]
    assert results == [card[0]["result"] for card in cards]
    assert story["placement"]["pod"] in _text(driver, "#summary")
    bind_results = [b["result"] for b in story["binds"]]
    shown = [row.find_elements(By.TAG_NAME, "td")[3].text for row in driver.find_elements(By.CSS_SELECTOR, "#story tbody tr")
             if row.find_elements(By.TAG_NAME, "td")[2].text == "bind"]
    assert "conflict" in bind_results and shown == [f"bind {r}" for r in bind_results]
    chosen = driver.find_elements(By.CSS_SELECTOR, "table.candidates tr.chosen")
    assert chosen, "the chosen candidate is highlighted"
    sections[-1].find_element(By.CSS_SELECTOR, "a.replay").click()
    WebDriverWait(driver, 60).until(lambda d: "identical" in sections[-1].find_element(By.CSS_SELECTOR, ".verdict-slot").text)
    assert browser.console_errors(driver) == []
    browser.screenshot(driver, "run")


@pytest.mark.parametrize("kind,sql,says", [
    ("failed", "SELECT name FROM history_runs WHERE end_reason = 'ProcessFailed' ORDER BY lsn LIMIT 1",
     "ProcessFailed: the process exited with code 3"),
    ("waiting", "SELECT run FROM history_cycles WHERE status = 'unschedulable' ORDER BY lsn LIMIT 1",
     "insufficient capacity (example.com/gpu); no runtime pod could fit this Run even if idle"),
], ids=["a failed Run says why it ended", "a waiting Run names the resource it waits for"])
def test_a_runs_page_says_why_it_failed_or_what_it_waits_for(
        kind: str, sql: str, says: str, driver: Any, served: Served, journal: backends.Journal) -> None:
    name = _scalar(journal, sql)
    _open(driver, served, f"/run/demo/{name}")
    assert browser.console_errors(driver) == []
    page = _text(driver, "body")
    assert says in page
    if kind == "failed":
        assert "why it ended" in _text(driver, "#summary") and says in _text(driver, "#summary")
    browser.screenshot(driver, f"run-{kind}")


def test_what_if_lists_the_decisions_replay_says_would_change(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    since, until = whatif_window(served.app.reader)
    _open(driver, served, markup.url("/whatif", since=since, until=until))
    assert browser.console_errors(driver) == []
    assert driver.find_element(By.NAME, "w.LeastLoaded").get_attribute("value") == "1"  # the recorded weight
    driver.find_element(By.CSS_SELECTOR, "input[name=disable][value=LeastLoaded]").click()
    driver.find_element(By.ID, "run-whatif").click()
    WebDriverWait(driver, 300).until(lambda d: d.find_elements(By.ID, "whatif-report"))
    expected = whatif.what_if(journal, source.Selection(since=since, until=until),
                              whatif.Alternative(disabled=frozenset({"LeastLoaded"})))
    assert expected.changed, "without LeastLoaded some demo Runs go elsewhere"
    assert _text(driver, "#changed-count") == f"{len(expected.changed):,}"
    assert f"of {expected.cycles:,} decisions" in _text(driver, "#whatif-summary")
    rows = driver.find_elements(By.CSS_SELECTOR, "#changes tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == [
        str(c.lsn) for c in expected.changed[:whatif_page.MAX_ROWS]]
    shift = {r.find_elements(By.TAG_NAME, "td")[0].text: (int(r.find_elements(By.TAG_NAME, "td")[1].text),
                                                           int(r.find_elements(By.TAG_NAME, "td")[2].text))
             for r in driver.find_elements(By.CSS_SELECTOR, "#shift tbody tr")}
    assert shift == {p: (b, a) for p, b, a in expected.shift()}
    assert browser.console_errors(driver) == []
    browser.screenshot(driver, "whatif")


def test_the_pod_page_shows_what_it_held_its_capacity_and_heartbeat_at_an_instant(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    placement = history_runs.latest_placement(journal)
    assert placement is not None
    at = placement["decided_at"] + timedelta(microseconds=1)
    seen = history_pods.pod_observations(journal, placement["namespace"], placement["pod"], at=at, limit=1)[0]
    _open(driver, served, markup.url(f"/pod/{placement['namespace']}/{placement['pod']}", at=at))
    assert browser.console_errors(driver) == []
    capacity = {row.find_elements(By.TAG_NAME, "td")[0].text: int(row.find_elements(By.TAG_NAME, "td")[1].text)
                for row in driver.find_elements(By.CSS_SELECTOR, "#capacity tbody tr")}
    assert capacity == {k: v for k, v in json.loads(seen["capacity"])}
    assert f"{placement['namespace']}/{placement['run']}" in _text(driver, "#held")
    state = _text(driver, "#pod-state")
    assert ("fresh" in state or "stale" in state) and seen["runtime"] in state
    browser.screenshot(driver, "pod")


def test_the_integrity_page_names_each_incarnation_and_verifies_a_window_on_request(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    bounds = served.app.reader.bounds()
    assert bounds is not None
    since, until = bounds.first_at, bounds.last_at + timedelta(seconds=1)
    _open(driver, served, markup.url("/integrity", since=since, until=until))
    assert browser.console_errors(driver) == []
    incarnations = journal.incarnations()
    table = _text(driver, "#incarnations")
    assert all(i.incarnation in table for i in incarnations)
    epochs = _text(driver, "#epochs")
    assert all(epoch in epochs and f"{head.head_lsn:,}" in epochs for epoch, head in journal.epochs().items())
    assert "Not verified" in _text(driver, "#last-verify")
    driver.find_element(By.ID, "run-verify").click()
    # the button submits the form: the page is replaced, so a lookup can meet the old page's element
    WebDriverWait(driver, 120, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException)).until(
        lambda d: "verify=1" in d.current_url and "Not verified" not in _text(d, "#last-verify"))
    browser.wait_until_drawn(driver)
    cycles = _scalar(journal, "SELECT COUNT(*) FROM cycles")
    verdict = _text(driver, "#last-verify")
    assert "OK" in verdict and f"{cycles:,} cycles replayed" in verdict
    assert browser.console_errors(driver) == []
    browser.screenshot(driver, "integrity")


@pytest.fixture(scope="module")
def thousand_pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A journal of 1,000 pods (50 Runtimes x 20) and a few thousand Runs, from bench/replay.py's generator."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-wide')}/journal.db"
    generator.generate(url, target=30_000, runtimes=50, pods_per_runtime=20, capacity=4)
    reader = queries.open_reader(url)
    app = server.App(reader)
    httpd = server.make_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, name="ui-test-wide", daemon=True)
    thread.start()
    try:
        yield Served(f"http://127.0.0.1:{httpd.server_port}", app)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
        reader.close()


def test_a_thousand_pods_are_paged_forty_lanes_at_a_time_and_every_page_of_lanes_is_reachable(
        driver: Any, thousand_pods: Served) -> None:
    _open(driver, thousand_pods, "/timeline")
    assert browser.console_errors(driver) == []
    assert "lanes 1–40 of 1,000 pods" in _text(driver, ".pager")
    lanes = driver.execute_script("return document.getElementById('lanes').layout.yaxis.categoryarray.length")
    assert lanes == 40
    assert len(driver.find_elements(By.CSS_SELECTOR, ".legend .key")) == 50
    browser.screenshot(driver, "timeline-1000-pods")
    driver.find_element(By.ID, "lanes-next").click()
    browser.wait_until_drawn(driver)
    assert "lanes 41–80 of 1,000 pods" in _text(driver, ".pager")
    _open(driver, thousand_pods, "/timeline?lanes=960")
    assert "lanes 961–1,000 of 1,000 pods" in _text(driver, ".pager")
    assert not driver.find_elements(By.ID, "lanes-next")


def test_the_waits_page_names_the_queue_wait_apart_from_the_unschedulable_one(
        driver: Any, served: Served, journal: backends.Journal, demo_journal: DemoJournal) -> None:
    found = history_waits.waits(journal)
    _open(driver, served, "/waits?limit=500")
    assert browser.console_errors(driver) == []
    summary = _text(driver, "#waits-summary")
    still = [w for w in found if w["outcome"] is None]
    queued = sum(w["state"] == "in queue" for w in still)
    # The demo's own count of Runs Pending at its end is the page's, split in two.
    assert f"Pending at the journal's end\n{len(still)}" in summary
    assert len(still) == demo_journal.report.phases.get("Pending", 0)
    assert f"waiting in queue (no cycle yet)\n{queued}" in summary
    assert f"unschedulable (a cycle found no pod)\n{len(still) - queued}" in summary
    rows = driver.find_elements(By.CSS_SELECTOR, "#waits tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == [f"{w['namespace']}/{w['run']}" for w in found[:500]]
    cells = [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells[2] == waits_page.seconds(found[0]["queued_us"])
    assert cells[3] == waits_page.seconds(found[0]["unschedulable_us"])
    assert "In queue: from the Run's first observation" in _text(driver, "#waits-legend")
    _open(driver, served, "/waits?limit=15")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#waits tbody tr")) == 15
    browser.screenshot(driver, "waits")
    waiting = next(w for w in still if w["state"] == "unschedulable")
    _open(driver, served, f"/run/{waiting['namespace']}/{waiting['run']}")
    summary = _text(driver, "#summary")
    assert f"waited in queue\n{waits_page.seconds(waiting['queued_us'])} (first seen" in summary
    assert "so far (still unschedulable)" in summary


def test_the_pod_list_is_paged_and_says_whether_each_pod_is_ready_and_its_heartbeat_fresh(
        driver: Any, served: Served, journal: backends.Journal) -> None:
    bounds = served.app.reader.bounds()
    assert bounds is not None
    _open(driver, served, markup.url("/pod", at=bounds.last_at, per=5))
    assert browser.console_errors(driver) == []
    pods = _scalar(journal, "SELECT COUNT(*) FROM (SELECT DISTINCT namespace, name FROM pod_observations) p")
    deleted = _scalar(journal, "SELECT COUNT(*) FROM history_pods WHERE event = 'DELETED'")
    total = pods - deleted
    assert _text(driver, "#pods-pager").startswith(f"pods 1–5 of {total}")
    first = [r.find_elements(By.TAG_NAME, "td") for r in driver.find_elements(By.CSS_SELECTOR, "#pods tbody tr")]
    assert len(first) == 5
    assert [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#pods thead th")] == [
        "pod", "Runtime", "state", "heartbeat", "capacity"]
    for cells in first:  # each row as the history says the pod was last seen
        namespace, name = cells[0].text.split("/")
        seen = history_pods.pod_observations(journal, namespace, name, at=bounds.last_at, limit=1)[0]
        assert cells[1].text == f"{namespace}/{seen['runtime']}"
        assert cells[2].text.startswith("ready" if seen["ready"] else "not ready")
        assert cells[3].text.split(":")[0] in ("fresh", "stale") and seen["heartbeat"] in cells[3].text
    shown = {cells[0].text for cells in first}
    driver.find_element(By.ID, "pods-next").click()
    WebDriverWait(driver, 20).until(lambda d: "offset=5" in d.current_url)
    assert _text(driver, "#pods-pager").startswith(f"pods 6–10 of {total}")
    second = [r.find_element(By.TAG_NAME, "td").text for r in driver.find_elements(By.CSS_SELECTOR, "#pods tbody tr")]
    assert len(second) == 5 and not set(second) & shown
    assert driver.find_element(By.ID, "pods-previous")
    browser.screenshot(driver, "pod-list")


def test_the_legend_keeps_runtimes_of_the_same_name_in_two_namespaces_apart(driver: Any, served: Served) -> None:
    _open(driver, served, "/timeline?per=200")
    legend = [k.text for k in driver.find_elements(By.CSS_SELECTOR, ".legend .key")]
    python = [k for k in legend if "/python (" in k]
    assert len(python) == 2 and python[0].startswith("demo/python (") and python[1].startswith("team-b/python (")
    colours = driver.execute_script("return document.getElementById('lanes').data.map(t => [t.name, t.marker.color])")
    named = dict(colours)
    assert named["demo/python"] != named["team-b/python"]
    driver.find_element(By.LINK_TEXT, python[1]).click()
    WebDriverWait(driver, 20).until(lambda d: "runtime=team-b" in d.current_url)
    browser.wait_until_drawn(driver)
    lanes = driver.execute_script("return document.getElementById('lanes').layout.yaxis.categoryarray")
    assert lanes and all(lane.startswith("team-b/") for lane in lanes)
    assert f"of {python[1].split('(')[1].split()[0]} pods" in _text(driver, ".pager")
    assert browser.console_errors(driver) == []
    browser.screenshot(driver, "timeline-team-b")
