"""The rule table: every pattern ``devcaps lint`` knows -> rule code, message, what to use instead,
the capability a gate protects and the replacement ``--fix`` writes, with the few functions that
build a gate's need from the table (``sm_gate``, ``platform_gate``, the gate table's flags); the
finder (``lint.finder``, ``lint.gating``) looks patterns up here and the codemod writes what this
table says.

Capability names appear in this module only (``tests/lint/test_lint_rules.py`` checks that each one
exists in the shipped catalogue), so renaming a capability is a one-line change here.

Where a gate's meaning comes from: an NVIDIA SM-level gate (``SM*OrLater``,
``is_sm_at_least_*()``, ``get_device_capability() >= (major, minor)``) is read from the
catalogue's nvidia rules (:mod:`pytest_devcaps.lint.smlevels`: which capabilities the rules tie
to the level, which of them the test's code names, and ``native``); this table keeps only what
the rules cannot say: which names in a test's code stand for which capability (``SM_USES``,
``PLATFORM_SUPPORTS``: ``PLATFORM_SUPPORTS_FLASH_ATTENTION`` is ``attention.flash`` by name,
the hardware behind it is the rules' business), rule codes and messages. The names are
PyTorch's ``torch/testing/_internal/common_cuda.py`` (``SM*OrLater``, ``IS_SM*``,
``PLATFORM_SUPPORTS_*``), ``common_distributed.py`` (``skip_if_lt_x_gpu``, ``requires_nccl``),
``inductor_utils.py`` (``HAS_GPU``, ``GPU_TYPE``, ``requires_gpu``), ``common_device_type.py``
(``onlyCUDA``, ``skipCUDAIf``, ``dtypesIfCUDA``, ``largeTensorTest``); torchao's
``torchao/utils.py`` (``is_sm_at_least_89/90/100``, ``is_MI300``, ``is_ROCM``); transformers'
``testing_utils.py`` and accelerate's ``test_utils/testing.py`` (``require_torch_gpu``,
``require_torch_multi_gpu``, ``require_cuda``, ``require_multi_gpu``, ``require_fp8``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_devcaps import gate_table
from pytest_devcaps.lint import smlevels
from pytest_devcaps.lint.records import Hardware, Need

if TYPE_CHECKING:
    from pytest_devcaps.config.catalogue import Catalogue

# ------------------------------------------------------------------------------------------
# Rule codes

@dataclass(frozen=True)
class Rule:
    code: str
    title: str
    # True when code the rule finds fails (or lies) on a machine without CUDA: while such a
    # finding is left unfixed in a file, its "needs CUDA" gates are kept as they are.
    blocks_cpu: bool


RULES: dict[str, Rule] = {r.code: r for r in (
    Rule("DC000", "file cannot be checked (unreadable, not UTF-8, not Python, bad pragma)", False),
    Rule("DC001", "CUDA availability check", False),
    Rule("DC002", "move to CUDA (.cuda(), .to('cuda'))", True),
    Rule("DC003", "CUDA device literal or constant", True),
    Rule("DC004", "CUDA runtime call", True),
    Rule("DC005", "GPU-count gate", False),
    Rule("DC006", "GPU architecture gate", False),
    Rule("DC007", "vendor check (ROCm/HIP or CUDA build)", False),
    Rule("DC008", "NCCL distributed backend", True),
    Rule("DC009", "CUDA autocast / grad scaling", False),
    Rule("DC010", "CUDA/cuDNN backend setting", False),
    Rule("DC011", "CUDA-only test decorator", False),
    Rule("DC012", "pinned memory assumes an accelerator", True),
    # --target torch with HardwareClassification (torch 2.14+): PyTorch's TEST_LINTER form
    Rule("DC013", "test class without a hardware classification", False),
)}

# the start of a pragma; what follows (``[DC002,...]`` or nothing) is read by lint.source.read_pragma
ALLOW_PRAGMA = re.compile(r"#\s*devcaps:\s*allow")

# ------------------------------------------------------------------------------------------
# Device literals

CUDA_LITERAL = re.compile(r"^cuda(?::\d+)?$")
CPU_LITERAL = re.compile(r"^cpu(?::\d+)?$")
# Names that hold a device (``DEVICE``, ``dev``, ``torch_device``, ``GPU_TYPE``): a CUDA literal
# assigned to one, or compared with one, is a device; elsewhere "cuda" may be data.
DEVICE_NAME = re.compile(r"dev|gpu|accel", re.IGNORECASE)
# Keyword arguments that take a device or a device type.
DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_map"})
DEVICE_TYPE_KEYWORDS = frozenset({"device_type"})
# instantiate_device_type_tests(..., only_for="cuda"): device-type selection.
DEVICE_SELECTION_KEYWORDS = frozenset({"only_for", "except_for", "allowed_devices"})
# Calls whose first positional argument is a device (``x.to("cuda")``, ``torch.device("cuda")``)
# or a device type (``torch.autocast("cuda")``), by the last part of the called name.
DEVICE_FIRST_ARG = frozenset({"to", "device", "get_device_module", "Generator", "pin_memory"})
DEVICE_TYPE_FIRST_ARG = frozenset({"autocast", "GradScaler", "get_autocast_dtype", "is_autocast_enabled",
                                   "set_autocast_enabled", "get_autocast_gpu_dtype"})
# Distributed APIs whose first positional argument is a device type (torch 2.13:
# torch/distributed/device_mesh.py init_device_mesh(device_type, mesh_shape, ...) and
# DeviceMesh(device_type, mesh, ...); distributed_c10d.get_default_backend_for_device(device)).
DEVICE_TYPE_ARG = frozenset({"init_device_mesh", "DeviceMesh", "get_default_backend_for_device"})
# Names imported from PyTorch's test utilities that stand for the GPU device (type).
EXTERNAL_DEVICE_NAMES: dict[str, str] = {"GPU_TYPE": "str", "CUDA_DEVICE": "device"}
# What replaces a device/device type when the test has the ``device`` fixture (a torch.device)
# or a plain ``device`` parameter of unknown type (a string or a torch.device).
TYPED = {"device": "device", "type": "device.type", "str": "str(device)"}
UNTYPED = {"device": "device", "type": "torch.device(device).type", "str": "str(device)"}
# A module-level ``DEVICE = "cuda"`` that is used outside tests becomes "the accelerator, else
# the CPU". Where no fixture or parameter gives a device (a unittest.TestCase,
# MultiProcessTestCase, a helper, module level): one module-level ``device_type``, as PyTorch's
# converted distributed tests write it (e.g. test/distributed/_composable/fsdp/test_fully_shard_*.py).
# ``current_accelerator(check_available=True)`` (torch >= 2.7, torch/accelerator/__init__.py) is
# None where no accelerator is usable: a CUDA build on a machine without a GPU answers "cuda" to
# plain ``current_accelerator()`` (the compiled-in accelerator), which would send every tensor
# to a device that is not there. Written as ruff format lays it out.
DEVICE_TYPE_NAME = "device_type"
DEVICE_TYPE_STATEMENT = ('device_type = (\n    acc.type\n    if (acc := torch.accelerator.current_accelerator(check_available=True))'
                         '\n    else "cpu"\n)')
# In a class instantiate_device_type_tests generates, the class's own device type
# (common_device_type.DeviceTypeTestBase.device_type), and the test's ``device`` argument.
DEVICE_SOURCES: dict[str, dict[str, str]] = {
    "global": {"device": DEVICE_TYPE_NAME, "type": DEVICE_TYPE_NAME, "str": DEVICE_TYPE_NAME},
    "self": {"device": "self.device_type", "type": "self.device_type", "str": "self.device_type"},
    "self_device": {"device": "device", "type": "self.device_type", "str": "device"},
}
ACCELERATOR_DEVICE = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
ACCELERATOR_TYPE = '(torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type'
ACCELERATOR_AVAILABLE = "torch.accelerator.is_available()"
# The device fixture under a name no project takes (pytest_devcaps.session.fixtures): where a
# test binds a ``device`` of its own, the fixture it is given goes by this name.
FREE_DEVICE_FIXTURE = "devcaps_device"

# ------------------------------------------------------------------------------------------
# Gates: flags, calls and comparisons that decide whether a test runs


@dataclass(frozen=True)
class ByUse:
    """A need chosen by what the gated test uses (identifiers, attribute names, short strings);
    ``group`` and ``rank`` matter in a ``union`` gate only."""

    names: frozenset[str]
    need: Need
    group: int = 0
    rank: int = 0


@dataclass(frozen=True)
class Gate:
    """What a gate means when it holds. ``by_use`` picks the capability from the test's code:
    the first match; when ``union``, the first match of each ``group``, of those the ones of
    the highest ``rank``, all of them (a top rank below ``floor`` gives way to ``need``).
    ``need`` is used when nothing matches."""

    code: str
    label: str
    need: Need
    use: str
    by_use: tuple[ByUse, ...] = ()
    union: bool = False
    hardware: Hardware | None = "accelerator"
    floor: int = 0
    # Where the gate holds, as a condition over device facts (the language of skip_on and override
    # files), when that is exactly what the gate checks of a device; None where it is not (a CUDA
    # build's get_device_capability() also answers on ROCm, which has no compute_capability fact).
    fact: str | None = None

    def resolve(self, used: frozenset[str]) -> Need:
        matched = [b for b in self.by_use if b.names & used]
        if not matched:
            return self.need
        if not self.union:
            return matched[0].need
        firsts: dict[int, ByUse] = {}
        for entry in matched:
            firsts.setdefault(entry.group, entry)
        top = max(entry.rank for entry in firsts.values())
        if top < self.floor:
            return self.need
        chosen = [entry.need for entry in firsts.values() if entry.rank == top]
        result = chosen[0]
        for need in chosen[1:]:
            result = result & need
        return result


def _caps(*names: str) -> Need:
    return Need(capabilities=names)


def _any(*names: str) -> Need:
    return Need(any_of=(names,))


def _blocked(why: str, hardware: Hardware | None) -> Need:
    return Need(blockers=(why,), hardware=hardware)


ACCELERATOR = Need(accelerator=True)
# "CUDA is available": widened to "an accelerator" where nothing else in the region is CUDA's;
# next to another vendor's check (TEST_CUDA or TEST_XPU) it is that set of device types, kept.
CUDA_NEED = Need(accelerator=True, vendors=("cuda",))
# PyTorch's common_utils flags for other device types (torch 2.13 common_utils.py: TEST_XPU,
# TEST_MPS, TEST_HPU, TEST_PRIVATEUSE1): not findings; they name a device type in a condition.
OTHER_VENDOR_FLAGS: dict[str, str] = {
    **{spelling: row.device_types[0] for row in gate_table.gates("flag")
       if len(row.device_types) == 1 and row.device_types[0] != "cuda" and row.vendor is None
       for spelling in (row.name, *row.spellings) if "." not in spelling},
    "TEST_MTIA": "mtia", "TEST_NPU": "npu"}

FP8_NAMES = frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "fp8",
                       "float8", "Float8Linear", "Float8Tensor", "Float8LinearConfig", "e4m3_type",
                       "float8_dtype", "convert_to_float8_training", "Float8WeightOnlyConfig"})
FNUZ_NAMES = frozenset({"float8_e4m3fnuz", "float8_e5m2fnuz"})
SCALED_MM_NAMES = frozenset({"_scaled_mm", "scaled_mm", "Float8Linear", "convert_to_float8_training",
                             "Float8LinearConfig", "addmm_float8_unwrapped",
                             "Float8DynamicActivationFloat8WeightConfig",
                             "float8_dynamic_activation_float8_weight"})
ROWWISE_NAMES = frozenset({"PerRow", "rowwise", "ROWWISE", "AXISWISE", "rowwise_with_gw_hp",
                           "_scaled_mm_rowwise"})
# fp8 gates: rowwise scaling > tensorwise scaled matmul > the fp8 dtype (either fp8 flavour when
# the test also names the fnuz dtypes AMD MI300 uses).
FP8_BY_USE = (
    ByUse(ROWWISE_NAMES, _caps("mm.scaled_rowwise")),
    ByUse(SCALED_MM_NAMES, _caps("mm.scaled")),
    ByUse(FNUZ_NAMES, _any("dtype.fp8_e4m3fn", "dtype.fp8_e4m3fnuz")),
    ByUse(FP8_NAMES, _caps("dtype.fp8_e4m3fn")),
)
FP8_USE = "requires_capability('dtype.fp8_e4m3fn'), or 'mm.scaled' / 'mm.scaled_rowwise' for scaled matmuls"
MX_NAMES = frozenset({"to_mx", "MXTensor", "MXLinear", "mx_mm", "nvfp4", "NVFP4Tensor", "mxfp8", "mxfp4",
                      "float4_e2m1fn_x2", "float8_e8m0fnu", "e8m0", "MXLinearConfig", "ScaledMMConfig"})
GROUPED_NAMES = frozenset({"_grouped_mm", "grouped_mm", "_scaled_grouped_mm", "grouped_gemm"})
# What names in a gated test's code stand for, one table per feature (in a table the first match
# counts): lint knowledge about names. Which tables an SM-level gate may use, and which match
# wins, is the catalogue's nvidia rules' (smlevels): an entry counts at a level only when the
# rules make all its capabilities depend on the SM level there.
SM_USES: tuple[tuple[ByUse, ...], ...] = (
    (ByUse(GROUPED_NAMES & frozenset({"_scaled_grouped_mm"}), _caps("mm.grouped", "mm.scaled")),
     ByUse(MX_NAMES, _caps("mm.scaled_mx")),
     ByUse(GROUPED_NAMES, _caps("mm.grouped"))),
    FP8_BY_USE,
    (ByUse(frozenset({"scaled_dot_product_attention", "sdpa_kernel", "SDPBackend", "FLASH_ATTENTION",
                      "flash_attention"}), _caps("attention.flash")),),
    (ByUse(frozenset({"allow_tf32", "tf32", "fp32_precision", "set_float32_matmul_precision"}),
           _caps("dtype.tf32")),),
    (ByUse(frozenset({"bfloat16", "bf16"}), _caps("dtype.bf16")),),
    (ByUse(frozenset({"triton", "jit"}), _caps("compile.triton")),
     ByUse(frozenset({"compile", "inductor"}), _caps("compile.inductor"))),
)
# What a bare SM-level gate (the test's code names nothing the rules tie to the gate's step) is
# read as: the first of these among the step's candidates. The rules tie 8.9 to fp8 alone and
# 5.3 to fp16 alone; which member of that family a bare gate means is a choice of name.
SM_SILENT_DEFAULTS = ("dtype.fp8_e4m3fn", "dtype.fp16")
# A hardware gate on these asks for the hardware (``native=True``) where some vendor's rules
# answer "emulated" (the fact, from the catalogue: a CPU upcasting fp8 to fp32). That fp8
# emulation does not stand in for the fp8 hardware a test was gated on is a reading of the
# tests, not a rule fact; bf16/fp16 emulation computes the same numbers, so those gates keep
# running on it.
NATIVE_WHEN_GATED = frozenset({"dtype.fp8_e4m3fn", "dtype.fp8_e5m2", "dtype.fp8_e4m3fnuz",
                               "dtype.fp8_e5m2fnuz", "mm.scaled", "mm.scaled_rowwise"})


def sm_gate(level: int, source: Catalogue | None = None) -> Gate:
    """``SM<level>OrLater`` / ``is_sm_at_least_<level>()`` / ``get_device_capability() >= ...``
    (level = 10 * major + minor), read from ``source``'s nvidia rules (the shipped catalogue,
    loaded on the first call, by default): see :mod:`pytest_devcaps.lint.smlevels`."""
    return _sm_gate(level, smlevels.catalogue() if source is None else source)


@functools.lru_cache(maxsize=256)
def _sm_gate(level: int, source: Catalogue) -> Gate:
    """A gate maps to a capability only where the rules' threshold for it is the gate's own
    level (``is_sm_at_least_90()`` is not fp8, whose rule is sm_89: an L4 has fp8 and fails
    the gate); otherwise it stays, naming the nearest threshold below."""
    view = smlevels.sm_level(level, source)
    native = view.native & NATIVE_WHEN_GATED
    label = f"sm_{level}+"
    by_use = tuple(ranked for group, table in enumerate(SM_USES) for entry in table
                   if (ranked := _ranked(entry, group, view, native)) is not None)
    if view.step != level:
        below = (f"the nearest threshold below is sm_{view.step}: {', '.join(view.candidates)}"
                 if view.step is not None else "no capability is gated below it either")
        return Gate("DC006", label, _blocked(
            f"{label}: no capability's rule is sm_{level} ({below}); keep the gate, or name a capability "
            f"whose rule is sm_{level}", "nvidia"),
            "a capability whose rule is the gate's level", by_use, union=True, hardware="nvidia")
    use = "requires_capability(" + " | ".join(f"'{c}'" for c in view.candidates) + ")"
    default = next((c for c in SM_SILENT_DEFAULTS if c in view.candidates), None)
    if default is not None:
        return Gate("DC006", label, native_where_emulable(_caps(default), native), use, by_use, union=True)
    return Gate("DC006", label, _blocked(
        f"{label}: name what the test needs (what the rules tie to sm_{level}: "
        f"{', '.join(view.candidates)}; a feature no capability names keeps the gate)", "nvidia"),
        use, by_use, union=True)


def _ranked(entry: ByUse, group: int, view: smlevels.SmLevel, native: frozenset[str]) -> ByUse | None:
    """``entry`` if the rules make its capabilities depend on the SM level and the highest of
    their thresholds is ``view``'s level (of an ``any_of``, one member is enough)."""
    need = entry.need
    if not all(c in view.gated for c in need.capabilities) or \
            not all(any(c in view.gated for c in options) for options in need.any_of):
        return None
    rank = max(view.gated[c] for c in (*need.capabilities, *(c for o in need.any_of for c in o))
               if c in view.gated)
    if rank != view.level:
        return None
    return ByUse(entry.names, native_where_emulable(need, native), group, rank)


