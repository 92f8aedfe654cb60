"""The fused kernel compiled for real GPU targets without a GPU (CI runs this on a CPU machine).

``python -m devcaps_kernels.compile`` builds the representative set (every operand family x one
epilogue-and-reduction plan x sm_80, sm_89, sm_90, sm_100, sm_120, gfx942, gfx950) with Triton's
compiler and checks the machine code: the native fp8 MMA where the target has one (the decoded
bf16 family on sm_80), shared memory within the vendor's per-block limit and within the config
model's estimate, no register spills. The checker itself is tested on made-up kernels, and the
per-target autotune lists without compiling.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from devcaps_kernels.compile_plans import FAMILIES, representative_plan
from devcaps_kernels.cross_compile import CompileResult, check_kernel
from devcaps_kernels.gpu_targets import DEFAULT_TARGETS, TARGETS, shared_limit, target
from devcaps_kernels.triton_configs import (TileConfig, configs_for, family_element_bytes,
                                            shared_bytes_estimate)
from devcaps_kernels.triton_plan import KernelTarget, plan_for

ROOT = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed: the Triton backend is optional")


def _compile_cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devcaps_kernels.compile", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@needs_triton
def test_the_representative_set_compiles_and_passes_on_every_target():
    done = _compile_cli("--json", "--jobs", "2")
    rows = json.loads(done.stdout)
    assert done.returncode == 0, [r for r in rows if not r["passed"]] or done.stderr[-2000:]
    assert sorted((r["target"], r["plan"].split(":")[0]) for r in rows) == sorted(
        (t, f) for t in DEFAULT_TARGETS for f in FAMILIES)
    for r in rows:
        assert {"target", "plan", "compiled", "fp8_native", "instruction", "shared_bytes", "shared_limit",
                "spills", "seconds", "error"} <= set(r)
        t = TARGETS[r["target"]]
        assert r["compiled"] and r["passed"] and r["error"] == "" and r["spills"] == 0, r
        assert 0 < r["shared_bytes"] <= min(r["shared_limit"], r["shared_estimate"]) and r["shared_limit"] == t.shared_limit
        family = r["plan"].split(":")[0]
        if family == "fp8":
            assert r["fp8_native"] is (t.fp8_mma is not None), r
            assert re.fullmatch(t.fp8_mma or t.mma_16bit, r["instruction"]), r  # sm_80: the bf16 MMA
        elif family == "bf16":
            assert r["fp8_native"] is None and re.fullmatch(t.mma_16bit, r["instruction"]), r
        else:
            assert "tf32" not in r["instruction"] and "xf32" not in r["instruction"], r


def test_usage_errors_name_what_is_known():
    done = _compile_cli("--targets", "sm_91")
    assert done.returncode == 2 and "unknown GPU target 'sm_91'; known: sm_80, sm_89" in done.stderr
    done = _compile_cli("--plans", "int8")
    assert done.returncode == 2 and "unknown plan family ['int8']" in done.stderr
    done = _compile_cli("--config", "128x128")
    assert done.returncode == 2 and "--config expects BMxBNxBK/wW/sS" in done.stderr


def _kernel(shared: int, asm: str, backend: str = "cuda") -> SimpleNamespace:
    key = "ptx" if backend == "cuda" else "amdgcn"
    return SimpleNamespace(metadata=SimpleNamespace(shared=shared), asm={key: asm, "cubin": b""})


def _check(name: str, family: str, shared: int, asm: str, log: str = "") -> CompileResult:
    t = target(name)
    spec = representative_plan(family)
    config = TileConfig(64, 64, 64, 8, 4, 3)
    plan = plan_for(spec.problem(t), KernelTarget(t.backend, t.arch, frozenset({"fp8e4nv", "fp8e4b8"}) if t.fp8_mma
                                                   else frozenset(), False, t.shared_limit), configs=(config,))
    result = CompileResult(t.name, spec.name, "64x64x64", compiled=True, shared_limit=t.shared_limit,
                           shared_estimate=shared_bytes_estimate(config, 1, 1, t.vendor, t.arch))
    check_kernel(result, plan, t, config, _kernel(shared, asm, t.backend), log)
    return result


def test_the_checker_names_every_failure():
    mma = "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
    good = _check("sm_90", "fp8", 24 * 1024, mma, "Used 128 registers, 0 bytes spill stores, 0 bytes spill loads")
    assert good.passed and good.instruction == mma.strip() and (good.registers, good.spills) == (128, 0)
    upcast = _check("sm_90", "fp8", 24 * 1024, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                    "Used 128 registers, 0 bytes spill stores")
    assert "fp8 dot is not the native fp8 MMA" in upcast.error
    big = _check("sm_89", "fp8", 147456, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
                 "Used 255 registers, 1692 bytes spill stores, 1692 bytes spill loads")
    assert "shared memory 147456 B > sm_89's limit 101376 B" in big.error
    assert "> the config model's estimate" in big.error and "register spills: 1692 bytes stored (255 registers)" in big.error
    amd = _check("gfx942", "fp8", 16384, "v_mfma_f32_32x32x16_fp8_fp8\n .vgpr_count: 64\n .vgpr_spill_count: 50\n"
                 " .sgpr_spill_count: 3")
    assert "register spills: 50 VGPRs (64 registers)" in amd.error and amd.sgpr_spills == 3
    unmeasured = _check("sm_90", "fp8", 1024, mma, "")  # no log, no cubin for cuobjdump
    assert "register spills not measured" in unmeasured.error


def test_fp8_on_sm_80_takes_the_decoded_family():
    plan = plan_for(representative_plan("fp8").problem(target("sm_80")),
                    KernelTarget("cuda", 80, frozenset({"fp8e5", "fp8e4b15"}), False, target("sm_80").shared_limit))
    assert plan.native_fp8 is False and plan.a_dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("name", DEFAULT_TARGETS)
def test_every_config_of_a_target_list_fits_it(name):
    t = target(name)
    for family in ("fp8", "16bit", "fp32"):
        listed = configs_for(t.vendor, family, 8192, t.shared_limit, t.arch)
        assert listed and all(shared_bytes_estimate(c, *family_element_bytes(family), t.vendor, t.arch)
                              <= t.shared_limit for c in listed)


def test_per_arch_lists_keep_the_large_fp8_tile_only_where_it_fits():
    tile = TileConfig(256, 64, 128, 8, 8, 4)  # 160 KB in 4 stages (sm_90); 3 of them on sm_89: 120 KB
    assert tile in configs_for("cuda", "fp8", 8192)
    assert tile in configs_for("cuda", "fp8", 8192, shared_limit("cuda", 90), 90)
    assert tile in configs_for("cuda", "fp8", 8192, shared_limit("cuda", 100), 100)
    for arch in (89, 120, 86):
        assert tile not in configs_for("cuda", "fp8", 8192, shared_limit("cuda", arch), arch)
    assert shared_limit("cuda", 75) is None and len(configs_for("cuda", "fp8", 8192, None)) == 7
