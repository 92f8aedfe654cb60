"""Unit tests of the modules behind unittest/PyTorch classes, hardware classes and expectations."""

from __future__ import annotations

from collections import Counter

import pytest

from pytest_devcaps.config import load_catalogue
from pytest_devcaps.errors import MarkerError
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level
from pytest_devcaps.registry import CapabilityRegistry

CPU = DeviceIdentity(type="cpu", index=None, vendor="cpu", name="cpu", arch="avx2",
                     facts={"isa": ["avx2"]})
H100 = DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="H100", arch="sm_90",
                      memory_bytes=80 * 2**30, count=8, facts={"compute_capability": 9.0})


def _registry(levels: dict[tuple[str, str], Level]) -> CapabilityRegistry:
    catalogue = load_catalogue()
    records: dict[str, dict[str, CapabilityRecord]] = {}
    for identity in (CPU, H100):
        records[identity.key] = {
            name: CapabilityRecord(name, identity.key, levels.get((name, identity.key), Level.UNSUPPORTED),
                                   "test", "cli") for name in catalogue.names()}
    return CapabilityRegistry([CPU, H100], records, catalogue)


@pytest.mark.parametrize(("capability", "native", "only_accelerators"), [
    ("runtime.graphs", False, True),          # cpu rule: unsupported
    ("dtype.tf32", False, False),             # native on CPUs with AMX-FP16 (oneDNN tf32)
    ("dist.nccl", False, True),               # the "*" rule, after the cpu vendor's own
    ("dtype.fp8_e4m3fn", False, False),       # emulated on CPUs
    ("dtype.fp8_e4m3fn", True, True),         # ...but never native
    ("dtype.bf16", True, False),              # native with avx512_bf16 / amx_bf16
    ("mm.int8", False, False),                # a conditional cpu rule: probes decide the rest
])
def test_accelerator_only_reads_the_cpu_rules(capability: str, native: bool, only_accelerators: bool) -> None:
    from pytest_devcaps.marks.classification import accelerator_only

    assert accelerator_only(load_catalogue(), capability, native=native) is only_accelerators


def test_classification_vocabulary_and_typos() -> None:
    from pytest_devcaps.marks.classification import parse_selection
    from pytest_devcaps.marks.hardware import check_class, vocabulary

    assert vocabulary()[:2] == ("generic", "accelerator")
    assert {"cuda", "xpu", "privateuse1", "nvidia", "amd", "habana"} <= set(vocabulary())
    assert check_class("GENERIC") == "generic"
    with pytest.raises(MarkerError, match="did you mean 'habana'"):
        check_class("habanna")
    registry = _registry({})
    assert check_class("cuda", lambda: registry) == "cuda"
    assert parse_selection(["accelerator", "nvidia"], "--devcaps-hardware") == ("accelerator", "nvidia")


def test_tolerance_precedence_condition_then_dtype_then_closest() -> None:
    from pytest_devcaps.marks.conditions import known_facts
    from pytest_devcaps.marks.tolerances import Tolerances, parse_tolerance

    facts = known_facts(_registry({}))
    rules = [parse_tolerance((), kwargs, facts) for kwargs in (
        {"atol": 1.0, "rtol": 1.0},
        {"dtype": "float16", "atol": 2.0, "rtol": 2.0},
        {"atol": 3.0, "rtol": 3.0, "when": "compute_capability >= 9.0"},
        {"dtype": ("float16", "bfloat16"), "atol": 4.0, "rtol": 4.0, "when": "vendor == 'nvidia'"},
    )]
    on_h100 = Tolerances(rules, H100)
    assert on_h100.for_dtype("float16").atol == 4.0      # condition and dtype
    assert on_h100.for_dtype("float32").atol == 3.0      # condition beats dtype-only
    on_cpu = Tolerances(rules, CPU, dtype="float16")
    assert on_cpu.atol == 2.0                            # dtype beats every-dtype
    assert on_cpu.for_dtype("float32").kwargs() == {"atol": 1.0, "rtol": 1.0}
    assert Tolerances([], CPU).kwargs("float16") == {}


def test_conditions_know_facts_of_devices_absent_here() -> None:
    from pytest_devcaps.marks.conditions import compile_condition, known_facts

    cpu_only = CapabilityRegistry([CPU], {"cpu": {}}, load_catalogue())
    facts = known_facts(cpu_only)
    assert {"compute_capability", "gcn_arch", "isa", "vendor", "memory_gib"} <= set(facts.names())
    with pytest.raises(MarkerError, match="unknown device fact 'gnc_arch' \\(did you mean 'gcn_arch'\\?\\)"):
        compile_condition("skip_on", "gnc_arch == 'gfx942'", facts)


def test_dtypes_for_prefers_the_vendor_then_the_device_type() -> None:
    from pytest_devcaps.marks.evaluation import dtypes_for

    mark = pytest.mark.dtypes("float32", when={"cuda": ("float16",), "nvidia": ("bfloat16",)}).mark
    assert dtypes_for(mark, H100) == ["bfloat16"]
    assert dtypes_for(mark, CPU) == ["float32"]
    assert dtypes_for(mark, None) == ["float32"]


