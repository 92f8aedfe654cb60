"""Loading the plugin: autoload on/off, -p pytest_devcaps, -p no:devcaps, vendor hooks."""

from __future__ import annotations

import pytest

COUNT_CONFTEST = """
import pytest

CALLS = []

@pytest.hookimpl(optionalhook=True)
def pytest_devcaps_register_capabilities(registrar):
    CALLS.append(1)

def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"register_capabilities calls: {len(CALLS)}")
"""


@pytest.mark.parametrize("autoload", [True, False], ids=["autoload", "no-autoload"])
def test_dash_p_registers_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, autoload: bool) -> None:
    if autoload:
        monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    else:
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(COUNT_CONFTEST)
    pytester.makepyfile("def test_d(device): pass")
    result = pytester.runpytest_subprocess("-p", "pytest_devcaps")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines_random(["register_capabilities calls: 1", "devcaps: * device(s)*"])
    result.stdout.no_fnmatch_line("*already registered*")


def test_entry_point_name_also_works_with_dash_p(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile("def test_d(device): pass")
    result = pytester.runpytest_subprocess("-p", "pytest_devcaps.plugin")
    result.assert_outcomes(passed=1)


def test_disabled_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_d(): pass")
    result = pytester.runpytest_subprocess("-p", "no:devcaps")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("devcaps:*")


def test_plugin_import_is_cheap(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import subprocess, sys

        def test_import():
            code = "import sys, pytest_devcaps.plugin; print('torch' in sys.modules)"
            out = subprocess.check_output([sys.executable, "-c", code], text=True)
            assert out.strip() == "False"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_misspelled_hook_argument_is_a_validation_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_devcaps_register_backends(registrr):
            pass
        """
    )
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*PluginValidationError*for hook 'pytest_devcaps_register_backends'*",
                                 "*{'registrr'} are declared in the hookimpl but can not be found in the hookspec*"])


def test_a_misspelled_argument_in_a_conftest_found_by_collection_is_an_error(pytester: pytest.Pytester) -> None:
    """Our hook specs are added when a plugin implementing one is registered, not at start: a
    conftest of a sub-folder is registered during collection, and its misspelt argument must
    still be pluggy's validation error."""
    pytester.mkpydir("sub")
    pytester.path.joinpath("sub", "conftest.py").write_text(
        "def pytest_devcaps_register_capabilities(registrr):\n    pass\n")
    pytester.path.joinpath("sub", "test_x.py").write_text("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*PluginValidationError*for hook 'pytest_devcaps_register_capabilities'*"])


HOOK_SPEC_STATE = """
def test_specs(request):
    caller = getattr(request.config.hook, "pytest_devcaps_register_backends", None)
    print("SPEC", "absent" if caller is None else caller.has_spec())
"""


def test_hook_specs_are_added_only_where_a_session_needs_them(pytester: pytest.Pytester) -> None:
    """A session of plain tests adds none (pluggy reads every name of a spec module); one
    whose conftest implements a hook without ``optionalhook`` (pytest checks it before the
    first test) and one that builds its registry (which calls them) have them."""
    pytester.makepyfile(test_specs=HOOK_SPEC_STATE)
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SPEC absent"])

    pytester.makepyfile(test_device="def test_device(device):\n    assert device.type == 'cpu'\n")
    result = pytester.runpytest_subprocess("-s", "--devcaps-devices=cpu", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*SPEC True"])

    (pytester.path / "test_device.py").unlink()
    pytester.mkpydir("sub")
    pytester.path.joinpath("sub", "conftest.py").write_text(
        "def pytest_devcaps_register_backends(registrar):\n    raise AssertionError('not called')\n")
    pytester.path.joinpath("sub", "test_y.py").write_text("def test_y():\n    pass\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*SPEC True"])


def test_out_of_tree_backend_and_adjust_hook(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import dataclasses
        import pytest
        import torch
        from pytest_devcaps import DeviceIdentity, Fact, Level

        torch.utils.rename_privateuse1_backend("acme")

        class AcmeBackend:
            type = "acme"
            visible_devices_variable = "ACME_VISIBLE_DEVICES"
            facts = {"generation": Fact("Acme chip generation")}

            def is_available(self):
                return True

            def discover(self):
                return [DeviceIdentity(type="acme", index=0, vendor="acme", name="Acme N1",
                                       arch="n1", count=2, facts={"generation": 1})]

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_register_backends(registrar):
            registrar.add(AcmeBackend())

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_register_capabilities(registrar):
            registrar.capability("acme.sparse", "Acme sparse units")
            registrar.rule("acme", "acme.sparse", "native", "sparse units on {arch}", when="generation >= 1")
            registrar.rule("acme", "dtype.fp16", "native", "N1 has fp16")

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_adjust_results(device, records):
            if device.vendor != "acme":
                return None
            return [dataclasses.replace(r, level=Level.UNSUPPORTED, reason="lab says no",
                                        source="hook:conftest")
                    for r in records if r.capability == "dtype.bf16"]
        """
    )
    pytester.makepyfile(
        """
        import pytest

        def test_rule(devcaps, device):
            assert str(device) == "acme:0"
            record = devcaps["acme.sparse"]
            assert (record.level.value, record.source, record.reason) == ("native", "vendor-rule", "sparse units on n1")

        @pytest.mark.requires_capability("dtype.bf16")
        def test_bf16(device):
            pass

        @pytest.mark.requires_devices(2)
        def test_two(device):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-rs", "-v", "--devcaps-devices=acme", "--devcaps-probe-timeout=20")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*test_rule?acme? PASSED*",
                                 "*requires dtype.bf16 on acme:0: unsupported (hook:conftest: lab says no)*"])


