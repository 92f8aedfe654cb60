"""Every class of bad YAML raises ConfigError naming the file, the line and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from pytest_devcaps.config import Catalogue, load_catalogue, load_overrides, load_profile
from pytest_devcaps.config.yamlsource import LineDict, LineList, parse_yaml
from pytest_devcaps.errors import ConfigError

Write = Callable[..., Path]

CATALOGUE_HEAD = """\
devcaps: 1
capabilities:
  dtype.bf16:
    description: bf16
    dtypes: [bfloat16]
  mm.scaled:
    description: scaled mm
    implies: [dtype.bf16]
"""


def _error(load: Callable[[Path], object], path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(path)
    error = info.value
    assert error.file == str(path)
    assert str(error).startswith(f"{path}:{error.line}: " if error.line else f"{path}: ")
    return error


def test_line_dict_records_lines() -> None:
    document = parse_yaml("a: 1\nb:\n  - x\n  - {c: 2}\n")
    assert isinstance(document, LineDict) and document.lines == {"a": 1, "b": 2}
    assert isinstance(document["b"], LineList) and document["b"].lines == [3, 4]
    assert document["b"][1].lines == {"c": 4}


# --- catalogue -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ("devcaps: 1\ncapabilities: {a: [\n", 3, None, ["YAML syntax error"]),
        ("devcaps: 1\ncapabilities:\n  x: 1\n   y: 2\n", 4, None, ["YAML syntax error"]),
        ("", None, None, ["empty"]),
        ("- just\n- a list\n", 1, None, ["expected a mapping"]),
        ("capabilities: {}\n", 1, "devcaps", ["devcaps: 1"]),
        ("devcaps: 2\ncapabilities: {}\n", 1, "devcaps", ["unsupported schema version 2"]),
        ("devcaps: '1'\ncapabilities: {}\n", 1, "devcaps", ["unsupported schema version '1'"]),
        ("devcaps: 1\ncapabilites: {}\n", 2, "capabilites",
         ["unknown key 'capabilites'", "did you mean 'capabilities'"]),
        ("devcaps: 1\nvendors: {}\n", 1, None, ["missing required key 'capabilities'"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    descripton: x\n", 10,
         "capabilities.dtype.fp16.descripton", ["did you mean 'description'"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    description: x\n    probe: dtype.fp16\n", 11,
         "capabilities.dtype.fp16.probe",
         ["unknown key 'probe'", "valid keys: aliases, description, dtypes, implies"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    description: x\n    dtypes: [float16, bfloat16]\n", 9,
         "capabilities.dtype.fp16", ["dtype 'bfloat16' is already gated by 'dtype.bf16'"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    description: x\n    dtypes: [torch.float16]\n", 11,
         "capabilities.dtype.fp16.dtypes", ["invalid torch dtype name"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    description: x\n    implies: [dtype.fp8]\n"
         "  dtype.fp8:\n    description: y\n    implies: [dtype.fp16]\n", 9,
         "capabilities.dtype.fp16", ["implies forms a cycle: dtype.fp16 -> dtype.fp8 -> dtype.fp16"]),
        (CATALOGUE_HEAD + "  Dtype.FP16:\n    description: x\n", 9,
         "capabilities.Dtype.FP16", ["invalid capability name", "<category>.<name>"]),
        (CATALOGUE_HEAD + "  fp16:\n    description: x\n", 9,
         "capabilities.fp16", ["invalid capability name"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    description: [x]\n", 10,
         "capabilities.dtype.fp16.description", ["expected a string, found a list"]),
        (CATALOGUE_HEAD + "  dtype.fp16:\n    description: x\n"
         "    implies: [dtype.bf61]\n", 11, "capabilities.dtype.fp16.implies",
         ["unknown capability 'dtype.bf61'", "did you mean 'dtype.bf16'"]),
        (CATALOGUE_HEAD + "  dtype.bf16:\n    description: again\n", 9,
         "dtype.bf16", ["duplicate key", "line 3"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf61:\n      - level: native\n"
         "        reason: r\n", 11, "vendors.nvidia.dtype.bf61",
         ["unknown capability 'dtype.bf61'", "did you mean 'dtype.bf16'"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n      - level: nativ\n"
         "        reason: r\n", 12, "vendors.nvidia.dtype.bf16[0].level",
         ["invalid level 'nativ'", "native, emulated, unsupported, unknown"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n      - level: 3\n"
         "        reason: r\n", 12, "vendors.nvidia.dtype.bf16[0].level",
         ["expected a level (native, emulated, unsupported, unknown)"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n      - level: native\n"
         "        reasn: r\n", 13, "vendors.nvidia.dtype.bf16[0].reasn",
         ["unknown key 'reasn'", "did you mean 'reason'"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n      - level: native\n",
         12, "vendors.nvidia.dtype.bf16[0]", ["missing required key 'reason'"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n"
         "      - when: \"arch.startswith('sm')\"\n        level: native\n        reason: r\n",
         12, "vendors.nvidia.dtype.bf16[0].when", ["function call", "arch.startswith('sm')"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n"
         "      - when: \"sm >=\"\n        level: native\n        reason: r\n",
         12, "vendors.nvidia.dtype.bf16[0].when", ["invalid rule expression"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16:\n"
         "      - level: native\n        reason: r\n      - level: emulated\n        reason: r\n",
         14, "vendors.nvidia.dtype.bf16[1]", ["can never apply", "line 12"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16: []\n", 11,
         "vendors.nvidia.dtype.bf16", ["at least one rule"]),
        (CATALOGUE_HEAD + "vendors:\n  nvidia:\n    dtype.bf16: native\n", 11,
         "vendors.nvidia.dtype.bf16", ["expected a list, found a string"]),
        (CATALOGUE_HEAD + "vendors:\n  NVIDIA Corp:\n    dtype.bf16: []\n", 10,
         "vendors.NVIDIA Corp", ["invalid vendor name"]),
        (CATALOGUE_HEAD + "vendors:\n  nvida:\n    dtype.bf16: []\n", 10,
         "vendors.nvida", ["unknown vendor 'nvida'", "did you mean 'nvidia'"]),
    ],
)
def test_bad_catalogue(write_yaml: Write, text: str, line: int | None, key: str | None,
                       words: list[str]) -> None:
    error = _error(load_catalogue, write_yaml(text))
    assert error.line == line
    assert error.key == key
    for word in words:
        assert word in str(error)
    if key:
        assert f"{key}: " in str(error)


def test_minimal_catalogue_and_custom_vendor(write_yaml: Write) -> None:
    catalogue = load_catalogue(write_yaml(CATALOGUE_HEAD))
    assert catalogue.names() == ["dtype.bf16", "mm.scaled"]
    assert catalogue.rules == {}
    custom = load_catalogue(write_yaml(CATALOGUE_HEAD + "vendors:\n  openreg:\n    dtype.bf16:\n"
                                       "      - {level: native, reason: r}\n", "custom.yaml"))
    assert list(custom.rules) == ["openreg"]


def test_unreadable_catalogue(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    assert "file not found" in str(_error(load_catalogue, path))
    path.write_bytes(b"devcaps: 1\n\xff\xfe\n")
    assert "not UTF-8" in str(_error(load_catalogue, path))


# --- overrides ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("body", "line", "key", "words"),
    [
        ("overrides:\n  - set: {dtype.bf61: native}\n", 3, "overrides[0].set.dtype.bf61",
         ["unknown capability 'dtype.bf61'", "did you mean 'dtype.bf16'"]),
        ("overrides:\n  - set: {dtype.bf16: fast}\n", 3, "overrides[0].set.dtype.bf16",
         ["invalid level 'fast'", "native, emulated, unsupported, unknown"]),
        ("overrides:\n  - set:\n      dtype.bf16: {levl: native}\n", 4,
         "overrides[0].set.dtype.bf16.levl", ["did you mean 'level'"]),
        ("overrides:\n  - set:\n      dtype.bf16: {reason: x}\n", 4,
         "overrides[0].set.dtype.bf16", ["missing required key 'level'"]),
        ("overrides:\n  - mach: {vendor: amd}\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].mach", ["unknown key 'mach'", "did you mean 'match'"]),
        ("overrides:\n  - match: {vendor: amd}\n", 3, "overrides[0]",
         ["missing required key 'set'"]),
        ("overrides:\n  - set: {}\n", 3, "overrides[0].set", ["at least one"]),
        ("overrides:\n  - match: vendor=amd\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].match", ["expected a mapping, found a string"]),
        ("overrides:\n  - match: {vendor: {a: 1}}\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].match.vendor", ["expected a scalar or a list of scalars"]),
        ("overrides:\n  - match: {gpu-name: x}\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].match.gpu-name", ["invalid fact name"]),
        ("overrides:\n  - when: \"__import__('os')\"\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].when", ["function call"]),
        ("overrides:\n  - when: \"open('x')\"\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].when", ["function call"]),
        ("overrides:\n  - when: \"isa[0]\"\n    set: {dtype.bf16: native}\n", 3,
         "overrides[0].when", ["subscript"]),
        ("overrides: {a: 1}\n", 2, "overrides", ["expected a list"]),
        ("overide: []\n", 2, "overide", ["did you mean 'overrides'"]),
        ("overrides:\n  - set: {dtype.bf16: native}\n    set: {dtype.bf16: unknown}\n", 4,
         "set", ["duplicate key"]),
    ],
)
def test_bad_overrides(write_yaml: Write, catalogue: Catalogue, body: str, line: int,
                       key: str, words: list[str]) -> None:
    path = write_yaml("devcaps: 1\n" + body)
    error = _error(lambda p: load_overrides([p], catalogue), path)
    assert (error.line, error.key) == (line, key)
    for word in words:
        assert word in str(error)


def test_overrides_need_schema_version(write_yaml: Write, catalogue: Catalogue) -> None:
    error = _error(lambda p: load_overrides([p], catalogue), write_yaml("overrides: []\n"))
    assert error.key == "devcaps" and "devcaps: 1" in str(error)


def test_second_override_file_error_names_that_file(write_yaml: Write,
                                                    catalogue: Catalogue) -> None:
    good = write_yaml("devcaps: 1\noverrides: []\n", "good.yaml")
    bad = write_yaml("devcaps: 1\noverrides:\n  - set: {dtype.fp9: native}\n", "bad.yaml")
    error = _error(lambda p: load_overrides([good, p], catalogue), bad)
    assert error.line == 3


# --- profiles ----------------------------------------------------------------------------------

DEVICE = "    - {type: cuda, vendor: nvidia, arch: sm_90"


@pytest.mark.parametrize(
    ("body", "line", "key", "words"),
    [
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", memry_gib: 8}\n", 5,
         "profile.devices[0].memry_gib", ["did you mean 'memory_gib'"]),
        ("profile:\n  name: p\n  devices:\n    - {type: cuda, vendor: nvidia}\n", 5,
         "profile.devices[0]", ["missing required key 'arch'"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", count: 0}\n", 5,
         "profile.devices[0].count", ["at least 1"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", count: two}\n", 5,
         "profile.devices[0].count", ["expected an integer, found a string"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", memory_gib: lots}\n", 5,
         "profile.devices[0].memory_gib", ["expected a number"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", memory_gib: 1, memory_bytes: 1}\n",
         5, "profile.devices[0].memory_bytes", ["not both"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", facts: {arch: sm_80}}\n", 5,
         "profile.devices[0].facts.arch", ["device field"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + ", facts: {isa: [{a: 1}]}}\n", 5,
         "profile.devices[0].facts.isa", ["scalar"]),
        ("profile:\n  name: p\n  devices:\n    - {type: CUDA, arch: sm_90}\n", 5,
         "profile.devices[0].type", ["lower case"]),
        ("profile:\n  name: p\n  devices: []\n", 4, "profile.devices", ["at least one device"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + "}\n  fixed: {dtype.fp9: native}\n", 6,
         "profile.fixed.dtype.fp9", ["unknown capability 'dtype.fp9'", "did you mean"]),
        # dtype.fp8 is PyTorch's name, an alias: profile keys take the capability's own name
        ("profile:\n  name: p\n  devices:\n" + DEVICE + "}\n  fixed: {dtype.fp8: native}\n", 6,
         "profile.fixed.dtype.fp8", ["'dtype.fp8' is an alias of 'mm.scaled'"]),
        ("profile:\n  name: p\n  devices:\n" + DEVICE + "}\n  fixed: {dtype.bf16: yes}\n", 6,
         "profile.fixed.dtype.bf16", ["expected a level"]),
        ("profile:\n  nam: p\n  devices: []\n", 3, "profile.nam", ["did you mean 'name'"]),
        ("profiles: {}\n", 2, "profiles", ["did you mean 'profile'"]),
    ],
)
def test_bad_profiles(write_yaml: Write, catalogue: Catalogue, body: str, line: int, key: str,
                      words: list[str]) -> None:
    path = write_yaml("devcaps: 1\n" + body, "p.yaml")
    error = _error(lambda p: load_profile(p, catalogue), path)
    assert (error.line, error.key) == (line, key)
    for word in words:
        assert word in str(error)
