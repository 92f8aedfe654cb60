from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pytest_devcaps.config import (
    Catalogue,
    CapabilitySpec,
    VendorRule,
    classify,
    compile_expression,
    load_catalogue,
    shipped_catalogue_path,
)
from pytest_devcaps.errors import ConfigError, UnknownCapabilityError
from pytest_devcaps.model import DeviceIdentity, Level

REQUIRED = [
    "dtype.fp64", "dtype.fp16", "dtype.bf16", "dtype.tf32", "dtype.fp8_e4m3fn", "dtype.fp8_e5m2",
    "dtype.fp8_e4m3fnuz", "dtype.fp8_e5m2fnuz", "mm.scaled", "mm.scaled_rowwise", "mm.int8",
    "attention.flash", "attention.mem_efficient", "attention.cudnn", "runtime.graphs",
    "runtime.streams", "runtime.events", "runtime.memory_stats", "runtime.pinned_memory",
    "compile.inductor", "compile.triton", "dist.gloo", "dist.nccl", "dist.xccl", "dist.hccl",
    "dist.mpi",
]


def test_shipped_catalogue_declares_every_required_capability(catalogue: Catalogue) -> None:
    assert set(REQUIRED) <= set(catalogue.names())
    assert catalogue.names() == sorted(catalogue.names())


def test_shipped_names_probes_and_implications_are_well_formed(catalogue: Catalogue) -> None:
    for name, spec in catalogue.capabilities.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z0-9][a-z0-9_]*", name)
        assert spec.name == name and spec.description
        assert all(target in catalogue.capabilities for target in spec.implies)
    from pytest_devcaps.probes import builtin_probes

    # A builtin probe is registered under the capability it measures (importing them is torch-free).
    assert set(builtin_probes()) <= set(catalogue.capabilities)
    assert "mm.scaled" in catalogue.capabilities["mm.scaled_rowwise"].implies
    order = catalogue.implication_order()
    assert sorted(order) == catalogue.names()
    for name in order:  # every capability comes after what it implies
        assert all(order.index(target) < order.index(name)
                   for target in catalogue.capabilities[name].implies)


def test_shipped_dtypes_are_torch_dtypes_gated_once(catalogue: Catalogue) -> None:
    import torch

    gated = [dtype for spec in catalogue.capabilities.values() for dtype in spec.dtypes]
    assert len(gated) == len(set(gated))
    for dtype in gated:
        assert isinstance(getattr(torch, dtype, None), torch.dtype), dtype
    assert catalogue.capability_for_dtype("bfloat16") == "dtype.bf16"
    assert catalogue.capability_for_dtype("complex128") == "dtype.fp64"
    assert catalogue.capability_for_dtype("float32") is None  # every device computes fp32


def test_every_shipped_rule_reason_names_what_was_found(catalogue: Catalogue) -> None:
    for vendor, by_cap in catalogue.rules.items():
        for capability, rules in by_cap.items():
            assert rules, (vendor, capability)
            for rule in rules:
                assert "found" in rule.reason, (vendor, capability, rule.reason)
                assert rule.line is not None


def test_shipped_catalogue_is_the_repository_file_and_cached() -> None:
    assert shipped_catalogue_path().resolve() == (
        Path(__file__).resolve().parents[2] / "capabilities.yaml")
    assert load_catalogue() is load_catalogue()
    assert load_catalogue().digest == load_catalogue(shipped_catalogue_path()).digest


