"""`devcaps lint` / `--fix` measured on real upstream CUDA-only test files (issues 18 and 27).

Re-run it against whatever lint is installed (the lint, the ``devcaps`` script and the run
machinery all come from the environment the script runs in; nothing is imported from this tree):

    . .venv/bin/activate                         # torch 2.13 (CI's), pytest-devcaps installed (-e .)
    devcaps emu build                            # once: the emu runs need it
    python benchmarks/bench_lint_upstream.py /work/upstream --label "lead <commit>" \\
        --torch214 .venv214/bin/python \\
        --test-linter /work/upstream/pytorch/pytorch/tools/linter/adapters/test_linter.py
    python benchmarks/bench_lint_upstream.py --fetch-list [/work/upstream]   # what to fetch first

(``.venv214``: ``python3 -m venv .venv214 && . .venv214/bin/activate && pip install torch==2.14.1
-e ".[test]"``; the test_linter.py commit is in the manifest's header. For more files to import
here: ``pip install --no-deps fairscale==0.4.13 torchao==0.18.0`` and, with torch held at the
installed build (``-c`` a file saying ``torch==2.13.0``), ``pip install accelerate==1.16.0
transformers==5.25.0 deepspeed==0.19.8 py-cpuinfo==9.0.0 einops==0.8.2``: accelerate's two
files and DeepSpeed's test_aio_gil then import; with ``PYTHONPATH=<DeepSpeed checkout>/tests`` at
the manifest's commit, test_cpu_adam too. torchtune's files import torchvision through torchtune,
and no torchvision on PyPI imports beside the torch 2.13.0 CPU build: they are linted, not run.)

``--manifest benchmarks/lint_upstream_sample.txt``: the second set, a whole folder taken as it is
(fairscale's tests/nn/data_parallel/test_fsdp*.py), for what --fix does on an ordinary suite. A file
that imports the test modules beside it (``from .test_fsdp import ...``) is measured at its
repository path, in packages, with those modules (unconverted) where the manifest has them too.

For every file of the manifest (benchmarks/lint_upstream_files.txt: repository, commit, path)
present under UPSTREAM_DIR/<owner>/<name>/<path>, in temporary copies, per target
(``--target devcaps``, ``--target torch``):

- found: ``devcaps lint --format json`` on the original, per rule code; fixed / left: the
  migration report of ``devcaps lint --fix --format json`` (checked: fixed + left == found per
  rule code), and measured left: a fresh ``devcaps lint`` of the output (checked: equal to left);
- new ruff findings (``ruff check --select F,E4,E7,E9``) in the output that the original lacks;
  whether the output parses and whether a second ``--fix`` changes nothing;
- for every file that imports here (its original collects without an ImportError): every test's
  outcome, original vs converted, under the plugin (``pytest_devcaps.commands.verify_runs``: a
  guarded process tree per run, outcomes per test), on the CPU alone and on the CPU with 2 emu
  devices (``PYTEST_DEVCAPS_EMU_DEVICES=2``), matched per test as ``--fix --verify`` matches them;
  the tests whose outcome got worse (must be 0), the passing tests gained, new and vanished ones;
- with ``--torch214``: the ``--target torch`` output of each pytorch/pytorch file made by the
  lint installed in that interpreter (torch 2.14.1: ``HardwareClassification``), checked with
  PyTorch's own ``TEST_LINTER`` rules (``--test-linter``: its ``check_file``), errors counted.

It prints the tables and writes benchmarks/results/lint_upstream_<date>_<cpu-model>-<isa>[_<label>].md.
Third-party code is never committed: the files live outside the repository.
"""

from __future__ import annotations

import argparse
import ast
import collections
import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MANIFEST = HERE / "lint_upstream_files.txt"
TARGETS = ("devcaps", "torch")
RUFF_SELECT = "F,E4,E7,E9"
EMU_DEVICES = "2"
_IMPORT_ERROR = re.compile(r"ModuleNotFoundError|ImportError|No module named|cannot import name")


