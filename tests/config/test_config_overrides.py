from __future__ import annotations

from pathlib import Path
from typing import Callable

from pytest_devcaps.config import Catalogue, load_overrides
from pytest_devcaps.model import DeviceIdentity, Level

H100 = DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="NVIDIA H100", arch="sm_90",
                      facts={"compute_capability": 9.0, "cuda_version": "12.8"})
B200 = DeviceIdentity(type="cuda", index=1, vendor="nvidia", name="NVIDIA B200", arch="sm_100",
                      facts={"compute_capability": 10.0, "cuda_version": "12.6"})
MI300 = DeviceIdentity(type="cuda", index=0, vendor="amd", name="MI300X", arch="gfx942")
CPU = DeviceIdentity(type="cpu", index=None, vendor="cpu", name="Xeon", arch="amx",
                     facts={"isa": ["avx512", "amx_bf16"]})

Write = Callable[..., Path]


def test_load_and_match(write_yaml: Write, catalogue: Catalogue) -> None:
    path = write_yaml("""
        devcaps: 1
        overrides:
          - match: {vendor: nvidia, arch: [sm_90, sm_100]}
            set:
              dtype.fp8_e4m3fn: unsupported
              attention.flash: {level: emulated, reason: "driver bug 1234"}
          - when: "cuda_version >= '12.8'"
            match: {vendor: nvidia}
            set: {mm.scaled: unknown}
          - set: {dist.mpi: native}
          - match: {isa: amx_bf16}
            set: {dtype.bf16: emulated}
        """)
    first, second, third, fourth = load_overrides([path], catalogue)
    assert first.file == str(path) and first.line == 3
    assert dict(first.match) == {"vendor": ("nvidia",), "arch": ("sm_90", "sm_100")}
    assert first.settings["dtype.fp8_e4m3fn"].level is Level.UNSUPPORTED
    assert first.settings["dtype.fp8_e4m3fn"].reason == f"set in {path}:5"
    assert first.settings["attention.flash"].level is Level.EMULATED
    assert first.settings["attention.flash"].reason == "driver bug 1234"
    assert [first.matches(d) for d in (H100, B200, MI300, CPU)] == [True, True, False, False]
    # match AND when: B200 has CUDA 12.6.
    assert second.when is not None and second.when.text == "cuda_version >= '12.8'"
    assert [second.matches(d) for d in (H100, B200, MI300)] == [True, False, False]
    # No match, no when: every device.
    assert all(third.matches(d) for d in (H100, B200, MI300, CPU))
    # A list-valued fact matches when it contains the value.
    assert [fourth.matches(d) for d in (H100, CPU)] == [False, True]


def test_files_keep_their_order(write_yaml: Write, catalogue: Catalogue) -> None:
    early = write_yaml("devcaps: 1\noverrides:\n  - set: {dtype.bf16: native}\n", "a.yaml")
    late = write_yaml("devcaps: 1\noverrides:\n  - set: {dtype.bf16: unsupported}\n", "b.yaml")
    entries = load_overrides([early, str(late)], catalogue)
    assert [entry.file for entry in entries] == [str(early), str(late)]
    # Applied in order, the later file wins for the same capability.
    answer = {}
    for entry in entries:
        answer.update(entry.settings)
    assert answer["dtype.bf16"].level is Level.UNSUPPORTED


def test_empty_override_list_is_allowed(write_yaml: Write, catalogue: Catalogue) -> None:
    assert load_overrides([write_yaml("devcaps: 1\noverrides: []\n")], catalogue) == []
    assert load_overrides([], catalogue) == []


def test_numeric_and_version_match_values(write_yaml: Write, catalogue: Catalogue) -> None:
    path = write_yaml("""
        devcaps: 1
        overrides:
          - match: {compute_capability: 9.0, cuda_version: "12.8.0"}
            set: {dtype.tf32: unsupported}
        """)
    (entry,) = load_overrides([path], catalogue)
    assert entry.matches(H100) and not entry.matches(B200)
