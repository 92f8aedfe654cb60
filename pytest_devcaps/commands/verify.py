"""``devcaps lint --fix --verify``: a rewrite is kept only where the tests say it holds.

For each file ``--fix`` would change, the original and the converted text run under the plugin
(:mod:`.verify_runs`: the converted text in a temporary file beside the original, each run in a
guarded process tree) in every device environment present: the CPU alone, and the CPU with
``emu`` devices (``PYTEST_DEVCAPS_EMU_DEVICES`` when set, else 2 when the emu extension is built
for this torch). Tests are matched and compared (:mod:`.verify_match`). Every test whose outcome
got worse (passed / skipped / xfailed -> failed / error / crashed / timeout; a passing test that
vanished; a new failing one) has its rewrite undone: the file is converted again with that
function ``untouched`` (its findings suppressed, so the gates it depends on stay), and verified
again. A new collection error is undone in the function its traceback points into, else file-wide;
so is a round that undid nothing new, and the third round that still finds a test worse.

What is written is the last text that held everywhere, and only when it differs from the original:
a file whose every rewrite was undone, whose original could not run to the end in time, or whose
budget (``--verify-timeout``, all runs of the file together) ran out is left as it was.
"""

from __future__ import annotations

import ast
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from pytest_devcaps._util.environ import ENV_EMU_DEVICES
from pytest_devcaps.commands.verify_match import Change, Comparison, compare
from pytest_devcaps.commands.verify_runs import RunResult, converted_copy, run_pytest
from pytest_devcaps.lint.analyze import function_qualnames
from pytest_devcaps.lint.conftests import cuda_only_fixtures
from pytest_devcaps.lint.fix import FixError, fix_text
from pytest_devcaps.lint.project_imports import lazy_imports
from pytest_devcaps.lint.records import Target

#: Rounds of convert-and-verify per file before every rewrite of it is undone.
MAX_ROUNDS = 3
#: Seconds all runs of one file may take together, unless --verify-timeout says otherwise.
DEFAULT_TIMEOUT_S = 900.0
#: emu devices when the extension is built but PYTEST_DEVCAPS_EMU_DEVICES is not set.
DEFAULT_EMU_DEVICES = 2
_SHOWN = 12


@dataclass(frozen=True)
class Environment:
    name: str
    env: Mapping[str, str]
    description: str


def _emu_built() -> bool:
    try:
        from importlib.metadata import version

        from pytest_devcaps.emu.extension import is_built

        return is_built(version("torch"))
    except Exception:  # noqa: BLE001 - no torch, no cache: not built
        return False


def environments(environ: Mapping[str, str] = os.environ) -> tuple[list[Environment], str]:
    """The device environments to verify in, and a line saying which and why."""
    from pytest_devcaps.emu import VISIBLE_ENV
    from pytest_devcaps.emu.config import device_count, requested

    base = {k: v for k, v in environ.items() if k not in (ENV_EMU_DEVICES, VISIBLE_ENV)}
    base["PYTHONDONTWRITEBYTECODE"] = "1"
    found = [Environment("cpu", base, "the CPU")]
    if requested(environ):
        count, why = device_count(environ), f"{ENV_EMU_DEVICES}={environ[ENV_EMU_DEVICES].strip()}"
        emu_env = {**base, ENV_EMU_DEVICES: environ[ENV_EMU_DEVICES].strip()}
        if VISIBLE_ENV in environ:
            emu_env[VISIBLE_ENV] = environ[VISIBLE_ENV]
    elif _emu_built():
        count, why = DEFAULT_EMU_DEVICES, "the emu extension is built"
        emu_env = {**base, ENV_EMU_DEVICES: str(count)}
    else:
        return found, (f"verified on the CPU only: emu is not built (`devcaps emu build`) and "
                       f"{ENV_EMU_DEVICES} is not set")
    if count == 0:
        return found, f"verified on the CPU only: {why} gives no emu devices"
    found.append(Environment("emu", emu_env, f"the CPU and {count} emu device(s)"))
    return found, f"verified on the CPU, and on the CPU with {count} emu device(s) ({why})"


@dataclass
class Verdict:
    """What ``--verify`` decided for one file: ``text`` to write (None: nothing)."""

    path: str
    text: str | None = None
    untouched: set[str] = field(default_factory=set)
    undone: dict[str, str] = field(default_factory=dict)  # function -> why
    final: dict[str, Comparison] = field(default_factory=dict)  # environment -> last comparison
    notes: list[str] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0

    @property
    def gained(self) -> list[Change]:
        return [c for comparison in self.final.values() for c in comparison.gained]

    def report(self) -> str:
        lines = [f"devcaps lint --verify: {self.path}: "
                 + ("written" if self.text is not None else "not written")
                 + f" ({self.rounds} round(s), {self.seconds:.1f} s)"]
        lines += [f"  {note}" for note in self.notes]
        gained = self.gained
        per_device = Counter(c.device or c.environment for c in gained)
        lines.append(f"  gained {len(gained)} passing test(s)"
                     + (": " + ", ".join(f"{d} {n}" for d, n in sorted(per_device.items())) if gained else ""))
        lines += [f"    + {c.line()}" for c in gained[:_SHOWN]] + _more(gained)
        lines.append(f"  undone {len(self.undone)}" + (":" if self.undone else ""))
        lines += [f"    - {name}: {why}" for name, why in sorted(self.undone.items())]
        for label, attribute in (("new", "new"), ("vanished", "vanished")):
            changes = [c for comparison in self.final.values() for c in getattr(comparison, attribute)]
            if changes:
                lines.append(f"  {label} {len(changes)}: " + ", ".join(c.line() for c in changes[:_SHOWN])
                             + (" ..." if len(changes) > _SHOWN else ""))
        return "\n".join(lines) + "\n"