def _script(python: str | Path, name: str) -> str:
    beside = Path(python).with_name(name)
    return str(beside) if beside.is_file() else shutil.which(name) or name


DEVCAPS = _script(sys.executable, "devcaps")


@dataclass(frozen=True)
class Entry:
    repo: str
    commit: str
    path: str

    def local(self, upstream: Path) -> Path:
        owner, name = self.repo.split("/")
        return upstream / owner / name / self.path


@dataclass
class TargetResult:
    note: str = ""
    fixed: dict[str, int] = field(default_factory=dict)  # the migration report's
    left: dict[str, int] = field(default_factory=dict)
    measured_left: dict[str, int] = field(default_factory=dict)  # a fresh lint of the output
    report_found: dict[str, int] = field(default_factory=dict)
    new_ruff: dict[str, int] = field(default_factory=dict)
    parses: bool | None = None
    idempotent: bool | None = None
    changed: bool = False
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # environment -> comparison summary
    test_linter: list[str] | None = None  # TEST_LINTER errors (names + lines), torch target, 2.14.1
    left_why: dict[str, int] = field(default_factory=dict)  # WHY_LEFT category -> left findings


@dataclass
class FileResult:
    entry: Entry
    lines: int
    found: dict[str, int]
    fixable: int
    imports: bool | None = None  # None: not run
    import_error: str = ""
    original_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    targets: dict[str, TargetResult] = field(default_factory=dict)
    original_test_linter: list[str] | None = None


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    entries = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{40}", parts[1]) or parts[0].count("/") != 1:
            raise SystemExit(f"{path}:{number}: expected 'owner/name <40-hex commit> path', got {raw!r}")
        entries.append(Entry(*parts))
    return entries


def fetch_list(entries: list[Entry], upstream: Path | None) -> int:
    """Print, per repository, the files to fetch (missing ones only when UPSTREAM_DIR is given)."""
    missing = [e for e in entries if upstream is None or not e.local(upstream).is_file()]
    by_repo: dict[str, list[Entry]] = collections.defaultdict(list)
    for entry in missing:
        by_repo[entry.repo].append(entry)
    for repo, items in sorted(by_repo.items()):
        print(f"github:{repo}")
        for entry in items:
            where = entry.local(upstream) if upstream else f"UPSTREAM_DIR/{repo}/{entry.path}"
            print(f"    {entry.commit} {entry.path} -> {where}")
    print(f"# {len(missing)} of {len(entries)} file(s) to fetch"
          + (f" into {upstream}" if upstream else ""), file=sys.stderr)
    return 0


# -- the lint, ruff ---------------------------------------------------------------------------


def _devcaps(*args: str, cwd: Path, devcaps: str = DEVCAPS) -> subprocess.CompletedProcess[str]:
    return subprocess.run([devcaps, "lint", *args], cwd=cwd, capture_output=True, text=True, timeout=900)


def lint_json(path: Path) -> tuple[dict[str, int], int]:
    """(findings per rule code, fixable count) from ``devcaps lint --format json``."""
    done = _devcaps("--format", "json", path.name, cwd=path.parent)
    if done.returncode not in (0, 1, 2) or not done.stdout.strip():
        raise RuntimeError(f"devcaps lint {path}: exit {done.returncode}: {done.stderr[-2000:]}")
    codes: collections.Counter[str] = collections.Counter()
    fixable = 0
    for item in json.loads(done.stdout)["files"]:
        for finding in item["findings"]:
            codes[finding["code"]] += 1
            fixable += bool(finding.get("fixable"))
    return dict(sorted(codes.items())), fixable


