"""Every builtin probe's answer on this machine, checked against real torch behaviour.

Expectations per build: the cpu device has an explicit table on every build (its fact-dependent
rows follow this CPU's facts); an accelerator device (a CUDA, ROCm, XPU or MPS build) is expected
to answer what the vendor rules say for its discovered facts, so on a GPU every probe whose
answer the hardware decides is checked against the rules (and so against PyTorch's gates).
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
import torch.distributed

from pytest_devcaps.backends import builtin_backends, discover_devices
from pytest_devcaps.config import classify, load_catalogue
from pytest_devcaps.model import DeviceIdentity, Level, ProbeOutcome
from pytest_devcaps.probes import ProbeSpec, builtin_probes, run_probes
from pytest_devcaps.probes.attention import judge_choice, judge_run
from pytest_devcaps.probes.rule_gate import RuleGate, gate_for, judge, live_identity, rule_gate
from pytest_devcaps._util.qualnames import resolve

N, E, U = Level.NATIVE, Level.EMULATED, Level.UNSUPPORTED

# What each probe answers for the host CPU, on every build. NATIVE means "the op ran".
CPU_EXPECTED: dict[str, Level] = {
    "dtype.fp64": N, "dtype.fp16": N, "dtype.bf16": N, "dtype.tf32": U,
    "dtype.fp8_e4m3fn": N, "dtype.fp8_e5m2": N,  # _scaled_mm's fp32 upcast
    "dtype.fp8_e4m3fnuz": N, "dtype.fp8_e5m2fnuz": N,  # rowwise fnuz takes the upcast on AMX too
    "dtype.fp4_e2m1": U,  # the CPU _scaled_mm has no block scales (Blas.cpp get_joint_scaling)
    "mm.scaled": N, "mm.scaled_rowwise": N, "mm.scaled_mx": U, "mm.grouped": N, "mm.int8": N,
    "attention.flash": N, "attention.mem_efficient": U, "attention.cudnn": U,
    "attention.flex": N,
    "runtime.graphs": U, "runtime.streams": U, "runtime.events": U,
    "runtime.memory_stats": U, "runtime.pinned_memory": U, "runtime.sleep": U,
    "compile.inductor": N, "compile.triton": U,
    "dist.gloo": N, "dist.nccl": U, "dist.xccl": U, "dist.hccl": U, "dist.mpi": U,
}

# Whether this torch has NCCL compiled in (what the dist.nccl probe reads first).
NCCL_BUILT = torch.distributed.is_available() and torch.distributed.is_nccl_available()  # devcaps: allow[DC008]

# Reasons users will read in skip messages: the important words must be there.
CPU_REASONS: dict[str, str] = {
    "dtype.tf32": "matmul stays fp32 under float32_matmul_precision('high')",
    "dtype.fp8_e4m3fn": "_scaled_mm ran with float8_e4m3fn",
    "dtype.fp4_e2m1": "tensorwise or rowwise scales only, no packed fp4",
    "mm.scaled_mx": "Invalid scaling configuration",
    "attention.flash": "SDPBackend.FLASH_ATTENTION chosen by _fused_sdp_choice and ran on cpu",
    "attention.mem_efficient": "(_fused_sdp_choice) under SDPBackend.EFFICIENT_ATTENTION",
    "compile.triton": "Triton has no CPU backend (TRITON_INTERPRET only)",
    "compile.inductor": "C++ compiler",
    # a CPU build has no NCCL; a CUDA build has it compiled in, for cuda tensors only
    "dist.nccl": ("nccl is available but handles cuda tensors, not cpu" if NCCL_BUILT  # devcaps: allow[DC008]
                  else "nccl is not available"),
    "runtime.graphs": "no graph capture for cpu",
    "runtime.sleep": "torch.cpu has no _sleep",
}


def _cpu_expected(facts: dict[str, object]) -> dict[str, Level]:
    """CPU_EXPECTED, with the rows this CPU's facts decide (rules: capabilities.yaml cpu)."""
    isa = list(facts.get("isa") or ())  # type: ignore[call-overload]
    expected = dict(CPU_EXPECTED)
    if "amx_fp16" in isa:  # mkldnn Matmul.cpp use_mkldnn_tf32_matmul
        expected["dtype.tf32"] = N
    if "amx_int8" in isa:  # tensorwise fp8 goes to oneDNN, which logs ref:any: emulated
        expected["mm.scaled"] = expected["dtype.fp8_e4m3fn"] = expected["dtype.fp8_e5m2"] = E
    if "avx2" not in isa or sys.platform == "darwin":  # IS_FLEX_ATTENTION_CPU_PLATFORM_SUPPORTED
        expected["attention.flex"] = U
    return expected


