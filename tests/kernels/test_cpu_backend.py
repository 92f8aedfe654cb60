"""CPU-backend specifics: thread settings, the oneDNN check and fallback, the weight cache,
block sizes, and a forked child (DataLoader-style workers)."""

from __future__ import annotations

import gc
import json
import multiprocessing
import subprocess
import sys

import pytest
import torch

import devcaps_kernels.cpu_backend as cpu
from devcaps_kernels import BackendUsed, Reduce, last_backend, scaled_mm, weight_cache
from devcaps_kernels.problem import build_problem
from devcaps_kernels import epilogue as ep
from pytest_devcaps.suites.kernels._checks import assert_reduction_close, assert_y_close, fresh

CPU = torch.device("cpu")


def _child(queue) -> None:
    a, b = torch.ones(300, 64), torch.ones(64, 128)
    y, (total,) = scaled_mm(a, b, reductions=[Reduce("sum")], backend="cpu")
    queue.put(float(total.sum()))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")
def test_forked_child_runs_after_the_parent_used_openmp():
    torch.nn.functional.gelu(torch.randn(2000, 2000))  # an OpenMP team in the parent
    scaled_mm(torch.ones(3000, 64), torch.ones(64, 512), reductions=[Reduce("sum")], backend="cpu")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=_child, args=(queue,))
    process.start()
    process.join(timeout=60)
    if process.is_alive():
        process.kill()
        pytest.fail("scaled_mm hung in a forked child (stale OpenMP team)")
    assert process.exitcode == 0
    assert queue.get(timeout=5) == 300 * 128 * 64


_THREADS = """
import json, sys, threading, torch
from devcaps_kernels import Reduce, scaled_mm, epilogue as ep

def settings():
    seen = {}
    def other(): seen["new_thread"] = torch.get_num_threads()
    t = threading.Thread(target=other); t.start(); t.join()
    return {"main": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
            "parallel_info": torch.__config__.parallel_info(), **seen}

def calls():
    for m, n, k in [(4096, 512, 64), (512, 512, 512), (7, 1024, 256), (1, 64, 64)]:
        a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
        scaled_mm(a, b, epilogue=[ep.gelu()], reductions=[Reduce("sum")], backend="cpu")
    w = (torch.randn(512, 256) * 4).to(torch.float8_e4m3fn)
    scaled_mm(w, w.t(), scale_a=0.5, scale_b=0.25, backend="cpu")

reports = []
for threads in map(int, sys.argv[1:]):
    torch.set_num_threads(threads)
    before = settings()
    calls()
    after_calls = settings()
    from_thread = {}
    def call():
        scaled_mm(torch.randn(2048, 128), torch.randn(128, 512), reductions=[Reduce("sum")], backend="cpu")
        from_thread["caller"] = torch.get_num_threads()
    t = threading.Thread(target=call); t.start(); t.join()
    reports.append({"threads": threads, "before": before, "after": after_calls, "after_thread": settings(),
                    **from_thread})
print(json.dumps(reports))
"""


