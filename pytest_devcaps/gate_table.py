"""PyTorch's test-suite gates: one table, gate name -> what it means, with its torch lines.

Unconverted suites gate their tests with the decorators and flags of ``torch.testing._internal``
(``@onlyCUDA``, ``@skip_if_lt_x_gpu(2)``, ``skipIf(not TEST_MULTIGPU)``, ``hw_classification =
HardwareClassification.CUDA``). This table says what each one means as facts: the hardware class
it gives a test, the device types it names, the devices it needs, the capability and vendor it
stands for. The runtime gate reader (:mod:`pytest_devcaps.marks.pytorch_gates`) reads it, and so
may the lint (it sits below ``lint/``: standard library only, no torch import).

A gate is recognised by its name (and what it means) on every supported torch, never by line.
Each row cites the definition line in every torch release it was checked against (``lines``:
release -> line); a release a row does not name lacks the gate (``HardwareClassification`` is
new in 2.14). ``tests/plugin/test_pytorch_gates.py`` checks each citation of the installed torch
against its source, and that a gate with no line for the installed release is not there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Mapping

#: torch releases every citation was checked against (the table names a line for each of them
#: where the gate exists there).
CITED_TORCH = ("2.13.0", "2.14.1")

TESTING = "torch/testing/_internal"
CDT = f"{TESTING}/common_device_type.py"
CDIST = f"{TESTING}/common_distributed.py"
CUTILS = f"{TESTING}/common_utils.py"
CCUDA = f"{TESTING}/common_cuda.py"
INDUCTOR = f"{TESTING}/inductor_utils.py"
TRITON = f"{TESTING}/triton_utils.py"

#: How a suite writes the gate: a decorator (``@onlyCUDA``, ``@requires_nccl()``), a flag in a
#: skip condition (``skipIf(not TEST_CUDA)``, also a call: ``torch.cuda.is_available()``), or a
#: class attribute's value (``hw_classification = HardwareClassification.CUDA``).
Form = Literal["decorator", "flag", "class_attribute"]

#: The class of a test that runs on any device (and of one a gate only skips somewhere).
GENERIC = "generic"
#: The class of a test that runs on any accelerator but not on the CPU.
ACCELERATOR = "accelerator"


@dataclass(frozen=True)
class Citation:
    """The line that defines a gate in one torch release."""

    torch: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} (torch {self.torch})"


@dataclass(frozen=True)
class PyTorchGate:
    """What one gate means where it holds (for a flag: where it is true).

    ``hardware``: the class it gives the test: ``generic``, ``accelerator``, a device type or a
    vendor; None where it narrows nothing itself (``dtypes``) or its arguments decide
    (``onlyOn(types)``). ``device_types``: the torch device types it names (empty: any
    accelerator, or none named). ``devices``: how many it needs (0: one, or none said);
    ``count_argument`` names the argument that says it instead (``skip_if_lt_x_gpu(x)``).
    ``capability``: the devcaps capability it stands for. ``vendor``: the vendor it singles
    out. ``skips``: the test is skipped where the meaning holds and runs everywhere else
    (``skipIfRocm``), so its class is ``generic``. ``spellings``: other names suites write
    for the same gate (``torch.cuda.is_available`` for ``TEST_CUDA``)."""

    name: str
    form: Form
    meaning: str
    path: str
    lines: Mapping[str, int]
    hardware: str | None
    device_types: tuple[str, ...] = ()
    devices: int = 0
    count_argument: str | None = None
    capability: str | None = None
    vendor: str | None = None
    skips: bool = False
    spellings: tuple[str, ...] = field(default=())

    @property
    def citations(self) -> tuple[Citation, ...]:
        """One citation per torch release the gate was checked in, oldest first."""
        return tuple(Citation(release, self.path, line) for release, line in self.lines.items())

    def citation(self, torch_version: str | None) -> Citation | None:
        """The line of torch ``torch_version`` (``2.14.1+cu130`` reads as ``2.14.1``); None
        where the table cites no line for it (another release, or the gate is not in it)."""
        release = release_of(torch_version)
        line = self.lines.get(release) if release is not None else None
        return None if line is None else Citation(release or "", self.path, line)

    def source(self, torch_version: str | None) -> str:
        """Where the gate is defined, for reports: the installed torch's line where cited,
        else the file and the releases whose lines the table cites."""
        cited = self.citation(torch_version)
        if cited is not None:
            return str(cited)
        releases = ", ".join(f"{release}:{line}" for release, line in self.lines.items())
        shown = release_of(torch_version) or "unknown"
        return f"{self.path} (torch {shown}: read by name; cited lines {releases})"


def release_of(torch_version: str | None) -> str | None:
    """``2.14.1`` from ``2.14.1+cu130`` (the local build label dropped)."""
    return None if not torch_version else torch_version.split("+", 1)[0]


def _lines(v213: int | None, v214: int) -> Mapping[str, int]:
    found = {"2.13.0": v213, "2.14.1": v214}
    return MappingProxyType({release: line for release, line in found.items() if line is not None})


def _row(name: str, form: Form, path: str, lines: tuple[int | None, int], hardware: str | None,
         meaning: str, **facts: object) -> PyTorchGate:
    return PyTorchGate(name, form, meaning, path, _lines(*lines), hardware, **facts)  # type: ignore[arg-type]


_DIST_TYPES = ("cuda", "hpu", "xpu")  # what common_distributed's "GPU" gates accept
_NATIVE = ("cpu", "cuda", "meta", "privateuse1")  # common_device_type NATIVE_DEVICES
_ROCM = {"vendor": "amd", "skips": True}

_ROWS: tuple[PyTorchGate, ...] = (
    # --- common_device_type: decorators of instantiated device-type tests ----------------------
    _row("onlyOn", "decorator", CDT, (1642, 1780), None,
         "runs only on the named device type(s): one type is that class, several accelerator "
         "(generic when cpu is one of them)"),
    *(_row(f"only{suffix}", "decorator", CDT, lines, kind, f"onlyOn({kind!r}): class {kind}",
           device_types=(kind,))
      for suffix, kind, lines in (("CPU", "cpu", (1870, 2008)), ("CUDA", "cuda", (1874, 2012)),
                                  ("MPS", "mps", (1878, 2016)), ("XPU", "xpu", (1882, 2020)),
                                  ("HPU", "hpu", (1886, 2024)))),
    _row("onlyPRIVATEUSE1", "decorator", CDT, (1890, 2028), "privateuse1",
         "onlyOn(<the renamed PrivateUse1 backend>): class privateuse1", device_types=("privateuse1",)),
    _row("onlyAccelerator", "decorator", CDT, (1899, 2037), ACCELERATOR,
         "skips on cpu and meta: class accelerator"),
    _row("onlyCUDAAndPRIVATEUSE1", "decorator", CDT, (1912, 2050), ACCELERATOR,
         "cuda or the PrivateUse1 backend only: class accelerator", device_types=("cuda", "privateuse1")),
    _row("onlyNativeDeviceTypes", "decorator", CDT, (1697, 1835), GENERIC,
         "cpu, cuda, meta, privateuse1: runs on the CPU, generic", device_types=_NATIVE),
    _row("onlyNativeDeviceTypesAnd", "decorator", CDT, (1710, 1848), GENERIC,
         "the native types and the named ones: generic", device_types=_NATIVE),
    _row("skipIf", "decorator", CDT, (1426, 1514), GENERIC,
         "the base of skipCPUIf/skipCUDAIf/...: a condition on one type narrows nothing, generic; "
         "a literal True excludes the type (skipCPUIf(True, ...): accelerator)", skips=True),
    *(_row(f"skip{suffix}If", "decorator", CDT, lines, GENERIC,
           f"skipIf on {kind} tests only: generic (True: every type but {kind})",
           device_types=(kind,), skips=True)
      for suffix, kind, lines in (("CPU", "cpu", (1454, 1542)), ("CUDA", "cuda", (1460, 1548)),
                                  ("XPU", "xpu", (1466, 1554)), ("MPS", "mps", (1490, 1578)),
                                  ("HPU", "hpu", (1495, 1583)),
                                  ("PRIVATEUSE1", "privateuse1", (1506, 1594)))),
    _row("skipGPUIf", "decorator", CDT, (1472, 1560), GENERIC,
         "skipIf on the GPU types (cuda, xpu...): generic", skips=True),
    _row("skipCUDAIfRocm", "decorator", CDT, (2082, 2224), GENERIC,
         "skipCUDAIf(TEST_WITH_ROCM): skips on ROCm, generic", device_types=("cuda",), **_ROCM),
    *(_row(name, "decorator", CDT, lines, GENERIC,
           f"{what} on cuda tests only: skips there, runs elsewhere (generic)",
           device_types=("cuda",), skips=True)
      for name, what, lines in (
          ("skipCUDAIfNoCudnn", "cuDNN", (2235, 2377)),
          ("skipCUDAIfCudnnVersionLessThan", "a cuDNN version", (2196, 2338)),
          ("skipCUDAIfNoMagma", "MAGMA", (2033, 2175)),
          ("skipCUDAIfNoMagmaAndNoCusolver", "MAGMA or cuSOLVER", (2064, 2206)),
          ("skipCUDAIfNoCusolver", "cuSOLVER", (2057, 2199)),
          ("skipCUDAVersionIn", "a CUDA version", (2160, 2302)))),
    _row("dtypes", "decorator", CDT, (1809, 1947), None,
         "dtypes(device_type=...): the dtypes of one type; no device gate"),
    _row("dtypesIfCUDA", "decorator", CDT, (1844, 1982), None,
         "dtypes(device_type='cuda'): other dtypes on cuda; no device gate", device_types=("cuda",)),
    _row("deviceCountAtLeast", "decorator", CDT, (1670, 1808), ACCELERATOR,
         "n devices of the test's type (n >= 2: accelerator; 1: generic)",
         count_argument="num_required_devices"),
    _row("largeTensorTest", "decorator", CDT, (1567, 1681), GENERIC,
         "memory on the test's device: generic (PyTorch skips at run time)"),
    # --- common_distributed: multi-process tests ----------------------------------------------
    _row("skip_if_lt_x_gpu", "decorator", CDIST, (310, 310), ACCELERATOR,
         "x accelerators (cuda, hpu or xpu): accelerator, x devices; allow_cpu=True: generic",
         device_types=_DIST_TYPES, count_argument="x"),
    _row("nccl_skip_if_lt_x_gpu", "decorator", CDIST, (380, 380), "cuda",
         "with backend 'nccl': x cuda devices, class cuda", device_types=("cuda",),
         count_argument="x", capability="dist.nccl"),
    _row("require_n_gpus_for_nccl_backend", "decorator", CDIST, (262, 262), "cuda",
         "with backend 'nccl': n cuda devices, class cuda", device_types=("cuda",),
         count_argument="n", capability="dist.nccl"),
    _row("skip_if_no_gpu", "decorator", CDIST, (213, 213), ACCELERATOR,
         "a cuda, hpu or xpu device per rank: accelerator", device_types=_DIST_TYPES),
    _row("requires_world_size", "decorator", CDIST, (338, 338), "cuda",
         "n cuda devices (the harness spawns n ranks): class cuda", device_types=("cuda",),
         count_argument="n"),
    _row("requires_nccl", "decorator", CDIST, (519, 519), "cuda",
         "c10d built with NCCL: class cuda (a CUDA build with no GPU runs the test)",
         device_types=("cuda",), capability="dist.nccl"),
    _row("requires_nccl_version", "decorator", CDIST, (498, 498), "cuda",
         "an NCCL version on CUDA (no gate without CUDA): class cuda", device_types=("cuda",),
         capability="dist.nccl"),
    _row("requires_accelerator_dist_backend", "decorator", CDIST, (540, 547), ACCELERATOR,
         "nccl, xccl or hccl: accelerator", device_types=_DIST_TYPES),
    _row("skip_if_rocm_multiprocess", "decorator", CDIST, (599, 606), GENERIC,
         "skipIf(TEST_WITH_ROCM) for multi-process tests: generic", device_types=("cuda",), **_ROCM),
    _row("skip_if_rocm_arch_multiprocess", "decorator", CDIST, (604, 611), GENERIC,
         "skips on the named ROCm archs: generic", device_types=("cuda",), **_ROCM),
    # --- common_utils --------------------------------------------------------------------------
    _row("skipIfRocm", "decorator", CUTILS, (2205, 2417), GENERIC, "skips on ROCm only: generic", **_ROCM),
    _row("skipIfRocmArch", "decorator", CUTILS, (2234, 2446), GENERIC,
         "skips on the named ROCm archs only: generic", **_ROCM),
    _row("skipIfRocmVersionLessThan", "decorator", CUTILS, (2348, 2560), GENERIC,
         "skips on ROCm below a version only: generic", **_ROCM),
    _row("skipIfNoXPU", "decorator", CUTILS, (2627, 2857), "xpu", "torch built with XPU: class xpu",
         device_types=("xpu",)),
    _row("requires_cuda", "decorator", CUTILS, (1739, 1943), "cuda",
         "unittest.skipUnless(torch.cuda.is_available()): class cuda", device_types=("cuda",)),
    _row("requires_cuda_p2p_access", "decorator", CUTILS, (2376, 2606), "cuda",
         "two cuda devices of sm_80+ with peer access: class cuda, 2 devices",
         device_types=("cuda",), devices=2),
    _row("TEST_CUDA", "flag", CUTILS, (1537, 1739), "cuda",
         "skipIf(not TEST_CUDA) / skipUnless(TEST_CUDA): class cuda", device_types=("cuda",),
         spellings=("HAS_CUDA", "torch.cuda.is_available")),
    _row("TEST_XPU", "flag", CUTILS, (1535, 1737), "xpu", "skipIf(not TEST_XPU): class xpu",
         device_types=("xpu",), spellings=("HAS_XPU", "torch.xpu.is_available")),
    _row("TEST_MPS", "flag", CUTILS, (1533, 1735), "mps", "skipIf(not TEST_MPS): class mps",
         device_types=("mps",), spellings=("torch.backends.mps.is_available",)),
    _row("TEST_HPU", "flag", CUTILS, (1536, 1738), "hpu", "skipIf(not TEST_HPU): class hpu",
         device_types=("hpu",)),
    _row("TEST_PRIVATEUSE1", "flag", CUTILS, (1542, 1744), "privateuse1",
         "the renamed PrivateUse1 backend is available: class privateuse1",
         device_types=("privateuse1",)),
    _row("TEST_ACCELERATOR", "flag", CUTILS, (1538, 1740), ACCELERATOR,
         "torch.accelerator.is_available(): class accelerator",
         spellings=("torch.accelerator.is_available",)),
    _row("TEST_MULTIACCELERATOR", "flag", CUTILS, (1539, 1741), ACCELERATOR,
         "torch.accelerator.device_count() > 1: accelerator, 2 devices", devices=2),
    _row("TEST_CUDA_GRAPH", "flag", CUTILS, (1689, 1893), "cuda",
         "CUDA graphs usable: class cuda", device_types=("cuda",), capability="runtime.graphs"),
    _row("TEST_WITH_ROCM", "flag", CUTILS, (1645, 1849), "amd",
         "a ROCm build (true on AMD): class amd where it must hold; skipIf(TEST_WITH_ROCM) "
         "narrows nothing", device_types=("cuda",), vendor="amd"),
    _row("IS_JETSON", "flag", CUTILS, (373, 481), "nvidia",
         "an NVIDIA Jetson host: class nvidia where it must hold", device_types=("cuda",),
         vendor="nvidia"),
    *(_row(f"HardwareClassification.{member}", "class_attribute", CUTILS, (None, line), kind,
           f"hw_classification = HardwareClassification.{member}: class {kind} (torch 2.14+)",
           device_types=(kind,) if kind not in (GENERIC, ACCELERATOR) else ())
      for member, kind, line in (("GENERIC", GENERIC, 156), ("ACCELERATOR", ACCELERATOR, 157),
                                 ("CPU", "cpu", 158), ("CUDA", "cuda", 159), ("MPS", "mps", 160),
                                 ("XPU", "xpu", 161))),
    # --- common_cuda ---------------------------------------------------------------------------
    _row("TEST_MULTIGPU", "flag", CCUDA, (18, 20), "cuda", "two cuda devices: class cuda, 2 devices",
         device_types=("cuda",), devices=2),
    _row("TEST_CUDNN", "flag", CCUDA, (22, 24), "cuda", "cuDNN (CUDA's library): class cuda",
         device_types=("cuda",)),
    _row("IS_THOR", "flag", CCUDA, (39, 78), "nvidia", "an NVIDIA Thor (sm_110 / sm_101): class nvidia",
         device_types=("cuda",), vendor="nvidia"),
    # --- inductor_utils / triton_utils ---------------------------------------------------------
    _row("HAS_GPU", "flag", INDUCTOR, (91, 82), ACCELERATOR, "cuda or xpu (2.14: or mtia) with Triton: "
         "accelerator", device_types=("cuda", "xpu"), capability="compile.triton",
         spellings=("HAS_GPU_AND_TRITON", "TEST_GPU")),
    _row("HAS_CUDA_AND_TRITON", "flag", INDUCTOR, (85, 74), "cuda", "cuda with Triton: class cuda",
         device_types=("cuda",), capability="compile.triton"),
    _row("HAS_XPU_AND_TRITON", "flag", INDUCTOR, (87, 78), "xpu", "xpu with Triton: class xpu",
         device_types=("xpu",), capability="compile.triton"),
    _row("HAS_MPS", "flag", INDUCTOR, (89, 80), "mps", "torch.mps.is_available(): class mps",
         device_types=("mps",)),
    _row("HAS_MULTIGPU", "flag", INDUCTOR, (96, 87), ACCELERATOR,
         "two devices of one GPU type (cuda, xpu...): accelerator, 2 devices",
         device_types=("cuda", "xpu"), devices=2),
    _row("requires_gpu", "decorator", TRITON, (22, 24), ACCELERATOR, "skipUnless(HAS_GPU): accelerator",
         device_types=("cuda", "xpu"), capability="compile.triton"),
    _row("requires_cuda_and_triton", "decorator", TRITON, (13, 14), "cuda",
         "skipUnless(HAS_CUDA_AND_TRITON): class cuda", device_types=("cuda",), capability="compile.triton"),
    _row("requires_xpu_and_triton", "decorator", TRITON, (16, 17), "xpu",
         "skipUnless(HAS_XPU_AND_TRITON): class xpu", device_types=("xpu",), capability="compile.triton"),
    _row("requires_gpu_and_triton", "decorator", TRITON, (19, 20), ACCELERATOR,
         "skipUnless(cuda, xpu (2.14: or mtia) with Triton): accelerator", device_types=("cuda", "xpu"),
         capability="compile.triton"),
)

#: Every gate by name.
GATES: Mapping[str, PyTorchGate] = MappingProxyType({row.name: row for row in _ROWS})

#: Every name a suite may write for a gate (its own and its spellings) -> the gate.
BY_SPELLING: Mapping[str, PyTorchGate] = MappingProxyType(
    {spelling: row for row in _ROWS for spelling in (row.name, *row.spellings)})


def gates(form: Form) -> tuple[PyTorchGate, ...]:
    """The gates written in one form, in table order."""
    return tuple(row for row in _ROWS if row.form == form)
