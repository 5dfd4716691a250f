"""The Run page: a Run's whole story from the journal, and a replay verdict per cycle on demand.

The story is every record about the Run in LSN order: its observations (phases, the
pod it ran on), every cycle (result, candidates with each plugin's normalised and raw
score, why pods were rejected, the Pending message), every reserve, bind, release and
drop. Each cycle links to ``/replay/LSN``, which runs ``replay.verify`` on that one
cycle (the same planner on the rebuilt snapshot) and says *identical* or what
differed; the page fetches it in place, and the link works on its own for a ticket.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from kruntimes import scores, wire
from kruntimes.devices import results
from kruntimes.journal.history import stored
from kruntimes.ui import markup as m
from kruntimes.ui import params, queries, waits_page
from replay import errors as replay_errors
from replay import source, verify

MAX_CYCLES = 200


def render(reader: queries.Reader, q: params.Query, namespace: str, name: str) -> bytes:
    records = reader.run_records(namespace, name)
    if not records:
        raise LookupError(f"the journal holds nothing about a Run {namespace}/{name}")
    title = f"Run {namespace}/{name}"
    cycles = [r for r in records if r.kind == "cycle"]
    body: list[Any] = [_summary(records, _waits(reader, namespace, records)), m.h("h2", "Story"), _story(records)]
    body += [m.h("h2", f"Cycles ({len(cycles)})"), m.h("p", scores.LEGEND, class_="note", id="legend")]
    cards = alike(cycles)
    if len(cards) > MAX_CYCLES:
        body.append(m.h("p", f"the newest {MAX_CYCLES} of {len(cards)} cycle cards", class_="note"))
    body += [_cycle(group[0]) if len(group) == 1 else _repeated(group) for group in cards[-MAX_CYCLES:]]
    return m.page(title, *body)


#: What makes two cycles the same decision for a reader: not their LSN, time, snapshot or duration.
_DECISION = ("result", "status", "chosen", "message", "rejections", "candidates", "pods_evaluated", "pods_feasible")


def alike(cycles: list[stored.Record]) -> list[list[stored.Record]]:
    """The records in order, consecutive cycles with the same decision grouped: a Pending Run retried 46 times
    for the same reason is one card, not 46 identical ones (any other record stands alone)."""
    groups: list[list[stored.Record]] = []
    for rec in cycles:
        if groups and rec.kind == "cycle" and groups[-1][-1].kind == "cycle" and \
                all(groups[-1][-1].payload.get(k) == rec.payload.get(k) for k in _DECISION):
            groups[-1].append(rec)
        else:
            groups.append([rec])
    return groups


def _repeated(group: list[stored.Record]) -> m.Html:
    """One card for consecutive identical cycles: how many, from when to when, and what they all said."""
    first, last = group[0], group[-1]
    p = last.payload
    said = p.get("message") or str(p.get("result"))
    head = m.h("h3", f"cycles {first.lsn} to {last.lsn} · ", m.h("span", str(p.get("result")), class_="result"))
    parts: list[Any] = [
        *(m.h("a", "", id=f"cycle-{rec.lsn}", class_="anchor") for rec in group),  # the story links to each
        head,
        m.h("p", f"{len(group)} cycles from {m.when(first.at)} to {m.when(last.at)}: ", m.h("strong", said),
            class_="pending repeated"),
        m.h("p", f"each decided the same: {p.get('pods_feasible')} of {p.get('pods_evaluated')} pods feasible",
            class_="note"),
    ]
    if p.get("rejections"):
        parts.append(m.table(("plugin", "reason", "pods rejected"),
                             [(plugin, reason, pods) for plugin, reason, pods in p["rejections"]], class_="rejections"))
    target = f"verdict-{last.lsn}"
    parts.append(m.h("p", m.link("replay the last of them", m.url(f"/replay/{last.lsn}", epoch=last.incarnation),
                                 data_verdict=target, class_="replay"),
                     " ", m.h("span", id=target, class_="verdict-slot")))
    return m.h("section", *parts, class_="cycle repeated", data_cycles=str(len(group)))


def _waits(reader: queries.Reader, namespace: str, records: list[stored.Record]) -> dict[str, str]:
    """The Run's two waits, named as the Waits page names them (``Reader.run_waits``)."""
    uids = sorted({str(r.payload.get("uid") or r.payload.get("run_uid")) for r in records
                   if r.kind in ("mutation", "cycle") and (r.payload.get("uid") or r.payload.get("run_uid"))})
    w = reader.run_waits(namespace, uids)
    if w is None:
        return {}
    queued = ("no cycle has evaluated it yet" if w["queued_us"] is None else
              f"{waits_page.seconds(w['queued_us'])} (first seen {m.when(w['first_seen_at'])}, "
              f"first cycle {m.when(w['first_cycle_at'])})")
    return {"waited in queue": queued,
            "unschedulable": waits_page.seconds(w["unschedulable_us"])
            + (" so far (still unschedulable)" if w["still_unschedulable"] else "")}


