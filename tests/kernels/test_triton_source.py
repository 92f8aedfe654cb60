"""The generated Triton source and its autotune set-up, for device paths the CPU cannot run
(no triton import needed, except where a test says so)."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from devcaps_kernels import Reduce, scaled_mm
from devcaps_kernels import epilogue as ep
from devcaps_kernels.problem import build_problem
from devcaps_kernels.triton_configs import (AUTOTUNE_KEY, INTERPRETER, configs_for, m_bucket, prune_for_m,
                                            segment_base)
from devcaps_kernels.triton_plan import INTERPRETED, KernelTarget, plan_for
from devcaps_kernels.triton_source import source as _source

GROUPS = (None, 32, 3, 96, 128, 48)


def _problem(dtype, *, n=96, fast_accum=False, groups=GROUPS):
    a, b = torch.zeros(4, 8).to(dtype), torch.zeros(8, n).to(dtype)
    return build_problem(a, b, None, None, None, torch.bfloat16, [ep.relu()],
                         [Reduce("sum", group=g) for g in groups if g is None or n % g == 0], True,
                         fast_accum)


def kernel_target(vendor="cuda", native=False, imprecise=True, shared_limit=None):
    """A compiled (not interpreted) Triton target whose tl.dot takes every fp8 type natively
    (``native``) or none."""
    types = frozenset(("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16")) if native else frozenset()
    return KernelTarget(vendor, None, types, imprecise, shared_limit)


def _plan(p, target=None):
    return plan_for(p, target or kernel_target())


def _loop(source: str) -> str:
    return source.split("for k0")[1].split("mask = mask_m")[0]


@pytest.mark.parametrize("native", [True, False])
def test_fp8_dot_operands(native):
    loop = _loop(_source(_plan(_problem(torch.float8_e4m3fn), kernel_target(native=native))))
    # native fp8 is loaded through fp8 pointers and goes to tl.dot as is (other=0.0: an fp8
    # zero); otherwise the tile is loaded as bytes and decoded to bf16 (exact).
    if native:
        assert "_decode" not in loop and loop.count("other=0.0)") == 2
    else:
        assert "a = _decode_e4m3fn(a).to(tl.bfloat16)\n" in loop and "other=0)" in loop
    assert "tl.float32" not in loop


@pytest.mark.parametrize(("native", "imprecise", "fast_accum", "promoted"), [
    (True, True, False, True),     # NVIDIA sm_90: ask for fp32 accumulation every BLOCK_K
    (True, True, True, False),     # fast_accum=True: Triton's (imprecise) default, as opted in
    (True, False, False, False),   # sm_89, sm_100, AMD: Triton's default is already precise
    (False, True, False, False),   # decoded to bf16: tl.dot accumulates bf16 products in fp32
])
def test_fp8_accumulates_in_fp32_unless_fast_accum(native, imprecise, fast_accum, promoted):
    plan = _plan(_problem(torch.float8_e4m3fn, fast_accum=fast_accum), kernel_target(native=native, imprecise=imprecise))
    assert plan.promote_fp8_acc is promoted
    dot = _loop(_source(plan)).split("acc = tl.dot(")[1].splitlines()[0]
    assert dot == ("a, b, acc, max_num_imprecise_acc=BLOCK_K)" if promoted else "a, b, acc)")


def test_offsets_are_int64():
    source = _source(_plan(_problem(torch.bfloat16)))
    assert "offs_k = tl.arange(0, BLOCK_K).to(tl.int64)" in source
    assert "rows = offs_m.to(tl.int64)" in source and "cols = offs_n.to(tl.int64)" in source
    # every load in the K loop indexes with those int64 vectors only
    assert _loop(source).count("kk[") == 2 and "kk = k0 + offs_k" in source


def test_interpreter_only_changes_the_dot_operand_dtype():
    device = _source(_plan(_problem(torch.bfloat16)))
    interp = _source(_plan(_problem(torch.bfloat16), INTERPRETED))
    assert "a = a.to(tl.float32)" in interp and "a = a.to(" not in device
    assert device.split("mask = mask_m")[1] == interp.split("mask = mask_m")[1]


@pytest.mark.parametrize(("vendor", "dtype", "native", "family"), [
    ("cuda", torch.float8_e4m3fn, True, "fp8"),
    ("cuda", torch.float8_e4m3fn, False, "16bit"),
    ("cuda", torch.bfloat16, False, "16bit"),
    ("cuda", torch.float32, False, "fp32"),
    ("hip", torch.float8_e4m3fnuz, True, "fp8"),
    ("hip", torch.float16, False, "16bit"),
    ("xpu", torch.bfloat16, False, "16bit"),
])
def test_configs_follow_vendor_and_dtype_family(vendor, dtype, native, family):
    plan = _plan(_problem(dtype, n=4096), kernel_target(vendor=vendor, native=native))
    assert plan.configs == configs_for(vendor, family, 4096)


def test_config_tables_differ_where_the_tutorial_does():
    cuda_fp8, cuda_16 = configs_for("cuda", "fp8", 8192), configs_for("cuda", "16bit", 8192)
    hip_fp8, hip_16 = configs_for("hip", "fp8", 8192), configs_for("hip", "16bit", 8192)
    assert min(c.block_k for c in cuda_fp8) >= 64 > min(c.block_k for c in cuda_16)
    assert all(dict(c.options).get("waves_per_eu") for c in hip_fp8 + hip_16)
    assert all(c.num_stages == 2 for c in hip_fp8 + hip_16)
    assert not any(c.options for c in cuda_fp8 + cuda_16)
    assert min(c.block_k for c in hip_fp8) >= 64  # fp8 MFMA takes K in steps of 32 or 64
    assert len(set(cuda_16)) == len(cuda_16) >= 6 and len(cuda_fp8) >= 6
    with pytest.raises(ValueError, match="family must be one of"):
        configs_for("cuda", "int8", 64)


@pytest.mark.parametrize("n", [1, 16, 40, 96, 4096])
def test_block_n_capped_by_n_and_segments_divide_every_block_n(n):
    for vendor in ("cuda", "hip"):
        for family in ("fp8", "16bit", "fp32"):
            configs = configs_for(vendor, family, n)
            cap = max(16, 1 << max(n - 1, 0).bit_length())
            assert all(c.block_n <= cap and c.block_n & (c.block_n - 1) == 0 for c in configs)
            base = segment_base(configs)
            for g in (1, 2, 3, 32, 48, 64, 96, 128, n):
                seg = math.gcd(g, base)
                assert all(c.block_n % seg == 0 for c in configs), (vendor, family, n, g)


def test_segments_do_not_depend_on_the_chosen_config():
    plan = _plan(_problem(torch.bfloat16, n=384, groups=(None, 32, 3, 96, 128, 48)))
    base = segment_base(plan.configs)
    assert base == 64
    assert [seg for (_, _, seg) in plan.reductions] == [64, 32, 1, 32, 64, 16]


def test_autotune_key_buckets_m():
    assert AUTOTUNE_KEY == ("M_BUCKET", "N", "K")
    assert [m_bucket(m) for m in (1, 7, 16, 17, 100, 128, 129, 4096, 5000)] == [
        16, 16, 16, 32, 128, 128, 256, 4096, 8192]
    configs = [SimpleNamespace(kwargs={"BLOCK_M": bm}) for bm in (32, 64, 128, 256)]
    assert [c.kwargs["BLOCK_M"] for c in prune_for_m(configs, {"M_BUCKET": 16})] == [32]
    assert [c.kwargs["BLOCK_M"] for c in prune_for_m(configs, {"M_BUCKET": 64})] == [32, 64, 128]
    assert len(prune_for_m(configs, {"M_BUCKET": 4096})) == 4
    tiny = [SimpleNamespace(kwargs={"BLOCK_M": 128}), SimpleNamespace(kwargs={"BLOCK_M": 256})]
    assert [c.kwargs["BLOCK_M"] for c in prune_for_m(tiny, {"M_BUCKET": 16})] == [128]


def test_kernel_takes_the_bucket_and_every_config_is_a_triton_config():
    triton = pytest.importorskip("triton", reason="triton is not installed")
    from devcaps_kernels.triton_configs import triton_configs

    plan = _plan(_problem(torch.bfloat16, n=4096))
    assert "M,\n                    N,\n                    K,\n                    M_BUCKET,\n" in _source(plan)
    made = triton_configs(plan.configs)
    assert all(isinstance(c, triton.Config) for c in made) and len(made) == len(plan.configs)
    assert {c.kwargs["BLOCK_N"] for c in made} == {c.block_n for c in plan.configs}


def test_interpreter_runs_one_config():
    plan = _plan(_problem(torch.bfloat16), INTERPRETED)
    assert plan.configs == INTERPRETER and not plan.promote_fp8_acc
    assert dataclasses.replace(plan, interpret=False) != plan  # the interpreter is part of the key


def test_triton_backend_on_cpu_needs_the_interpreter(monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        scaled_mm(torch.ones(2, 2), torch.ones(2, 2), backend="triton")
