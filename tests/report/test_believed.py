"""Nothing a report says is believed before it is checked: an outcome, a level, a device type,
key or index outside its closed set or of the wrong type, an oversized file, string or list is
a ReportError naming the file and key, and the merge exits 2 writing nothing; the output path
is checked first, as ``--devcaps-json`` checks its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.report import sources
from pytest_devcaps.report.formats import TEST_OUTCOMES, ReportError
from pytest_devcaps.report.sources import load_source
from pytest_devcaps.report.validate import schema_text

import fleet_data as data

Spoil = Callable[[Any], Any]

# (document maker, spoiler, the key and words of the refusal)
HOSTILE: list[tuple[Callable[[], Any], Spoil, str]] = [
    (data.cpu_check, lambda d: d["suites"][0]["tests"][1].update(outcome="FAILED"),
     "suites[0].tests[1].outcome: expected an outcome (passed, failed, skipped, error, xfailed, "
     "xpassed, would-run, would-skip), got 'FAILED' (did you mean 'failed'?)"),
    (data.cpu_check, lambda d: d["suites"][0]["tests"][1].update(outcome="exploded"),
     "suites[0].tests[1].outcome: expected an outcome"),
    (data.cpu_check, lambda d: d["suites"][0]["tests"][1].update(outcome=["failed"]),
     "suites[0].tests[1].outcome: expected an outcome"),
    (lambda: data.node1_rank(0), lambda d: d["tests"][0].update(outcome="Passed"),
     "tests[0].outcome: expected an outcome"),
    (lambda: data.node2_probe("native"), lambda d: d["capabilities"][0].update(level="superb"),
     "capabilities[0].level: expected a level (native, emulated, unsupported, unknown), got "
     "'superb'"),
    (lambda: data.node2_probe("native"), lambda d: d["capabilities"][0].update(level="NATIVE"),
     "(did you mean 'native'?)"),
    (lambda: data.node2_probe("native"), lambda d: d["devices"].append({"type": 5}),
     "devices[1].type: expected a device type (cpu, cuda, a backend's name), got 5"),
    (lambda: data.node2_probe("native"), lambda d: d["devices"].append({"type": "cu da"}),
     "devices[1].type: expected a device type"),
    (lambda: data.node2_probe("native"), lambda d: d["devices"][0].update(index="zero"),
     "devices[0].index: expected an int >= 0 or null, got 'zero'"),
    (lambda: data.node2_probe("native"), lambda d: d["devices"][0].update(index=-1),
     "devices[0].index: expected an int >= 0 or null, got -1"),
    (lambda: data.node2_probe("native"), lambda d: d["devices"][0].update(name={"x": 1}),
     "devices[0].name: expected a string, got an object"),
    (lambda: data.node1_rank(0), lambda d: d["tests"][0].update(device={"type": "cuda"}),
     "tests[0].device: expected a device key (cpu, cuda:0...), got {'type': 'cuda'}"),
    (lambda: data.node1_rank(0), lambda d: d["tests"][0].update(device="cuda:zero"),
     "tests[0].device: expected a device key"),
    (lambda: data.node1_rank(0), lambda d: d["tests"][0].update(teardown="boom"),
     "tests[0].teardown: expected 'error' or nothing, got 'boom'"),
    (lambda: data.node1_rank(0), lambda d: d["capabilities"][0].update(device=["cuda:0"]),
     "capabilities[0].device: expected a device key"),
    (lambda: data.node1_rank(0), lambda d: d.update(host="h" * 300),
     "host: a string of 300 characters; at most 255 are read here"),
    (lambda: data.node1_rank(0), lambda d: d.update(mode="plan", meta=["profile"]),
     "meta: expected an object, got a list"),
    (lambda: data.node1_rank(0), lambda d: d.update(mode="dry"),
     "mode: expected mode 'run' or 'plan', got 'dry'"),
    (lambda: data.node1_rank(0), lambda d: d["tests"][0].update(reruns="2"),
     "tests[0].reruns: expected integer, got str (the schema of a pytest report, format 2)"),
    (lambda: data.node2_probe("native"), lambda d: d.update(kind="Probe"),
     "kind: expected kind 'pytest', 'check', 'probe', 'fleet', got 'Probe' (did you mean "
     "'probe'?)"),
    # the older formats, which the schema does not describe, are checked as closely
    (lambda: {**data.node1_rank(0), "format": 1},
     lambda d: d["tests"][0].update(outcome="FAILED"), "tests[0].outcome: expected an outcome"),
    (lambda: [{"suite": "x", "exit_code": 0, "counts": {"cpu": {"passed": 1}}}],
     lambda d: d[0]["counts"]["cpu"].update(FAILED=3), "[0].counts.cpu: expected an outcome"),
    (lambda: [{"suite": "x", "exit_code": 0, "counts": {"cpu": {"passed": 1}}}],
     lambda d: d[0]["counts"].update({"<b>": {}}), "[0].counts: expected a device key"),
]


@pytest.mark.parametrize("make, spoil, expected", HOSTILE)
def test_a_hostile_report_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             make: Callable[[], Any], spoil: Spoil,
                                             expected: str) -> None:
    document = make()
    spoil(document)
    path = data.write(tmp_path, "bad.json", document)
    with pytest.raises(ReportError) as error:
        load_source(path)
    assert str(error.value).startswith(f"{path}: ") and expected in str(error.value)
    out = tmp_path / "fleet.json"
    assert main(["report", "merge", data.write(tmp_path, "good.json", data.node2_probe("native")),
                 path, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"devcaps: error: {path}: ") and "Traceback" not in err
    assert not out.exists()


def test_each_hostile_case_was_good_before_it_was_spoiled(tmp_path: Path) -> None:
    """The refusals above are the spoiling's doing: every document before it merges."""
    for i, (make, _, _) in enumerate(HOSTILE):
        load_source(data.write(tmp_path, f"r{i}.json", make()))