def test_torch_thread_settings_are_never_changed(tmp_path):
    """In a fresh process, with each thread count in turn, and from a thread of the caller's own."""
    result = subprocess.run([sys.executable, "-c", _THREADS, "3", "1", "2"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    reports = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["threads"] for r in reports] == [3, 1, 2]
    for report in reports:
        assert report["before"]["main"] == report["threads"]
        assert report["after"] == report["before"] == report["after_thread"]
        assert report["caller"] == report["before"]["new_thread"]


def test_onednn_missing_falls_back_and_says_why(monkeypatch):
    a, b = fresh(600, 96, dtype=torch.bfloat16, device=CPU), fresh(96, 128, dtype=torch.bfloat16, device=CPU)
    kwargs = dict(bias=fresh(128, dtype=torch.bfloat16, device=CPU), epilogue=[ep.gelu(approximate="tanh")],
                  reductions=[Reduce("sum"), Reduce("amax", group=32)])
    ref_y, _ = scaled_mm(a, b, backend="reference", **kwargs)
    y, _ = scaled_mm(a, b, backend="cpu", **kwargs)
    assert last_backend() == "cpu" and last_backend().reason == ""
    monkeypatch.setattr(cpu, "onednn_problem", lambda dtype: "no oneDNN in this test")
    y2, reds = scaled_mm(a, b, backend="cpu", **kwargs)
    used = last_backend()
    assert used == "cpu" and isinstance(used, BackendUsed)
    # without oneDNN's gelu before the rounding, a bf16 GEMM would round twice: fp32 it is
    assert used.reason == "no oneDNN in this test; ran torch.mm in float32 and the eager epilogue per block"
    assert "no oneDNN in this test" in repr(used)
    assert_y_close(y2, ref_y)
    assert_reduction_close(reds[0], y2.float(), Reduce("sum"))
    assert_reduction_close(reds[1], y2.float(), Reduce("amax", group=32))


def test_onednn_check_runs_once_and_names_a_failure(monkeypatch):
    assert cpu.onednn_problem(torch.float32) == ""  # this torch build has it
    calls = []

    def broken(*args):
        calls.append(args)
        raise RuntimeError("could not create a primitive\nmore detail")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", broken)
    cpu.onednn_problem.cache_clear()
    try:
        assert cpu.onednn_problem(torch.float32) == (
            "torch.ops.mkldnn._linear_pointwise fails for torch.float32: could not create a primitive")
        cpu.onednn_problem(torch.float32)
        assert len(calls) == 1
    finally:
        cpu.onednn_problem.cache_clear()


def test_fp8_weight_is_converted_once_per_version():
    weight_cache.clear()
    a = fresh(64, 128, dtype=torch.float32, device=CPU).to(torch.float8_e4m3fn)
    b = fresh(256, 128, dtype=torch.float32, device=CPU).to(torch.float8_e4m3fn).t()  # column-major
    first, _ = scaled_mm(a, b, scale_a=0.5, scale_b=2.0, out_dtype=torch.float32, backend="cpu")
    assert weight_cache.cached_weights() == 1
    again, _ = scaled_mm(a, b, scale_a=0.5, scale_b=2.0, out_dtype=torch.float32, backend="cpu")
    assert torch.equal(first, again) and weight_cache.cached_weights() == 1
    b.copy_((-b.float()).to(torch.float8_e4m3fn))  # in place: a new version; the cached copy is stale
    flipped, _ = scaled_mm(a, b, scale_a=0.5, scale_b=2.0, out_dtype=torch.float32, backend="cpu")
    torch.testing.assert_close(flipped, -first)
    assert weight_cache.cached_weights() == 1
    del b
    gc.collect()
    assert weight_cache.cached_weights() == 0


def test_weight_cache_is_bounded_and_skips_inference_tensors():
    weight_cache.clear()
    weights = [torch.randn(32, 16).to(torch.float8_e4m3fn) for _ in range(weight_cache.CAPACITY + 3)]
    for w in weights:
        weight_cache.converted_weight(w, torch.float32)
    assert weight_cache.cached_weights() == weight_cache.CAPACITY
    with torch.inference_mode():
        frozen = torch.randn(32, 16).to(torch.float8_e4m3fn)
    weight_cache.clear()
    converted = weight_cache.converted_weight(frozen, torch.bfloat16)
    assert torch.equal(converted, frozen.t().to(torch.bfloat16)) and converted.is_contiguous()
    assert weight_cache.cached_weights() == 0
    same = torch.randn(16, 8, dtype=torch.bfloat16)
    assert weight_cache.converted_weight(same, torch.bfloat16).data_ptr() == same.data_ptr()


@pytest.mark.parametrize(("m", "n", "threads", "rows"), [
    (512, 512, 2, 512),        # one block of 256K outputs
    (1024, 512, 2, 1024),
    (1024, 1024, 2, 512),      # two blocks of 512K
    (4096, 4096, 2, 256),
    (8192, 8192, 2, 256),
    (65536, 256, 2, 2048),
    (64, 16384, 2, 64),        # never fewer than 256 rows (or all of them): the weight is read per block
    (7, 4096, 2, 7),
    (1, 4096, 2, 1),
    (300, 128, 2, 300),        # 38K outputs: one block
    (3000, 3000, 2, 250),      # twelve even blocks, one oneDNN primitive
    (1000, 4096, 2, 250),
    (1024, 1024, 1, 256),      # one thread: a quarter of the outputs per block
    (8192, 1024, 16, 4096),    # sixteen threads: each keeps a 2-thread block's share
    (8192, 1024, 0, 256),      # a nonsense count reads as one thread
])
def test_block_rows(m, n, threads, rows):
    assert cpu.block_rows(m, n, threads) == rows


@pytest.mark.parametrize("fast_bf16", [True, False], ids=["bf16-gemm-fast", "bf16-gemm-slow"])
def test_the_gemm_runs_in_bf16_only_when_allowed_and_fast(monkeypatch, fast_bf16):
    """Both answers of the machine check are exercised on every machine (an AVX2 CPU has no
    bf16 units and no oneDNN bf16 GEMM, an AVX512-BF16 / AMX one has both): the plan must not
    depend on the ISA it runs on."""
    a = torch.zeros(8, 16).to(torch.float8_e4m3fn)
    from devcaps_kernels.problem import build_problem

    monkeypatch.setattr(cpu, "bf16_gemm_problem", lambda: "" if fast_bf16 else "no bf16 units here")
    # and oneDNN's bf16 GEMM, which takes a gelu inside it, exists where bf16 is fast (an AVX2
    # CPU has no oneDNN bf16 inner product at all: without this the fast case failed there)
    monkeypatch.setattr(cpu, "onednn_problem",
                        lambda dtype: "" if fast_bf16 or dtype != torch.bfloat16 else "no bf16 kernels here")
    bf16 = torch.bfloat16 if fast_bf16 else torch.float32  # where bf16 would do

    def dtype(**kwargs):
        p = build_problem(a, a.t(), kwargs.pop("sa", None), None, None, kwargs.pop("out", torch.bfloat16),
                          kwargs.pop("epilogue", ()), (), True, kwargs.pop("fast", False))
        return cpu._plan_dtype(p)

    assert dtype() == bf16                               # the bf16 GEMM output is y
    assert dtype(sa=0.5) == torch.float32                # a scale after the GEMM: exact fp32
    assert dtype(sa=0.5, fast=True) == bf16              # opted in: one more rounding
    assert dtype(out=torch.float32) == torch.float32
    assert dtype(epilogue=[ep.gelu()]) == bf16           # oneDNN applies it before the rounding
    assert dtype(epilogue=[ep.relu()]) == bf16           # relu commutes with the rounding: on y
    assert dtype(epilogue=[ep.gelu(), ep.relu(), ep.clamp(-1.0, 0.5)]) == bf16
    assert dtype(epilogue=[ep.gelu(), ep.tanh()]) == torch.float32   # tanh after a rounding: no
    assert dtype(epilogue=[ep.clamp(lo=0.1)]) == torch.float32       # 0.1 is no bf16 value


def test_relu_after_the_rounding_equals_relu_before_it():
    """What the bf16 path relies on, for every bf16 value and both signs of zero and NaN."""
    values = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    wide = values.double() + torch.tensor([[0.0], [2.0 ** -9], [-(2.0 ** -9)]], dtype=torch.float64) * values.double()
    x = wide.float()
    assert torch.equal(torch.relu(x).bfloat16().view(torch.int16), torch.relu(x.bfloat16()).view(torch.int16))
    for lo, hi in ((-1.0, 0.5), (0.0, 448.0)):
        assert torch.equal(x.clamp(lo, hi).bfloat16().view(torch.int16), x.bfloat16().clamp(lo, hi).view(torch.int16))


def test_amax_beside_other_reductions_of_the_rounded_output(monkeypatch):
    """amax takes |y| into a scratch block of its own: the sums after it still read y's values
    (one shared buffer would hand them |y|), over several blocks, a ragged group and a NaN."""
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(1100, 96, generator=gen), torch.randn(96, 1000, generator=gen)
    a[700, 5] = float("nan")  # one row of the third block is NaN throughout
    reductions = [Reduce("amax"), Reduce("sum"), Reduce("amax", group=48, ragged=True), Reduce("sum", group=48, ragged=True),
                  Reduce("amax", source="fp32"), Reduce("mean", source="fp32")]
    monkeypatch.setattr(cpu, "block_rows", lambda m, n, threads: 256)  # five blocks, whatever the thread count
    y, outs = scaled_mm(a, b, out_dtype=torch.bfloat16, reductions=reductions, backend="cpu")
    acc = a.double() @ b.double()
    for r, got in zip(reductions, outs):
        assert_reduction_close(got, y.float() if r.source == "output" else acc, r)
    assert torch.isnan(outs[0][700]) and not torch.isnan(outs[0][:700]).any()
    assert float(outs[1][:700].abs().sum()) != float(outs[0][:700].sum())  # sums of y, not of |y|


def test_reduction_steps_derive_coarse_from_fine():
    reductions = (Reduce("sum"), Reduce("sumsq"), Reduce("sum", group=64), Reduce("mean", group=64),
                  Reduce("amax", group=128), Reduce("amax", group=32), Reduce("sum", group=96, source="fp32"))
    steps = {s.index: s for s in cpu.reduction_steps(reductions, 384)}
    assert [s.index for s in cpu.reduction_steps(reductions, 384)] == [5, 2, 3, 6, 4, 0, 1]
    assert (steps[2].computes, steps[2].finer) == (True, None)      # group sums from the block
    assert (steps[3].computes, steps[3].finer) == (False, None)     # mean: reuses those sums
    assert (steps[0].computes, steps[0].finer) == (True, 64)        # row sum: from 6 group sums
    assert (steps[4].computes, steps[4].finer) == (True, 32)        # amax 128 from amax 32
    assert (steps[6].finer, steps[1].finer) == (None, None)         # other source, other family
    assert steps[0].groups == 1 and steps[5].groups == 12


def test_a_view_made_on_every_call_hits_the_cache():
    weight_cache.clear()
    w = torch.randn(96, 64).to(torch.float8_e4m3fn)  # nn.Linear layout [N, K]; b = w.t() per call
    first = weight_cache.converted_weight(w.t(), torch.float32)
    again = weight_cache.converted_weight(w.t(), torch.float32)
    assert again is first and weight_cache.cached_weights() == 1
    other_rows = weight_cache.converted_weight(w[:48].t(), torch.float32)  # same owner, another view
    assert other_rows is not first and weight_cache.cached_weights() == 2
    w.copy_(torch.zeros(96, 64).to(torch.float8_e4m3fn))  # the owner changes: both views are stale
    assert not weight_cache.converted_weight(w.t(), torch.float32).any()
    del w
    gc.collect()
    assert weight_cache.cached_weights() == 0


def test_dense_copy_of_a_row_major_weight_for_few_rows():
    weight_cache.clear()
    b = torch.randn(64, 96, dtype=torch.bfloat16)  # [K, N] row-major
    first = weight_cache.converted_weight(b, torch.bfloat16, dense=True)
    assert first.data_ptr() == b.data_ptr() and weight_cache.cached_weights() == 0  # a one-off: no copy
    dense = weight_cache.converted_weight(b, torch.bfloat16, dense=True)  # used again: copy it
    assert dense.is_contiguous() and torch.equal(dense, b.t()) and weight_cache.cached_weights() == 1
    assert weight_cache.converted_weight(b, torch.bfloat16, dense=True) is dense
    column_major = torch.randn(96, 64, dtype=torch.bfloat16).t()
    assert weight_cache.converted_weight(column_major, torch.bfloat16, dense=True).data_ptr() == column_major.data_ptr()
    weight_cache.clear()
    a = torch.randn(7, 64, dtype=torch.bfloat16)
    y, _ = scaled_mm(a, b, backend="cpu")
    y, _ = scaled_mm(a, b, backend="cpu")                      # 7 rows, twice: the dense copy is made
    assert weight_cache.cached_weights() == 1
    big, _ = scaled_mm(torch.randn(200, 64, dtype=torch.bfloat16), b, backend="cpu")  # no copy
    assert weight_cache.cached_weights() == 1
    assert_y_close(y, scaled_mm(a, b, backend="reference")[0])


def test_ops_on_the_rounded_output_give_the_reference_result(monkeypatch):
    """The bf16 GEMM-is-y path with relu and a clamp applied to y (forced here: on a CPU without
    bf16 units the plan would take the fp32 GEMM), against float64."""
    from pytest_devcaps.suites.kernels._checks import assert_y_close, float64_expected

    monkeypatch.setattr(cpu, "bf16_gemm_problem", lambda: "")
    a, b = torch.randn(33, 40).bfloat16(), torch.randn(40, 96).bfloat16()
    ops = [ep.relu(), ep.clamp(hi=2.0)]
    plan = cpu._make_plan(build_problem(a, b, None, None, None, torch.bfloat16, ops, [Reduce("sum")], True))
    assert plan.compute == torch.bfloat16 and plan.gemm_is_output and plan.on_output == len(ops) - plan.fused_ops
    y, (total,) = scaled_mm(a, b, epilogue=ops, reductions=[Reduce("sum")], backend="cpu")
    assert_y_close(y, float64_expected(a, b, epilogue=ops).rounded(torch.bfloat16))
    assert float(y.float().max()) <= 2.0 and float(y.float().min()) >= 0.0
    torch.testing.assert_close(total, y.float().sum(-1), rtol=1e-5, atol=1e-4)


_THREAD_COUNT = """
import json, os, torch
from devcaps_kernels import scaled_mm, Reduce
torch.set_num_threads(2)
count = lambda: len(os.listdir("/proc/self/task"))
torch.mm(torch.randn(512, 512), torch.randn(512, 512))  # torch's own OpenMP team exists
before = count()
scaled_mm(torch.randn(2048, 512), torch.randn(512, 1024), reductions=[Reduce("sum")])  # four blocks
print(json.dumps({"added": count() - before}))
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="counts /proc/self/task (Linux)")
def test_a_fused_call_starts_no_threads_of_its_own():
    """Its blocks run on the calling thread with torch's own OpenMP team: threads of ours would
    share the cores with that team's threads, which keep spinning after torch's last op (issue
    30: 1024x1024x512 ran at up to 1.8x the faster of Inductor and eager with a pool of workers)."""
    done = subprocess.run([sys.executable, "-c", _THREAD_COUNT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["added"] == 0, seen