def _summary(records: list[stored.Record], waits: dict[str, str]) -> m.Html:
    runs = [r for r in records if r.kind == "mutation"]
    latest = runs[-1].payload.get("object") or {} if runs else {}
    ran = [(r, (r.payload.get("object") or {}).get("pod_name")) for r in runs]
    first_on_pod = next(((r, pod) for r, pod in ran if pod), None)
    ended = next((r for r in runs if r.payload.get("event") == "DELETED"
                  or (r.payload.get("object") or {}).get("phase") in wire.TERMINAL_PHASES), None)
    results = Counter(str(r.payload.get("result")) for r in records if r.kind == "cycle")
    binds = Counter(str(r.payload.get("result")) for r in records if r.kind == "bind")
    where: Any = "-"
    if first_on_pod is not None:
        rec, pod = first_on_pod
        where = m.join((m.link(pod, m.url(f"/pod/{m.seg(rec.payload.get('namespace', ''))}/{m.seg(pod)}",
                                          at=rec.at)), f" (observed there from {m.when(rec.at)})"))
    items = {
        "UID": ", ".join(sorted({str(r.payload.get("uid")) for r in runs})) or "-",
        "Runtime": latest.get("runtime", "-"),
        "requests": ", ".join(f"{k} {v}" for k, v in latest.get("requests") or ()) or "-",
        "phase (last seen)": latest.get("phase", "-"),
        "ran on": where,
        "devices": _devices(runs, records),
        "until": (f"{m.when(ended.at)} ({'deleted' if ended.payload.get('event') == 'DELETED' else latest.get('phase')})"
                  if ended else "still there at the journal's end"),
        "why it ended": _why_ended(ended, records) if ended else "-",
        **waits,
        "cycles": ", ".join(f"{n} {k}" for k, n in sorted(results.items())) or "-",
        "binds": ", ".join(f"{n} {k}" for k, n in sorted(binds.items())) or "-",
    }
    return m.definition(items, id="summary")


def _devices(runs: list[stored.Record], records: list[stored.Record]) -> str:
    """What the Run was allocated (SPEC §7.6): its observed `status.devices`, else its latest placing cycle's."""
    for r in reversed(runs):
        text = (r.payload.get("object") or {}).get("device_results")
        if isinstance(text, str):
            try:
                return results.describe(json.loads(text)) or "-"
            except ValueError:
                break
    chosen = next((r.payload["devices"].get("chosen") for r in reversed(records)
                   if r.kind == "cycle" and isinstance(r.payload.get("devices"), dict)
                   and r.payload["devices"].get("chosen")), None)
    return results.describe(chosen) or "-"