def native_where_emulable(need: Need, emulable: frozenset[str]) -> Need:
    """``need`` with ``native=True`` when one of its capabilities is in ``emulable`` (what some
    vendor emulates, of :data:`NATIVE_WHEN_GATED`): a hardware gate said "the hardware does
    it", which the capability alone does not say."""
    names = {*need.capabilities, *(c for options in need.any_of for c in options)}
    return replace(need, native=True) if names & emulable else need


def exact_arch_gate(label: str, vendor: Hardware) -> Gate:
    """A gate on one GPU model (``IS_SM90``, ``is_MI300()``): no capability says "this model"."""
    return Gate("DC006", label, _blocked(f"{label} pins one GPU model; no capability says that",
                                         vendor),
                "the capability the test needs on that model (requires_capability), or an "
                "override file for the model", hardware=vendor)


# PyTorch's common_cuda.PLATFORM_SUPPORTS_<suffix> flags: the capability each one names (a
# name mapping); ``native`` is added from the rules when read (platform_gate): every flag is a
# hardware check (common_cuda evaluates it from the SM level / gfx arch), so where a vendor can
# emulate the capability, emulation is not what the flag said.
PLATFORM_SUPPORTS: dict[str, Gate] = {
    "FLASH_ATTENTION": Gate("DC006", "flash attention", _caps("attention.flash"),
                            "requires_capability('attention.flash')"),
    "MEM_EFF_ATTENTION": Gate("DC006", "memory-efficient attention", _caps("attention.mem_efficient"),
                              "requires_capability('attention.mem_efficient')"),
    "CUDNN_ATTENTION": Gate("DC006", "cuDNN attention", _caps("attention.cudnn"),
                            "requires_capability('attention.cudnn')"),
    # FLASH or CUDNN or MEM_EFF, as common_cuda defines it
    "FUSED_ATTENTION": Gate("DC006", "fused attention",
                            _any("attention.flash", "attention.mem_efficient", "attention.cudnn"),
                            "requires_capability(any_of=['attention.flash', 'attention.mem_efficient', "
                            "'attention.cudnn'])"),
    "BF16": Gate("DC006", "bf16", _caps("dtype.bf16"), "requires_capability('dtype.bf16')"),
    "FP8": Gate("DC006", "fp8", _caps("dtype.fp8_e4m3fn"), FP8_USE, by_use=FP8_BY_USE),
    "MX_GEMM": Gate("DC006", "MX-format scaled matmul", _caps("mm.scaled_mx"),
                    "requires_capability('mm.scaled_mx')"),
    "FP8_GROUPED_GEMM": Gate("DC006", "fp8 grouped GEMM", _caps("mm.grouped", "mm.scaled"),
                             "requires_capability('mm.grouped', 'mm.scaled')"),
    "MXFP8_GROUPED_GEMM": Gate("DC006", "MXFP8 grouped GEMM", _caps("mm.grouped", "mm.scaled_mx"),
                               "requires_capability('mm.grouped', 'mm.scaled_mx')"),
}


