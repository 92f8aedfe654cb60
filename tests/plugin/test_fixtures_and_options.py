"""Device-generic fixtures and option precedence (command line > env > ini)."""

from __future__ import annotations

import pytest

DEVICE_TEST = """
import torch

def test_where(device, device_type):
    assert isinstance(device, torch.device)
    assert device.type == device_type
"""


def test_device_fixture_ids_and_types(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("-v")
    result.stdout.fnmatch_lines(["*test_where?cpu? PASSED*"])


def test_devcaps_fixture_gives_records(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_devcaps import Level

        def test_view(devcaps, device):
            assert devcaps.device == str(device)
            record = devcaps["dist.gloo"]
            assert record.capability == "dist.gloo" and record.device == str(device)
            assert devcaps.has("dist.gloo") == record.level.available
            assert devcaps.level("dtype.bf16") is Level.UNSUPPORTED
            assert devcaps["dtype.bf16"].source == "cli"
        """
    )
    result = pytester.runpytest("--devcaps-devices=cpu", "--devcaps-set=dtype.bf16=unsupported")
    result.assert_outcomes(passed=1)


def test_dist_backend_and_runtime_helpers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_backend(dist_backend, device):
            assert dist_backend == str(torch.distributed.get_default_backend_for_device(device))

        def test_runtime(device_runtime, device):
            device_runtime.manual_seed(3)
            a = torch.rand(3, device=device)
            device_runtime.manual_seed(3)
            b = torch.rand(3, device=device)
            device_runtime.synchronize()
            device_runtime.empty_cache()
            assert torch.equal(a, b)
        """
    )
    result = pytester.runpytest("--devcaps-devices=cpu")
    result.assert_outcomes(passed=2)


def test_dist_backend_skips_when_registry_says_missing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_backend(dist_backend):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu", "--devcaps-set=dist.gloo=unsupported@cpu")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*requires dist.gloo on cpu: unsupported (cli*"])


def test_except_that_leaves_no_device_type_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    # Here cpu is the only device type: leaving it out would leave an empty parameter set,
    # every device test skipped as "got empty parameter set" and exit 0.
    result = pytester.runpytest("--devcaps-except=cpu", "-rs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *--devcaps-except: no device type left to run device tests "
                                 "on (present: cpu)"])
    result.stdout.no_fnmatch_line("*empty parameter set*")


def test_unknown_device_type_is_a_usage_error_naming_its_source(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("--devcaps-devices=cpu,cdua")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *--devcaps-devices*unknown device type 'cdua' (did you mean 'cuda'?)*"])

    monkeypatch.setenv("PYTEST_DEVCAPS_DEVICES", "xpuu")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *PYTEST_DEVCAPS_DEVICES environment variable*'xpuu'*"])


def test_precedence_cli_over_env_over_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\ndevcaps_devices = ini_bogus\n")
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *ini option devcaps_devices*ini_bogus*"])

    monkeypatch.setenv("PYTEST_DEVCAPS_DEVICES", "cpu")
    pytester.runpytest().assert_outcomes(passed=1)  # env beats ini

    monkeypatch.setenv("PYTEST_DEVCAPS_DEVICES", "env_bogus")
    pytester.runpytest("--devcaps-devices=cpu").assert_outcomes(passed=1)  # cli beats env


def test_overrides_option_env_and_ini_paths(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.mkdir("cfg")
    (pytester.path / "cfg" / "caps.yaml").write_text(
        "devcaps: 1\noverrides:\n  - match: {type: cpu}\n    set:\n      dtype.fp16: {level: unsupported, reason: lab policy}\n"
    )
    pytester.makeini("[pytest]\ndevcaps_overrides = cfg/caps.yaml\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("dtype.fp16")
        def test_half(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*requires dtype.fp16 on cpu: unsupported (override:*caps.yaml: lab policy)*"])

    # --devcaps-set (command line) beats the override file.
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu", "--devcaps-set=dtype.fp16=native")
    result.assert_outcomes(passed=1)


def test_missing_override_file_names_source(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--devcaps-overrides=nope.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *--devcaps-overrides*nope.yaml*does not exist*"])


def test_bad_override_yaml_is_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", caps="devcaps: 1\noverrides:\n  - set:\n      dtype.bf61: native\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--devcaps-overrides=caps.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *caps.yaml:4*dtype.bf61*did you mean 'dtype.bf16'*"])


def test_bad_probe_timeout_and_set_values(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--devcaps-probe-timeout=soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *--devcaps-probe-timeout: must be a finite number of seconds *, "
                                 "got 'soon'"])
    result = pytester.runpytest("--devcaps-set=dtype.bf16=sorta")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *invalid level 'sorta'*"])
    result = pytester.runpytest("--devcaps-set=dtype.bf61=native")
    result.stderr.fnmatch_lines(["ERROR: *unknown capability 'dtype.bf61' (did you mean 'dtype.bf16'?)*"])


def test_fixtures_are_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fixtures")
    for name in ("device", "device_type", "dtype", "devcaps", "dist_backend", "device_runtime"):
        result.stdout.fnmatch_lines([f"{name} -- *"])