def test_sizes_gb_is_decimal_gib_is_binary() -> None:
    from pytest_devcaps.marks.evaluation import parse_size

    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("2GiB") == 2 * 2**30


def test_free_memory_missing_uses_the_reader() -> None:
    from pytest_devcaps.marks.evaluation import free_memory_missing

    marks = [pytest.mark.requires_memory("1GiB", free=True).mark, pytest.mark.requires_memory("8GiB").mark]
    assert free_memory_missing(marks, H100, lambda identity: 2**31) == []
    [missing] = free_memory_missing(marks, H100, lambda identity: 2**29)
    assert (missing.key, missing.found) == ("free memory>=1GiB", "512MiB")
    assert free_memory_missing(marks, H100, lambda identity: None) == []  # not reported: total decides


def test_dispatch_keys_come_from_torch() -> None:
    from pytest_devcaps.backends.dispatch import DispatchKeyError, autograd_dispatch_key, dispatch_key

    assert (dispatch_key("cpu"), autograd_dispatch_key("cpu")) == ("CPU", "AutogradCPU")
    assert (dispatch_key("cuda:1"), autograd_dispatch_key("cuda")) == ("CUDA", "AutogradCUDA")
    assert (dispatch_key("meta"), autograd_dispatch_key("meta")) == ("Meta", "AutogradMeta")
    assert dispatch_key("privateuse1") == "PrivateUse1"  # PyTorch's name for the unrenamed class
    with pytest.raises(DispatchKeyError, match="no dispatch key for device type 'acme2'"):
        dispatch_key("acme2")
    registry = _registry({})
    assert registry.view("cuda:0").dispatch_keys == ("CUDA", "AutogradCUDA")


def test_capabilities_mapping_in_pytorchs_shape() -> None:
    from pytest_devcaps.pytorch_compat import capabilities_mapping, class_device_type

    registry = _registry({("attention.cudnn", "cuda:0"): Level.NATIVE,
                          ("dtype.bf16", "cpu"): Level.EMULATED})
    cuda = capabilities_mapping("cuda", registry)
    cpu = capabilities_mapping("cpu", registry)
    assert (cuda["attention"]["cudnn"](), cpu["attention"]["cudnn"]()) == (True, False)
    assert (cuda["dtype"]["bf16"](), cpu["dtype"]["bf16"]()) == (False, True)
    assert capabilities_mapping("xpu", registry)["dtype"]["bf16"]() is False  # no xpu here
    names = [*registry.capability_names, *registry.catalogue.aliases()]
    assert set(cuda) == {name.partition(".")[0] for name in names}
    assert cuda["dtype"]["fp8"]() is registry.has("dtype.fp8", "cuda:0")  # PyTorch's name, an alias

    class Generic:
        device_type = "generic_device_type"

    class OnAcme(Generic):  # what instantiate_device_type_tests makes for a backend named acme
        device_type = "acme"

    assert (class_device_type(Generic), class_device_type(OnAcme), class_device_type(None)) == \
        (None, "acme", None)


def test_check_prints_hardware_counts_per_suite() -> None:
    from pytest_devcaps.commands.check import SuiteResult, hardware_lines

    results = [SuiteResult("kernels", 0, 1.0, hardware=Counter(cuda=1, generic=3, accelerator=2)),
               SuiteResult("fsdp", 0, 1.0)]
    assert hardware_lines(results) == ["hardware kernels: generic 3, accelerator 2, cuda 1"]


def test_decorators_put_the_marks_pytest_reads() -> None:
    import enum

    from pytest_devcaps import hardware, requires_capabilities, requires_memory

    class Capability(enum.Enum):  # the shape of PyTorch's upstream Capability names
        CUDNN = "attention.cudnn"

    @requires_capabilities(Capability.CUDNN, "dtype.bf16")
    @requires_memory("1GiB", free=True)
    def test_function() -> None:
        pass

    marks = [(m.name, m.args, m.kwargs) for m in test_function.pytestmark]  # type: ignore[attr-defined]
    assert marks == [("requires_memory", ("1GiB",), {"free": True}),
                     ("requires_capability", ("attention.cudnn", "dtype.bf16"), {})]

    @hardware("ACCELERATOR")
    class Classified:
        pass

    assert Classified.hw_classification == "accelerator"  # type: ignore[attr-defined]


def test_hardware_selection_text_is_read_one_way_under_pytest_and_unittest() -> None:
    """``PYTEST_DEVCAPS_HARDWARE`` is split by the option's own helper in the unittest bridge
    too: a trailing comma or upper case works in both, instead of failing every unittest test."""
    from pytest_devcaps import testcase
    from pytest_devcaps.environment import environment_settings, hardware_names

    assert hardware_names("Generic, ,ACCELERATOR,") == ("generic", "accelerator")
    assert testcase.environment_settings is environment_settings  # one parser for both
    env = environment_settings({"PYTEST_DEVCAPS_HARDWARE": "Generic, ,ACCELERATOR,"})
    assert env.hardware.value == ("generic", "accelerator")