def platform_gate(suffix: str) -> Gate:
    known = PLATFORM_SUPPORTS.get(suffix)
    if known is not None:
        return _platform_gate(known, smlevels.emulable(smlevels.catalogue()) & NATIVE_WHEN_GATED)
    label = f"PLATFORM_SUPPORTS_{suffix}"
    return Gate("DC006", label, _blocked(f"{label}: the catalogue has no capability for it yet",
                                         "cuda"),
                "a capability once the catalogue has one; until then keep the gate", hardware="cuda")


@functools.lru_cache(maxsize=64)
def _platform_gate(gate: Gate, emulable: frozenset[str]) -> Gate:
    return replace(gate, need=native_where_emulable(gate.need, emulable),
                   by_use=tuple(replace(b, need=native_where_emulable(b.need, emulable))
                                for b in gate.by_use))


AVAILABILITY_USE = ("the device fixture (the test runs on every device), torch.accelerator.is_available(), "
                    "or requires_capability for the feature the test needs")


# The device facts of a gate that holds on a device (skip_on's language: pytest_devcaps.config
# .expressions, facts of pytest_devcaps.model.IDENTITY_FACTS and backends/cuda.py): CUDA is
# available on a device of type cuda (NVIDIA and ROCm alike); a ROCm build's device is AMD's, a
# CUDA build's NVIDIA's.
ON_CUDA = "type == 'cuda'"
ON_ROCM = "vendor == 'amd'"
ON_NVIDIA = "vendor == 'nvidia'"