def test_config_layer_does_not_import_torch() -> None:
    import subprocess

    code = ("import sys; from pytest_devcaps.config import load_catalogue, list_profiles, "
            "load_profile, classify; c = load_catalogue(); "
            "[classify(c, load_profile(n, c).identities[0]) for n in list_profiles()]; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_check_name_suggests_the_closest_name(catalogue: Catalogue) -> None:
    assert catalogue.check_name("dtype.bf16").name == "dtype.bf16"
    with pytest.raises(UnknownCapabilityError) as info:
        catalogue.check_name("dtype.bfloat16")
    assert info.value.suggestion == "dtype.bf16"
    assert "did you mean 'dtype.bf16'" in str(info.value)
    with pytest.raises(KeyError):
        catalogue.check_name("attention.flsh")


def _device(vendor: str = "openreg", **facts: object) -> DeviceIdentity:
    return DeviceIdentity(type="openreg", index=0, vendor=vendor, name="OpenReg", arch="v1",
                          facts=facts)


def test_with_capabilities_adds_specs_and_rules(catalogue: Catalogue) -> None:
    spec = CapabilitySpec("openreg.fancy_op", "a vendor op", implies=("dtype.bf16",))
    rules = {"openreg": {
        "openreg.fancy_op": (VendorRule(Level.NATIVE, "v1 has it; found {arch}"),),
        "dtype.bf16": (VendorRule(Level.EMULATED, "no bf16 units on {arch}",
                                  when=compile_expression("arch == 'v1'")),),
    }}
    extended = catalogue.with_capabilities([spec], rules)
    assert "openreg.fancy_op" in extended and "openreg.fancy_op" not in catalogue
    assert extended.digest != catalogue.digest
    verdicts = classify(extended, _device())
    assert verdicts["openreg.fancy_op"].level is Level.NATIVE
    assert verdicts["openreg.fancy_op"].reason == "v1 has it; found v1"
    assert verdicts["dtype.bf16"].level is Level.EMULATED
    # A vendor without rules gets only the "*" verdicts.
    assert set(classify(catalogue, _device())) == {"dist.nccl", "dist.xccl", "dist.hccl", "dist.mpi"}
    # Triples work too, and hook rules come before the shipped ones.
    nvidia_override = catalogue.with_capabilities(
        [], [("nvidia", "dtype.fp64", VendorRule(Level.UNKNOWN, "hook says so; found {arch}"))])
    h100 = DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="H100", arch="sm_90",
                          facts={"compute_capability": 9.0})
    assert classify(nvidia_override, h100)["dtype.fp64"].level is Level.UNKNOWN
    assert classify(catalogue, h100)["dtype.fp64"].level is Level.NATIVE


def test_with_capabilities_refuses_conflicts_and_bad_names(catalogue: Catalogue) -> None:
    # Re-declaring identically is fine.
    same = catalogue.capabilities["dtype.bf16"]
    assert catalogue.with_capabilities([same]).capabilities["dtype.bf16"] == same
    with pytest.raises(ConfigError, match="already declared"):
        catalogue.with_capabilities([CapabilitySpec("dtype.bf16", "other")])
    with pytest.raises(ConfigError, match="invalid capability name"):
        catalogue.with_capabilities([CapabilitySpec("FancyOp", "x")])
    with pytest.raises(ConfigError, match="did you mean 'dtype.bf16'"):
        catalogue.with_capabilities([CapabilitySpec("vendor.op", "x", ("dtype.bf61",))])
    with pytest.raises(ConfigError, match="unknown capability 'dtype.bf61'"):
        catalogue.with_capabilities([], [("x", "dtype.bf61", VendorRule(Level.NATIVE, "r"))])


def test_reason_templates_substitute_facts_only(catalogue: Catalogue) -> None:
    rule = VendorRule(Level.NATIVE,
                      "{arch} {isa} {cudnn_version} {nope} {arch.__class__} {0} {{arch}}")
    device = _device(isa=["avx2", "amx_bf16"], cudnn_version=None)
    assert rule.verdict(device.rule_facts()).reason == (
        "v1 [avx2, amx_bf16] none unknown {arch.__class__} {0} {v1}")


def test_catalogue_is_hashable_and_compared_by_content(catalogue: Catalogue) -> None:
    import hashlib

    raw = Path(catalogue.source).read_bytes()
    assert catalogue.digest == hashlib.sha256(raw).hexdigest()
    same = load_catalogue(catalogue.source)
    assert same == catalogue and hash(same) == hash(catalogue)
    extended = catalogue.with_capabilities([CapabilitySpec("vendor.op", "x")])
    assert extended != catalogue and extended.digest != catalogue.digest
    # Adding nothing changes nothing.
    assert catalogue.with_capabilities([]).digest == catalogue.digest


def test_config_objects_pickle_for_worker_processes(catalogue: Catalogue) -> None:
    import pickle

    from pytest_devcaps.config import load_profile

    extended = catalogue.with_capabilities(
        [], [("NVIDIA", "dtype.fp64", VendorRule(Level.UNKNOWN, "r", compile_expression("sm > 1")))])
    assert "nvidia" in extended.rules  # vendor names are lower-cased like identities
    clone = pickle.loads(pickle.dumps(extended))
    assert clone == extended and dict(clone.capabilities) == dict(extended.capabilities)
    h100 = load_profile("nvidia-h100", catalogue)
    assert pickle.loads(pickle.dumps(h100)) == h100
    assert classify(clone, h100.identities[0]) == classify(extended, h100.identities[0])
