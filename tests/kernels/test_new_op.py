"""Adding an epilogue op takes one definition in one file: this one.

Two ops are defined here and nowhere else: ``leaky_relu(slope)`` (a scalar parameter and a oneDNN
post-op) and ``rsub(t)`` (``t - x``: an operand that is a number or a tensor of any broadcast
shape). With nothing else changed they run on the ``reference`` and ``cpu`` backends, through
the Triton kernel under Triton's interpreter, and compile for sm_90 with the native fp8 MMA,
each checked against float64 math. A definition whose parts disagree never reaches a kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from devcaps_kernels import Reduce, last_backend, scaled_mm
from devcaps_kernels.compile_plans import PlanSpec, meta_tensor
from devcaps_kernels.epilogue import OPERAND, SCALAR, EpilogueDefinitionError, EpiOp, OpDef, Param, make
from devcaps_kernels.problem import build_problem
from devcaps_kernels.triton_plan import INTERPRETED, plan_for
from devcaps_kernels.triton_source import kernel_params, source
from pytest_devcaps.suites.kernels._checks import assert_y_close, float64_expected, fresh

# -- the new ops: the whole of what adding them takes -----------------------------------------------

LEAKY_RELU = OpDef(
    "leaky_relu",
    reference=lambda x, slope: torch.nn.functional.leaky_relu(x, slope),
    triton="x = tl.where(x < 0, x * {slope}, x)",
    params=(Param("slope", SCALAR),),
    onednn=lambda op: ("leaky_relu", [float(op.value("slope"))], ""),  # type: ignore[arg-type]
)
RSUB = OpDef("rsub", reference=lambda x, t: torch.sub(t, x), triton="x = {t} - x", params=(Param("t", OPERAND),))


def leaky_relu(slope: float) -> EpiOp:
    return make(LEAKY_RELU, slope=float(slope))


def rsub(t: float | torch.Tensor) -> EpiOp:
    return make(RSUB, t=t)

# ---------------------------------------------------------------------------------------------------


CPU = torch.device("cpu")
M, N, K = 33, 96, 40
FORMS = {"number": lambda: 0.25, "row": lambda: fresh(N, dtype=torch.float32, device=CPU),
         "col": lambda: fresh(M, 1, dtype=torch.float32, device=CPU),
         "full": lambda: fresh(M, N, dtype=torch.float32, device=CPU)}


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_new_ops_match_float64(backend, form):
    a, b = fresh(M, K, dtype=torch.bfloat16, device=CPU), fresh(K, N, dtype=torch.bfloat16, device=CPU)
    bias = fresh(N, dtype=torch.float32, device=CPU)
    ops = [leaky_relu(0.1), rsub(FORMS[form]()), leaky_relu(0.3)]
    for out_dtype in (torch.bfloat16, torch.float32):
        y, (total,) = scaled_mm(a, b, bias=bias, epilogue=ops, out_dtype=out_dtype, reductions=[Reduce("sum")],
                                backend=backend)
        assert last_backend() == backend
        assert_y_close(y, float64_expected(a, b, bias=bias, epilogue=ops).rounded(out_dtype))
        torch.testing.assert_close(total, y.float().sum(-1), rtol=1e-5, atol=1e-4)


def test_the_oneDNN_post_op_comes_from_the_definition():
    from devcaps_kernels.cpu_backend import _make_plan

    a, b = fresh(M, K, dtype=torch.float32, device=CPU), fresh(K, N, dtype=torch.float32, device=CPU)
    plan = _make_plan(build_problem(a, b, None, None, None, torch.float32, [leaky_relu(0.2)], [], True))
    assert (plan.attr, plan.scalars, plan.fused_ops) == ("leaky_relu", [0.2], 1)


def test_kernel_parameters_and_source_come_from_the_definition():
    a, b = fresh(M, K, dtype=torch.bfloat16, device=CPU), fresh(K, N, dtype=torch.bfloat16, device=CPU)
    t = fresh(M, N, dtype=torch.float32, device=CPU)
    p = build_problem(a, b, None, None, None, torch.bfloat16, [leaky_relu(0.1), rsub(t), rsub(2.0)], [], True)
    plan = plan_for(p, INTERPRETED)
    names = [param.name for param in kernel_params(plan)]
    assert {"slope_0", "T_t_1", "stride_t_1_m", "stride_t_1_n", "t_2"} <= set(names)
    text = source(plan)
    assert "x = tl.where(x < 0, x * slope_0, x)" in text and "x = t_1 - x" in text and "x = t_2 - x" in text


def test_mismatched_definitions_are_refused():
    with pytest.raises(EpilogueDefinitionError, match=r"uses \['beta'\] but .* are \['slope'\]"):
        OpDef("bad", lambda x, slope: x, "x = x * {beta}", (Param("slope", SCALAR),))
    with pytest.raises(EpilogueDefinitionError, match=r"uses \[\] but .* are \['t'\]"):
        OpDef("unused", lambda x, t: x, "x = x * 2.0", (Param("t", OPERAND),))
    built_per_call = OpDef("per_call", lambda x, t: x, lambda statics: "x = x * {s}", (Param("t", OPERAND),))
    p = build_problem(torch.ones(2, 2), torch.ones(2, 2), None, None, None, torch.float32,
                      [make(built_per_call, t=1.0)], [], True)
    with pytest.raises(EpilogueDefinitionError, match=r"op 'per_call': the Triton template uses \['s'\]"):
        source(plan_for(p, INTERPRETED))  # before anything is compiled
    with pytest.raises(EpilogueDefinitionError, match=r"has no parameter\(s\) \['slope'\]"):
        make(RSUB, t=1.0, slope=2.0)


_INTERPRETED = """
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("new_op_test", sys.argv[1])
new = importlib.util.module_from_spec(spec)
spec.loader.exec_module(new)
from devcaps_kernels import Reduce, last_backend, scaled_mm
from pytest_devcaps.suites.kernels._checks import assert_y_close, float64_expected, fresh
cpu = torch.device("cpu")
a, b = fresh(33, 40, dtype=torch.bfloat16, device=cpu), fresh(40, 96, dtype=torch.bfloat16, device=cpu)
ops = [new.leaky_relu(0.1), new.rsub(fresh(33, 1, dtype=torch.float32, device=cpu)), new.rsub(0.5)]
y, _ = scaled_mm(a, b, epilogue=ops, out_dtype=torch.float32, backend="triton")
assert_y_close(y, float64_expected(a, b, epilogue=ops).rounded(torch.float32))
print(json.dumps({"backend": str(last_backend())}))
"""


def test_new_ops_run_in_the_triton_kernel_under_the_interpreter():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: the Triton backend is optional")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", _INTERPRETED, __file__], capture_output=True, text=True,
                          env=env, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"backend": "triton"}


def test_new_ops_compile_for_sm_90_with_the_native_fp8_mma():
    pytest.importorskip("triton", reason="triton is not installed: the Triton backend is optional")
    from devcaps_kernels.cross_compile import compile_plan
    from devcaps_kernels.gpu_targets import target
    from devcaps_kernels.triton_configs import TileConfig

    spec = PlanSpec("fp8:rowwise+bias+leaky_relu+rsub_full/sum", "fp8", "rowwise", True,
                    (lambda m, n: leaky_relu(0.1), lambda m, n: rsub(meta_tensor(m, n))), (Reduce("sum"),))
    result = compile_plan(spec, target("sm_90"), TileConfig(64, 64, 64, 8, 4, 3))
    assert result.passed, result.error
    assert result.fp8_native and "e4m3.e4m3" in result.instruction and result.spills == 0
