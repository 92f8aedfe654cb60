"""Compile the fused kernel for real GPU targets without a GPU, and check the machine code.

For a :class:`~devcaps_kernels.compile_plans.PlanSpec` and a
:class:`~devcaps_kernels.gpu_targets.GpuTarget`, :func:`compile_plan` builds the plan the runtime
would launch on that target (:func:`~devcaps_kernels.triton_plan.plan_for` with the target's own
Triton options), specializes its parameters exactly as ``triton.jit`` does at launch (Triton's
``native_specialize_impl`` on the launch arguments of a stand-in problem on the meta device:
strides of 1 become constants, 16-aligned pointers and sizes get ``tt.divisibility``), compiles
it with ``triton.compile(ASTSource(...), target=GPUTarget(...))`` (no driver, no GPU) and reads
back the assembly and metadata. Checks (each failure is named in ``error``):

* it compiles;
* the MMA instruction: fp8 operands use the target's native fp8 MMA where it has one
  (:attr:`GpuTarget.fp8_mma`), and take the decoded bf16 family where it has none (sm_80);
  16-bit operands use a bf16 / fp16 MMA; fp32 operands no reduced-precision (tf32 / xf32) one;
* shared memory (``metadata.shared``) is at most the target's per-block limit, and at most
  :func:`~devcaps_kernels.triton_configs.shared_bytes_estimate`, the model that keeps configs
  that cannot fit out of each target's autotune list;
* no register spills: NVIDIA: ``ptxas -v`` (Triton's own ptxas run, its log captured with
  ``knobs.nvidia.dump_ptxas_log``: "N bytes spill stores"; ``cuobjdump --dump-resource-usage``
  of the cubin, ``STACK``/``LOCAL``, where no log was printed); AMD: the code object's
  ``.vgpr_spill_count`` (spills to scratch memory; ``.sgpr_spill_count``, spills of scalar
  registers into vector lanes, is reported as ``sgpr_spills``).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import torch

from .dtypes import FP8_DTYPES
from .gpu_targets import GpuTarget
from .triton_configs import TileConfig, config_name, family_element_bytes, shared_bytes_estimate
from .triton_plan import family, plan_for, target_for
from .triton_source import CONSTEXPRS, KernelPlan, kernel_params


@dataclass
class CompileResult:
    """One plan x target x config: what was compiled and how it measured up."""

    target: str
    plan: str
    config: str
    compiled: bool = False
    fp8_native: bool | None = None      # None: the plan has no fp8 operands
    instruction: str = ""               # the matrix instruction found ("" none)
    shared_bytes: int | None = None
    shared_limit: int = 0
    shared_estimate: int | None = None
    spills: int | None = None           # NVIDIA: spill store bytes; AMD: spilled VGPRs
    sgpr_spills: int | None = None      # AMD only
    registers: int | None = None
    seconds: float = 0.0
    family: str = ""
    error: str = ""                     # "" when every check passed
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.compiled and not self.error

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        return out


def specialize(fn: Any, names: list[str], values: list[object], backend: Any) -> tuple[
        dict[str, str], dict[str, object], dict[tuple[int, ...], list[Any]]]:
    """``(signature, constexprs, attrs)`` of a launch with ``values``, as ``triton.jit``
    computes them (``native_specialize_impl`` per argument, ``backend.parse_attr``)."""
    from triton._C.libtriton import native_specialize_impl

    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    attrs: dict[tuple[int, ...], list[Any]] = {}
    for name, value in zip(names, values):
        kind, attr = native_specialize_impl(backend, value, False, True, True)[:2]
        if kind == "constexpr":
            signature[name], constexprs[name] = "constexpr", attr
            continue
        signature[name] = kind
        if isinstance(attr, str) and attr:
            attrs[(fn.arg_names.index(name),)] = backend.parse_attr(attr)
    return signature, constexprs, attrs


def _launch_values(plan: KernelPlan, problem: Any) -> tuple[list[str], list[object]]:
    from .triton_backend import launch_inputs

    y = torch.empty(problem.m, problem.n, dtype=problem.out_dtype, device=problem.device)
    workspaces = [torch.empty(problem.m, -(-problem.n // seg), dtype=torch.float32, device=problem.device)
                  for (_, _, seg) in plan.reductions]
    inputs = launch_inputs(problem, plan, y if problem.store_output else None, workspaces)
    params = kernel_params(plan)
    return [p.name for p in params], [p.get(inputs) for p in params]


@contextlib.contextmanager
def _compile_scope(cache_dir: str | None) -> Iterator[io.StringIO]:
    """Triton knobs for one compile: a fresh cache (honest compile times, and ptxas runs so
    its log is printed; removed afterwards unless ``cache_dir`` was given), ptxas's ``-v`` log
    printed to a captured stdout."""
    from triton import knobs

    log = io.StringIO()
    scratch = None if cache_dir else tempfile.mkdtemp(prefix="devcaps_triton_cache_")
    try:
        with knobs.cache.scope(), knobs.nvidia.scope(), contextlib.redirect_stdout(log), warnings.catch_warnings():
            # Triton 3.9's notice that its FP-fusion default changes in 3.10: the kernel compiles
            # with the default a launch gets, so the notice says nothing about this compile.
            warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
            knobs.cache.dir = cache_dir or scratch
            knobs.nvidia.dump_ptxas_log = True
            yield log
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def compile_kernel(plan: KernelPlan, problem: Any, target: GpuTarget, config: TileConfig,
                   cache_dir: str | None = None) -> tuple[Any, str]:
    """The compiled kernel (Triton's ``CompiledKernel``) and ptxas's log ("" on AMD)."""
    import triton
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    from .triton_backend import kernel_module

    fn = kernel_module(plan).fused_scaled_mm
    gpu_target = target.triton_target()
    names, values = _launch_values(plan, problem)
    signature, constexprs, attrs = specialize(fn, names, values, make_backend(gpu_target))
    blocks = dict(zip(CONSTEXPRS, (config.block_m, config.block_n, config.block_k, config.group_m)))
    signature.update({name: "constexpr" for name in blocks})
    constexprs.update(blocks)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages, **dict(config.options)}
    with _compile_scope(cache_dir) as log:
        kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                                target=gpu_target, options=options)
    return kernel, log.getvalue()


# -- reading the machine code back ----------------------------------------------------------------

def _int(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def _nvidia_resources(kernel: Any, ptxas_log: str) -> tuple[int | None, int | None, list[str]]:
    """(registers, spill store bytes, notes) from ptxas's log, else from cuobjdump."""
    registers = _int(r"Used (\d+) registers", ptxas_log)
    spills = _int(r"(\d+) bytes spill stores", ptxas_log)
    if registers is not None and spills is not None:
        return registers, spills, []
    usage = _cuobjdump_usage(kernel.asm["cubin"])
    if usage is None:
        return registers, spills, ["no ptxas log and no cuobjdump: spills not measured"]
    stack, local = usage.get("STACK", 0), usage.get("LOCAL", 0)
    return usage.get("REG"), stack + local, ["spills from cuobjdump (STACK + LOCAL bytes)"]


def _cuobjdump_usage(cubin: bytes) -> dict[str, int] | None:
    """``cuobjdump --dump-resource-usage`` of a cubin (Triton's wheel ships cuobjdump)."""
    from triton import knobs

    try:
        tool = knobs.nvidia.cuobjdump.path
    except Exception:  # noqa: BLE001 - another Triton: no tool to ask
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        try:
            out = subprocess.run([tool, "--dump-resource-usage", handle.name], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    return {key: int(value) for key, value in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out)}


def _amd_resources(amdgcn: str) -> tuple[int | None, int | None, int | None]:
    """(VGPRs, spilled VGPRs, spilled SGPRs) from the code object's metadata."""
    return (_int(r"\.vgpr_count:\s*(\d+)", amdgcn), _int(r"\.vgpr_spill_count:\s*(\d+)", amdgcn),
            _int(r"\.sgpr_spill_count:\s*(\d+)", amdgcn))


def _instruction(plan: KernelPlan, target: GpuTarget, assembly: str) -> tuple[str, list[str]]:
    """(the matrix instruction used, failures of the instruction check)."""
    fp8_operands = plan.a_dtype in FP8_DTYPES
    if fp8_operands and target.fp8_mma:
        found = target.find_fp8_mma(assembly)
        failures = [] if plan.native_fp8 and found else [
            f"fp8 dot is not the native fp8 MMA ({target.fp8_mma!r} not found; plan native_fp8="
            f"{plan.native_fp8}, 16-bit MMA {target.find_16bit_mma(assembly)!r})"]
        return found or target.find_16bit_mma(assembly), failures
    if fp8_operands:  # no fp8 MMA on this target: decoded to bf16, a bf16 MMA
        found = target.find_16bit_mma(assembly)
        ok = not plan.native_fp8 and bool(found)
        return found, [] if ok else [f"fp8 on {target.name} should take the decoded bf16 family, "
                                     f"found {found!r} (native_fp8={plan.native_fp8})"]
    if plan.a_dtype == torch.float32:
        reduced = re.search(r"(?:mma[\w.:]*tf32|v_mfma\w*xf32)\w*", assembly)
        return (reduced.group(0) if reduced else "fma (no reduced-precision MMA)",
                [f"fp32 dot uses a reduced-precision MMA: {reduced.group(0)}"] if reduced else [])
    found = target.find_16bit_mma(assembly)
    return found, [] if found else ["16-bit dot uses no bf16 / fp16 MMA"]


def check_kernel(result: CompileResult, plan: KernelPlan, target: GpuTarget, config: TileConfig,
                 kernel: Any, ptxas_log: str) -> None:
    """Fill ``result`` from the compiled kernel and run every check but "it compiles"."""
    assembly = kernel.asm.get("ptx") or kernel.asm.get("amdgcn") or ""
    result.instruction, failures = _instruction(plan, target, assembly)
    result.shared_bytes = int(kernel.metadata.shared)
    if target.backend == "cuda":
        result.registers, result.spills, notes = _nvidia_resources(kernel, ptxas_log)
        result.notes += notes
    else:
        result.registers, result.spills, result.sgpr_spills = _amd_resources(assembly)
    if result.shared_bytes > target.shared_limit:
        failures.append(f"shared memory {result.shared_bytes} B > {target.name}'s limit {target.shared_limit} B")
    if result.shared_estimate is not None and result.shared_bytes > result.shared_estimate:
        failures.append(f"shared memory {result.shared_bytes} B > the config model's estimate "
                        f"{result.shared_estimate} B (triton_configs.shared_bytes_estimate)")
    if result.spills is None:
        failures.append("register spills not measured")
    elif result.spills:
        failures.append(f"register spills: {result.spills} {'bytes stored' if target.backend == 'cuda' else 'VGPRs'}"
                        f" ({result.registers} registers)")
    result.error = "; ".join(failures)


def compile_plan(spec: Any, target: GpuTarget, config: TileConfig | None = None,
                 cache_dir: str | None = None) -> CompileResult:
    """Compile ``spec`` for ``target`` with ``config`` (default: the first of the target's
    autotune list) and check it; never raises for a kernel that fails (``error`` says why)."""
    problem = spec.problem(target)
    kernel_target = target_for(target.triton_target())
    plan = plan_for(problem, kernel_target)
    config = config or plan.configs[0]
    plan = plan_for(problem, kernel_target, configs=(config,))
    kind = family(problem.a.dtype, plan.native_fp8)
    result = CompileResult(target=target.name, plan=spec.name, config=config_name(config),
                           shared_limit=target.shared_limit, family=kind,
                           fp8_native=plan.native_fp8 if problem.a.dtype in FP8_DTYPES else None,
                           shared_estimate=shared_bytes_estimate(config, *family_element_bytes(kind),
                                                                 target.vendor, target.arch))
    start = time.perf_counter()
    try:
        kernel, log = compile_kernel(plan, problem, target, config, cache_dir)
    except Exception as exc:  # noqa: BLE001 - a failed compile is a result, not a crash
        result.seconds = time.perf_counter() - start
        result.error = f"did not compile: {type(exc).__name__}: {_first_line(exc)}"
        return result
    result.seconds = time.perf_counter() - start
    result.compiled = True
    check_kernel(result, plan, target, config, kernel, log)
    return result


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""