#: What no rule decides for an accelerator: the software installed, not the hardware.
def _software_rows(identity: DeviceIdentity) -> dict[str, Level]:
    import torch.distributed as dist

    rows = {"dist.mpi": N if dist.is_available() and dist.is_mpi_available() else U}
    if importlib.util.find_spec("triton") is None:
        rows["compile.triton"] = U
        if identity.type in ("cuda", "xpu"):
            rows["attention.flex"] = U
    return rows


def _accelerator_expected(identity: DeviceIdentity) -> dict[str, Level]:
    """A probe must run the op where the rule says native or emulated and see it refused where
    the rule says unsupported; capabilities the rules leave unknown are for the probe alone."""
    verdicts = classify(load_catalogue(), identity)
    expected = {cap: (N if verdict.level.available else U) for cap, verdict in verdicts.items()
                if verdict.level is not Level.UNKNOWN and cap in builtin_probes()}
    expected.update(_software_rows(identity))
    return expected


def _table() -> dict[str, dict[str, Level]]:
    devices = discover_devices(builtin_backends())
    table = {}
    for identity in devices:
        if identity.type == "cpu":
            table[identity.key] = _cpu_expected(identity.rule_facts())
        elif identity.index in (None, 0):  # one device per accelerator type
            table[identity.key] = _accelerator_expected(identity)
    return table


TABLE = _table()
CASES = [(device, cap) for device, caps in TABLE.items() for cap in caps]
# The usable accelerator: a CUDA build on a machine without a GPU has "cuda" compiled in
# (current_accelerator()) but no device, so it is checked as the CPU-only machine it is.
ACCELERATOR = getattr(torch.accelerator.current_accelerator(check_available=True), "type", None)


def children_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class ColdRun:
    answers: dict[str, dict[str, ProbeOutcome]]
    cpu_seconds: float  # CPU time of the probe children: unlike wall time, immune to load


@pytest.fixture(scope="module")
def cold() -> ColdRun:
    """All builtin probes, cold, in one child per device: the way the registry runs them."""
    before = children_cpu_seconds()
    answers = {device: run_probes(device, builtin_probes()) for device in TABLE}
    return ColdRun(answers, children_cpu_seconds() - before)


@pytest.fixture(scope="module")
def answers(cold: ColdRun) -> dict[str, dict[str, ProbeOutcome]]:
    return cold.answers


def test_every_device_of_this_build_has_expectations() -> None:
    assert "cpu" in TABLE
    if ACCELERATOR is not None:  # a GPU build checks its accelerator too
        assert any(device.startswith(ACCELERATOR) for device in TABLE), TABLE.keys()
    for device, expected in TABLE.items():
        assert len(expected) >= 10, (device, sorted(expected))


def test_one_isolated_module_level_probe_per_capability() -> None:
    probes = builtin_probes()
    assert set(probes) == set(CPU_EXPECTED)
    for name, spec in probes.items():
        assert isinstance(spec, ProbeSpec) and spec.name == name and spec.isolated
        assert resolve(spec.target) is spec.function, "the child must be able to import it"
        assert inspect.signature(spec.function).parameters.keys() == {"device"}


@pytest.mark.parametrize(("device", "capability"), CASES)
def test_probe_answer_on_this_machine(answers: dict[str, dict[str, ProbeOutcome]],
                                      device: str, capability: str) -> None:
    outcome = answers[device][capability]
    assert outcome.level is TABLE[device][capability], outcome.reason
    assert outcome.reason
    fragment = CPU_REASONS.get(capability) if device == "cpu" else None
    if fragment and outcome.level is CPU_EXPECTED[capability]:
        assert fragment in outcome.reason