def _more(items: list[Change]) -> list[str]:
    return [f"    ... and {len(items) - _SHOWN} more"] if len(items) > _SHOWN else []


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


def verify_file(path: Path, before: str, target: Target = "devcaps", timeout_s: float = DEFAULT_TIMEOUT_S,
                envs: list[Environment] | None = None, cwd: Path | None = None) -> Verdict:
    """Convert ``before`` (the text of ``path``), verify, undo what got worse, verify again."""
    started = time.monotonic()
    deadline = started + timeout_s
    verdict = Verdict(str(path))
    if envs is None:
        envs, note = environments()
        verdict.notes.append(note)
    try:
        _verify(path, before, target, envs, deadline, verdict, cwd)
    finally:
        verdict.seconds = time.monotonic() - started
    return verdict


def _verify(path: Path, before: str, target: Target, envs: list[Environment], deadline: float,
            verdict: Verdict, cwd: Path | None) -> None:
    originals: dict[str, RunResult] = {}
    for environment in envs:
        run = run_pytest(path, environment.name, environment.env, _remaining(deadline), cwd)
        if run.timed_out:
            verdict.notes.append(f"the original did not finish on {environment.description} within the "
                                 "time given (--verify-timeout): nothing to compare with; not written")
            return
        originals[environment.name] = run
    defined = {name for name, _ in function_qualnames(ast.parse(before))}
    # what the first --fix was given (commands.lint): a re-fix that undoes a test is that fix, less the test
    fixtures, imported = cuda_only_fixtures(path), lazy_imports(path)
    for verdict.rounds in range(1, MAX_ROUNDS + 1):
        try:
            after = fix_text(before, str(path), target, frozenset(verdict.untouched),
                             external_fixtures=fixtures, imported=imported).after
        except FixError as exc:
            verdict.notes.append(f"{exc}")
            return
        if after == before:
            verdict.notes.append("every rewrite was undone: the file is left as it was")
            return
        runs, complete = _run_converted(path, after, envs, deadline, cwd)
        verdict.final = {name: compare(originals[name], run) for name, run in runs.items()}
        blame, file_wide = _blame(verdict.final, runs, after, defined)
        if not complete and file_wide is None and not blame:
            verdict.notes.append("ran out of time (--verify-timeout) before the converted file was verified "
                                 f"on {', '.join(e.name for e in envs if e.name not in runs) or 'every device'}: "
                                 "not written")
            return
        if file_wide is None and not blame:
            verdict.text = after
            return
        fresh = {name: why for name, why in blame.items() if name not in verdict.untouched}
        if file_wide is not None or not fresh:
            verdict.undone["(the whole file)"] = file_wide or "undoing single tests did not help: " + \
                "; ".join(f"{n}: {w}" for n, w in sorted(blame.items())[:3])
            return
        verdict.untouched.update(fresh)
        verdict.undone.update(fresh)
    verdict.undone["(the whole file)"] = f"still worse after {MAX_ROUNDS} rounds of undoing single tests"


def _run_converted(path: Path, after: str, envs: list[Environment], deadline: float,
                   cwd: Path | None) -> tuple[dict[str, RunResult], bool]:
    """The converted text's runs, and whether every one finished (a run cut off at the deadline
    still blames the test it was in: ``timeout``)."""
    runs: dict[str, RunResult] = {}
    with converted_copy(path, after) as copy:
        for environment in envs:
            if _remaining(deadline) <= 1:
                return runs, False
            run = run_pytest(copy, environment.name, environment.env, _remaining(deadline), cwd, shown_as=path)
            runs[environment.name] = run
            if run.timed_out:
                return runs, False
    return runs, True


def _blame(comparisons: dict[str, Comparison], runs: dict[str, RunResult], after: str,
           defined: set[str]) -> tuple[dict[str, str], str | None]:
    """(function -> why its rewrite goes, why the whole file's goes or None)."""
    blame: dict[str, str] = {}
    for name, comparison in comparisons.items():
        for change in comparison.worse:
            if change.qualname not in defined:
                return blame, f"{change.line()} (its function is not defined in the file: cannot undo it alone)"
            blame.setdefault(change.qualname, change.line())
        if comparison.collection:
            where = _enclosing_functions(after, [n for e in runs[name].collection_errors for n in e.lines])
            inside = [f for f in where if f in defined]
            if not inside:
                return blame, f"a new collection error on {name}: {comparison.collection[0]}"
            blame.setdefault(inside[-1], f"a new collection error on {name} in {inside[-1]}: "
                             f"{comparison.collection[0]}")
    return blame, None


def _enclosing_functions(text: str, lines: list[int]) -> list[str]:
    """The functions of ``text`` (qualified names) that the traceback ``lines`` fall in, in order."""
    spans = [(name, min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno or node.lineno)
             for name, node in function_qualnames(ast.parse(text))]
    found = []
    for line in lines:
        inside = [(first, name) for name, first, last in spans if first <= line <= last]
        if inside:
            found.append(max(inside)[1])
    return found