def _availability(label: str, extra: Need = Need()) -> Gate:
    """"CUDA is available" (and ``extra``): its fact where it asks for nothing more."""
    fact = ON_CUDA if extra == Need() else None
    return Gate("DC001", label, CUDA_NEED & extra, AVAILABILITY_USE, fact=fact)


def _devices(label: str, count: int) -> Gate:
    return Gate("DC005", label, Need(accelerator=True, devices=count),
                f"@pytest.mark.requires_devices({count})")


def _rocm(label: str) -> Gate:
    return Gate("DC007", label, _blocked(f"{label} singles out ROCm", "amd"),
                "requires_capability for what differs on ROCm, or an override file for vendor amd",
                hardware=None, fact=ON_ROCM)


# Flags, by name (also as the last part of a dotted name: common_utils.TEST_CUDA).
def _names_cuda(row: gate_table.PyTorchGate) -> bool:
    """The gate table row names the CUDA device type (the lint reads the table's data here; no
    device is checked)."""
    return "cuda" in row.device_types  # devcaps: allow[DC003]


def _table_flag(row: gate_table.PyTorchGate) -> Gate | None:
    """A flag of PyTorch's gate table as the lint reads it (the table says what it means: its
    class, devices, capability, vendor); None for a flag that is not CUDA's (``TEST_XPU``)."""
    if row.vendor == "amd":
        return _rocm(row.name)
    if row.vendor == "nvidia":
        return exact_arch_gate(row.name, "nvidia")
    if row.hardware not in ("cuda", gate_table.ACCELERATOR) or not _names_cuda(row) \
            and row.hardware != gate_table.ACCELERATOR:
        return None
    if row.name == "TEST_CUDNN":
        return Gate("DC007", row.name, _blocked("cuDNN is CUDA's library", "cuda"),
                    "requires_capability for the operation the test needs", hardware="cuda")
    if row.hardware == gate_table.ACCELERATOR and not _names_cuda(row):
        return None  # TEST_ACCELERATOR, TEST_MULTIACCELERATOR: already device-generic
    extra = _caps(row.capability) if row.capability else Need()
    if row.devices > 1:
        return Gate("DC005", row.name, Need(accelerator=True, devices=row.devices) & extra,
                    f"@pytest.mark.requires_devices({row.devices})")
    # "GPU" flags (HAS_GPU: cuda or xpu with Triton) are PyTorch's any-GPU, not an author's set
    return _availability(row.name, extra) if row.hardware == "cuda" else \
        Gate("DC001", row.name, ACCELERATOR & extra, AVAILABILITY_USE)


# Flags, by name (also as the last part of a dotted name: common_utils.TEST_CUDA): PyTorch's from
# the gate table (pytest_devcaps.gate_table, which the runtime gate reader reads too), then the
# names other projects use for the same checks.
GATE_NAMES: dict[str, Gate] = {
    **{spelling: gate for row in gate_table.gates("flag") if (gate := _table_flag(row)) is not None
       for spelling in (row.name, *row.spellings) if "." not in spelling},
    **{n: _availability(n) for n in ("RUN_CUDA", "RUN_GPU", "CUDA_AVAILABLE", "GPU_AVAILABLE",
                                     "IS_CUDA_AVAILABLE", "HAS_CUDA_AVAILABLE", "TEST_CUDA_AVAILABLE")},
    **{n: _devices(n, 2) for n in ("TEST_MULTI_GPU", "MULTI_GPU")},
    **{n: _rocm(n) for n in ("IS_ROCM", "TEST_ROCM", "IS_HIP", "HAS_HIP", "ROCM")},
}

# Calls, by dotted name.
GATE_CALLS: dict[str, Gate] = {
    "torch.cuda.is_available": _availability("torch.cuda.is_available()"),
    "torch.cuda.is_bf16_supported": Gate("DC006", "torch.cuda.is_bf16_supported()", _caps("dtype.bf16"),
                                         "requires_capability('dtype.bf16'), or devcaps.has('dtype.bf16')"),
    "torch.cuda.is_tf32_supported": Gate("DC006", "torch.cuda.is_tf32_supported()", _caps("dtype.tf32"),
                                         "requires_capability('dtype.tf32'), or devcaps.has('dtype.tf32')"),
    "torch.backends.cudnn.is_available": GATE_NAMES["TEST_CUDNN"],
    "torch.distributed.is_nccl_available": Gate("DC008", "is_nccl_available()", _caps("dist.nccl"),
                                                "the dist_backend fixture, or requires_capability('dist.nccl')"),
    "is_ROCM": _rocm("is_ROCM()"),
    # torch.backends.cuda: the SDPA backends CUDA enables (and builds) for scaled_dot_product_attention
    **{f"torch.backends.cuda.{name}": Gate("DC006", f"torch.backends.cuda.{name}()", _caps(capability),
                                           f"requires_capability('{capability}')")
       for name, capability in (("flash_sdp_enabled", "attention.flash"),
                                ("is_flash_attention_available", "attention.flash"),
                                ("mem_efficient_sdp_enabled", "attention.mem_efficient"),
                                ("cudnn_sdp_enabled", "attention.cudnn"))},
    "is_torch_bf16_gpu_available": Gate("DC006", "is_torch_bf16_gpu_available()", _caps("dtype.bf16"),
                                        "requires_capability('dtype.bf16')"),
    "is_torch_tf32_available": Gate("DC006", "is_torch_tf32_available()", _caps("dtype.tf32"),
                                    "requires_capability('dtype.tf32')"),
}

