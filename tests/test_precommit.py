"""The pre-commit hooks as pre-commit runs them: the entry, split as a shell would, then the
staged file names, in chunks. A file named like an option is linted (and fixed) with the
others: it used to end the call, leaving every file of its chunk unlinted."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_devcaps.commands.main import main

HOOKS = Path(__file__).resolve().parent.parent / ".pre-commit-hooks.yaml"
GATED = "import torch\n\n\ndef test_x():\n    assert torch.cuda.is_available()\n"  # devcaps: allow
NAMES = ["-weird.py", "--fix.py", "--exclude.py", "-x", "good.py", "--", "-", "z.py"]
"""Option-like names (an option of lint's own among them), `--` and `-` (files named so)."""


def _hooks() -> dict[str, dict[str, Any]]:
    return {hook["id"]: hook for hook in yaml.safe_load(HOOKS.read_text())}


def _run_hook(hook: dict[str, Any], files: list[str]) -> int:
    """pre-commit's call: ``shlex.split(entry) + args + files`` (no args here)."""
    argv = shlex.split(hook["entry"])
    assert argv[0] == "devcaps"
    return main([*argv[1:], *files])


@pytest.fixture
def staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.chdir(tmp_path)
    for name in NAMES:
        (tmp_path / name).write_text(GATED)
    for i in range(40):
        (tmp_path / f"m{i:02}.py").write_text(GATED)
    return sorted(os.listdir(tmp_path))


def test_every_entry_ends_its_options() -> None:
    hooks = _hooks()
    assert set(hooks) == {"devcaps-lint", "devcaps-lint-fix", "devcaps-lint-fix-torch"}
    for hook in hooks.values():
        assert shlex.split(hook["entry"])[-1] == "--", hook["id"]


def test_the_report_hook_lints_every_file(staged: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_hook(_hooks()["devcaps-lint"], staged) == 1
    out = capsys.readouterr().out
    found = {line.split(":", 1)[0] for line in out.splitlines() if ": DC" in line}
    assert found == set(staged), set(staged) ^ found


@pytest.mark.parametrize("hook", ["devcaps-lint-fix", "devcaps-lint-fix-torch"])
def test_the_fix_hooks_fix_every_file(staged: list[str], hook: str) -> None:
    pytest.importorskip("libcst", reason="the lint extra (test extras install it)")
    _run_hook(_hooks()[hook], staged)
    unchanged = [name for name in staged if Path(name).read_text() == GATED]
    assert unchanged == []
    assert _run_hook(_hooks()["devcaps-lint"], staged) == 0  # nothing left in any of them


def test_an_option_after_the_double_dash_is_refused_by_name(
        staged: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A hook's ``args:`` come after the entry's ``--``: said, not looked for in silence."""
    assert main(["lint", "--", "--format=github", *staged]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devcaps: error: --format=github: no such file or directory; after "
                          "`--` every argument is a path: options go before it")
    assert "override `entry:`" in err


def test_other_commands_take_option_like_paths_after_the_double_dash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("-r.json").write_text('{"format": 1, "kind": "probe", "created": "2026-12-01T00:00:00Z", '
                               '"host": "h", "devcaps_version": "0", "devices": [], '
                               '"capabilities": []}')
    assert main(["report", "merge", "-o", "fleet.json", "--", "-r.json"]) == 0
    assert Path("fleet.json").is_file()
