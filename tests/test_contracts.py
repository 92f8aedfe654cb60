"""Issue 20, items 2 and 3: one source per fact, and the contracts at the edges.

- "did you mean" is written once (errors.py); one alias policy for every surface;
- answers carry structured provenance (``needs``) that ``explain`` reads instead of reason text;
- every error raised on purpose is a DevcapsError, every warning a DevcapsWarning;
- a hook's answer is labelled ``hook:<plugin>``; the ``devcaps`` entry-point group is loaded
  outside pytest as by the CLI; a broken vendor install is a warning naming the error;
- ``implies`` never overrules an explicit setting or a probe's evidence without saying so.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator

import pluggy
import pytest

from pytest_devcaps import errors
from pytest_devcaps.config.catalogue import load_catalogue
from pytest_devcaps.errors import ConfigError, DevcapsError, DevcapsWarning, UnknownCapabilityError
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level, ProbeOutcome
from pytest_devcaps.registry import CapabilitySetting, RegistryOptions, build_registry
from pytest_devcaps.registry.layers import ImpliesLayer, ProbeLayer, merge

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_devcaps"
CPU = DeviceIdentity(type="cpu", index=None, vendor="cpu", name="test cpu", arch="x86_64")


def _package_sources() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "suites" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts).removesuffix(".__init__")] = path
    return found


# --- one source per fact -------------------------------------------------------------------

def test_did_you_mean_is_written_once() -> None:
    """Only errors.py words a suggestion or asks difflib for one; everyone else calls it."""
    wording, matching = [], []
    for name, path in _package_sources().items():
        if name == "pytest_devcaps.errors":
            continue
        text = path.read_text(encoding="utf-8")
        if "did you mean" in text.lower():
            wording.append(name)
        if "get_close_matches" in text:
            matching.append(name)
    assert (wording, matching) == ([], [])
    assert errors.did_you_mean("dtype.bf61", ["dtype.bf16"]) == " (did you mean 'dtype.bf16'?)"
    assert str(errors.UnknownCapabilityError("dtype.bf61", ["dtype.bf16"])) == \
        "unknown capability 'dtype.bf61'" + errors.suggestion("dtype.bf16")


REFUSAL = "'dtype.fp8' is an alias of 'mm.scaled'; use the capability name 'mm.scaled'"


def test_names_that_set_an_answer_refuse_an_alias_with_one_message(tmp_path: Path) -> None:
    """--devcaps-set, override keys, profile keys and hook records: one refusal, one wording."""
    from pytest_devcaps.config import load_overrides, load_profile
    from pytest_devcaps.registry.layers import _checked_hook_record

    catalogue = load_catalogue()
    messages = []
    with pytest.raises(ConfigError) as cli:
        build_registry(RegistryOptions(profile="nvidia-h100",
                                       settings=(CapabilitySetting("dtype.fp8", Level.NATIVE),)))
    messages.append(str(cli.value))
    override = tmp_path / "ov.yaml"
    override.write_text("devcaps: 1\noverrides:\n  - set:\n      dtype.fp8: native\n")
    with pytest.raises(ConfigError) as keyed:
        load_overrides([str(override)], catalogue)
    messages.append(str(keyed.value))
    profile = tmp_path / "p.yaml"
    profile.write_text("devcaps: 1\nprofile:\n  name: p\n  devices:\n    - {type: cuda, vendor: nvidia, arch: sm_90}\n"
                       "  fixed:\n    dtype.fp8: native\n")
    with pytest.raises(ConfigError) as fixed:
        load_profile(str(profile), catalogue)
    messages.append(str(fixed.value))
    known = {name: CapabilityRecord(name, "cpu", Level.NATIVE, "r", "probe") for name in catalogue.names()}
    with pytest.raises(ConfigError) as hooked:
        _checked_hook_record(CapabilityRecord("dtype.fp8", "cpu", Level.NATIVE, "r", "x"), CPU, known,
                             catalogue.capabilities)
    messages.append(str(hooked.value))
    with pytest.raises(ConfigError) as checked:
        catalogue.check_key("dtype.fp8")
    messages.append(str(checked.value))
    assert all(REFUSAL in message for message in messages), messages


def test_names_that_ask_accept_an_alias() -> None:
    """Markers, --devcaps-require and queries resolve an alias to its capability."""
    from pytest_devcaps.environment import Setting
    from pytest_devcaps.environment import check_required

    catalogue = load_catalogue()
    assert catalogue.check_name("dtype.fp8").name == "mm.scaled"
    assert catalogue.resolve("dtype.fp8") == "mm.scaled" and catalogue.resolve("dtype.fp9") is None
    check_required(Setting(["dtype.fp8"], "--devcaps-require"), catalogue)  # no error
    registry = build_registry(RegistryOptions(profile="nvidia-h100"))
    assert registry.record("dtype.fp8", "cuda:0").capability == "mm.scaled"


def test_explain_reads_the_blocking_capability_from_the_record_not_its_reason() -> None:
    from pytest_devcaps.commands.explain import decision_lines

    catalogue = load_catalogue()
    record = CapabilityRecord("runtime.streams", "cpu", Level.UNKNOWN, "worded any way at all",
                              "implies", needs="runtime.events")
    text = "\n".join(decision_lines(catalogue, CPU, record, None))
    assert "decide runtime.events first (devcaps probe --explain runtime.events)" in text
    round_trip = CapabilityRecord.from_dict(record.to_dict())
    assert round_trip == record and record.to_dict()["needs"] == "runtime.events"


# --- errors and warnings -------------------------------------------------------------------

def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    for name in _package_sources():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra (LibCST) that is not installed
            continue
        found += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                  if issubclass(obj, BaseException) and obj.__module__ == name]
    return found


def test_every_error_is_a_devcaps_error_and_every_warning_a_devcaps_warning() -> None:
    found = _defined_exceptions()
    assert {"MemoryStatsUnavailableError", "RankUnreachable", "AllRanksSkipped",
            "WorldMemoryWarning"} <= {cls.__name__ for cls in found}
    wrong = [f"{cls.__module__}.{cls.__name__}" for cls in found
             if not issubclass(cls, (DevcapsError, DevcapsWarning))]
    assert not wrong


_BUILTIN_ERRORS = {"Exception", "ValueError", "RuntimeError", "TypeError", "KeyError",
                   "LookupError", "OSError", "ImportError"}
# AssertionError: an invariant of ours, not a user's error. An OSError subclass that reports an
# OS condition (_util/files.py: no free temporary name after 16 tries) stays one: callers handle
# OSError, and it is not a usage error.


def _shipped_sources() -> dict[str, Path]:
    """The package's modules and the suites' own (non-test) modules: the suites ship too."""
    suites = {".".join(p.relative_to(ROOT).with_suffix("").parts): p
              for p in (PACKAGE / "suites").rglob("*.py")
              if not p.name.startswith("test_") and p.name != "conftest.py"}
    return {**_package_sources(), **suites}


def test_nothing_raises_a_bare_builtin_error_on_purpose() -> None:
    """``raise ValueError(...)`` and friends: each is a DevcapsError subclass that is also the
    builtin (``DevcapsValueError``...), so ``except ValueError`` callers keep working."""
    bare = []
    for name, path in _shipped_sources().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                    and isinstance(node.exc.func, ast.Name) and node.exc.func.id in _BUILTIN_ERRORS:
                bare.append(f"{name}:{node.lineno} {node.exc.func.id}")
    assert not bare


def test_the_snapshot_and_level_errors_keep_their_old_type() -> None:
    from pytest_devcaps.registry.query import CapabilityRegistry

    with pytest.raises(ValueError) as level:
        Level.parse("nativ")
    with pytest.raises(ValueError) as snapshot:
        CapabilityRegistry.from_snapshot({"format": -1}, load_catalogue())
    assert isinstance(level.value, DevcapsError) and isinstance(snapshot.value, DevcapsError)


# --- hooks and vendor plugins ----------------------------------------------------------------

class _Relabel:
    """A plugin that labels its answer as if a probe had given it."""

    @pluggy.HookimplMarker("pytest")
    def pytest_devcaps_adjust_results(self, device: DeviceIdentity,
                                      records: list[CapabilityRecord]) -> list[CapabilityRecord]:
        return [CapabilityRecord("dtype.bf16", device.key, Level.EMULATED, "lab says slow", "probe")]


def test_a_hook_answer_is_labelled_with_its_plugin_whatever_it_says(tmp_path: Path) -> None:
    from pytest_devcaps import hookspecs

    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspecs)
    manager.register(_Relabel(), name="acme")
    registry = build_registry(RegistryOptions(cache_dir=tmp_path / "cache"), hook=manager.hook)
    record = registry.record("dtype.bf16", "cpu")
    assert (record.level, record.source, record.reason) == (Level.EMULATED, "hook:acme", "lab says slow")


def _dist(root: Path, name: str, group: str, module: str, body: str) -> None:
    """A minimal installed distribution on ``root`` with one entry point."""
    (root / f"{module}.py").write_text(body)
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n")


VENDOR = '''
import dataclasses

def pytest_devcaps_register_capabilities(registrar):
    registrar.capability("acme.thing", "an Acme capability")
    registrar.rule("*", "acme.thing", "native", "Acme says so")

def pytest_devcaps_adjust_results(device, records):
    return [dataclasses.replace(r, reason="relabelled", source="probe")
            for r in records if r.capability == "acme.thing"]
'''


@pytest.fixture
def vendor_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "site"
    root.mkdir()
    _dist(root, "acme_vendor", "devcaps", "acme_vendor_plugin", VENDOR)
    monkeypatch.syspath_prepend(str(root))
    with _forgetting("acme_vendor_plugin"):
        yield root


@contextlib.contextmanager
def _forgetting(*modules: str) -> Iterator[None]:
    """Modules a test imports from its own folder are gone afterwards (a later test's
    ``find_spec`` must not find them)."""
    try:
        yield
    finally:
        for name in modules:
            sys.modules.pop(name, None)


def test_library_code_sees_the_vendor_plugins_the_cli_sees(vendor_dist: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_devcaps import library
    from pytest_devcaps.hookspecs import vendor_hooks

    monkeypatch.setattr(library, "_installed", [])  # outside a pytest session
    library._built_default.cache_clear()
    try:
        registry = library.default_registry()
    finally:
        library._built_default.cache_clear()
    record = registry.record("acme.thing", "cpu")
    assert (record.level, record.source, record.reason) == (Level.NATIVE, "hook:acme_vendor", "relabelled")
    cli = vendor_hooks().pytest_devcaps_adjust_results.get_hookimpls()
    assert "acme_vendor" in [impl.plugin_name for impl in cli]  # beside any other installed (devcaps-emu)


def test_the_unittest_bridge_sees_the_vendor_plugins_with_its_environment_set(
        vendor_dist: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PYTEST_DEVCAPS_PROBE_TIMEOUT / _OVERRIDES make the bridge build its own registry: the
    vendor plugins are loaded into it too."""
    from pytest_devcaps import library, testcase
    from pytest_devcaps._util.current_test import PYTEST_TEST
    from pytest_devcaps._util.environ import ENV_PROBE_TIMEOUT
    from pytest_devcaps.environment import environment_settings

    monkeypatch.setattr(library, "_installed", [])  # outside a pytest session
    monkeypatch.setenv(ENV_PROBE_TIMEOUT, "30")
    testcase._env_registry.cache_clear()
    outside = PYTEST_TEST.set(None)  # as under python -m unittest
    try:
        registry = testcase._registry(environment_settings())
    finally:
        PYTEST_TEST.reset(outside)
        testcase._env_registry.cache_clear()
    record = registry.record("acme.thing", "cpu")
    assert (record.level, record.source, record.reason) == (Level.NATIVE, "hook:acme_vendor", "relabelled")