# Name patterns (flags or helper calls) for the architecture gates of many projects. A GPU model
# counts only as a flag or check (``is_MI300()``, ``IS_H100``), never as a bare name (``mi300``
# is a variable holding a device).
ARCH_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^is_sm_at_least_(\d+)$"), "min"),
    (re.compile(r"^(?:is_)?(?:SM|sm)_?(\d{2,3})(?:OrLater|_or_later|_or_newer|_plus|OrNewer)$"), "min"),
    (re.compile(r"^(?:IS_|is_)(?:SM|sm)_?(\d{2,3})$"), "exact"),
    (re.compile(r"^is_sm_version$"), "exact"),  # torchao: is_sm_version(10, 0)
    (re.compile(r"^(?:(?:is_|IS_|has_|HAS_)(?:MI\d{3}X?|mi\d{3}x?|Navi\d*|navi\d*|NAVI\d*|cdna\d*|CDNA\d*|"
                r"rdna\d*|RDNA\d*|gfx\d+\w*)|CDNA\dOrLater)$"), "rocm"),
    (re.compile(r"^(?:is_|IS_)(hopper|blackwell|ampere|ada|h100|h200|b200|a100|HOPPER|BLACKWELL|"
                r"AMPERE|H100|H200|B200|A100)$"), "nvidia"),
)
# torchao's is_sm_at_least_<N>() (torchao/utils.py) is False off a CUDA build (``torch.version.cuda``),
# so it holds on NVIDIA devices alone; PyTorch's SM<N>OrLater also holds on ROCm (its
# get_device_capability() is the gfx version there), which the facts cannot say: no fact for it.
TORCHAO_SM_AT_LEAST = re.compile(r"^is_sm_at_least_(\d+)$")
# AMD GPU models by the gfx architectures torch reports for them (gcnArchName; torchao's is_MI300()
# is gfx940/941/942, is_MI350() gfx950): the ``arch`` fact of an AMD device (backends/cuda.py).
AMD_MODEL_ARCHES: dict[str, tuple[str, ...]] = {
    "MI300": ("gfx940", "gfx941", "gfx942"), "MI350": ("gfx950",), "MI355": ("gfx950",),
    "MI250": ("gfx90a",), "MI210": ("gfx90a",), "MI200": ("gfx90a",), "MI100": ("gfx908",),
}


def sm_at_least_fact(level: int) -> str:
    """``vendor == 'nvidia' and compute_capability >= 9.0`` for level 90."""
    return f"{ON_NVIDIA} and compute_capability >= {level // 10}.{level % 10}"


def amd_model_fact(name: str) -> str | None:
    """``arch in ('gfx940', 'gfx941', 'gfx942')`` for ``is_MI300`` / ``IS_MI300X``; None for a
    model this table does not know."""
    model = re.search(r"MI\d{3}", name, re.IGNORECASE)
    arches = AMD_MODEL_ARCHES.get(model.group(0).upper()) if model else None
    if not arches:
        return None
    return f"arch == {arches[0]!r}" if len(arches) == 1 else f"arch in {arches!r}"


# In a skip condition, any other name that says CUDA/GPU/ROCm is a device flag we cannot read.
DEVICE_WORD = re.compile(r"cuda|gpu|rocm|hip(?![a-z])|nccl|cudnn|(?<![a-z])sm_?\d{2}", re.IGNORECASE)

# ------------------------------------------------------------------------------------------
# Decorators that gate a test by themselves (a name, or a call whose arguments matter)


@dataclass(frozen=True)
class DecoratorRule:
    gate: Gate
    count_arg: bool = False     # skip_if_lt_x_gpu(n): the first argument is the device count
    memory_arg: bool = False    # largeTensorTest("40GB", "cuda"): the first argument is a size
    device_type_only: bool = False   # common_device_type decorators: keep as they are
    condition_arg: bool = False      # skipCUDAIf(cond, reason): like skipIf, but CUDA-scoped
    default_count: int | None = None  # the count when none is written (torchtune's gpu_test(): 1)
    # where it skips, over device facts, when that is all it checks (skip_if_rocm: vendor == 'amd')
    skip_when: str | None = None


_PLAIN_ROCM_SKIPS = frozenset({"skipIfRocm", "skipCUDAIfRocm", "skip_if_rocm", "skip_if_rocm_multiprocess"})
ONLY_CUDA = Gate("DC011", "onlyCUDA", _blocked("runs only on CUDA", "cuda"),
                 "@onlyAccelerator, or requires_capability for the feature the test needs",
                 hardware="cuda")
# onlyCUDAAndPRIVATEUSE1 (common_device_type.py, torch 2.14.1 line 2050) predates onlyAccelerator:
# "CUDA and whatever out-of-tree backend is registered", the accelerators such a suite had. The
# PrivateUse1 slot is not a vendor an author chose, so it is decided as onlyCUDA is (vendors: cuda):
# widened to onlyAccelerator only where nothing CUDA-only stays; the PrivateUse1 run is kept.
ONLY_CUDA_AND_PRIVATEUSE1 = Gate("DC011", "onlyCUDAAndPRIVATEUSE1",
                                 _blocked("runs only on CUDA and the PrivateUse1 backend", "cuda"),
                                 "@onlyAccelerator, or requires_capability for the feature the test needs",
                                 hardware="cuda")
