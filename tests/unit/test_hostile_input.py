"""Hostile files given to the CLI (`simulate -f`, `scheduler --kubeconfig`): one line, exit code 2.

Issue 12 defects 7 and 8: a long integer, a binary file, a malformed kubeconfig and
a 700-byte "billion laughs" file each gave a traceback or a MemoryError. The bounds
themselves are in ``kruntimes.bounded_yaml``; ``quantity.describe_input`` must stay
bounded for values that reach it some other way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from kruntimes import bounded_yaml
from kruntimes.api.quantity import describe_input

# Nine levels of ten: 10**9 "lol"s in 700 bytes, as the request of a Run.
BILLION_LAUGHS = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: bomb, namespace: n}\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else 'lol'] * 10)}]\n" for i in range(9)
) + "spec: {runtime: r, resources: {requests: {runs: *a8}}}\n"

# The child's peak resident memory, measured by the child itself; its address space is
# capped so that a regression fails with a MemoryError instead of taking the machine.
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a large
# pytest process would report the parent's size; VmHWM belongs to the new image alone.
MEASURED = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
    from kruntimes.cli.main import main
    code = main(sys.argv[1:])
    try:
        with open("/proc/self/status") as status:
            peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(peak_kib // 1024, file=sys.stderr)
    sys.exit(code)
""")


def _cli(*args: str, stdin: bytes | None = None, measured: bool = False) -> subprocess.CompletedProcess[str]:
    command = ["-c", MEASURED] if measured else ["-m", "kruntimes.cli.main"]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    result = subprocess.run([sys.executable, *command, *args], input=stdin, capture_output=True, check=False,
                            env=env, timeout=120)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(),
                                       result.stderr.decode(errors="replace"))


def _one_line_error(result: subprocess.CompletedProcess[str], prog: str, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"kruntimes {prog}: ")
    for needle in needles:
        assert needle in result.stderr


def test_a_yaml_integer_of_more_than_4300_digits_is_a_one_line_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {n: " + "7" * 5000 + "}\n")
    _one_line_error(_cli("simulate", "-f", str(path)), "simulate",
                    f"{path} line 4: an integer of 5,000 characters (at most 4,300)")


def test_a_binary_file_given_to_simulate_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    _one_line_error(_cli("simulate", "-f", str(path)), "simulate", f"{path}: not UTF-8 text (byte 0 is 0x89)")
    _one_line_error(_cli("simulate", "-f", "-", stdin=path.read_bytes()), "simulate", "<stdin>: not UTF-8 text")


def test_a_name_and_a_reason_that_look_like_markup_are_printed_as_they_are() -> None:
    text = ('apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: "[/b]x", namespace: n}\n'
            'spec: {runtime: r, resources: {requests: {runs: "[red]"}}}\n')
    result = _cli("simulate", "-f", "-", stdin=text.encode())
    assert result.returncode == 0, result.stderr
    assert "[/b]x" in result.stdout and "\"[red]\"" in result.stdout  # rich wraps at spaces only


