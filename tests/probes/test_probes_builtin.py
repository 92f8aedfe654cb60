"""Every builtin probe's answer on this machine, checked against real torch behaviour."""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.probes import ProbeSpec, builtin_probes, run_probes
from pytest_devcaps.qualnames import resolve

N, U = Level.NATIVE, Level.UNSUPPORTED

# What each probe must answer, keyed by torch.accelerator.current_accelerator()'s type
# (None: a CPU-only build), then by device. Add a table when running on another build.
EXPECTED: dict[str | None, dict[str, dict[str, Level]]] = {
    None: {
        "cpu": {
            "dtype.fp64": N, "dtype.fp16": N, "dtype.bf16": N, "dtype.tf32": U,
            "dtype.fp8_e4m3fn": N, "dtype.fp8_e5m2": N,
            "dtype.fp8_e4m3fnuz": N, "dtype.fp8_e5m2fnuz": N,
            "mm.scaled": N,  # emulated on CPU; the vendor rule says so, the probe sees it run
            "mm.scaled_rowwise": N, "mm.int8": N,
            "attention.flash": N, "attention.mem_efficient": U, "attention.cudnn": U,
            "runtime.graphs": U, "runtime.streams": U, "runtime.events": U,
            "runtime.memory_stats": U, "runtime.pinned_memory": U,
            "compile.inductor": N, "compile.triton": U,
            "dist.gloo": N, "dist.nccl": U, "dist.xccl": U, "dist.hccl": U, "dist.mpi": U,
        },
    },
}

# Reasons users will read in skip messages: the important words must be there.
REASON_FRAGMENTS: dict[str | None, dict[str, dict[str, str]]] = {
    None: {
        "cpu": {
            "dtype.tf32": "tf32 is a tensor-core format; cpu matmul stays fp32",
            "attention.mem_efficient": "SDPBackend.EFFICIENT_ATTENTION raised RuntimeError",
            "compile.triton": "Triton has no CPU backend (TRITON_INTERPRET only)",
            "compile.inductor": "C++ compiler",
            "dist.nccl": "nccl is not available",
            "runtime.graphs": "no graph capture for cpu",
        },
    },
}

ACCELERATOR = getattr(torch.accelerator.current_accelerator(), "type", None)
TABLE = EXPECTED.get(ACCELERATOR, {})
CASES = [(device, cap) for device, caps in TABLE.items() for cap in caps]


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


def test_an_expectation_table_exists_for_this_build() -> None:
    assert TABLE, f"add an EXPECTED table for accelerator {ACCELERATOR!r}"


def test_one_isolated_module_level_probe_per_capability() -> None:
    probes = builtin_probes()
    assert set(probes) == set(EXPECTED[None]["cpu"])
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
    fragment = REASON_FRAGMENTS.get(ACCELERATOR, {}).get(device, {}).get(capability)
    if fragment:
        assert fragment in outcome.reason


def test_isolated_and_in_process_answers_agree(answers: dict[str, dict[str, ProbeOutcome]]) -> None:
    # in-process, skipping the process-group probe: it would create a group in pytest's process
    for device, expected in TABLE.items():
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
    per_device = cold.cpu_seconds / len(TABLE)
    # about 1.2 s here against 1.6 s for a bare import (the child skips interpreter teardown);
    # importing inductor or compiling would add well over a second
    assert per_device < import_torch + 1.0, (per_device, import_torch)