def _why_ended(ended: stored.Record, records: list[stored.Record]) -> str:
    """The Completed condition's reason and message as journaled; for a journal written before
    they were (``0009_run_end_reason``), an invalid Run's invalid cycle still says why."""
    obj = ended.payload.get("object") or {}
    if obj.get("end_reason"):
        return f"{obj['end_reason']}: {obj.get('end_message') or ''}".rstrip(": ")
    if ended.payload.get("event") == "DELETED":
        return "the Run was deleted"
    invalid = next((r for r in reversed(records) if r.kind == "cycle" and r.payload.get("result") == "invalid"), None)
    if invalid is not None:
        return f"InvalidConfiguration: {invalid.payload.get('message') or ''}".rstrip(": ")
    return "not recorded (a journal written before kruntimes recorded why Runs end)"


def _event(rec: stored.Record) -> str:
    p = rec.payload
    if rec.kind == "mutation":
        obj = p.get("object") or {}
        where = f" on {obj['pod_name']}" if obj.get("pod_name") else ""
        pending = f": {obj['pending_message']}" if obj.get("pending_message") else ""
        why = f" ({obj['end_reason']}: {obj.get('end_message') or ''})" if obj.get("end_reason") else ""
        return f"Run {str(p.get('event', '')).lower()}: {obj.get('phase', '-')}{where}{pending}{why}"
    if rec.kind == "cycle":
        devices = results.describe((p.get("devices") or {}).get("chosen")) if isinstance(p.get("devices"), dict) else ""
        chosen = (f" → {p['chosen']} (total {p.get('total')}{'; devices ' + devices if devices else ''})"
                  if p.get("chosen") else "")
        message = f": {p['message']}" if p.get("message") else ""
        return f"cycle {p.get('result')}{chosen}{message}"
    if rec.kind == "reserve":
        return f"reserved on {(p.get('assumption') or {}).get('pod_name')}"
    if rec.kind == "bind":
        return f"bind {p.get('result')}" + (f" ({p['error']})" if p.get("error") else "")
    if rec.kind == "release":
        return f"reservation released ({p.get('why')})"
    if rec.kind == "drop":
        return f"assumption dropped ({p.get('why')})"
    return rec.kind


def _story(records: list[stored.Record]) -> m.Html:
    """One row per record; consecutive identical cycles (``alike``) are one row saying how many and until when."""
    rows: list[tuple[Any, ...]] = []
    for group in alike(records):
        r = group[0]
        if r.kind != "cycle" or len(group) == 1:
            rows += [(m.link(x.lsn, f"#cycle-{x.lsn}") if x.kind == "cycle" else x.lsn, m.when(x.at), x.kind, _event(x))
                     for x in group]
            continue
        rows.append((m.link(r.lsn, f"#cycle-{r.lsn}"), m.when(r.at), f"{len(group)} cycles",
                     f"{_event(group[-1])} (the same {len(group)} times, until {m.when(group[-1].at)})"))
    return m.table(("LSN", "recorded at", "kind", "what happened"), rows, id="story")


