"""Issue 20: what an NVIDIA SM-level gate stands for comes from the catalogue's nvidia rules,
the one place PyTorch's hardware gates live (``pytest_devcaps.lint.smlevels``).

The expectations below are written out by hand from the small catalogue in this file, never
computed by the derivation; a second catalogue, the shipped one with one rule moved, shows the
lint's suggestion follow the rule; a subprocess shows a file without SM-level gates never
loads the catalogue."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_devcaps.config.catalogue import Catalogue, load_catalogue, shipped_catalogue_path
from pytest_devcaps.lint import analyze, rules, smlevels

# Five capabilities, each with a hand-written nvidia rule; the comments say what a gate means.
SMALL = """\
devcaps: 1
capabilities:
  dtype.fp16: {description: half}
  dtype.bf16: {description: brain float}
  dtype.tf32: {description: tf32}
  dtype.fp8_e4m3fn: {description: fp8}
  compile.triton: {description: triton}
  runtime.streams: {description: streams}
vendors:
  nvidia:
    compile.triton:                  # native from 7.0
      - {when: "compute_capability >= 7.0", level: native, reason: r}
      - {level: unsupported, reason: r}
    dtype.bf16:                      # native from 8.0, emulated before
      - {when: "compute_capability >= 8.0", level: native, reason: r}
      - {level: emulated, reason: r}
    dtype.tf32:                      # native on 8.0 .. 9.0 only
      - {when: "compute_capability >= 8.0 and compute_capability <= 9.0", level: native, reason: r}
      - {level: unsupported, reason: r}
    dtype.fp8_e4m3fn:                # native from 8.9 with CUDA 12.1+
      - {when: "compute_capability >= 8.9 and cuda_version >= '12.1'", level: native, reason: r}
      - {level: unsupported, reason: r}
    runtime.streams:                 # everywhere: no SM gate stands for it
      - {level: native, reason: r}
  cpu:
    dtype.fp8_e4m3fn:
      - {level: emulated, reason: r}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    path = tmp_path_factory.mktemp("catalogue") / "small.yaml"
    path.write_text(SMALL)
    return load_catalogue(path)


@pytest.mark.parametrize(("level", "step", "candidates", "gated"), [
    (60, None, (), {}),
    (70, 70, ("compile.triton",), {"compile.triton": 70}),
    (75, 70, ("compile.triton",), {"compile.triton": 70}),
    (80, 80, ("dtype.bf16", "dtype.tf32"), {"compile.triton": 70, "dtype.bf16": 80, "dtype.tf32": 80}),
    (86, 80, ("dtype.bf16", "dtype.tf32"), {"compile.triton": 70, "dtype.bf16": 80, "dtype.tf32": 80}),
    (89, 89, ("dtype.fp8_e4m3fn",),
     {"compile.triton": 70, "dtype.bf16": 80, "dtype.tf32": 80, "dtype.fp8_e4m3fn": 89}),
    # above 9.0 tf32 is not native any more: not gated, and not a candidate
    (100, 89, ("dtype.fp8_e4m3fn",), {"compile.triton": 70, "dtype.bf16": 80, "dtype.fp8_e4m3fn": 89}),
])
def test_candidates_are_what_the_rules_tie_to_the_level(
        small: Catalogue, level: int, step: int | None, candidates: tuple[str, ...],
        gated: dict[str, int]) -> None:
    view = smlevels.sm_level(level, small)
    assert (view.step, view.candidates, dict(view.gated)) == (step, candidates, gated)
    assert view.native == frozenset({"dtype.bf16", "dtype.fp8_e4m3fn"})  # what some vendor emulates


def test_the_finding_names_only_the_levels_candidates(small: Catalogue) -> None:
    gate = rules.sm_gate(80, small)
    assert gate.use == "requires_capability('dtype.bf16' | 'dtype.tf32')"
    (why,) = gate.need.blockers
    assert "what the rules tie to sm_80: dtype.bf16, dtype.tf32" in why
    assert "flash" not in why and "fp8" not in why        # the small rules tie no such thing to 8.x
    assert rules.sm_gate(60, small).need.blockers == (
        "sm_60+: no capability's rule is sm_60 (no capability is gated below it either); keep the gate, "
        "or name a capability whose rule is sm_60",)


