"""HTML for the pages: every value escaped on the way in, one layout, small table and link helpers.

Why a class and not f-strings: a Run's name, an annotation or a Pending message is
text someone else wrote. ``Html`` marks markup that is already safe; ``esc`` turns
anything else into text; ``h`` builds an element from escaped parts. A page never
concatenates raw strings into HTML, so a Run called ``<script>`` shows as its name.
Figures travel as JSON inside ``<script type="application/json">`` (not executed;
``<`` escaped so the data cannot close the element) and are drawn by ``ui.js``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode


class Html(str):
    """Text that is already markup (built here from escaped parts)."""


def esc(value: Any) -> Html:
    if isinstance(value, Html):
        return value
    if value is None:
        return Html("")
    if isinstance(value, datetime):
        value = when(value)
    return Html(html.escape(str(value), quote=True))


def join(parts: Iterable[Any]) -> Html:
    return Html("".join(esc(p) for p in parts))


def h(tag: str, *children: Any, **attrs: Any) -> Html:
    """``<tag attrs>children</tag>``; ``class_`` is ``class``, ``data_x`` is ``data-x``; False/None drop."""
    rendered = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' if v is not True
                       else f' {k.rstrip("_").replace("_", "-")}'
                       for k, v in attrs.items() if v is not None and v is not False)
    return Html(f"<{tag}{rendered}>{join(children)}</{tag}>")


def void(tag: str, **attrs: Any) -> Html:
    return Html(h(tag, **attrs)[: -len(f"</{tag}>")])


def when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(sep=" ", timespec="milliseconds").replace("+00:00", "Z")


def iso(value: datetime) -> str:
    """An instant as the URL and the forms carry it."""
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def url(path: str, **params: Any) -> str:
    """A path with its query; path segments are given pre-split as ``/run/{ns}/{name}`` by the caller."""
    query = urlencode({k: (iso(v) if isinstance(v, datetime) else v) for k, v in params.items()
                       if v is not None and v != ""}, doseq=True)
    return f"{path}?{query}" if query else path


_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")


def seg(value: str) -> str:
    """One URL path segment (Kubernetes names need no quoting: they are returned as they are)."""
    return value if _PLAIN.fullmatch(value) else quote(value, safe="")


def link(text: Any, href: str, **attrs: Any) -> Html:
    return h("a", text, href=href, **attrs)


def table(columns: Iterable[Any], rows: Iterable[Iterable[Any]], **attrs: Any) -> Html:
    head = h("thead", h("tr", *(h("th", c) for c in columns)))
    body = h("tbody", *(h("tr", *(h("td", cell) for cell in row)) for row in rows))
    return h("table", head, body, **attrs)


def definition(items: Mapping[str, Any], **attrs: Any) -> Html:
    return h("dl", *(join((h("dt", k), h("dd", v))) for k, v in items.items()), **attrs)


def figure(figure_id: str, spec: dict[str, Any], *, height: int = 300) -> Html:
    """A Plotly figure: a div and its JSON (data, layout), drawn by ``ui.js``."""
    data = json.dumps(spec, separators=(",", ":"), default=str).replace("<", "\\u003c")
    return join((h("div", id=figure_id, class_="figure", style=f"height:{height}px", data_figure=figure_id + "-spec"),
                 Html(f'<script type="application/json" id="{esc(figure_id)}-spec">{data}</script>')))


NAV = (("Timeline", "/timeline"), ("Waits", "/waits"), ("What-if", "/whatif"), ("Pod at T", "/pod"),
       ("Integrity", "/integrity"))


def page(title: str, *body: Any, active: str = "", journal: str = "") -> bytes:
    """The whole document: navigation, the page's content, the shared assets (all served locally)."""
    nav = h("nav", h("strong", "kruntimes"),
            *(link(name, href, class_="active" if name == active else None) for name, href in NAV),
            h("span", journal, class_="journal"))
    doc = Html("<!doctype html>") + h(
        "html",
        h("head", void("meta", charset="utf-8"), h("title", f"{title} · kruntimes"),
          void("meta", name="viewport", content="width=device-width, initial-scale=1"),
          void("link", rel="stylesheet", href="/static/ui.css"), void("link", rel="icon", href="data:,"),
          h("script", src="/static/plotly.min.js", defer=True), h("script", src="/static/ui.js", defer=True)),
        h("body", nav, h("main", h("h1", title), *body)),
        lang="en")
    return doc.encode("utf-8")


def with_banner(document: bytes, banner: Html) -> bytes:
    """A document from ``page`` with ``banner`` between the navigation and the page's content.

    Why after the fact: a banner about the journal as a whole belongs on every page, so
    the server adds it to each one it serves rather than every page asking for it. The
    first ``</nav>`` is the layout's (``page`` writes it before anything a page supplies,
    and text is escaped); a fragment without one is returned as it is.
    """
    return document.replace(b"</nav>", b"</nav>" + banner.encode("utf-8"), 1)