def fix_json(path: Path, target: str, devcaps: str = DEVCAPS) -> tuple[dict[str, Any] | None, str]:
    """``devcaps lint --fix --target T --format json`` on ``path``: (its migration entry, note);
    the entry also holds ``messages``, those of the findings the rewrite left."""
    done = _devcaps("--fix", "--target", target, "--format", "json", path.name, cwd=path.parent, devcaps=devcaps)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return None, f"exit {done.returncode}: {'; '.join(errors[:2]) or done.stderr[-300:]}"
    entry = next((m for m in report.get("migration") or [] if Path(m["path"]).name == path.name), None)
    if entry is not None:
        entry["messages"] = [f["message"] for item in report.get("files") or []
                             if Path(item["path"]).name == path.name for f in item["findings"] if f["code"] != "DC000"]
    return entry, "; ".join(errors[:2])


# Why a finding is left, read from the "not fixed: ..." part of its message, first match wins:
# the code is CUDA's (the rewrite would widen code that stays CUDA-only: issue 27's item 1),
# the author's vendor set or architecture (kept for precision: item 2), what torch itself has no
# decorator for (--target torch), or the lint could not rewrite it (the rest: a person finishes
# it, or the lint learns it).
WHY_LEFT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("CUDA-only code (kept, not widened)", (
        "is CUDA-only", "about CUDA itself", "no device-generic replacement", "accelerator-only", "the class is CUDA's",
        "CUDA-only library", "CUDA-specific")),
    ("the author's vendor set or architecture (kept as precise)", (
        "sm_90", "names the device types", "vendor-specific", "singles out ROCm", "ROCm holds", "is_MI")),
    ("no torch equivalent (--target torch keeps it)", ("has no decorator for", "PyTorch's own gate")),
    ("not rewritten: a person decides or finishes it", ("",)),
)


def why_left(message: str) -> str:
    reason = message.split("not fixed: ", 1)[-1]
    return next(name for name, needles in WHY_LEFT if any(n in reason for n in needles))


def ruff_codes(path: Path) -> collections.Counter[str]:
    ruff = _script(sys.executable, "ruff")
    done = subprocess.run([ruff, "check", "--isolated", "--no-cache", "--select", RUFF_SELECT, "--output-format",
                           "json", "--exit-zero", str(path)], capture_output=True, text=True, timeout=300)
    try:
        return collections.Counter(item["code"] or "syntax" for item in json.loads(done.stdout))
    except ValueError:
        return collections.Counter({"ruff-failed": 1})


# -- the test runs ------------------------------------------------------------------------------


def run_environments() -> list[Any]:
    """The CPU alone, and the CPU with 2 emu devices (from the installed plugin)."""
    from pytest_devcaps.commands.verify import environments

    envs, _ = environments({**os.environ, "PYTEST_DEVCAPS_EMU_DEVICES": EMU_DEVICES})
    return envs


def _counts(run: Any) -> dict[str, Any]:
    counts: dict[str, Any] = dict(sorted(collections.Counter(t.outcome for t in run.tests.values()).items()))
    if run.collection_errors:
        counts["collection error"] = f"{len(run.collection_errors)} ({run.collection_errors[0].message[:120]})"
    return counts


def run_original(path: Path, envs: list[Any], timeout: float) -> tuple[dict[str, Any], str]:
    from pytest_devcaps.commands.verify_runs import run_pytest

    runs = {e.name: run_pytest(path, e.name, e.env, timeout, cwd=path.parent) for e in envs}
    errors = [c.message for run in runs.values() for c in run.collection_errors]
    if runs["cpu"].collection_errors and any(_IMPORT_ERROR.search(m) for m in errors):
        return runs, next(m for m in errors if _IMPORT_ERROR.search(m))
    return runs, ""


def run_converted(path: Path, originals: dict[str, Any], envs: list[Any], timeout: float) -> dict[str, dict[str, Any]]:
    from pytest_devcaps.commands.verify_match import compare
    from pytest_devcaps.commands.verify_runs import run_pytest

    out: dict[str, dict[str, Any]] = {}
    for environment in envs:
        run = run_pytest(path, environment.name, environment.env, timeout, cwd=path.parent)
        comparison = compare(originals[environment.name], run)
        per_device = collections.Counter(c.device or c.environment for c in comparison.gained)
        out[environment.name] = {
            "counts": _counts(run), "timed_out": run.timed_out,
            "worse": [c.line() for c in comparison.worse]
            + [f"new collection error: {m}" for m in comparison.collection],
            "gained": len(comparison.gained), "gained_per_device": dict(sorted(per_device.items())),
            "gained_tests": [c.nodeid for c in comparison.gained],
            "new": len(comparison.new), "vanished": len(comparison.vanished),
        }
    return out