def test_isolated_and_in_process_answers_agree(answers: dict[str, dict[str, ProbeOutcome]]) -> None:
    # in-process, skipping the process-group probe: it would create a group in pytest's process
    for device in TABLE:
        for name, spec in builtin_probes().items():
            if name != "dist.gloo":
                assert spec.function(device).level is answers[device][name].level, name


def test_importing_probes_does_not_import_torch() -> None:
    code = ("import sys, pytest_devcaps.probes as p; p.builtin_probes(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(sys.platform == "win32", reason="measures child CPU time with resource")
def test_cold_probing_costs_little_more_than_importing_torch(cold: ColdRun) -> None:
    before = children_cpu_seconds()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    import_torch = children_cpu_seconds() - before
    per_device = cold.cpu_seconds / max(1, len(cold.answers))
    # about 1.5 s here against 2.0 s for a bare import (the child skips interpreter teardown);
    # importing inductor or compiling would add well over a second
    assert per_device < import_torch + 1.0, (per_device, import_torch)


# --- the probes' decision code, fed what each backend shows ----------------------------------

@pytest.mark.parametrize(("backend", "chosen", "level", "words"), [
    # MPS: _fused_sdp_choice has no MPS kernel; attention always runs
    # _scaled_dot_product_attention_math_for_mps, whatever sdpa_kernel asks
    ("FLASH_ATTENTION", NotImplementedError("Could not run 'aten::_fused_sdp_choice' with "
                                            "arguments from the 'MPS' backend"), U, "math path"),
    # the selection (every can_use_* check of sdp_utils.cpp) picked another backend
    ("CUDNN_ATTENTION", 1, U, "picked FLASH_ATTENTION instead of SDPBackend.CUDNN_ATTENTION"),
    ("EFFICIENT_ATTENTION", 0, U, "picked MATH"),
    ("EFFICIENT_ATTENTION", RuntimeError("No viable backend"), U, "raised RuntimeError"),
    ("FLASH_ATTENTION", 1, None, ""),  # chosen: the call decides
])
def test_attention_probe_counts_only_the_backend_pytorch_selects(
        backend: str, chosen: int | BaseException, level: Level | None, words: str) -> None:
    outcome = judge_choice(backend, chosen, "dev:0 (float16)")
    if level is None:
        assert outcome is None
    else:
        assert outcome is not None and outcome.level is level and words in outcome.reason


@pytest.mark.parametrize(("messages", "level", "words"), [
    ([], N, "chosen by _fused_sdp_choice and ran"),
    # XPU has no efficient-attention kernel: SDPA warns and falls back to math
    (["Memory efficient kernel not used because: ... falling back to math"], U, "fell back"),
    (["Flash attention kernel not used because: head_dim"], U, "fell back"),
    (["some unrelated deprecation"], N, "ran"),
])
def test_a_fallback_warning_means_not_supported(messages: list[str], level: Level,
                                                words: str) -> None:
    outcome = judge_run("EFFICIENT_ATTENTION", messages, "xpu:0 (float16)")
    assert outcome.level is level and words in outcome.reason


@pytest.mark.parametrize(("gate", "outcome", "level", "words"), [
    (RuleGate(False, "needs sm_89", "ScaledBlas.cpp"), ProbeOutcome(U, "raised RuntimeError: x"), U,
     "needs sm_89 [ScaledBlas.cpp] (raised"),
    (RuleGate(False, "needs sm_89"), ProbeOutcome(N, "ran"), N,
     "ran, although the vendor rule says PyTorch refuses it here: needs sm_89"),
    (RuleGate(True, "ok"), ProbeOutcome(U, "raised RuntimeError: built without it"), U,
     "built without"),
    (RuleGate(None, "no rule"), ProbeOutcome(N, "ran"), N, "ran"),
])
def test_probe_outcomes_are_read_against_the_vendor_rule(gate: RuleGate, outcome: ProbeOutcome,
                                                         level: Level, words: str) -> None:
    judged = judge(gate, outcome)
    assert judged.level is level and words in judged.reason


def _gpu(vendor: str, arch: str = "a", **facts: object) -> DeviceIdentity:
    return DeviceIdentity(type="cuda", index=0, vendor=vendor, name="GPU", arch=arch, facts=facts)


@pytest.mark.parametrize(("capability", "identity", "allowed", "words"), [
    # ScaledBlasDeviceUtils.cpp scaled_mm_arch_allowed: sm_89 or major >= 9
    ("mm.scaled", _gpu("nvidia", compute_capability=8.6, platform="linux"), False, "sm_89"),
    ("mm.scaled", _gpu("nvidia", compute_capability=9.0, platform="linux"), True, "sm_89"),
    # ScaledBlas.cpp _scaled_mm_is_fnuz: fnuz is gfx942's format
    ("dtype.fp8_e4m3fnuz", _gpu("amd", "gfx942", gcn_arch="gfx942", rocm_version="6.3"), True, ""),
    ("dtype.fp8_e4m3fnuz", _gpu("amd", "gfx90a", gcn_arch="gfx90a", rocm_version="6.3"), False, "gfx942"),
    # the version decides, and it is missing: the rule says unknown, so only running can tell
    ("dtype.fp8_e4m3fn", _gpu("amd", "gfx950", gcn_arch="gfx950"), None, ""),
    ("dtype.fp8_e4m3fn", None, None, "no builtin backend describes this device"),
])
def test_the_gate_a_probe_reads_is_the_vendor_rule(capability: str,
                                                   identity: DeviceIdentity | None,
                                                   allowed: bool | None, words: str) -> None:
    """PyTorch's gate logic lives once, in capabilities.yaml: the probe side asks the rule."""
    gate = gate_for(capability, identity)
    assert gate.allowed is allowed and words in gate.reason
    if identity is not None and allowed is not None:
        assert gate.source and ".cpp" in gate.source  # the rule's citation travels with it


def test_a_changed_rule_changes_what_the_probe_expects(monkeypatch: pytest.MonkeyPatch) -> None:
    """One source: a catalogue whose nvidia mm.scaled rule refuses everything makes the probe
    side refuse, with that rule's reason and source."""
    from pytest_devcaps.config.catalogue import parse_catalogue
    from pytest_devcaps.config.yamlsource import parse_yaml
    from pytest_devcaps.probes import rule_gate as module

    text = (b"devcaps: 1\ncapabilities:\n  mm.scaled: {description: scaled matmul}\nvendors:\n"
            b"  nvidia:\n"
            b"    mm.scaled:\n      - level: unsupported\n        reason: 'refused on {arch}'\n"
            b"        source: 'my.cpp check'\n")
    custom = parse_catalogue(parse_yaml(text.decode(), "c.yaml"), "c.yaml", text)
    monkeypatch.setattr(module, "load_catalogue", lambda: custom)
    gate = gate_for("mm.scaled", _gpu("nvidia", compute_capability=9.0, platform="linux"))
    assert gate == RuleGate(False, "refused on a", "my.cpp check")


def test_the_live_identity_comes_from_the_backends() -> None:
    identity = live_identity("cpu")
    assert identity is not None and identity.vendor == "cpu" and "isa" in identity.rule_facts()
    assert live_identity("nosuchdevice:3") is None
    # the cpu rules answer for this CPU whatever its ISA: fp8 is emulated (an upcast or oneDNN)
    assert rule_gate("mm.scaled", "cpu").allowed is True


def test_no_probe_restates_a_gate() -> None:
    """The probes decide nothing from device facts themselves: no module under probes/ reads a
    fact a vendor rule compares (compute_capability, gcn_arch, rocm_version, isa...)."""
    from pathlib import Path

    import pytest_devcaps.probes as probes

    facts = ("compute_capability", "gcn_arch", "rocm_version", "cuda_version", "gaudi_generation")
    for path in Path(probes.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert not [f for f in facts if f'"{f}"' in text or f"'{f}'" in text], path.name
