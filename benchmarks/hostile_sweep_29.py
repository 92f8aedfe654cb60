"""Issue 29's hostile-case sweep: fleet documents, the CLI's paths, the pre-commit entry,
distributed settings, tolerance and profile numbers. Each case runs the command line as a user
does (a subprocess) and is "ok" when it ends with the expected exit status, says so in one
line where it refuses, and prints no traceback; anything else is "BAD".

    python benchmarks/hostile_sweep_29.py > benchmarks/results/hostile_sweep_29_<date>_<CPU>.txt
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests" / "report"))
import fleet_data as data  # noqa: E402

CLI = [sys.executable, "-m", "pytest_devcaps.commands.main"]


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None,
        **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, text=True,
                          capture_output="stdout" not in kwargs, timeout=300, **kwargs)


def verdict(name: str, done: subprocess.CompletedProcess[str], expected: int,
            needle: str = "") -> bool:
    err = done.stderr or ""
    lines = [line for line in err.splitlines() if line.startswith(("devcaps: error:", "ERROR:"))]
    good = (done.returncode == expected and "Traceback" not in err + (done.stdout or "")
            and (expected == 0 or expected == 1 or len(lines) == 1)
            and needle in err + (done.stdout or ""))
    shown = lines[0] if lines else err.strip().splitlines()[-1] if err.strip() else ""
    print(f"{'ok ' if good else 'BAD'} {name}: exit {done.returncode} (expected {expected}): "
          f"{shown[:160]}")
    return good


SPOILS: list[tuple[str, Callable[[], Any], Callable[[Any], Any], str]] = [
    ("outcome FAILED", data.cpu_check, lambda d: d["suites"][0]["tests"][1].update(outcome="FAILED"), "did you mean 'failed'"),
    ("outcome exploded", data.cpu_check, lambda d: d["suites"][0]["tests"][1].update(outcome="exploded"), "expected an outcome"),
    ("outcome a list", data.cpu_check, lambda d: d["suites"][0]["tests"][1].update(outcome=["failed"]), "expected an outcome"),
    ("outcome number", lambda: data.node1_rank(0), lambda d: d["tests"][0].update(outcome=1), "expected an outcome"),
    ("level unknown name", lambda: data.node2_probe("x"), lambda d: None, "expected a level"),
    ("device type 5", lambda: data.node2_probe("native"), lambda d: d["devices"].append({"type": 5}), "expected a device type"),
    ("device type with space", lambda: data.node2_probe("native"), lambda d: d["devices"].append({"type": "a b"}), "expected a device type"),
    ("device index 'zero'", lambda: data.node2_probe("native"), lambda d: d["devices"][0].update(index="zero"), "devices[0].index"),
    ("device index -1", lambda: data.node2_probe("native"), lambda d: d["devices"][0].update(index=-1), "devices[0].index"),
    ("device index True", lambda: data.node2_probe("native"), lambda d: d["devices"][0].update(index=True), "devices[0].index"),
    ("test device an object", lambda: data.node1_rank(0), lambda d: d["tests"][0].update(device={"a": 1}), "tests[0].device"),
    ("test device '<script>'", lambda: data.node1_rank(0), lambda d: d["tests"][0].update(device="<script>"), "tests[0].device"),
    ("record device a list", lambda: data.node1_rank(0), lambda d: d["capabilities"][0].update(device=[1]), "capabilities[0].device"),
    ("teardown 'boom'", lambda: data.node1_rank(0), lambda d: d["tests"][0].update(teardown="boom"), "teardown"),
    ("host 300 chars", lambda: data.node1_rank(0), lambda d: d.update(host="h" * 300), "at most 255"),
    ("host 200 MB", lambda: data.node1_rank(0), lambda d: d.update(host="h" * 200_000_000), "holds a string"),
    ("meta a list in a plan", lambda: data.node1_rank(0), lambda d: d.update(mode="plan", meta=[1]), "meta: expected an object"),
    ("mode 'dry'", lambda: data.node1_rank(0), lambda d: d.update(mode="dry"), "expected mode"),
    ("reruns '2'", lambda: data.node1_rank(0), lambda d: d["tests"][0].update(reruns="2"), "the schema of a pytest report"),
    ("exitstatus a string", lambda: data.node1_rank(0), lambda d: d.update(exitstatus="0"), "exitstatus"),
    ("format-1 outcome FAILED", lambda: {**data.node1_rank(0), "format": 1}, lambda d: d["tests"][0].update(outcome="FAILED"), "expected an outcome"),
    ("format-0 counts FAILED", lambda: [{"suite": "x", "exit_code": 0, "counts": {"cpu": {"passed": 1}}}], lambda d: d[0]["counts"]["cpu"].update(FAILED=3), "expected an outcome"),
    ("format-0 counts -1", lambda: [{"suite": "x", "exit_code": 0, "counts": {"cpu": {"passed": -1}}}], lambda d: None, "expected a count"),
    ("kind 'Probe'", lambda: data.node2_probe("native"), lambda d: d.update(kind="Probe"), "did you mean 'probe'"),
]


def fleet_documents(tmp: Path) -> list[bool]:
    results = []
    good = data.write(tmp, "good.json", data.node2_probe("native"))
    for name, make, spoil, needle in SPOILS:
        document = make()
        spoil(document)
        path = data.write(tmp, "bad.json", document)
        for command in ("merge", "html"):
            out = tmp / "out"
            done = run([*CLI, "report", command, good, path, "-o", str(out)], cwd=tmp)
            results.append(verdict(f"fleet {command}: {name}", done, 2, needle) and not out.exists())
    (tmp / "many.json").write_text("[" + "[]," * 17_000_000 + "[]]")
    results.append(verdict("fleet merge: 17M empty lists (5 GB as objects)",
                           run([*CLI, "report", "merge", str(tmp / "many.json"), "-o", "-"], cwd=tmp),
                           2, "values"))
    os.mkfifo(tmp / "fifo.json")
    results.append(verdict("fleet merge: a FIFO", run([*CLI, "report", "merge", "fifo.json", "-o", "-"],
                                                      cwd=tmp), 2, "a FIFO"))
    return results


def output_paths(tmp: Path) -> list[bool]:
    report = data.write(tmp, "c.json", data.cpu_check())
    (tmp / "plain").write_text("x")
    os.mkfifo(tmp / "out-fifo")
    results = []
    for target, needle in [("/dev/null", "character device"), ("/dev/zero", "character device"),
                           (str(tmp), "a directory"), (str(tmp / "plain" / "x.json"), "not a directory"),
                           (str(tmp / "out-fifo"), "a FIFO"), ("", "needs a file path")]:
        for command in ("merge", "html"):
            done = run([*CLI, "report", command, report, "-o", target], cwd=tmp)
            results.append(verdict(f"-o {target!r} ({command})", done, 2, needle))
    closed = run([*CLI, "report", "merge", report, "-o", "-"], cwd=tmp, stdout=None,
                 stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    results.append(verdict("-o - with stdout closed", closed, 2, "standard output is closed"))
    with open("/dev/full", "w") as full:
        results.append(verdict("-o - to /dev/full", run([*CLI, "report", "merge", report, "-o", "-"],
                                                        cwd=tmp, stdout=full, stderr=subprocess.PIPE),
                               2, "No space left"))
    gone = subprocess.Popen([*CLI, "report", "merge", report, "-o", "-"], cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert gone.stdout is not None and gone.stderr is not None
    gone.stdout.close()
    err = gone.stderr.read()
    results.append(verdict("-o - reader gone", subprocess.CompletedProcess([], gone.wait(), "", err),
                           2, "Broken pipe"))
    Path(tmp / "-r.json").write_text(json.dumps(data.node2_probe("native")))
    results.append(verdict("report merge -- -r.json", run([*CLI, "report", "merge", "-o", "f.json", "--",
                                                           "-r.json"], cwd=tmp), 0))
    return results


def pre_commit_entry(tmp: Path) -> list[bool]:
    import yaml

    hooks = yaml.safe_load((HERE / ".pre-commit-hooks.yaml").read_text())
    gated = "import torch\n\n\ndef test_x():\n    assert torch.cuda.is_available()\n"  # devcaps: allow
    results = []
    for hook in hooks:
        tree = tmp / hook["id"]
        tree.mkdir()
        names = ["-weird.py", "--fix.py", "--exclude.py", "--", "-", *[f"m{i:04}.py" for i in range(300)]]
        for name in names:
            (tree / name).write_text(gated)
        argv = shlex.split(hook["entry"])
        done = run([*CLI, *argv[1:], *names], cwd=tree)
        unlinted = [n for n in names if f"{n}:" not in done.stdout] if "--fix" not in argv else \
            [n for n in names if (tree / n).read_text() == gated]
        good = done.returncode in (0, 1) and not unlinted and "Traceback" not in done.stderr
        print(f"{'ok ' if good else 'BAD'} pre-commit {hook['id']}: entry {hook['entry']!r}, "
              f"{len(names)} files (5 named like options), exit {done.returncode}, "
              f"{len(unlinted)} not linted/fixed")
        results.append(good)
    done = run([*CLI, "lint", "--", "--format=github", "m0000.py"], cwd=tmp / hooks[0]["id"])
    results.append(verdict("lint: an option after -- (a hook's args:)", done, 2, "options go before it"))
    return results


def settings_and_numbers(tmp: Path) -> list[bool]:
    (tmp / "test_plain.py").write_text("def test_plain():\n    pass\n")
    results = []
    for env in ({"PYTEST_DEVCAPS_DIST_TIMEOUT": "abc"}, {"PYTEST_DEVCAPS_DIST_TIMEOUT": "nan"},
                {"PYTEST_DEVCAPS_DIST_TIMEOUT": "inf"}, {"PYTEST_DEVCAPS_DIST_PG_TIMEOUT": "-5"},
                {"PYTEST_DEVCAPS_DIST_SHARE_DEVICES": "maybe"}, {"PYTEST_DEVCAPS_DIST_REUSE": "2"},
                {"PYTEST_DEVCAPS_DIST_TIMEOUT": "10", "DEVCAPS_DIST_TIMEOUT": "20"}):
        done = run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-q", "test_plain.py"],
                   cwd=tmp, env=env)
        results.append(verdict(f"pytest with {env}", done, 4, next(iter(env))))
    for value in ("float('nan')", "float('inf')", "-1.0"):
        (tmp / "test_tol.py").write_text(f"import pytest\n@pytest.mark.tolerance(atol={value}, rtol=0)\n"
                                         "def test_t(tolerances):\n    pass\n")
        done = run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-q", "test_tol.py"], cwd=tmp)
        good = done.returncode == 1 and "takes a finite number >= 0" in done.stdout
        print(f"{'ok ' if good else 'BAD'} tolerance(atol={value}): exit {done.returncode}, "
              "the test errors naming atol")
        results.append(good)
    for value in (".nan", ".inf", "-.inf"):
        (tmp / "p.yaml").write_text("devcaps: 1\nprofile:\n  name: p\n  devices:\n"
                                    f"    - {{type: cuda, arch: sm_90, memory_gib: {value}}}\n")
        results.append(verdict(f"profile memory_gib: {value}",
                               run([*CLI, "probe", "--profile", str(tmp / "p.yaml")], cwd=tmp), 2, "p.yaml"))
    return results


def main() -> int:
    print(f"# issue 29 hostile sweep; python {sys.version.split()[0]}; {os.uname().machine}")
    results: list[bool] = []
    for part in (fleet_documents, output_paths, pre_commit_entry, settings_and_numbers):
        print(f"## {part.__name__}")
        with tempfile.TemporaryDirectory() as tmp:
            results += part(Path(tmp))
    bad = results.count(False)
    print(f"# {len(results)} cases, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
