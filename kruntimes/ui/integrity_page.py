"""The Integrity page: who wrote the journal, what it holds, and whether replay agrees with it.

Epochs are the leadership terms that wrote the journal (``journal_epochs``: each one's
LSN range, chain and how it ended) and the scheduler incarnations behind them (version
and configuration hash); leader changes are the ``leader`` records; a prune leaves its
record at LSN 0. A spool that outlived its writer is drained by the next process into
the writer's own epoch, which it then ends as ``recovered``: those are the spool
episodes the journal shows. A spill the writer drains itself leaves no seam.

``verify=1`` runs ``replay verify`` over the chosen window (coverage from the start
or the recorded prune, then every cycle in it); the server keeps the last result in
memory so that the page shows it until the next one. The journal is never written.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from kruntimes.ui import markup as m
from kruntimes.ui import busy, params, queries
from replay import errors as replay_errors
from replay import source, verify

DEFAULT_WINDOW = timedelta(seconds=60)
MAX_CYCLES = 5000
NARROWING_STEPS = 8  # tries at a default window that holds at most MAX_CYCLES; each lands close


def render(reader: queries.Reader, q: params.Query) -> bytes:
    bounds = reader.bounds()
    if bounds is None:
        return m.page("Integrity", m.h("p", "The journal holds no records yet."), active="Integrity")
    since, until = _window(reader, q, bounds)
    if q.text("verify") == "1":
        with busy.one_at_a_time(q.memory, busy.VERIFY):
            q.memory["last_verify"] = _verify(reader, since, until)
    incarnations = reader.incarnations()
    counts = reader.kind_counts()
    body: list[Any] = [
        m.definition({"backend": reader.backend, "records": f"{sum(n for k, n in counts.items()):,}",
                      "first and newest record": f"epoch {bounds.first_epoch} LSN {bounds.first_lsn:,} – "
                                                 f"epoch {bounds.last_epoch} LSN {bounds.last_lsn:,}",
                      "recorded": f"{m.when(bounds.first_at)} – {m.when(bounds.last_at)}",
                      "by kind": ", ".join(f"{k} {n:,}" for k, n in sorted(counts.items()))}, id="journal"),
        m.h("h2", "Epochs: heads and ends"),
        _epochs(reader),
        m.h("h2", f"Scheduler incarnations ({len(incarnations)})"),
        m.table(("first LSN", "started", "incarnation", "version", "planner", "config hash", "workers"),
                [(r.lsn, m.when(r.at), r.incarnation, r.payload.get("version"), r.payload.get("planner_version"),
                  str(r.payload.get("config_hash", ""))[:12], (r.payload.get("config") or {}).get("workers"))
                 for r in incarnations], id="incarnations"),
        m.h("h2", "Leader changes"),
        _leaders(reader),
        m.h("h2", "Prunes"),
        _prune(reader),
        m.h("h2", "Checkpoints (newest)"),
        m.table(("epoch", "LSN", "recorded"), [(epoch, lsn, m.when(at)) for epoch, lsn, at in reader.checkpoints(5)],
                id="checkpoints")
        if reader.checkpoints(1) else m.h("p", "None yet: replay starts from each epoch's first record.",
                                          class_="note", id="checkpoints"),
        m.h("h2", "Spool episodes"),
        _spool(reader),
        m.h("h2", "Replay verify"),
        _verify_form(since, until),
        _last_verify(q.memory.get("last_verify")),
    ]
    return m.page("Integrity", *body, active="Integrity")


def _epochs(reader: queries.Reader) -> m.Html:
    """Each epoch (one leadership term) as ``journal_epochs`` stores it: where its chain ends and why."""
    rows = [(epoch, m.when(started), f"{first:,}–{head:,}", f"{algorithm}{' key ' + key_id if key_id else ''}",
             str(head_hash)[:16], f"{end_reason} at {end_lsn:,}" if end_lsn is not None else (end_reason or "open"))
            for epoch, first, head, head_hash, algorithm, key_id, started, end_lsn, end_reason in reader.epochs()]
    return m.table(("epoch", "started", "LSNs", "chain", "head link", "ended"), rows, id="epochs")


def _spool(reader: queries.Reader) -> m.Html:
    """Epochs closed by a spool's recovery: a writer whose records waited in its spool and were stored by
    the next process (``end`` reason ``recovered``). Spills a writer drained itself leave no seam."""
    recovered = [row for row in reader.epochs() if row.end_reason == "recovered"]
    note = ("A spill the writer drains itself keeps each record's LSN, time and chain and leaves no seam "
            "(kruntimes_journal_records_spilled on /metrics counts it).")
    if not recovered:
        return m.h("p", "No epoch was recovered from a spool. " + note, class_="note", id="spool")
    return m.join((m.table(("epoch", "LSNs", "recovered at LSN"),
                           [(row.epoch, f"{row.first_lsn:,}–{row.head_lsn:,}", f"{row.end_lsn:,}")
                            for row in recovered], id="spool"), m.h("p", note, class_="note")))


def _leaders(reader: queries.Reader) -> m.Html:
    leaders = reader.leader_records()
    if not leaders:
        return m.h("p", "No leader records: each incarnation above wrote as the only scheduler "
                        "(leadership changes are journaled when the leader-election adapter reports them).",
                   class_="note", id="leaders")
    return m.table(("LSN", "recorded", "incarnation", "what"),
                   [(r.lsn, m.when(r.at), r.incarnation, ", ".join(f"{k}={v}" for k, v in sorted(r.payload.items())))
                    for r in leaders], id="leaders")


def _prune(reader: queries.Reader) -> m.Html:
    rec = reader.prune_record()
    if rec is None:
        return m.h("p", "Never pruned: the journal starts at LSN 1.", class_="note", id="prune")
    p = rec.payload
    earlier = int(p["number"]) - 1 if isinstance(p.get("number"), int) else len(p.get("earlier") or ())
    return m.definition({"epoch cut": p.get("epoch"), "starts at checkpoint": p.get("checkpoint_lsn"),
                         "cut-off": p.get("before"), "pruned at": p.get("pruned_at"), "by": p.get("by"),
                         "deleted": p.get("deleted"), "epochs removed whole": len(p.get("removed_epochs") or ()),
                         "earlier prunes": earlier}, id="prune")


def _window(reader: queries.Reader, q: params.Query, bounds: Any) -> tuple[datetime, datetime]:
    """The window to verify: as asked, else the journal's last minute narrowed to at most ``MAX_CYCLES`` cycles.

    Why narrow: the prefilled window must verify when the button is pressed. The demo's
    journal records over 5,000 cycles in its last minute, and the page then refused its
    own default (issue 27). Cycles come at a roughly even rate, so a window cut to the
    share that fits (with a tenth to spare) fits after a step or two.
    """
    since, until = q.window(bounds.last_at, DEFAULT_WINDOW, bounds.first_at)
    if q.text("since") or q.text("until"):
        return since, until
    for _ in range(NARROWING_STEPS):
        count = reader.cycles_between(since, until)
        if count <= MAX_CYCLES:
            break
        since = until - (until - since) * MAX_CYCLES * 9 // (count * 10)
    return since, until


def _verify_form(since: datetime, until: datetime) -> m.Html:
    return m.h("form", m.h("label", "since ", m.void("input", name="since", value=m.iso(since), size=28)),
               m.h("label", " until ", m.void("input", name="until", value=m.iso(until), size=28)),
               m.void("input", type="hidden", name="verify", value="1"),
               m.h("button", "verify this window", type="submit", id="run-verify"),
               method="get", action="/integrity", id="verify-form")


def _verify(reader: queries.Reader, since: datetime, until: datetime) -> dict[str, Any]:
    done: dict[str, Any] = {"at": datetime.now(timezone.utc), "since": since, "until": until}
    count = reader.cycles_between(since, until)
    if count > MAX_CYCLES:
        return {**done, "error": f"{count:,} cycles in the window; narrow it to at most {MAX_CYCLES:,} here, "
                                 "or run `kruntimes replay verify`, which has no limit"}
    try:
        report = verify.verify(reader.journal, source.Selection(since=since, until=until))
    except replay_errors.ReplayError as exc:
        return {**done, "error": str(exc)}
    return {**done, "ok": report.ok, "replayed": report.replayed, "identical": report.identical,
            "diverged": [r.lsn for r in report.diverged], "seconds": report.seconds, "skipped": report.skipped,
            "pruned": report.pruned.checkpoint_lsn if report.pruned else None}


def _last_verify(result: dict[str, Any] | None) -> m.Html:
    if result is None:
        return m.h("p", "Not verified since this view started.", class_="note", id="last-verify")
    head = f"window {m.when(result['since'])} – {m.when(result['until'])}, run at {m.when(result['at'])}: "
    if "error" in result:
        return m.h("p", head, m.h("span", result["error"], class_="bad"), id="last-verify")
    outcome = (m.h("span", "OK", class_="ok") if result["ok"] else
               m.h("span", f"DIVERGED at LSN {', '.join(map(str, result['diverged'][:10]))}", class_="bad"))
    extra = f"; journal starts at the pruned checkpoint {result['pruned']}" if result["pruned"] else ""
    return m.h("p", head, outcome, f" {result['replayed']:,} cycles replayed in {result['seconds']:.2f} s: "
                                   f"{result['identical']:,} identical, {len(result['diverged'])} diverged"
                                   f"{', ' + str(result['skipped']) + ' skipped (pruned state)' if result['skipped'] else ''}"
                                   f"{extra}", id="last-verify")