def test_the_outcomes_read_are_the_schema_s() -> None:
    enum = json.loads(schema_text())["$defs"]["test"]["properties"]["outcome"]["enum"]
    assert tuple(e for e in enum if e is not None) == TEST_OUTCOMES


def test_a_long_string_anywhere_is_refused(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_STRING", 1000)
    document = data.node1_rank(0)
    document["collection_errors"] = [{"nodeid": "t.py", "longrepr": "x" * 1001}]
    with pytest.raises(ReportError, match="holds a string of 1,001 characters .at most 1,000"):
        load_source(data.write(tmp_path, "long.json", document))
    document["collection_errors"] = [{"nodeid": "t.py", "longrepr": "x" * 999}]
    document["meta"] = {"y" * 1001: 1}  # a key is a string too
    with pytest.raises(ReportError, match="holds a string of 1,001 characters"):
        load_source(data.write(tmp_path, "key.json", document))


def test_a_long_name_is_refused_where_the_merge_repeats_it(tmp_path: Path) -> None:
    document = data.node1_rank(0)
    document["capabilities"][0]["capability"] = "c" * (sources.MAX_NAME + 1)
    with pytest.raises(ReportError, match=r"capabilities\[0\].capability: a string of 4,097"):
        load_source(data.write(tmp_path, "name.json", document))


def test_too_many_values_are_refused_before_parsing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_VALUES", 50)
    document = data.node1_rank(0)
    with pytest.raises(ReportError, match=r"may hold \d+ values, more than the 50 read"):
        load_source(data.write(tmp_path, "many.json", document))
    monkeypatch.setattr(sources, "MAX_VALUES", 10_000)
    load_source(data.write(tmp_path, "fine.json", document))


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(ReportError, match="pipe.json: not read: a FIFO, not a regular file"):
        load_source(str(fifo))


def test_the_output_is_checked_before_anything_is_read(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """As ``--devcaps-json``: a character device is refused (``-o -`` writes to stdout)."""
    for command in ("merge", "html"):
        assert main(["report", command, str(tmp_path / "missing.json"), "-o", "/dev/null"]) == 2
        err = capsys.readouterr().err
        assert "/dev/null: cannot write: '/dev/null' exists and is not a regular file (a " \
               "character device)" in err and "missing.json" not in err


def _cli(arguments: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_devcaps.commands.main", *arguments],
                          text=True, timeout=120, **kwargs)


@pytest.mark.parametrize("command", ["merge", "html"])
def test_standard_output_closed_full_or_gone(tmp_path: Path, command: str) -> None:
    report = data.write(tmp_path, "c.json", data.cpu_check())
    closed = _cli(["report", command, report, "-o", "-"], stdout=None, stderr=subprocess.PIPE,
                  close_fds=True, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and closed.stderr.startswith(
        "devcaps: error: -: cannot write: standard output is closed"), closed.stderr
    with open("/dev/full", "w") as full:
        done = _cli(["report", command, report, "-o", "-"], stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2 and done.stderr == \
        "devcaps: error: -: cannot write: No space left on device\n"
    gone = subprocess.Popen([sys.executable, "-m", "pytest_devcaps.commands.main", "report",
                             command, report, "-o", "-"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert gone.stdout is not None and gone.stderr is not None
    gone.stdout.close()  # the reader went away (`| head` that exited)
    err = gone.stderr.read()
    assert gone.wait(timeout=120) == 2 and err == "devcaps: error: -: cannot write: Broken pipe\n"


def test_a_huge_host_costs_no_more_than_its_file(tmp_path: Path) -> None:
    """The 200 MB host name that took 3.6 GB: refused while reading, at a small cost. The cost is
    the peak memory above a process that imports the same modules and reads a small report (so
    whatever the environment adds to every process is not counted)."""
    document = data.node1_rank(0)
    small = data.write(tmp_path, "small.json", document)
    document["host"] = "h" * 20_000_000
    path = data.write(tmp_path, "huge.json", document)
    script = ("import resource, sys\n"
              "from pytest_devcaps.report.sources import load_source\n"
              "from pytest_devcaps.report.formats import ReportError\n"
              "try:\n    load_source(sys.argv[1])\nexcept ReportError as e:\n    print(e)\n"
              "else:\n    print('read')\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    peaks = {}
    for name, report in (("small", small), ("huge", path)):
        done = subprocess.run([sys.executable, "-c", script, report], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        message, peak_kib = done.stdout.splitlines()
        peaks[name] = int(peak_kib) * 1024
    assert message.endswith("holds a string of 20,000,000 characters (at most 1,048,576 are "
                            "read): not read")
    assert peaks["huge"] - peaks["small"] < 10 * len(json.dumps(document)), peaks
