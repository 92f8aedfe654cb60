"""PyTorch's flags and conditions read against a device profile (marks/profile_gates.py)."""

from __future__ import annotations

import ast

import pytest

from pytest_devcaps.marks.profile_gates import Target, Undecided, ConditionReader, device_capability, flag
from pytest_devcaps.model import DeviceIdentity


def identity(**fields: object) -> DeviceIdentity:
    base: dict[str, object] = {"type": "cuda", "index": 0, "vendor": "nvidia", "name": "x",
                               "arch": "sm_90"}
    base.update(fields)
    return DeviceIdentity(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("device", "capability"), [
    (identity(facts={"compute_capability": 8.9}), (8, 9)),
    (identity(facts={"compute_capability": 12.0}), (12, 0)),
    (identity(arch="sm_100"), (10, 0)),
    (identity(facts={"sm": 75}, arch=""), (7, 5)),
    (identity(vendor="amd", arch="gfx942", facts={"gcn_arch": "gfx942"}), (9, 4)),
    (identity(vendor="amd", arch="gfx90a"), (9, 0)),
    (identity(vendor="amd", arch="gfx1100"), (11, 0)),
    (identity(type="cpu", index=None, vendor="cpu", arch="avx2"), None),
])
def test_the_device_capability_torch_would_report(device: DeviceIdentity,
                                                  capability: tuple[int, int] | None) -> None:
    assert device_capability(device) == capability


def answers(found: dict[str, bool | None]) -> Target:
    return Target(identity(count=8, facts={"sm": 90}), lambda cap: found.get(cap))


def test_flags_come_from_the_profile_and_the_registry() -> None:
    h100 = answers({"dtype.fp8": True})
    assert (flag("TEST_CUDA", h100), flag("TEST_WITH_ROCM", h100), flag("TEST_MULTIGPU", h100)) == \
        (True, False, True)
    assert (flag("SM90OrLater", h100), flag("SM100OrLater", h100), flag("IS_SM90", h100)) == \
        (True, False, True)
    assert flag("PLATFORM_SUPPORTS_FP8", h100) is True
    assert flag("PLATFORM_SUPPORTS_FLASH_ATTENTION", h100) is None  # unknown answer
    mi300x = Target(identity(vendor="amd", arch="gfx942"), lambda cap: None)
    assert (flag("TEST_WITH_ROCM", mi300x), flag("SM80OrLater", mi300x)) == (True, True)
    with pytest.raises(Undecided):
        flag("TEST_WITH_SLOW", h100)


@pytest.mark.parametrize(("text", "value", "notes"), [
    ("not SM90OrLater", False, []),
    ("TEST_WITH_ROCM or not TEST_CUDA", False, []),
    ("torch.cuda.device_count() < 2", False, []),
    ("torch.cuda.get_device_capability() >= (9, 0)", True, []),
    ("torch.version.hip is not None", False, []),
    ("IS_WINDOWS and TEST_CUDA", False, ["IS_WINDOWS is this host's value (False): not a device fact"]),
])
def test_a_condition_as_written_is_read_against_the_profile(text: str, value: bool,
                                                            notes: list[str]) -> None:
    reader = ConditionReader(answers({}), {"IS_WINDOWS": False})
    node = ast.parse(text, mode="eval").body
    assert reader.read(node) is value
    assert reader.notes == notes


@pytest.mark.parametrize("text", ["has_magma()", "PLATFORM_SUPPORTS_FLASH_ATTENTION",
                                  "some_module.flag", "x + 1"])
def test_what_a_profile_does_not_say_is_undecided(text: str) -> None:
    reader = ConditionReader(answers({}), {"some_module": object()})
    node = ast.parse(text, mode="eval").body
    with pytest.raises(Undecided):
        reader.read(node)
