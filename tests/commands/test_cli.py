"""The devcaps command: probe (table and JSON), profiles, bad YAML exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main


def test_probe_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "devcaps: 1 device(s)" in out
    assert "cpu: " in out
    assert "dist.gloo" in out and "native" in out


def test_probe_json_has_every_record_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--json", "--device", "cpu"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"][0]["type"] == "cpu"
    record = next(r for r in data["capabilities"] if r["capability"] == "attention.flash")
    assert set(record) - {"history"} == {"capability", "device", "level", "reason", "source"}
    assert len({r["capability"] for r in data["capabilities"]}) >= 26


def test_probe_profile_and_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--json", "--profile", "amd-mi300x", "--set", "attention.flash=unsupported"]) == 0
    data = json.loads(capsys.readouterr().out)
    caps = {r["capability"]: r for r in data["capabilities"]}
    assert caps["dtype.fp8_e4m3fnuz"]["level"] == "native"
    assert caps["dtype.fp8_e4m3fn"]["level"] == "unsupported"
    assert caps["attention.flash"]["source"] == "cli"
    assert data["meta"]["profile"] == "amd-mi300x"


def test_profiles_lists_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in ("nvidia-h100", "nvidia-h200", "nvidia-b200", "nvidia-a100", "nvidia-rtx3090", "amd-mi300x",
                 "amd-mi355x", "intel-max-1550", "habana-gaudi3", "apple-m3", "cpu-amx"):
        assert name in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("devcaps: 1\noverrides:\n  - set:\n      dtype.bf61: native\n", "did you mean 'dtype.bf16'"),
        ("devcaps: 2\noverrides: []\n", "devcaps"),
        ("devcaps: 1\noverrides:\n  - set: {dtype.bf16: sorta}\n", "sorta"),
        ("devcaps: 1\noverrides:\n  - when: \"__import__('os')\"\n    set: {dtype.bf16: native}\n", "bad.yaml:3"),
        ("devcaps: 1\noverrides: [\n", "bad.yaml"),
    ],
)
def test_bad_yaml_exits_2_naming_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                      expected: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["probe", "--overrides", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devcaps: error: ")
    assert str(bad) in err and expected in err


def test_unknown_device_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--device", "tpu"]) == 2
    assert "no device matches tpu" in capsys.readouterr().err
    assert main(["probe", "--device", "gaudi"]) == 2
    # the cpu is always the first device
    assert capsys.readouterr().err.startswith("devcaps: error: --device: no device matches gaudi; devices: cpu")
    assert main(["probe", "--device", "cpuu"]) == 2
    assert "no device matches cpuu (did you mean 'cpu'?)" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--device", "cpu"], ["--json"], ["--profile", "amd-mi300x"]])
def test_probe_imports_no_pytest(flags: list[str]) -> None:
    """``devcaps probe`` runs outside pytest; importing pytest would cost a warm run ~0.16 s."""
    code = ("import sys; from pytest_devcaps.commands.main import main; status = main(sys.argv[1:]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')), "
            "file=sys.stderr); sys.exit(status)")
    result = subprocess.run([sys.executable, "-c", code, "probe", *flags], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "dtype.bf16" in result.stdout
    assert result.stderr.splitlines()[-1] == "[]"


def test_capability_matrix_has_a_column_per_device() -> None:
    from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level
    from pytest_devcaps.registry import CapabilityRegistry
    from pytest_devcaps.report.table import capability_matrix

    devices = [DeviceIdentity(type="cpu", index=None, vendor="cpu", name="cpu", arch="avx2"),
               DeviceIdentity(type="acme", index=0, vendor="acme", name="N1", arch="n1")]
    records = {
        "cpu": {"dtype.bf16": CapabilityRecord("dtype.bf16", "cpu", Level.EMULATED, "r", "probe")},
        "acme:0": {"dtype.bf16": CapabilityRecord("dtype.bf16", "acme:0", Level.NATIVE, "r", "vendor-rule")},
    }
    from pytest_devcaps.config.catalogue import parse_catalogue
    from pytest_devcaps.config.yamlsource import parse_yaml

    text = "devcaps: 1\ncapabilities:\n  dtype.bf16: {description: bf16}\n"
    catalogue = parse_catalogue(parse_yaml(text), "<test>", text.encode())
    lines = capability_matrix(CapabilityRegistry(devices, records, catalogue), devices)
    assert lines[0].split() == ["cpu", "acme:0"]
    assert lines[1].split() == ["dtype.bf16", "emulated/probe", "native/vendor-rule"]


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5", "soon"])
def test_probe_timeout_must_be_finite_and_positive(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["probe", "--probe-timeout", value])
    assert info.value.code == 2
    assert (f"devcaps probe: error: argument --probe-timeout: must be a finite number of seconds above 0 "
            f"and at most 86400, got '{value}'") in capsys.readouterr().err


def test_set_for_a_device_that_matches_nothing_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--set", "dtype.bf16=unsupported@cdua"]) == 2
    assert "no device here matches 'cdua'" in capsys.readouterr().err
    # With a profile, the profile's devices are the ones to match.
    assert main(["probe", "--json", "--profile", "nvidia-h100", "--set", "dtype.bf16=unsupported@cuda"]) == 0
    records = json.loads(capsys.readouterr().out)["capabilities"]
    assert next(r for r in records if r["capability"] == "dtype.bf16")["source"] == "cli"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_devcaps.version import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"pytest-devcaps {__version__}\n"
