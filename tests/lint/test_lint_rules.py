"""The lint's rule table and gate reading: every capability it names exists, and each gate
condition reads as the requirement PyTorch's own definitions give it (common_cuda.py:
PLATFORM_SUPPORTS_FP8 is sm_89/sm_90+, flash attention sm_80+, MX GEMM sm_100+).
An arch gate means the hardware does it, so its marks carry ``native=True``: emulation (a CPU
running fp8 in software) does not satisfy a test written for sm_89 hardware."""

from __future__ import annotations

import ast

import pytest

from pytest_devcaps.config import load_catalogue
from pytest_devcaps.lint import rules
from pytest_devcaps.lint.gating import FixedUses, classify, generic_atom, need_for
from pytest_devcaps.lint.records import Need


def test_every_capability_in_the_table_exists_in_the_catalogue() -> None:
    names = rules.capability_names()
    assert {"dtype.fp8_e4m3fn", "mm.scaled", "mm.scaled_rowwise", "attention.flash", "dist.nccl",
            "runtime.memory_stats", "runtime.pinned_memory"} <= names  # the walk sees the table
    missing = names - set(load_catalogue().capabilities)
    assert not missing, f"the rule table names capabilities the catalogue lacks: {sorted(missing)}"


def test_every_rule_code_is_documented() -> None:
    used = {g.code for g in (*rules.GATE_NAMES.values(), *rules.GATE_CALLS.values(),
                             *(d.gate for d in rules.DECORATORS.values()))}
    used |= {c.code for c in rules.CUDA_CALLS.values()}
    assert used <= set(rules.RULES)
    assert sorted(rules.RULES) == [f"DC{n:03d}" for n in range(len(rules.RULES))]


def _run_need(condition: str, used: tuple[str, ...] = (), skip: bool = True) -> Need:
    """What a test gated by ``skipIf(condition)`` (or ``skipUnless`` when not ``skip``) needs."""
    uses = FixedUses(frozenset(used))
    expr = ast.parse(condition, mode="eval").body
    return need_for(expr, not skip, lambda e: classify(e, uses, in_condition=True) or generic_atom(e))


@pytest.mark.parametrize(("condition", "used", "marks"), [
    ("not TEST_CUDA", (), ()),
    ("torch.cuda.is_available() and not is_sm_at_least_89()", ("_scaled_mm",),
     ('pytest.mark.requires_capability("mm.scaled", native=True)',)),
    ("not SM89OrLater", (), ('pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)',)),
    ("not PLATFORM_SUPPORTS_FP8", ("float8_e4m3fnuz",),
     ('pytest.mark.requires_capability(any_of=["dtype.fp8_e4m3fn", "dtype.fp8_e4m3fnuz"], native=True)',)),
    ("not PLATFORM_SUPPORTS_FUSED_ATTENTION", (),
     ('pytest.mark.requires_capability(any_of=["attention.flash", "attention.mem_efficient", '
      '"attention.cudnn"])',)),
    ("torch.cuda.device_count() < 2", (), ("pytest.mark.requires_devices(2)",)),
    ("not (SM80OrLater and TEST_MULTIGPU)", ("bfloat16",),
     ('pytest.mark.requires_capability("dtype.bf16")', "pytest.mark.requires_devices(2)")),
    ("not torch.accelerator.is_available() or not SM89OrLater", (),
     ('pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)',)),
    ("not PLATFORM_SUPPORTS_FLASH_ATTENTION", (), ('pytest.mark.requires_capability("attention.flash")',)),
    ("not torch.cuda.is_bf16_supported()", (), ('pytest.mark.requires_capability("dtype.bf16")',)),
    # PyTorch's common_cuda: PLATFORM_SUPPORTS_MX_GEMM / *_GROUPED_GEMM; Blackwell gates by use.
    ("not PLATFORM_SUPPORTS_MX_GEMM", (), ('pytest.mark.requires_capability("mm.scaled_mx")',)),
    ("not PLATFORM_SUPPORTS_MXFP8_GROUPED_GEMM", (),
     ('pytest.mark.requires_capability("mm.grouped", "mm.scaled_mx")',)),
    ("not SM100OrLater", ("to_mx",), ('pytest.mark.requires_capability("mm.scaled_mx")',)),
])
def test_gate_conditions_read_as_marks(condition: str, used: tuple[str, ...], marks: tuple[str, ...]) -> None:
    need = _run_need(condition, used)
    assert need.convertible, need.blockers
    assert need.render() == marks


def test_skip_unless_reads_the_other_way() -> None:
    need = _run_need("torch.cuda.get_device_capability() >= (8, 9)", skip=False)
    assert need.render() == ('pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)',)


@pytest.mark.parametrize(("condition", "why"), [
    ("not SM100OrLater", "what the rules tie to sm_100: dtype.fp4_e2m1, mm.scaled_mx"),
    # a gate maps only to a capability whose rule is the gate's own level (issue 27): rowwise fp8
    # and scaled mm are sm_89's, grouped mm sm_90's; an sm_89 L4 has them and fails these gates
    ("not SM90OrLater", "what the rules tie to sm_90: mm.grouped"),
    ("torch.cuda.get_device_capability()[0] < 9", "what the rules tie to sm_90: mm.grouped"),
    ("TEST_WITH_ROCM", "no mark expresses an exclusion"),
    ("not torch.cuda.is_available() or IS_WINDOWS", "'IS_WINDOWS' is not a device condition"),
    ("not (is_sm_at_least_89() or is_MI300())", "no single mark"),
    ("torch.cuda.device_count() > 2", "bounded GPU count"),
    ("not PLATFORM_SUPPORTS_GREEN_CONTEXT", "no capability for it yet"),
    ("not has_cuda_fp8_kernels()", "cannot read"),
])
def test_gates_without_a_mark_say_why(condition: str, why: str) -> None:
    need = _run_need(condition)
    assert not need.convertible
    assert any(why in blocker for blocker in need.blockers), need.blockers


def test_need_renders_every_mark_kind() -> None:
    need = Need(capabilities=("dtype.bf16",), any_of=(("attention.flash", "attention.cudnn"),),
                devices=2, memory="40GB")
    assert need.render() == (
        'pytest.mark.requires_capability("dtype.bf16", any_of=["attention.flash", "attention.cudnn"])',
        "pytest.mark.requires_devices(2)",
        'pytest.mark.requires_memory("40GB")',
    )