def test_a_gate_between_thresholds_stays_naming_the_one_below(small: Catalogue) -> None:
    """Issue 27: sm_86 is no capability's threshold (bf16 and tf32 are sm_80's): an sm_80 A100
    has them and fails ``SM86OrLater``, so the gate stays rather than become a capability."""
    gate = rules.sm_gate(86, small)
    (why,) = gate.need.blockers
    assert why.startswith("sm_86+: no capability's rule is sm_86 (the nearest threshold below is sm_80: "
                          "dtype.bf16, dtype.tf32)")
    assert gate.resolve(frozenset({"bfloat16", "allow_tf32"})).blockers == gate.need.blockers


@pytest.mark.parametrize(("level", "used", "capabilities", "native"), [
    (80, {"bfloat16", "allow_tf32"}, ("dtype.tf32", "dtype.bf16"), False),  # both rise at 8.0
    (80, {"bfloat16"}, ("dtype.bf16",), False),
    (89, {"float8_e4m3fn"}, ("dtype.fp8_e4m3fn",), True),   # emulated on the CPU: native=True
    (89, {"bfloat16"}, ("dtype.fp8_e4m3fn",), True),        # bf16's rule is sm_80: the default stands
    (70, {"triton"}, ("compile.triton",), False),
])
def test_used_names_pick_among_what_the_rules_gate(small: Catalogue, level: int, used: set[str],
                                                   capabilities: tuple[str, ...], native: bool) -> None:
    need = rules.sm_gate(level, small).resolve(frozenset(used))
    assert need.capabilities == capabilities
    assert need.native is native


@pytest.mark.parametrize(("level", "used"), [
    (86, {"triton"}),       # triton's rule is sm_70, two thresholds below
    (100, {"allow_tf32"}),  # tf32 is not native at 10.0, and nothing's rule is sm_100 here
    (90, {"float8_e4m3fn"}),  # fp8's rule is sm_89: an sm_90 gate is not fp8 (an L4 has fp8)
])
def test_used_names_below_the_gates_level_keep_it(small: Catalogue, level: int, used: set[str]) -> None:
    need = rules.sm_gate(level, small).resolve(frozenset(used))
    assert not need.capabilities and need.blockers


GATED_FILE = textwrap.dedent("""\
    import pytest
    import torch
    from torch.testing._internal.common_cuda import SM89OrLater


    @pytest.mark.skipif(not SM89OrLater, reason="fp8")
    def test_cast():
        assert torch.ones(2).to(torch.float8_e4m3fn).dtype == torch.float8_e4m3fn
    """)


def _sm89_fixes(monkeypatch: pytest.MonkeyPatch, source: Catalogue) -> list[str]:
    monkeypatch.setattr(smlevels, "catalogue", lambda: source)
    found = analyze(GATED_FILE, "t.py").findings
    return [f"{f.code} {f.fix or f.message}" for f in found if f.code == "DC006"]


def test_moving_a_rule_moves_the_suggestion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shipped = shipped_catalogue_path().read_text(encoding="utf-8")
    fp8 = '    dtype.fp8_e4m3fn: &nvidia_ocp_fp8\n      - when: "compute_capability >= 8.9"'
    assert fp8 in shipped
    moved = tmp_path / "moved.yaml"
    moved.write_text(shipped.replace(fp8, fp8.replace("8.9", "9.0")), encoding="utf-8")

    before = _sm89_fixes(monkeypatch, load_catalogue())
    after = _sm89_fixes(monkeypatch, load_catalogue(moved))
    assert before == ['DC006 replaced by @pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)']
    # with fp8_e4m3fn native from 9.0 only, an sm_89 gate no longer stands for it
    assert len(after) == 1 and "not fixed" in after[0] and "dtype.fp8_e4m3fn" not in after[0].split(
        "sm_89:")[1].split(";")[0], after
    assert rules.sm_gate(90, load_catalogue(moved)).resolve(frozenset({"float8_e4m3fn"})).capabilities \
        == ("dtype.fp8_e4m3fn",)


_PROBE = """
import json, sys
from pytest_devcaps.lint import analyze
found = analyze(open(sys.argv[1]).read(), sys.argv[1]).findings
print(json.dumps([len(found), "pytest_devcaps.config.catalogue" in sys.modules]))
"""


@pytest.mark.parametrize(("body", "loads"), [
    ("import torch\n\ndef test_a():\n    assert torch.cuda.is_available()\n    x = torch.ones(1).cuda()\n", False),
    (GATED_FILE, True),   # the control: an SM-level gate does load it
])
def test_a_file_without_sm_gates_never_loads_the_catalogue(tmp_path: Path, body: str, loads: bool) -> None:
    path = tmp_path / "t.py"
    path.write_text(body)
    done = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True,
                          timeout=120, check=True)
    findings, loaded = json.loads(done.stdout)
    assert findings >= 1
    assert loaded is loads