ONLY_CUDA_GATES = (ONLY_CUDA, ONLY_CUDA_AND_PRIVATEUSE1)
DECORATORS: dict[str, DecoratorRule] = {
    "onlyCUDA": DecoratorRule(ONLY_CUDA, device_type_only=True),
    "onlyCUDAAndPRIVATEUSE1": DecoratorRule(ONLY_CUDA_AND_PRIVATEUSE1, device_type_only=True),
    "skipCUDAIf": DecoratorRule(Gate("DC011", "skipCUDAIf", ACCELERATOR,
                                     "requires_capability for what the condition protects"),
                                condition_arg=True, device_type_only=True),
    "dtypesIfCUDA": DecoratorRule(Gate("DC011", "dtypesIfCUDA", _blocked("CUDA-only dtype list", None),
                                       "@pytest.mark.dtypes(...): dtypes the device lacks skip with the "
                                       "capability as reason", hardware=None), device_type_only=True),
    "largeTensorTest": DecoratorRule(Gate("DC011", "largeTensorTest", ACCELERATOR,
                                          "@pytest.mark.requires_memory(size)"),
                                     memory_arg=True, device_type_only=True),
    **{n: DecoratorRule(Gate("DC011", n, _blocked("CUDA-only (cuDNN, MAGMA) library check", "cuda"),
                             "requires_capability for the operation the test needs", hardware="cuda"),
                        device_type_only=True)
       for n in ("skipCUDAIfNoCudnn", "skipCUDAIfCudnnVersionLessThan", "skipCUDAIfNoMagma",
                 "skipCUDAIfNoMagmaAndNoCusolver", "skipCUDAIfNoCusolver", "skipCUDAVersionIn")},
    # skipIfRocm skips *on* ROCm: the test runs everywhere else (the CPU included), so it says
    # nothing about the hardware the test is for (no "amd" classification)
    # The plain ones skip on any ROCm device (PyTorch's common_utils.skipIfRocm: TEST_WITH_ROCM, set
    # in ROCm runs; skipCUDAIfRocm: the cuda device type of a ROCm build; torchao's
    # testing/utils.py skip_if_rocm: torch.version.hip): skip_on(vendor == 'amd'). Those with an
    # architecture or version argument skip on some ROCm devices only: no fact rewrite.
    **{n: DecoratorRule(replace(_rocm(n), need=_blocked(f"{n} singles out ROCm", None)),
                        skip_when=ON_ROCM if n in _PLAIN_ROCM_SKIPS else None) for n in (
        "skipIfRocm", "skipCUDAIfRocm", "skipIfRocmArch", "skipIfRocmVersionLessThan", "skip_if_rocm",
        "skip_if_rocm_multiprocess", "skip_if_rocm_arch_multiprocess", "skipIfRocmVersionAndArch")},
    **{n: DecoratorRule(_availability(n)) for n in (
        "require_torch_gpu", "require_cuda", "requires_cuda", "skip_if_no_gpu",
        "require_gpu", "skip_if_no_cuda", "skipIfNoCuda", "cuda_only", "gpu_only", "needs_cuda")},
    # triton_utils: skipUnless(HAS_GPU) / (cuda or xpu) with Triton (pytest_devcaps.gate_table)
    **{n: DecoratorRule(Gate("DC001", n, ACCELERATOR & _caps("compile.triton"), AVAILABILITY_USE))
       for n in ("requires_gpu", "requires_gpu_and_triton")},
    "requires_accelerator_dist_backend": DecoratorRule(Gate("DC008", "requires_accelerator_dist_backend", ACCELERATOR,
                                                            "the dist_backend fixture (the device's default backend)")),
    # accelerate's test_utils/testing.py: a set of device types by name (kept, never widened)
    "require_cuda_or_xpu": DecoratorRule(_availability("require_cuda_or_xpu", Need(vendors=("cuda", "xpu")))),
    "require_cuda_or_hpu": DecoratorRule(_availability("require_cuda_or_hpu", Need(vendors=("cuda", "hpu")))),
    "requires_cuda_graph": DecoratorRule(_availability("requires_cuda_graph", _caps("runtime.graphs"))),
    "requires_cuda_p2p_access": DecoratorRule(Gate("DC001", "requires_cuda_p2p_access",
                                                   _blocked("CUDA peer-to-peer access between GPUs", "cuda"),
                                                   "keep it: peer access is CUDA's", hardware="cuda")),
    "requires_cuda_and_triton": DecoratorRule(_availability("requires_cuda_and_triton", _caps("compile.triton"))),
    "requires_triton_and_cuda": DecoratorRule(_availability("requires_triton_and_cuda", _caps("compile.triton"))),
    "require_torch_bf16_gpu": DecoratorRule(_availability("require_torch_bf16_gpu", _caps("dtype.bf16"))),
    "require_torch_tf32": DecoratorRule(Gate("DC006", "require_torch_tf32", _caps("dtype.tf32"),
                                             "requires_capability('dtype.tf32')")),
    "require_fp8": DecoratorRule(Gate("DC006", "require_fp8", _caps("dtype.fp8_e4m3fn"), FP8_USE,
                                      by_use=FP8_BY_USE)),
    **{n: DecoratorRule(_devices(n, 2)) for n in (
        "require_torch_multi_gpu", "require_multi_gpu", "requires_multigpu", "skip_if_not_multigpu",
        "require_multi_gpu_or_xpu", "multi_gpu", "requires_multi_gpu",
        # fairscale's fair_dev/testing/testing.py: skipif(not cuda.is_available() or device_count() < 2)
        "skip_if_single_gpu")},
    "skip_if_less_than_four_gpu": DecoratorRule(_devices("skip_if_less_than_four_gpu", 4)),
    # fairscale's skip_if_cuda = skipif(torch.cuda.is_available(), "Testing only on CPUs to save time"):
    # it skips where CUDA is, and runs everywhere else
    "skip_if_cuda": DecoratorRule(Gate("DC001", "skip_if_cuda", _blocked("skip_if_cuda skips where CUDA is", None),
                                       "skip_on(\"type == 'cuda'\") with the reason", hardware=None),
                                  skip_when=ON_CUDA),
    "skip_if_lt_x_gpu": DecoratorRule(_devices("skip_if_lt_x_gpu", 2), count_arg=True),
    # with backend "nccl" (the only one they are used with): n CUDA devices and NCCL
    **{n: DecoratorRule(replace(_devices(n, 2), need=Need(accelerator=True, devices=2) & _caps("dist.nccl")),
                        count_arg=True)
       for n in ("require_n_gpus_for_nccl_backend", "nccl_skip_if_lt_x_gpu")},
    "requires_world_size": DecoratorRule(_devices("requires_world_size", 2), count_arg=True),
    # torchtune's tests/test_utils.py gpu_test(gpu_count=1): skips with fewer CUDA devices
    "gpu_test": DecoratorRule(_devices("gpu_test", 1), count_arg=True, default_count=1),
    **{n: DecoratorRule(Gate("DC005", n, _blocked(f"{n}: an upper bound on GPUs", None),
                             "requires_devices(n) for a lower bound; an upper bound has no mark",
                             hardware=None))
       for n in ("require_torch_non_multi_gpu", "require_torch_up_to_2_gpus", "require_single_gpu")},
    "requires_nccl": DecoratorRule(Gate("DC008", "requires_nccl", _caps("dist.nccl"),
                                        "the dist_backend fixture (the device's default backend)")),
    "requires_nccl_version": DecoratorRule(Gate("DC008", "requires_nccl_version",
                                                _blocked("an NCCL version pin", "cuda"),
                                                "the dist_backend fixture", hardware="cuda")),
}

# Decorators that skip on a condition, by dotted name: (condition means "skip", reason keyword).
SKIP_DECORATORS: dict[str, bool] = {
    "unittest.skipIf": True, "skipIf": True, "pytest.mark.skipif": True, "mark.skipif": True,
    "skip_but_pass_in_sandcastle_if": True, "unittest.skipUnless": False, "skipUnless": False,
}
SKIP_CALLS = frozenset({"pytest.skip", "skip", "unittest.SkipTest", "SkipTest", "self.skipTest"})

# ------------------------------------------------------------------------------------------
# torch.cuda.* calls


@dataclass(frozen=True)
class CudaCall:
    """``torch.cuda.<name>(...)``: ``test`` is the replacement in a test with the device fixtures
    (``{fixture}.method``), ``device`` where a ``device`` parameter is in scope, ``anywhere``
    in any code; ``device_arg`` passes the device (keyword, or positional when ``"0"``);
    ``capability`` is marked on the test that now calls it."""

    use: str
    test: str | None = None
    device: str | None = None
    anywhere: str | None = None
    device_arg: str | None = None
    capability: str | None = None
    blocks_cpu: bool = True
    hardware: Hardware | None = "accelerator"
    code: str = "DC004"
    accelerator: str | None = None  # the same function in torch 2.13 (torch.accelerator.*, torch.Stream)
    # the device module's function of that name (torch.get_device_module(device)._sleep): devices
    # whose module lacks it are kept off by ``capability``
    module: bool = False