def test_autoloaded_plugin_imports_no_torch_for_a_torch_free_suite(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(
        """
        import sys

        def test_free():
            assert "torch" not in sys.modules
            assert "pytest_devcaps.plugin" in sys.modules  # loaded, just not used
        """
    )
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("devcaps: * device(s)*")  # no registry, so no header


#: What a session of plain tests must not import: torch, YAML, the catalogue and the machinery
#: behind markers, parametrization, classification and distributed worlds.
MACHINERY = ("torch", "yaml", "pytest_devcaps.config", "pytest_devcaps.marks.evaluation",
             "pytest_devcaps.session.parametrize", "pytest_devcaps.marks.conditions",
             "pytest_devcaps.marks.classification", "pytest_devcaps.testcase",
             "pytest_devcaps.distributed.pool", "pytest_devcaps.registry.build",
             "pytest_devcaps.registry.inputs", "pytest_devcaps.model",
             "pytest_devcaps._util.current_test",
             # nothing of ours is set: the settings are not even read (issue 32 item 8)
             "pytest_devcaps.environment", "pytest_devcaps.session.resolved",
             "pytest_devcaps.session.state", "pytest_devcaps.session.plan",
             "pytest_devcaps.session.reporting", "pytest_devcaps.distributed",
             "pytest_devcaps.emu.config",
             # emu is loaded with the registry (the devcaps entry-point group), not as a pytest11
             # plugin; the error types and the hardware vocabulary only where something is wrong
             # or declared (each module costs every pytest session ~0.4 M instructions)
             "pytest_devcaps.emu", "pytest_devcaps.errors", "pytest_devcaps.marks.hardware")


#: What selecting builtin hardware classes must not load either: it checks the names against
#: the builtin vocabulary (classification), without torch, YAML or a registry.
NO_REGISTRY = ("torch", "yaml", "pytest_devcaps.registry.build", "pytest_devcaps.probes")


@pytest.mark.parametrize("selection, unwanted", [((), MACHINERY),
                                                 (("--devcaps-hardware=generic",), NO_REGISTRY)],
                         ids=["no-option", "hardware-selection"])
def test_a_session_of_plain_tests_imports_none_of_the_machinery(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, selection: tuple[str, ...],
        unwanted: tuple[str, ...]) -> None:
    """Checked after the whole session (collection, report lines, session finish), for
    functions and classes; the plugin still counts their hardware class (generic)."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makeconftest(
        f"""
        import sys

        def pytest_unconfigure(config):
            loaded = [name for name in {unwanted!r} if name in sys.modules]
            print("machinery loaded:", loaded)
        """
    )
    pytester.makepyfile(
        """
        class TestPlain:
            def test_method(self):
                pass

        def test_function():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-s", "-p", "no:randomly", *selection)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["devcaps: hardware classes: generic 2 (2 without a declared class)*",
                                 "machinery loaded: []"])


def test_registry_error_found_at_first_use_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_register_capabilities(registrar):
            registrar.probe("dtype.bf61", lambda device: None)
        """
    )
    pytester.makepyfile(test_a="def test_a(device): pass", test_b="def test_b(device): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "unknown capability 'dtype.bf61'" in errors[0], result.stderr.str()
    assert "did you mean 'dtype.bf16'" in errors[0]


def test_the_ini_keys_an_idle_session_looks_at_are_every_key_declared() -> None:
    """``options.any_given`` asks each of ``INI_KEYS``: a key declared but not listed would be
    ignored by a session that sets only it (its settings then read on first need, too late
    for a usage error at configure time)."""
    from pytest_devcaps.session import options

    parser = pytest.Parser(_ispytest=True)  # the class pytest hands pytest_addoption
    options.add_options(parser)
    declared = sorted(name for name in parser._inidict if name.startswith(options.NAME_PREFIX))
    assert declared == sorted(options.INI_KEYS)


@pytest.mark.parametrize("setting", ["env", "ini", "option"])
def test_a_bad_setting_is_a_usage_error_at_configure_time_however_it_is_given(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    """A session that sets something of ours reads its settings at configure time, as before:
    a bad value stops it before collection, even when no test uses devcaps."""
    pytester.makepyfile("def test_plain():\n    pass\n")
    args: list[str] = []
    if setting == "env":
        monkeypatch.setenv("PYTEST_DEVCAPS_DIST_TIMEOUT", "soon")
    elif setting == "ini":
        pytester.makeini("[pytest]\ndevcaps_probe_timeout = soon\n")
    else:
        args.append("--devcaps-rank-timeout=soon")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stderr.str()
    result.stderr.fnmatch_lines(["ERROR: pytest-devcaps: *"])