def test_a_pytest_session_loads_the_same_vendor_plugins(vendor_dist: Path,
                                                        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_seen(devcaps):
            record = devcaps["acme.thing"]
            assert (record.source, record.reason) == ("hook:acme_vendor", "relabelled")
        """
    )
    pytester.runpytest("--devcaps-devices=cpu").assert_outcomes(passed=1)


def test_a_pytest11_only_vendor_plugin_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    pytester: pytest.Pytester) -> None:
    root = tmp_path / "site"
    root.mkdir()
    _dist(root, "acme_pytest_only", "pytest11", "acme_pytest_only_plugin", VENDOR)
    monkeypatch.syspath_prepend(str(root))
    pytester.makepyfile("def test_x(device):\n    pass\n")
    with _forgetting("acme_pytest_only_plugin"):
        result = pytester.runpytest("--devcaps-devices=cpu", "-W", "always")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*vendor plugin acme_pytest_only_plugin (from acme_pytest_only) is a "
                                 "pytest11 plugin only*'devcaps' entry-point group*"])


def test_a_vendor_plugin_that_fails_to_import_is_a_warning_naming_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_devcaps.hookspecs import vendor_hooks

    root = tmp_path / "site"
    root.mkdir()
    _dist(root, "acme_broken", "devcaps", "acme_broken_plugin", "import acme_sdk_that_is_missing\n")
    monkeypatch.syspath_prepend(str(root))
    with _forgetting("acme_broken_plugin"), pytest.warns(
            DevcapsWarning, match="skipping the vendor plugin 'acme_broken'.*"
                                  "ModuleNotFoundError.*acme_sdk_that_is_missing"):
        vendor_hooks()


def test_a_broken_habana_install_is_a_warning_not_a_missing_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_devcaps.backends import HpuAdapter, discover_devices

    package = tmp_path / "habana_frameworks"
    (package / "torch").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "torch" / "__init__.py").write_text("raise ImportError('libhabana.so: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with _forgetting("habana_frameworks", "habana_frameworks.torch"), pytest.warns(DevcapsWarning, match=r"skipping the hpu backend: BackendInstallError: "
                                            r"habana_frameworks is installed.*libhabana\.so"):
        assert discover_devices([HpuAdapter()]) == []


def test_a_renamed_privateuse1_backend_without_its_module_is_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from pytest_devcaps.backends import PrivateUse1Adapter, discover_devices

    # renaming is once per process, so the name is stood in for; get_device_module is torch's own
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "acmebroken")
    with pytest.warns(DevcapsWarning, match=r"skipping the acmebroken backend: BackendInstallError: "
                                            r"PrivateUse1 is renamed 'acmebroken', but "
                                            r"torch.get_device_module\('acmebroken'\) raised"):
        assert discover_devices([PrivateUse1Adapter()]) == []


# --- implies -----------------------------------------------------------------------------------

def test_a_setting_that_an_implication_overrules_is_a_warning_naming_both() -> None:
    settings = (CapabilitySetting("runtime.events", Level.UNSUPPORTED),
                CapabilitySetting("runtime.streams", Level.NATIVE))
    with pytest.warns(DevcapsWarning) as caught:
        registry = build_registry(RegistryOptions(profile="nvidia-h100", settings=settings))
    record = registry.record("runtime.streams", "cuda:0")
    assert (record.level, record.source, record.needs) == (Level.UNSUPPORTED, "implies", "runtime.events")
    assert record.reason.endswith("; overrules native from cli")
    text = [str(w.message) for w in caught]
    assert any("cli sets runtime.streams=native on cuda:0, but runtime.streams needs runtime.events, "
               "which is unsupported (cli): the answer is unsupported" in t for t in text), text


def test_an_unknown_prerequisite_says_it_overrules_the_probe() -> None:
    """A probe ran the op, its prerequisite is unknown: the answer is unknown, and says so."""
    catalogue = load_catalogue()
    probed = ProbeLayer({"cpu": {"runtime.streams": ProbeOutcome(Level.NATIVE, "ran the op")}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DevcapsWarning)  # a probe is no setting: no warning
        answers = merge([probed, ImpliesLayer(catalogue)], CPU, catalogue.names())
    record = answers["runtime.streams"]
    assert (record.level, record.needs) == (Level.UNKNOWN, "runtime.events")
    assert re.fullmatch(r"needs runtime\.events, which is unknown \(default: .*\); overrules "
                        r"native from probe", record.reason), record.reason
    assert record.history == ("native (probe: ran the op)",)


def test_hook_answers_keep_pluggys_order(tmp_path: Path) -> None:
    """Two plugins answer the same capability: the one pluggy calls last wins, as before."""
    from pytest_devcaps import hookspecs

    class Second:
        @pluggy.HookimplMarker("pytest")
        def pytest_devcaps_adjust_results(self, device: Any, records: Any) -> list[CapabilityRecord]:
            return [CapabilityRecord("dtype.bf16", device.key, Level.UNSUPPORTED, "second", "x")]

    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspecs)
    manager.register(_Relabel(), name="first")
    manager.register(Second(), name="second")
    order = [impl.plugin_name for impl in reversed(manager.hook.pytest_devcaps_adjust_results.get_hookimpls())]
    record = build_registry(RegistryOptions(cache_dir=tmp_path / "cache"), hook=manager.hook) \
        .record("dtype.bf16", "cpu")
    assert record.source == f"hook:{order[-1]}"
    assert len(record.history) >= 1 and record.history[-1].startswith(
        "emulated (hook:first" if order[-1] == "second" else "unsupported (hook:second")


def test_a_wrapper_of_the_adjust_hook_is_a_warning_not_silently_skipped(tmp_path: Path) -> None:
    from pytest_devcaps import hookspecs

    class Wrapping:
        @pluggy.HookimplMarker("pytest")(wrapper=True)
        def pytest_devcaps_adjust_results(self, device: Any, records: Any) -> Any:
            result = yield
            return result

    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspecs)
    manager.register(Wrapping(), name="lab_wrapper")
    manager.register(_Relabel(), name="acme")
    with pytest.warns(DevcapsWarning, match="plugin lab_wrapper wraps pytest_devcaps_adjust_results"):
        registry = build_registry(RegistryOptions(cache_dir=tmp_path / "cache"), hook=manager.hook)
        record = registry.record("dtype.bf16", "cpu")
    assert record.source == "hook:acme"  # the plain implementation still answers


@pytest.mark.parametrize("short, full", [("bf16", "dtype.bf16"), ("flash", "attention.flash"),
                                         ("events", "runtime.events"), ("fp8", "dtype.fp8")])
def test_a_short_capability_name_is_refused_naming_the_full_one(short: str, full: str) -> None:
    from pytest_devcaps.config import load_catalogue

    with pytest.raises(UnknownCapabilityError, match=rf"did you mean '{full}'\?"):
        load_catalogue().check_name(short)


def test_a_short_name_in_a_marker_fails_collection_with_the_full_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("bf16")
        def test_short(device):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown capability 'bf16' (did you mean 'dtype.bf16'?)*"])