def _runtime(name: str, capability: str | None = None, blocks: bool = True,
             hardware: Hardware | None = "accelerator") -> CudaCall:
    return CudaCall(f"torch.accelerator.{name}(), or device_runtime.{name}() (the device_runtime fixture)",
                    test=f"device_runtime.{name}", device_arg="device", capability=capability,
                    blocks_cpu=blocks, hardware=hardware, accelerator=f"torch.accelerator.{name}")


def _accelerator(name: str, capability: str | None = None, same: str | None = None) -> CudaCall:
    """``torch.cuda.<name>`` -> ``torch.accelerator.<same or name>`` (torch 2.13,
    torch/accelerator/__init__.py and torch/accelerator/memory.py: every one takes the device
    positionally, None for the current one)."""
    target = f"torch.accelerator.{same or name}"
    suffix = f" with requires_capability('{capability}')" if capability else ""
    return CudaCall(f"{target}(){suffix}", capability=capability, accelerator=target)


CUDA_CALLS: dict[str, CudaCall] = {
    "synchronize": _runtime("synchronize"),
    "empty_cache": _runtime("empty_cache", blocks=False, hardware=None),
    "memory_stats": _runtime("memory_stats", "runtime.memory_stats"),
    "memory_allocated": _runtime("memory_allocated", "runtime.memory_stats"),
    "max_memory_allocated": _runtime("max_memory_allocated", "runtime.memory_stats"),
    "reset_peak_memory_stats": _runtime("reset_peak_memory_stats"),
    "manual_seed": CudaCall("device_runtime.manual_seed(n), or torch.manual_seed(n) (seeds every device)",
                            test="device_runtime.manual_seed", anywhere="torch.manual_seed",
                            blocks_cpu=False, hardware=None),
    "manual_seed_all": CudaCall("torch.manual_seed(n) (seeds every device)", anywhere="torch.manual_seed",
                                blocks_cpu=False, hardware=None),
    "device_count": CudaCall("torch.accelerator.device_count()", anywhere="torch.accelerator.device_count",
                             blocks_cpu=False, accelerator="torch.accelerator.device_count"),
    "current_device": _accelerator("current_device", same="current_device_index"),
    "set_device": _accelerator("set_device", same="set_device_index"),
    "is_available": CudaCall(ACCELERATOR_AVAILABLE, anywhere="torch.accelerator.is_available",
                             blocks_cpu=False, code="DC001", accelerator="torch.accelerator.is_available"),
    # torch.Stream / torch.Event (torch/_C/__init__.pyi: Stream(device=None, *, priority=0),
    # Event(device=None, *, enable_timing=False, ...)): the current accelerator's
    "Stream": CudaCall("torch.Stream(device) with requires_capability('runtime.streams')",
                       capability="runtime.streams", accelerator="torch.Stream"),
    "Event": CudaCall("torch.Event(device) with requires_capability('runtime.events')",
                      capability="runtime.events", accelerator="torch.Event"),
    "current_stream": _accelerator("current_stream", "runtime.streams"),
    "stream": CudaCall("the stream as a context manager (with stream: ...)", capability="runtime.streams"),
    "CUDAGraph": CudaCall("torch.accelerator.Graph with requires_capability('runtime.graphs')"),
    "graph": CudaCall("torch.accelerator.Graph with requires_capability('runtime.graphs')"),
    "make_graphed_callables": CudaCall("requires_capability('runtime.graphs') and the device's graph API"),
    "get_device_properties": CudaCall("the devcaps fixture (devcaps.has(...)) instead of device properties",
                                      hardware="cuda"),
    # torch.accelerator.get_device_capability exists in 2.13 but returns a dict of supported
    # dtypes, not CUDA's (major, minor): not the same function
    "get_device_capability": CudaCall("requires_capability for the feature the capability gates",
                                      hardware="cuda"),
    "get_device_name": CudaCall("the devcaps fixture; a device name is not a capability", hardware="cuda"),
    # torch.cuda._sleep(cycles) and torch.xpu._sleep (torch 2.14) queue a spin on the current
    # stream; other devices have none: the runtime.sleep capability keeps the test off them
    "_sleep": CudaCall("torch.get_device_module(device)._sleep(cycles) with requires_capability('runtime.sleep')",
                       capability="runtime.sleep", module=True),
    "memory_reserved": _accelerator("memory_reserved", "runtime.memory_stats"),
    "max_memory_reserved": _accelerator("max_memory_reserved", "runtime.memory_stats"),
    "reset_accumulated_memory_stats": _accelerator("reset_accumulated_memory_stats"),
    "mem_get_info": _accelerator("mem_get_info", "runtime.memory_stats", same="get_memory_info"),
    "set_stream": _accelerator("set_stream", "runtime.streams"),
    "current_device_index": _accelerator("current_device_index"),
    "set_device_index": _accelerator("set_device_index"),
}
DEFAULT_CUDA_CALL = CudaCall("torch.accelerator, or the device_runtime fixture")
# torch's private CUDA bindings (torch/csrc/cuda/Module.cpp: torch._C._cuda_hasPrimaryContext,
# _cuda_getDeviceCount...; NCCL, cuDNN, NVTX): code that calls them is about CUDA itself.
CUDA_PRIVATE_PREFIXES = ("torch._C._cuda", "torch._C._nccl", "torch._C._cudnn", "torch._C._nvtx",
                         "torch._C._cudart", "torch._C._cuda_")