def _cycle(rec: stored.Record) -> m.Html:
    p = rec.payload
    result = str(p.get("result"))
    head = m.h("h3", f"cycle {rec.lsn} · {m.when(rec.at)} · ", m.h("span", result, class_="result"),
               f" → {p['chosen']}" if p.get("chosen") else "")
    facts = m.h("p", f"snapshot LSN {p.get('snapshot_lsn')}, now {p.get('now')}; "
                     f"{p.get('pods_feasible')} of {p.get('pods_evaluated')} pods feasible; "
                     f"{p.get('duration_us')} µs", class_="note")
    parts: list[Any] = [head, facts]
    if isinstance(p.get("devices"), dict):  # a Run with a device claim (SPEC §7.8)
        chosen = results.describe(p["devices"].get("chosen"))
        parts.append(m.h("p", f"devices: {chosen or 'none allocated'}; {p['devices'].get('steps')} search steps",
                         class_="devices"))
    if p.get("message"):
        parts.append(m.h("p", "Pending: ", m.h("strong", p["message"]), class_="pending"))
    if p.get("rejections"):
        parts.append(m.table(("plugin", "reason", "pods rejected"),
                             [(plugin, reason, pods) for plugin, reason, pods in p["rejections"]], class_="rejections"))
    candidates = p.get("candidates") or []
    if candidates:
        plugins = sorted({s[0] for c in candidates for s in c.get("scores") or ()})
        rows = []
        for rank, c in enumerate(candidates, 1):
            by_plugin = {s[0]: s for s in c.get("scores") or ()}
            cells = [scores.text(pl, by_plugin[pl][2], by_plugin[pl][1]) if pl in by_plugin else "-" for pl in plugins]
            rows.append((rank, c.get("pod"), c.get("total"), *cells))
        table = m.table(("rank", "pod", "total", *plugins), rows, class_="candidates")
        chosen = p.get("chosen")
        # mark the chosen row (the table helper has no per-row attributes: add the class in place)
        if chosen:
            table = m.Html(table.replace(f"<tr><td>1</td><td>{m.esc(chosen)}</td>",
                                         f'<tr class="chosen"><td>1</td><td>{m.esc(chosen)}</td>', 1))
        parts.append(table)
    target = f"verdict-{rec.lsn}"
    parts.append(m.h("p", m.link("replay this cycle", m.url(f"/replay/{rec.lsn}", epoch=rec.incarnation),
                                 data_verdict=target, class_="replay"),
                     " ", m.h("span", id=target, class_="verdict-slot")))
    return m.h("section", *parts, class_="cycle", id=f"cycle-{rec.lsn}")


def render_replay(reader: queries.Reader, q: params.Query, lsn_text: str) -> bytes:
    """``/replay/LSN?epoch=E``: replay one cycle and say whether it is identical to the record."""
    lsn, epoch = int(lsn_text), q.text("epoch") or None
    found = [r for r in reader.records_at(lsn) if r.kind == "cycle" and epoch in (None, r.incarnation)]
    if not found:
        raise LookupError(f"LSN {lsn}{' of epoch ' + epoch if epoch else ''} is not a cycle record in this journal")
    if len(found) > 1:
        raise params.BadParameter(f"LSN {lsn} names cycles of {len(found)} epochs: add epoch= one of "
                                  + ", ".join(r.incarnation for r in found))
    rec = found[0]
    verdict = verdict_html(reader, rec.lsn, rec.incarnation)
    if q.text("fragment") == "1":
        return verdict.encode("utf-8")
    run = rec.payload
    back = m.link(f"Run {run.get('namespace')}/{run.get('run')}",
                  f"/run/{m.seg(str(run.get('namespace')))}/{m.seg(str(run.get('run')))}#cycle-{lsn}")
    return m.page(f"Replay of cycle {lsn}", m.h("p", back, f" · epoch {rec.incarnation}"), verdict)


def verdict_html(reader: queries.Reader, lsn: int, epoch: str) -> m.Html:
    try:
        report = verify.verify(reader.journal, source.Selection(lsns=(lsn,), incarnation=epoch))
    except replay_errors.ReplayError as exc:
        return m.h("div", m.h("span", "cannot replay: ", class_="bad"), str(exc), class_="verdict")
    if report.skipped:
        return m.h("div", "not replayable: its snapshot is before the checkpoint a prune kept", class_="verdict")
    if report.ok:
        return m.h("div", m.h("span", "identical", class_="ok"),
                   f": replayed in {report.seconds * 1000:.0f} ms ({report.stats.records:,} records applied); "
                   "the same decision, candidates, scores and outcome digest", class_="verdict")
    differences = [d for result in report.diverged for d in result.differences]
    return m.h("div", m.h("span", "diverged", class_="bad"), f": {len(differences)} differences",
               m.table(("field", "recorded", "replayed"), [(d.field, str(d.recorded), str(d.replayed))
                                                          for d in differences]), class_="verdict")
