"""Issue 32 item 2: PyTorch's test-suite gates live in one table (pytest_devcaps.gate_table),
which the runtime gate reader and the lint both read: for every gate of the table the lint knows,
the lint's reading agrees with the table's (device count, capability, CUDA or not)."""

from __future__ import annotations

import pytest

from pytest_devcaps import gate_table
from pytest_devcaps.lint import rules

SHARED = [(spelling, row) for row in gate_table.GATES.values() for spelling in (row.name, *row.spellings)
          if spelling in rules.GATE_NAMES or spelling in rules.DECORATORS]


def lint_gate(name: str) -> tuple[rules.Gate, rules.DecoratorRule | None]:
    rule = rules.DECORATORS.get(name)
    return (rule.gate if rule is not None else rules.GATE_NAMES[name]), rule


def test_the_lint_and_the_reader_share_the_table() -> None:
    assert len(SHARED) >= 30
    # the names the earlier drift left out of one side (issue 32): HAS_MULTIGPU is two devices
    assert rules.GATE_NAMES["HAS_MULTIGPU"].need.devices == gate_table.GATES["HAS_MULTIGPU"].devices == 2


@pytest.mark.parametrize(("name", "row"), SHARED, ids=[s for s, _ in SHARED])
def test_each_shared_gate_means_what_the_table_says(name: str, row: gate_table.PyTorchGate) -> None:
    gate, rule = lint_gate(name)
    need = gate.need
    if need.blockers:  # kept as written (ROCm exclusions, one GPU model, cuDNN, dtypesIfCUDA...)
        assert row.skips or row.vendor or row.hardware in ("cuda", None, "generic") or rule is not None
        return
    if row.capability is not None:
        assert row.capability in need.capabilities, (name, need)
    if row.count_argument is None and row.devices:
        assert need.devices == row.devices
    if rule is not None and rule.count_arg:
        assert row.count_argument is not None
    # a gate the table calls CUDA's keeps CUDA as its vendor; the table's accelerator gates
    # (HAS_GPU: PyTorch's any GPU) are any accelerator
    if row.hardware == "cuda" and need.accelerator:
        assert need.vendors in (("cuda",), ()), need
    if row.hardware == gate_table.ACCELERATOR:
        assert not need.vendors or need.vendors == ("cuda",)


def test_flags_of_other_device_types_name_them_without_being_findings() -> None:
    for name in ("TEST_XPU", "HAS_XPU", "TEST_MPS", "TEST_HPU", "TEST_PRIVATEUSE1"):
        assert name not in rules.GATE_NAMES
        assert rules.OTHER_VENDOR_FLAGS[name] == gate_table.BY_SPELLING[name].device_types[0]