def test_a_billion_laughs_file_is_a_clear_error_within_a_few_hundred_megabytes(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 1024
    result = _cli("simulate", "-f", str(path), measured=True)
    error, peak_mib = result.stderr.splitlines()
    # Measured at 85 MiB (the interpreter and its imports); before the bound: MemoryError at the 2 GiB cap.
    assert int(peak_mib) < 300
    _one_line_error(subprocess.CompletedProcess(result.args, result.returncode, "", error + "\n"), "simulate",
                    f"{path} line 8: a document of more than 100,000 nodes")


@pytest.mark.parametrize("content, needle", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\xff", "not UTF-8 text (byte 11 is 0xff)"),
    (b"apiVersion: v1\nclusters: [\n", "line 3: not valid YAML"),
    (b"- a kubeconfig\n- is not a list\n", "not a kubeconfig (expected a YAML mapping, got a list)"),
    (b"apiVersion: v1\nclusters: 1\n", "not usable ('int' object is not iterable)"),
    (BILLION_LAUGHS.encode(), "a document of more than 100,000 nodes"),
], ids=["a binary file", "malformed YAML", "a list", "clusters that are a number", "a billion laughs"])
def test_a_kubeconfig_that_cannot_be_read_is_a_one_line_error_naming_it(
        tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    result = _cli("scheduler", "--kubeconfig", str(path), "--no-leader-elect", "--http-port", "0")
    _one_line_error(result, "scheduler", f"kubeconfig {path}", needle)


def test_describing_a_billion_laughs_value_takes_a_few_kilobytes() -> None:
    laughs: object = "lol"
    for _ in range(7):  # 10**7 strings: tens of megabytes as JSON
        laughs = [laughs] * 10
    tracemalloc.start()
    try:
        shown = describe_input(laughs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shown == '[[[[[[["lol", "lol", "lol", "lol", "lol…' and len(shown) == 40
    assert peak < 64 * 1024


def test_describing_a_list_that_contains_itself_shows_its_start() -> None:
    ouroboros: list[object] = [1]
    ouroboros.append(ouroboros)
    assert describe_input(ouroboros, 12) == "[1, [1, [1,…"


@pytest.mark.parametrize("text, needle", [
    ("a: &a [1, *a]\n", "line 1: alias *a refers to a node that contains it"),
    ("[" * 101 + "]" * 101, f"line 1: nested more than {bounded_yaml.MAX_DEPTH} levels deep"),
    ("a: !!int ''\n", "line 1: not valid YAML (cannot read '' as !!int"),
    ("when: 2026-02-30\n", "line 1: not valid YAML (cannot read '2026-02-30' as !!timestamp"),
    ("a: !!python/object:os.system x\n", "line 1: not valid YAML (could not determine a constructor"),
    ("a: b\x00\n", "x.yaml: not valid YAML (character U+0000 at offset 4 is not allowed in YAML)"),
    ("a: \ud800\n", "x.yaml: not valid YAML (character U+D800 at offset 3 is not allowed in YAML)"),
    ("a: !" + "t" * 100_000 + " x\n", "line 1: not valid YAML (could not determine a constructor for the tag '!ttt"),
    ("---\na: 1\n---\nb: &b [[1, 2, 3]]\nc: [" + ", ".join(["*b"] * 25_000) + "]\n",
     "line 5: a document of more than 100,000 nodes (aliases counted as the nodes they stand for) (document 2)"),
], ids=["a recursive alias", "deep nesting", "an explicit tag on the wrong value", "a day that does not exist",
        "a Python tag", "a control character", "a lone surrogate in text built in Python", "a long unknown tag",
        "many aliases of a small node"])
def test_hostile_yaml_is_an_error_naming_the_file_and_line(text: str, needle: str) -> None:
    with pytest.raises(bounded_yaml.Unreadable) as caught:
        list(bounded_yaml.load_all("x.yaml", text))
    assert str(caught.value).startswith("x.yaml") and needle in str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def test_the_nodes_of_a_file_are_bounded_across_its_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded_yaml, "MAX_NODES_PER_FILE", 10)
    documents = bounded_yaml.load_all("x.yaml", "[1, 2, 3, 4]\n---\n[5, 6, 7, 8]\n---\n[9]\n")
    assert next(documents) == (1, [1, 2, 3, 4])
    assert next(documents) == (2, [5, 6, 7, 8])
    with pytest.raises(bounded_yaml.Unreadable, match="x.yaml line 5: more than 10 nodes in one file"):
        next(documents)


def test_a_file_larger_than_the_bound_is_refused_before_it_is_parsed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded_yaml, "MAX_BYTES", 1024 * 1024)
    path = tmp_path / "big.yaml"
    path.write_text("a: [" + "1, " * 600_000 + "]\n")
    with pytest.raises(bounded_yaml.Unreadable, match=r"big.yaml: larger than 1 MiB$"):
        bounded_yaml.read_text(str(path))


def test_yaml_within_the_bounds_reads_as_pyyaml_reads_it() -> None:
    text = "a: &a {x: 1, t: 2026-11-29T10:00:00Z}\nb: {<<: *a, y: [*a, 0x1f, 1:30]}\n---\n---\nc: 1\n"
    import yaml
    assert [v for _, v in bounded_yaml.load_all("x.yaml", text)] == list(yaml.safe_load_all(text))
    assert [n for n, _ in bounded_yaml.load_all("x.yaml", text)] == [1, 2, 3]