# -- TEST_LINTER --------------------------------------------------------------------------------


def load_test_linter(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("pytorch_test_linter", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def linter_errors(linter: ModuleType, path: Path) -> list[str]:
    return [f"{m.name} line {m.line}" for m in linter.check_file(str(path))]


# -- one file ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    run_tests: bool
    timeout: float
    keep: Path | None
    torch214: str | None
    linter: ModuleType | None


@dataclass(frozen=True)
class Layout:
    """Where a file goes in its scratch folder: alone, or (when it imports the test modules beside
    it: ``from .test_fsdp import ...``, ``from tests.nn.data_parallel.test_fsdp import ...``) at its
    repository path, in packages, with those modules as they are upstream (the ones present)."""

    path: str  # the file, relative to the scratch folder
    support: tuple[tuple[str, Path], ...] = ()  # (relative path, upstream copy), unconverted
    packages: tuple[str, ...] = ()  # folders that get an empty __init__.py

    def place(self, source: Path, folder: Path) -> Path:
        target = folder / self.path
        target.parent.mkdir(parents=True, exist_ok=True)
        for package in self.packages:
            (folder / package / "__init__.py").touch()
        for relative, copy in self.support:
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(copy, folder / relative)
        shutil.copyfile(source, target)
        return target


def layout(entry: Entry, upstream: Path, text: str) -> Layout:
    """The file alone, unless it imports modules of its own repository (relatively, or by a
    package path that starts at its repository's top folder)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return Layout(Path(entry.path).name)
    parts = entry.path.split("/")
    folder, top = parts[:-1], parts[0]
    wanted: list[list[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and node.level <= len(folder):
            base = folder[:len(folder) - node.level + 1]
            wanted.append(base + (node.module.split(".") if node.module else []))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] == top and len(parts) > 1:
            wanted.append(node.module.split("."))
    repo = upstream / entry.repo
    support = tuple(("/".join(m) + ".py", repo / ("/".join(m) + ".py")) for m in wanted
                    if (repo / ("/".join(m) + ".py")).is_file() and "/".join(m) + ".py" != entry.path)
    if not support:  # none of them is here: it does not import either way
        return Layout(Path(entry.path).name)
    packages = tuple("/".join(folder[:n]) for n in range(1, len(folder) + 1))
    return Layout(entry.path, tuple(dict.fromkeys(support)), packages)


def measure(entry: Entry, upstream: Path, settings: Settings, envs: list[Any]) -> FileResult:
    source = entry.local(upstream)
    text = source.read_text(encoding="utf-8", errors="replace")
    placed = layout(entry, upstream, text)
    with tempfile.TemporaryDirectory(prefix="devcaps-upstream-") as scratch:
        original = placed.place(source, Path(scratch) / "original")
        found, fixable = lint_json(original)
        result = FileResult(entry, len(text.splitlines()), found, fixable)
        originals: dict[str, Any] = {}
        if settings.run_tests:
            originals, error = run_original(original, envs, settings.timeout)
            result.imports, result.import_error = not error, error
            result.original_runs = {name: _counts(run) for name, run in originals.items()}
        for target in TARGETS:
            result.targets[target] = _measure_target(source, Path(scratch) / target, target, result, originals,
                                                     envs, settings, placed)
        if settings.linter is not None and entry.repo == "pytorch/pytorch":
            result.original_test_linter = linter_errors(settings.linter, original)
    return result


def _measure_target(source: Path, folder: Path, target: str, result: FileResult, originals: dict[str, Any],
                    envs: list[Any], settings: Settings, placed: Layout) -> TargetResult:
    copy = placed.place(source, folder)
    migration, note = fix_json(copy, target)
    outcome = TargetResult(note)
    if migration is not None:
        outcome.report_found, outcome.fixed, outcome.left = migration["found"], migration["fixed"], migration["left"]
        outcome.left_why = dict(collections.Counter(why_left(m) for m in migration["messages"]))
    first = copy.read_bytes()
    outcome.changed = first != source.read_bytes()
    try:
        ast.parse(first, filename=str(copy))
        outcome.parses = True
    except SyntaxError as exc:
        outcome.parses = False
        outcome.note = f"{outcome.note}; does not parse: {exc.msg} line {exc.lineno}".strip("; ")
    outcome.measured_left, _ = lint_json(copy)
    before, after = ruff_codes(source), ruff_codes(copy)
    outcome.new_ruff = {c: n - before.get(c, 0) for c, n in sorted(after.items()) if n > before.get(c, 0)}
    fix_json(copy, target)
    outcome.idempotent = copy.read_bytes() == first
    copy.write_bytes(first)
    if result.imports and outcome.parses and outcome.changed:
        outcome.runs = run_converted(copy, originals, envs, settings.timeout)
    if settings.keep is not None:
        kept = settings.keep / target / result.entry.repo / result.entry.path
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(copy, kept)
    if target == "torch" and settings.torch214 and settings.linter is not None \
            and result.entry.repo == "pytorch/pytorch":
        outcome.test_linter = _test_linter_214(source, folder / "torch214", settings)
    return outcome


def _test_linter_214(source: Path, folder: Path, settings: Settings) -> list[str]:
    """The ``--target torch`` output made by the lint in the torch 2.14.1 interpreter, checked."""
    folder.mkdir()
    copy = folder / source.name
    shutil.copyfile(source, copy)
    fix_json(copy, "torch", devcaps=_script(settings.torch214, "devcaps"))  # type: ignore[arg-type]
    if settings.keep is not None:
        kept = settings.keep / "torch214" / source.name
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(copy, kept)
    return linter_errors(settings.linter, copy)  # type: ignore[arg-type]


# -- the report ---------------------------------------------------------------------------------


def cpu_label() -> str:
    """``AMD-EPYC-Zen4-AVX512BF16``: the machine tag every benchmark result's name carries (the
    model, the Zen generation on AMD, the widest ISA: kernel_timing.machine_tag)."""
    from kernel_timing import machine_tag

    return machine_tag()


def _total(codes: dict[str, int]) -> int:
    return sum(codes.values())


def _codes(codes: dict[str, int]) -> str:
    return " ".join(f"{code}:{n}" for code, n in sorted(codes.items())) or "-"


def _balanced(found: dict[str, int], t: TargetResult) -> bool:
    """fixed + left == found, per rule code, in the lint's own report, and its left is what a
    fresh lint of the output finds."""
    codes = set(found) | set(t.fixed) | set(t.left)
    return all(t.fixed.get(c, 0) + t.left.get(c, 0) == found.get(c, 0) for c in codes) \
        and t.left == t.measured_left


def count_rows(results: list[FileResult]) -> list[list[str]]:
    rows = [["file", "lines", "found", *(f"{t}: fixed / left (ok?)" for t in TARGETS),
             *(f"{t}: new ruff" for t in TARGETS), "parses, 2nd --fix same"]]
    for r in results:
        cells = [f"{r.entry.repo}:{r.entry.path}", str(r.lines), str(_total(r.found))]
        for t in TARGETS:
            x = r.targets[t]
            cells.append(f"{_total(x.fixed)} / {_total(x.left)}" + ("" if _balanced(r.found, x) else " MISMATCH"))
        cells += [_codes(r.targets[t].new_ruff) for t in TARGETS]
        cells.append(" ".join(f"{t}:{'y' if x.parses else 'N'}{'y' if x.idempotent else 'N'}"
                              for t, x in r.targets.items()))
        rows.append(cells)
    found = sum(_total(r.found) for r in results)
    totals = ["TOTAL", str(sum(r.lines for r in results)), str(found)]
    for t in TARGETS:
        left = sum(_total(r.targets[t].left) for r in results)
        bad = sum(not _balanced(r.found, r.targets[t]) for r in results)
        totals.append(f"{sum(_total(r.targets[t].fixed) for r in results)} / {left} "
                      f"({100 * left / max(found, 1):.0f}% left; {bad} file(s) mismatched)")
    totals += [str(sum(_total(r.targets[t].new_ruff) for r in results)) for t in TARGETS] + [""]
    rows.append(totals)
    return rows


def _run_summary(counts: dict[str, Any]) -> str:
    return " ".join(f"{k} {v}" for k, v in counts.items()) or "no tests"


def run_rows(results: list[FileResult]) -> list[list[str]]:
    rows = [["file", "original cpu", "original emu", *(f"{t}: worse cpu / emu" for t in TARGETS),
             *(f"{t}: gained cpu / emu" for t in TARGETS)]]
    for r in results:
        if r.imports is None:
            continue
        if not r.imports:
            rows.append([f"{r.entry.repo}:{r.entry.path}", "does not import here", r.import_error[:80], "", "",
                         "", ""])
            continue
        cells = [f"{r.entry.repo}:{r.entry.path}", _run_summary(r.original_runs.get("cpu", {}))[:70],
                 _run_summary(r.original_runs.get("emu", {}))[:70]]
        for key in ("worse", "gained"):
            for t in TARGETS:
                runs = r.targets[t].runs
                if not runs:
                    cells.append("unchanged" if not r.targets[t].changed else "-")
                    continue
                cells.append(" / ".join(str(len(runs[e][key]) if key == "worse" else runs[e][key])
                                        for e in ("cpu", "emu") if e in runs))
        rows.append(cells)
    ran = [r for r in results if r.imports]
    totals = ["TOTAL", f"{len(ran)} file(s) import here", ""]
    for key in ("worse", "gained"):
        for t in TARGETS:
            per_env = [sum((len(r.targets[t].runs.get(e, {}).get(key, [])) if key == "worse"
                            else r.targets[t].runs.get(e, {}).get(key, 0)) for r in ran) for e in ("cpu", "emu")]
            totals.append(" / ".join(map(str, per_env)))
    rows.append(totals)
    return rows


def linter_rows(results: list[FileResult]) -> list[list[str]]:
    rows = [["file", "original: TEST_LINTER errors", "--target torch (torch 2.14.1): TEST_LINTER errors"]]
    for r in results:
        if r.original_test_linter is None:
            continue
        converted = r.targets["torch"].test_linter
        rows.append([f"{r.entry.repo}:{r.entry.path}", str(len(r.original_test_linter)),
                     "-" if converted is None else f"{len(converted)}: "
                     + ", ".join(sorted(collections.Counter(e.split()[0] for e in converted)))])
    if len(rows) > 1:
        rows.append(["TOTAL", str(sum(len(r.original_test_linter or []) for r in results)),
                     str(sum(len(r.targets["torch"].test_linter or []) for r in results))])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print()


def _markdown_table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
    return out


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "?"


def environment(label: str, settings: Settings) -> list[str]:
    import platform

    import pytest_devcaps

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:
        torch_version = "not installed"
    dirty = " (uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    return [f"- label: {label}",
            f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
            f"- lint measured: pytest-devcaps installed at {Path(pytest_devcaps.__file__).parent}; this tree: "
            f"{_git('rev-parse', 'HEAD')} on branch {_git('rev-parse', '--abbrev-ref', 'HEAD')}{dirty}: "
            f"{_git('log', '-1', '--format=%s')[:120]}",
            f"- CPU: {cpu_label()}; Python {platform.python_version()}; torch {torch_version}; "
            f"runs: the CPU, and the CPU with {EMU_DEVICES} emu devices; per-run timeout {settings.timeout:.0f} s",
            f"- TEST_LINTER: {'torch 2.14.1 lint from ' + settings.torch214 if settings.torch214 else 'not run'}"]


def detail_lines(results: list[FileResult]) -> list[str]:
    out = ["## Per file", ""]
    for r in results:
        out += [f"### {r.entry.repo}: `{r.entry.path}`", "",
                f"- commit `{r.entry.commit}`, {r.lines} lines",
                f"- found: {_total(r.found)} ({_codes(r.found)}); fixable per the lint: {r.fixable}"]
        if r.imports is False:
            out.append(f"- does not import here: `{r.import_error[:200]}`")
        for name, counts in r.original_runs.items():
            out.append(f"- original, {name} run: {_run_summary(counts)}")
        for t, x in r.targets.items():
            out.append(f"- --target {t}: fixed {_total(x.fixed)} ({_codes(x.fixed)}); left {_total(x.left)} "
                       f"({_codes(x.left)}); measured left {_total(x.measured_left)}; fixed + left == found: "
                       f"{_balanced(r.found, x)}; new ruff: {_codes(x.new_ruff)}; parses: {x.parses}; second "
                       f"--fix changes nothing: {x.idempotent}{'; ' + x.note if x.note else ''}"
                       + ("" if x.changed else "; output identical to the original"))
            for env, run in x.runs.items():
                out.append(f"    - {env} run: {_run_summary(run['counts'])}; worse {len(run['worse'])}; gained "
                           f"{run['gained']} {run['gained_per_device'] or ''}; new {run['new']}; vanished "
                           f"{run['vanished']}{'; TIMED OUT' if run['timed_out'] else ''}")
                out += [f"        - worse: {line[:300]}" for line in run["worse"][:10]]
            if x.test_linter is not None:
                out.append(f"    - TEST_LINTER (torch 2.14.1 output): {len(x.test_linter)} error(s): "
                           + ", ".join(x.test_linter[:12]))
        out.append("")
    return out


def why_rows(results: list[FileResult]) -> list[list[str]]:
    found = sum(_total(r.found) for r in results)
    rows = [["why left", *(f"--target {t}: left (share of all found)" for t in ("devcaps", "torch"))]]
    for name, _ in WHY_LEFT:
        counts = [sum(r.targets[t].left_why.get(name, 0) for r in results if t in r.targets) for t in ("devcaps", "torch")]
        rows.append([name, *(f"{n} ({100 * n / max(found, 1):.0f}%)" for n in counts)])
    return rows


def result_path(label: str) -> Path:
    suffix = "_" + re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-") if label else ""
    return HERE / "results" / f"lint_upstream_{datetime.date.today().isoformat()}_{cpu_label()}{suffix}.md"


def write_markdown(results: list[FileResult], label: str, settings: Settings, path: Path,
                   notes: tuple[str, ...] = (), manifest: Path = MANIFEST) -> Path:
    shown = manifest.relative_to(REPO) if manifest.is_relative_to(REPO) else manifest
    text = ["# `devcaps lint` / `--fix` on real upstream CUDA-only test files", "",
            f"Measured by `benchmarks/bench_lint_upstream.py` (manifest `{shown}`; "
            "its docstring says how each number is made).", "", *environment(label, settings),
            *(f"- note: {note}" for note in notes), "",
            "## Findings: found, fixed / left per target, new ruff findings", "",
            *_markdown_table(count_rows(results)), "",
            "## Tests under the plugin: original vs converted (worse must be 0)", "",
            *_markdown_table(run_rows(results)), ""]
    text += ["## Why the findings are left (from each left finding's \"not fixed\" reason)", "",
             *_markdown_table(why_rows(results)), ""]
    linter = linter_rows(results)
    if len(linter) > 1:
        text += ["## PyTorch's TEST_LINTER on the pytorch/pytorch files", "", *_markdown_table(linter), ""]
    text += detail_lines(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def save_json(results: list[FileResult], path: Path) -> None:
    from dataclasses import asdict

    path.write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")


def load_json(paths: list[Path], manifest: Path = MANIFEST) -> list[FileResult]:
    """Results saved by ``--save-json`` (several runs over parts of the manifest), in manifest order."""
    results = []
    for path in paths:
        for item in json.loads(path.read_text(encoding="utf-8")):
            item["entry"] = Entry(**item["entry"])
            item["targets"] = {t: TargetResult(**x) for t, x in item["targets"].items()}
            results.append(FileResult(**item))
    order = {(e.repo, e.path): n for n, e in enumerate(read_manifest(manifest))}
    return sorted(results, key=lambda r: (r.entry.repo != "pytorch/pytorch", order.get((r.entry.repo, r.entry.path), 0)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("upstream", nargs="?", type=Path, help="folder of <owner>/<name>/<path> files")
    parser.add_argument("--fetch-list", action="store_true", help="print what must be fetched, then exit")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--label", default="", help="what is measured (e.g. 'baseline27', 'lead <commit>')")
    parser.add_argument("--no-run", action="store_true", help="do not run the files' tests")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per pytest run (default 300)")
    parser.add_argument("--only", action="append", default=[], help="only paths containing this (repeatable)")
    parser.add_argument("--keep", type=Path, help="copy each converted file to KEEP/<target>/<repo>/<path> "
                        "(outside the repository: third-party code)")
    parser.add_argument("--torch214", help="python of a torch 2.14.1 environment with pytest-devcaps installed")
    parser.add_argument("--test-linter", type=Path, help="PyTorch's tools/linter/adapters/test_linter.py")
    parser.add_argument("--out", type=Path, help="the Markdown file to write (default: benchmarks/results/...)")
    parser.add_argument("--skip", action="append", default=[], help="not the paths containing this (repeatable)")
    parser.add_argument("--note", action="append", default=[], help="a line for the results' header (repeatable)")
    parser.add_argument("--save-json", type=Path, help="also save the results here (after each file)")
    parser.add_argument("--combine", type=Path, nargs="+", metavar="JSON",
                        help="write one Markdown file from the --save-json files of runs over parts of the manifest")
    args = parser.parse_args(argv)
    entries = read_manifest(args.manifest)
    if args.fetch_list:
        return fetch_list(entries, args.upstream)
    if args.combine:
        settings = Settings(True, args.timeout, None, os.path.abspath(args.torch214) if args.torch214 else None, None)
        out = args.out or result_path(args.label)
        print(f"wrote {write_markdown(load_json(args.combine, args.manifest), args.label, settings, out, tuple(args.note), args.manifest)}")
        return 0
    if args.upstream is None:
        parser.error("UPSTREAM_DIR is required (or --fetch-list)")
    settings = Settings(not args.no_run, args.timeout, args.keep,
                        os.path.abspath(args.torch214) if args.torch214 else None,
                        load_test_linter(args.test_linter) if args.test_linter else None)
    present = [e for e in entries if e.local(args.upstream).is_file()
               and (not args.only or any(o in e.path for o in args.only))
               and not any(o in e.path for o in args.skip)]
    for entry in entries:
        if not entry.local(args.upstream).is_file():
            print(f"missing, not measured: {entry.repo} {entry.path} (see --fetch-list)", file=sys.stderr)
    envs = run_environments() if settings.run_tests else []
    out = args.out or result_path(args.label)
    results: list[FileResult] = []
    present.sort(key=lambda e: e.repo != "pytorch/pytorch")  # PyTorch's first: they all import here
    for number, entry in enumerate(present, 1):
        print(f"measuring {entry.repo}:{entry.path} ...", file=sys.stderr, flush=True)
        results.append(measure(entry, args.upstream, settings, envs))
        partial = f" (partial: {number} of {len(present)} files)" if number < len(present) else ""
        write_markdown(results, args.label + partial, settings, out, tuple(args.note), args.manifest)  # progress
        if args.save_json:
            save_json(results, args.save_json)
    for rows in (count_rows(results), run_rows(results), linter_rows(results)):
        if len(rows) > 1:
            print_table(rows)
    print(f"wrote {write_markdown(results, args.label, settings, out, tuple(args.note), args.manifest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