CUDA_PRIVATE_USE = "keep the test CUDA-only: a private CUDA binding has no other device's counterpart"
# Libraries that run on NVIDIA (or CUDA/ROCm) GPUs only: code that calls them stays CUDA's, so
# the gate in front of it stays (not findings: nothing here is a device check to rewrite).
CUDA_ONLY_LIBRARIES: dict[str, str] = {
    "flash_attn": "flash-attention (CUDA/ROCm kernels)", "apex": "NVIDIA Apex", "amp_C": "NVIDIA Apex",
    "fused_layer_norm_cuda": "NVIDIA Apex", "bitsandbytes": "bitsandbytes", "xformers": "xFormers",
    "cupy": "CuPy", "pynvml": "NVML", "nvidia_smi": "NVML", "transformer_engine": "Transformer Engine",
    "tensorrt": "TensorRT", "torch_tensorrt": "Torch-TensorRT", "cutlass": "CUTLASS", "pycuda": "PyCUDA",
    "cuda": "CUDA Python", "nvtx": "NVTX", "triton_dist": "Triton-distributed", "deep_gemm": "DeepGEMM",
    # a module or class of a library that is not CUDA-only as a whole (a dotted key: the name and
    # what is under it): fairscale's FullyShardedDataParallel makes its streams only where
    # torch.cuda.is_available() and reads self._streams["all_gather"] in every forward
    # (fairscale/nn/data_parallel/fully_sharded_data_parallel.py _setup_streams, _rebuild_full_params),
    # a KeyError on any other device
    **{name: "fairscale's FullyShardedDataParallel (CUDA streams in every forward)" for name in (
        "fairscale.nn.data_parallel.FullyShardedDataParallel", "fairscale.nn.FullyShardedDataParallel",
        "fairscale.nn.data_parallel.fully_sharded_data_parallel")},
}
# torch.cuda functions torch.cpu has too (torch 2.13 torch/cpu/__init__.py: set_device and
# synchronize are no-ops there, current_device is "cpu"): where the device comes from a fixture
# or a parameter it may be the CPU, on which every torch.accelerator function but
# is_available/device_count raises ("Cannot access accelerator device when none is available"),
# so the call goes to that device's module: torch.get_device_module(device).set_device(rank) is
# torch.cuda.set_device(rank) on CUDA, the same call as before.
CPU_MODULE_CALLS = frozenset({"set_device", "current_device", "synchronize", "current_stream"})
# Names that single out another vendor next to a CUDA check (a vendor-keyed branch).
OTHER_VENDOR = re.compile(r"XPU|HPU|MPS|NPU|MTIA|ROCM|rocm|hip(?![a-z])|HIP|xpu|hpu|mps(?![a-z])|npu")
# Attributes only a CUDA stream / event has: the object they are read from stays CUDA's.
CUDA_OBJECT_ATTRIBUTES = frozenset({"cuda_stream", "cuda_event", "ipc_handle", "from_ipc_handle"})
AMP_USE = "torch.autocast(device.type, ...) / torch.amp.GradScaler(device.type)"
# torch.cuda.amp.X(...) -> torch.amp / torch.autocast with the device type first.
CUDA_AMP: dict[str, str] = {"autocast": "torch.autocast", "GradScaler": "torch.amp.GradScaler"}

# ------------------------------------------------------------------------------------------
# Settings (torch.backends.cuda.* / torch.backends.cudnn.*), by attribute after the prefix

SETTINGS_USE: dict[str, str] = {
    "allow_tf32": "torch.set_float32_matmul_precision('high') (every backend) and requires_capability('dtype.tf32')",
    "fp32_precision": "torch.backends.fp32_precision or torch.set_float32_matmul_precision(...)",
    "deterministic": "torch.use_deterministic_algorithms(True)",
    "benchmark": "a cuDNN-only tuning switch: drop it, or set it only when device.type == 'cuda'",
    "sdp_kernel": "torch.nn.attention.sdpa_kernel(SDPBackend...) and requires_capability('attention.flash')",
    "enable_flash_sdp": "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) and requires_capability('attention.flash')",
    "enable_mem_efficient_sdp": "torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION) and requires_capability('attention.mem_efficient')",
    "allow_fp16_reduced_precision_reduction": "a CUDA-only matmul setting: set it only when device.type == 'cuda'",
    "allow_bf16_reduced_precision_reduction": "a CUDA-only matmul setting: set it only when device.type == 'cuda'",
}
# cuDNN's answers (torch/backends/cudnn/__init__.py): is_acceptable() is False for a tensor not on
# CUDA, version() None where cuDNN is not; a test asserting them is about CUDA
CUDNN_QUERIES: dict[str, str] = {
    "torch.backends.cudnn.is_acceptable": "keep the test CUDA's (requires_capability for the feature it needs elsewhere)",
    "torch.backends.cudnn.version": "keep the test CUDA's, or requires_capability('attention.cudnn') for cuDNN attention",
}
DEFAULT_SETTINGS_USE = "a device-generic setting (torch.backends.fp32_precision, torch.use_deterministic_algorithms)"

# ------------------------------------------------------------------------------------------
# A skip's reason that says the test is vendor-specific: the gate keeps its vendor and its text.
# "CUDA not available" or "requires CUDA" restates the gate (widened like the gate); "only works
# for CUDA", "CUDA-specific", "requires CUDA or XPU" (a set the author named), "CUDA 12.4", a
# CUDA-only library or another vendor named say why other devices do not run it.

_VENDOR = r"cuda|nvidia|rocm|hip|amd|xpu|intel|mps|apple|metal|hpu|gaudi|habana|npu|ascend|mtia|tpu"
_OTHER_VENDOR = r"rocm|hip|amd|xpu|intel|mps|apple|metal|hpu|gaudi|habana|npu|ascend|mtia|tpu"
VENDOR_REASON = re.compile(
    rf"\b(?:only|solely|exclusively)\b\W+(?:\w+\W+){{0,4}}?(?:{_VENDOR})\b"
    rf"|\b(?:{_VENDOR})\b[\s-]*(?:only|specific|exclusive)\b"
    rf"|\bspecific\s+to\s+(?:\w+\s+){{0,2}}?(?:{_VENDOR})\b"
    rf"|\b(?:{_VENDOR})\b\s*(?:,|/|\bor\b|\band\b)\s*(?:{_VENDOR})\b"
    rf"|\b(?:cuda|rocm|hip)\s*(?:version\s*)?[<>=]*\s*\d+(?:\.\d+)?"
    rf"|\b(?:{_OTHER_VENDOR})\b"
    r"|\b(?:bitsandbytes|apex|flash[-_ ]?attn|flash[-_ ]?attention\s*\d|xformers|cudnn|cublas(?:lt)?|cusparse"
    r"|cusolver|cufft|curand|cutlass|nccl|nvml|nvtx|tensorrt|transformer[-_ ]?engine|jiterator|cupy)\b",
    re.IGNORECASE)


def vendor_specific(reason: str) -> bool:
    """The author's reason says why the test is one vendor's (see :data:`VENDOR_REASON`)."""
    return VENDOR_REASON.search(reason) is not None


PINNED_MEMORY = "runtime.pinned_memory"
# PyTorch's common_utils.get_cycles_per_ms(device="cuda") times the device's _sleep: CUDA's alone
# before torch 2.14 (torch.cuda.Event), any device module's with a _sleep from 2.14. The rewrite
# (--target devcaps) calls pytest_devcaps.runtime.cycles_per_ms(device), the same measurement for
# any device, on every torch.
CYCLES_PER_MS = "torch.testing._internal.common_utils.get_cycles_per_ms"
SLEEP = "runtime.sleep"
DIST_USE = "the dist_backend fixture, or dist.get_default_backend_for_device(device)"


def capability_names() -> set[str]:
    """Every capability this table names (each must exist in the shipped catalogue)."""
    gates: list[Gate] = [*GATE_NAMES.values(), *GATE_CALLS.values(), *PLATFORM_SUPPORTS.values(),
                         *(d.gate for d in DECORATORS.values()), *(sm_gate(level) for level in range(50, 130))]
    gates += [Gate("DC006", "", Need(), "", table) for table in SM_USES]
    needs = [n for g in gates for n in (g.need, *(b.need for b in g.by_use))]
    names = {c for n in needs for c in (*n.capabilities, *(c for group in n.any_of for c in group))}
    names |= {c.capability for c in (*CUDA_CALLS.values(), DEFAULT_CUDA_CALL) if c.capability}
    return names | {PINNED_MEMORY, SLEEP}
