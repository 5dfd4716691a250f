"""`kruntimes simulate`: the docs' examples, input order, errors that name the document."""

import json
import pathlib
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from kruntimes.cli.main import main
from kruntimes.simulate import InputError, load_documents, simulate

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kruntimes.cli.main", *args], input=stdin,
                          capture_output=True, text=True, check=False)


def test_the_documented_example_places_runs_as_the_docs_show() -> None:
    result = _cli("simulate", "-f", str(EXAMPLES / "cohort.yaml"), "--now", "2026-11-29T12:00:00Z", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads((EXAMPLES / "cohort.expected.json").read_text())


def test_the_cohort_bootstraps_onto_the_only_pod_with_a_gpu_and_its_member_follows() -> None:
    docs = load_documents([("cohort.yaml", (EXAMPLES / "cohort.yaml").read_text())])
    by_name = {p.name: p for p in simulate(docs, NOW)}
    assert by_name["train-1"].pod == by_name["train-2"].pod == "python-a"
    assert by_name["web-1"].pod != by_name["web-2"].pod
    assert by_name["typo"].phase == "Failed" and 'requests["runs"]' in (by_name["typo"].reason or "")


def test_output_is_in_input_order_and_each_run_sees_the_assumptions_before_it() -> None:
    pod = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: n, labels: {kruntimes.io/runtime: r},
           annotations: {kruntimes.io/capacity.runs: "1", kruntimes.io/runtimed-heartbeat: "2026-11-29T12:00:00Z"}}
status: {conditions: [{type: Ready, status: "True"}]}
"""
    runs = "".join(f"""---
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata: {{name: {name}, namespace: n, creationTimestamp: "2026-11-29T10:00:0{t}Z"}}
spec: {{runtime: r}}
""" for name, t in (("late", 9), ("early", 1)))
    placements = simulate(load_documents([("x.yaml", pod + runs)]), NOW)
    assert [p.name for p in placements] == ["late", "early"]
    assert placements[1].phase == "Scheduled" and placements[0].phase == "Pending"
    assert placements[0].reason == "0/1 runtime pods available: 1 insufficient capacity (runs)"


def test_heartbeats_are_judged_against_now() -> None:
    docs = load_documents([("cohort.yaml", (EXAMPLES / "cohort.yaml").read_text())])
    later = datetime(2026, 11, 29, 13, 0, tzinfo=timezone.utc)
    assert "Scheduled" in [p.phase for p in simulate(docs, NOW)]  # the same pods are fresh at NOW
    placements = simulate(docs, later)
    assert [(p.name, p.phase, p.reason) for p in placements if p.name != "typo"] == [
        (name, "Pending", "0/3 runtime pods available: 3 runtimed stale")
        for name in ("train-1", "train-2", "web-1", "web-2", "web-3", "train-3")]


@pytest.mark.parametrize("text, needle", [
    ("a: b\n  c: d\n", "x.yaml line 2: not valid YAML"),
    ("- 1\n- 2\n", "x.yaml document 1: expected a Kubernetes object"),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n", "x.yaml document 1: unsupported object"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "has no kruntimes.io/runtime label"),
    ("---\n---\napiVersion: v1\nkind: Pod\nmetadata: {}\n", "x.yaml document 2: metadata.name is required"),
], ids=["malformed YAML names the file and line", "a non-object document is named",
        "an unknown kind is named", "a pod without the runtime label is explained",
        "empty documents are skipped but counted"])
def test_bad_input_gets_an_error_naming_the_document(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=None) as caught:
        simulate(load_documents([("x.yaml", text)]), NOW)
    assert needle in str(caught.value)


def test_the_cli_reports_bad_input_on_stderr_with_exit_code_2() -> None:
    result = _cli("simulate", "-f", "-", stdin="kind: Foo\n")
    assert result.returncode == 2
    assert "<stdin> document 1: unsupported object" in result.stderr


def test_the_cli_rejects_a_now_that_is_not_a_time() -> None:
    result = _cli("simulate", "-f", str(EXAMPLES / "cohort.yaml"), "--now", "yesterday")
    assert result.returncode == 2 and "--now 'yesterday' is not a time: use RFC 3339" in result.stderr


ONE_SLOT_POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: n, labels: {kruntimes.io/runtime: r},
           annotations: {kruntimes.io/capacity.runs: "1", kruntimes.io/runtimed-heartbeat: "2026-11-29T12:00:00Z"}}
status: {conditions: [{type: Ready, status: "True"}]}
"""


