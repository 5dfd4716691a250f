"""A journal URL fit to print: its password masked, whether or not the URL parses.

The one place a journal URL is rendered for people: every command, log line and page
that shows a URL shows ``url(...)`` (the CLI's ``journal_args.shown`` is this), and what
is kept for printing later (the demo's report) keeps only this form, never the URL itself.
tests/integration/test_no_password_printed.py runs every command that prints one.

Why not SQLAlchemy's ``render_as_string(hide_password=True)`` alone: it needs a URL
that parses, and the URL that fails to parse (a port that is not a number, an
unclosed ``[``) is exactly the one an error message wants to show. It also splits a
password holding an unescaped ``@`` at the first ``@`` and prints the rest as the
host. So this works on the text: everything from the first ``:`` of the user part to
the LAST ``@`` is masked, as are ``password=`` query parameters. Masking too much is
harmless; masking too little is not.
"""

from __future__ import annotations

import re

MASK = "***"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_QUERY_SECRET = re.compile(r"(?i)\b((?:ssl)?pass(?:word|wd)?=)[^&\s'\"]*")


def url(value: object) -> str:
    """``value`` (a URL string or SQLAlchemy URL) with any password masked."""
    render = getattr(value, "render_as_string", None)
    text = render(hide_password=False) if callable(render) else str(value)
    return _masked(text)


def text(message: str, *urls: object) -> str:
    """``message`` with each of ``urls`` (as given or as SQLAlchemy renders it) masked, and
    any other ``scheme://user:secret@`` in it too."""
    for raw in urls:
        if raw:
            shown = url(raw)
            for form in {str(raw), _rendered(raw)} - {""}:
                message = message.replace(form, shown)
    return " ".join(_masked(word) if "://" in word or "=" in word else word for word in message.split(" "))


def _masked(text: str) -> str:
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)
    scheme = _SCHEME.search(text)
    if scheme is None:
        return _userinfo_masked(text, 0)
    return _userinfo_masked(text, scheme.end())


def _userinfo_masked(text: str, start: int) -> str:
    """Mask from the first ``:`` after ``start`` to the last ``@``, when the ``:`` comes first."""
    at = text.rfind("@", start)
    colon = text.find(":", start)
    if at < 0 or colon < 0 or colon > at:
        return text
    return text[:colon + 1] + MASK + text[at:]


def _rendered(value: object) -> str:
    try:
        import sqlalchemy as sa  # only when a URL is rendered for a message: the CLI has it loaded then

        return sa.make_url(value).render_as_string(hide_password=True)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a URL that does not parse has no rendered form
        return ""
