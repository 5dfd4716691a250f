"""`kruntimes ui --journal URL [--listen 127.0.0.1:8080]`: the read-only web view of a journal.

Binds to localhost unless told otherwise: the pages show every Run's name and every
decision, so in a cluster they belong behind `kubectl port-forward` or an
authenticating proxy (``deploy/README.md``), never on an open port.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys

from kruntimes.cli import journal_args as ja
from kruntimes.ui import queries, server

DEFAULT_LISTEN = "127.0.0.1:8080"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("ui", help="a read-only web view of the journal: timelines, Runs, replay, what-if",
                       description="Serve pages over the journal (opened read-only): the Timeline of pods and "
                                   "Runs, a Run's story with replay verdicts, what-if, a pod at an instant, "
                                   "and the journal's integrity.")
    ja.add_url_option(p)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN}: this machine only)")
    p.set_defaults(run=run)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ja.UsageError(f"--listen must be HOST:PORT (e.g. {DEFAULT_LISTEN}), got {text!r}")
    return host, int(port)


def local(host: str) -> bool:
    """Whether ``host`` serves this machine only (a loopback address or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that resolves elsewhere, maybe: warn rather than guess


@ja.guarded("kruntimes ui")
def run(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen)
    url = ja.journal_url(args)
    ja.checked_url(url, must_exist=True)
    reader = queries.open_reader(url)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        httpd = server.make_server(server.App(reader, label=ja.shown(url)), host, port)
    except OSError as exc:
        reader.close()
        raise ja.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    shown_host = f"[{host}]" if ":" in host else host
    print(f"kruntimes ui: serving {ja.shown(url)} (read-only) on http://{shown_host}:{httpd.server_port}/",
          file=sys.stderr, flush=True)
    if not local(host):
        print(f"kruntimes ui: warning: {host} is reachable from other machines, and the pages show every Run's "
              "name and every decision without asking who reads them; serve on 127.0.0.1 behind "
              "`kubectl port-forward` or an authenticating proxy (deploy/README.md)", file=sys.stderr, flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        reader.close()
    return 0