def _runs(*runs: tuple[str, str]) -> str:
    """Runs in namespace n; each created at the YAML text given (quote it to make it a string)."""
    return "".join(f"---\napiVersion: kruntimes.io/v1alpha1\nkind: Run\n"
                   f"metadata: {{name: {name}, namespace: n, creationTimestamp: {created}}}\nspec: {{runtime: r}}\n"
                   for name, created in runs)


def _first_scheduled(text: str) -> str:
    placements = simulate(load_documents([("x.yaml", ONE_SLOT_POD + text)]), NOW)
    return next(p.name for p in placements if p.phase == "Scheduled")


@pytest.mark.parametrize("late, early", [
    ('"2026-11-29T10:00:01.5Z"', '"2026-11-29T10:00:01Z"'),
    ('"2026-11-29T10:00:00Z"', '"2026-11-29T11:00:00+02:00"'),
    ("2026-11-29T10:00:00Z", '"2026-11-29T09:59:59Z"'),
    ("2026-11-29 10:00:00Z", "2026-11-29T11:00:00+02:00"),
], ids=["fractional seconds", "an offset", "an unquoted YAML timestamp against text",
        "two unquoted YAML timestamps"])
def test_runs_are_placed_in_the_order_of_the_instants_they_were_created_not_of_the_timestamp_text(
        late: str, early: str) -> None:
    assert _first_scheduled(_runs(("late", late), ("early", early))) == "early"


def test_a_fraction_finer_than_a_microsecond_still_orders_runs_before_their_names_do() -> None:
    # RFC 3339 allows any number of fractional digits; a datetime keeps six. Found by the
    # differential model: "a" (100 ns later) was placed first, by name.
    text = _runs(("a", '"2026-11-29T10:00:01.0000001Z"'), ("b", '"2026-11-29T10:00:01Z"'))
    assert _first_scheduled(text) == "b"


def test_runs_created_at_the_same_instant_are_placed_by_namespace_then_name() -> None:
    text = _runs(("b", '"2026-11-29T10:00:00Z"'), ("a", '"2026-11-29T12:00:00.000+02:00"'))
    assert _first_scheduled(text) == "a"


@pytest.mark.parametrize("created", ['"yesterday"', '"2026-11-29T10:00:00"', "2026-11-29 10:00:00", "2026-11-29",
                                     "12", "[1]", '"0001-01-01T00:30:00+01:00"', "9999-12-31T23:59:59-01:00"],
                         ids=["words", "text without a zone", "an unquoted YAML timestamp without a zone",
                              "a date", "a number", "a list",
                              "text before year 1 in UTC", "a YAML timestamp after year 9999 in UTC"])
def test_an_unparsable_creation_timestamp_is_an_error_naming_the_file_and_document(created: str) -> None:
    with pytest.raises(InputError) as caught:
        simulate(load_documents([("x.yaml", ONE_SLOT_POD + _runs(("a", '"2026-11-29T10:00:00Z"'),
                                                                   ("b", created)))]), NOW)
    assert str(caught.value).startswith("x.yaml document 3: metadata.creationTimestamp ")
    assert "is not an RFC 3339 time with a zone" in str(caught.value) or "outside the years 1 to 9999" in str(
        caught.value)


@pytest.mark.parametrize("text, needle", [
    (_runs(("a", '"2026-11-29T10:00:00Z"'), ("a", '"2026-11-29T10:00:01Z"')),
     "y.yaml document 1: Run n/a is already in x.yaml document 2"),
    (ONE_SLOT_POD, "y.yaml document 1: Pod n/p is already in x.yaml document 1"),
    ("apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: u, namespace: n, uid: x}\n---\n"
     "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: v, namespace: n, uid: x}\n",
     'y.yaml document 2: Run n/v has uid "x", as does y.yaml document 1'),
    ("apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: '{0}{x}', namespace: n}\n---\n"
     "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: '{0}{x}', namespace: n}\n",
     "y.yaml document 2: Run n/{0}{x} is already in y.yaml document 1"),
], ids=["a Run", "a Runtime Pod", "a uid", "a name with braces"])
def test_an_object_given_twice_is_an_error_naming_both_documents(text: str, needle: str) -> None:
    with pytest.raises(InputError) as caught:
        simulate(load_documents([("x.yaml", ONE_SLOT_POD + _runs(("a", '"2026-11-29T09:00:00Z"'))),
                                 ("y.yaml", text)]), NOW)
    assert str(caught.value) == needle + "; each object may appear once"


def test_objects_of_the_same_name_in_other_namespaces_or_kinds_are_distinct() -> None:
    text = ONE_SLOT_POD + _runs(("p", '"2026-11-29T10:00:00Z"')) + _runs(("p", '"2026-11-29T10:00:01Z"')).replace(
        "namespace: n", "namespace: m")
    assert [(p.namespace, p.name) for p in simulate(load_documents([("x.yaml", text)]), NOW)] == [
        ("n", "p"), ("m", "p")]


@pytest.mark.parametrize("text, needle", [
    ("apiVersion: v1\nkind: Pod\nmetadata: [p]\n", "metadata must be a mapping"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: [p]}\n", "metadata.name must be a string"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: 7}\n", "metadata.namespace must be a string"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: [a]}\n", "metadata.labels must be a mapping"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {kruntimes.io/runtime: r}}\nstatus: [1]\n",
     "status must be a mapping"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {kruntimes.io/runtime: r}}\nstatus: {conditions: 1}\n",
     "status.conditions must be a list, got 1"),
    ("apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: r}\nstatus: {conditions: 1}\n",
     "status.conditions must be a list, got 1"),
    ("apiVersion: [v1]\nkind: {a: b}\nmetadata: {name: r}\n", 'unsupported object ["v1"]/{"a": "b"}'),
], ids=["metadata a list", "a name that is a list", "a namespace that is a number", "labels a list",
        "status a list", "a pod's conditions a number", "a Run's conditions a number", "a kind that is a mapping"])
def test_a_document_of_the_wrong_shape_is_an_error_naming_it(text: str, needle: str) -> None:
    with pytest.raises(InputError) as caught:
        simulate(load_documents([("x.yaml", text)]), NOW)
    assert str(caught.value).startswith("x.yaml document 1: ") and needle in str(caught.value)


def test_a_run_without_a_creation_timestamp_is_placed_first_as_kube_reads_a_zero_time() -> None:
    text = _runs(("a", '"2026-11-29T10:00:00Z"'), ("b", "null"))
    assert _first_scheduled(text) == "b"


RUNTIME_EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples" / "runtime.yaml"


def _gpu_runs(n: int) -> str:
    return "".join(f"""---
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata: {{name: train-{i}, creationTimestamp: "2026-11-29T10:00:0{i}Z"}}
spec: {{runtime: python, resources: {{requests: {{example.com/gpu: "1"}}}}}}
""" for i in range(n))


def test_a_runtime_becomes_its_replicas_pods_with_their_capacity_as_the_controller_makes_them() -> None:
    docs = load_documents([("runtime.yaml", RUNTIME_EXAMPLE.read_text()), ("runs.yaml", _gpu_runs(4))])
    placements = simulate(docs, NOW)
    # replicas 3, one example.com/gpu each: three Runs placed, one per pod, the fourth waits naming the GPU.
    assert [(p.name, p.pod) for p in placements[:3]] == [("train-0", "python-0"), ("train-1", "python-1"),
                                                          ("train-2", "python-2")]
    assert placements[3].phase == "Pending" and placements[3].reason == \
        "0/3 runtime pods available: 3 insufficient capacity (example.com/gpu)"


RUNTIME_ERRORS = {
    "a capacity the controller refuses": ('capacity: {resources: {runs: "1.5"}}', "the controller creates no pods"),
    "more replicas than simulate expands": ("replicas: 1000000", "more than simulate expands (10,000)"),
}


@pytest.mark.parametrize("spec,says", RUNTIME_ERRORS.values(), ids=list(RUNTIME_ERRORS))
def test_a_runtime_that_cannot_become_pods_is_an_error_naming_the_document(spec: str, says: str) -> None:
    text = f"apiVersion: kruntimes.io/v1alpha1\nkind: Runtime\nmetadata: {{name: python}}\nspec: {{{spec}}}\n"
    with pytest.raises(InputError, match=r"^bad\.yaml document 1: Runtime python: ") as raised:
        simulate(load_documents([("bad.yaml", text)]), NOW)
    assert says in str(raised.value)


def test_simulate_reads_the_runtime_example_from_the_command_line(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: pathlib.Path) -> None:
    runs = tmp_path / "runs.yaml"
    runs.write_text(_gpu_runs(1))
    assert main(["simulate", "-f", str(RUNTIME_EXAMPLE), "-f", str(runs), "--now", "2026-11-29T12:00:00Z",
                 "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"namespace": "default", "name": "train-0", "phase": "Scheduled", "pod": "python-0", "reason": None}]


def test_the_demos_gpu_runtime_example_places_devices_as_the_docs_show() -> None:
    result = _cli("simulate", "-f", str(EXAMPLES / "demo-gpu.yaml"), "--now", "2026-11-29T12:00:00Z", "-o", "json")
    assert result.returncode == 0, result.stderr
    placed = json.loads(result.stdout)
    assert placed == json.loads((EXAMPLES / "demo-gpu.expected.json").read_text())
    by_name = {p["name"]: p for p in placed}
    assert by_name["a100-or-any-1"]["devices"] == {"gpu/a100": ["gpu-2"]}  # request/alternative → devices
    assert by_name["slice-1"]["consumed"] == {"slice": {"shared": {"gpu.example.com/memory": "10737418240"}}}
    assert "consumed" not in by_name["one-a100-1"] and "devices" in by_name["one-a100-1"]


def test_the_gpu_example_is_the_demos_own_runtime_class_and_claims() -> None:
    from kruntimes import demo_workload as demo

    docs = [doc for _, doc in load_documents([("demo-gpu.yaml", (EXAMPLES / "demo-gpu.yaml").read_text())])]
    [runtime] = [d for d in docs if d["kind"] == "Runtime"]
    assert runtime["spec"]["devices"] == demo.GPU_DEVICES and [d for d in docs if d["kind"] == "RuntimeDeviceClass"] \
        == [demo.GPU_CLASS]
    claims = [d["spec"]["devices"] for d in docs if d["kind"] == "Run"]
    assert all(c in demo.GPU_CLAIMS for c in claims) and len({json.dumps(c) for c in claims}) == len(demo.GPU_CLAIMS)


def test_without_its_device_class_a_claim_waits_saying_so_and_a_class_given_twice_is_an_error() -> None:
    text = (EXAMPLES / "demo-gpu.yaml").read_text()
    without = "---".join(part for part in text.split("---") if "kind: RuntimeDeviceClass" not in part)
    placed = simulate(load_documents([("f.yaml", without)]), NOW)
    assert {p.phase for p in placed} == {"Pending"} and all("device class not found" in (p.reason or "")
                                                            for p in placed)
    assert all(p.devices is None for p in placed)
    first = text.split("---")[0]
    with pytest.raises(InputError, match="RuntimeDeviceClass gpu is already in"):
        simulate(load_documents([("f.yaml", text), ("g.yaml", first)]), NOW)
