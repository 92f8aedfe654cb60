"""The unittest bridge: devcaps markers honoured where pytest does not run the test.

Under pytest the plugin evaluates markers at collection and skips at setup. Under
``python -m unittest`` (or PyTorch's ``run_tests``) nothing reads pytest marks, so a test that
asked for tf32 would run and pass on a CPU. This module evaluates the same marks with the same
functions (``evaluation.evaluate``) for a TestCase, so the skip reason is the text pytest shows:

* :class:`DevcapsMixin` (and :class:`DevcapsTestCase`): ``self.devcaps`` (the registry seen
  from the test's device), ``self.devcaps_device``, ``self.tolerances``, and marks honoured in
  ``run()``: an unmet requirement or a ``skip_on`` skips before ``setUp`` (as ``@unittest.skip``
  does), an ``xfail_on`` that holds expects a failure;
* :func:`guard` / :func:`checked_call`, used by the decorators of :mod:`pytest_devcaps.decorators`.

The test's device: its class's ``device_type`` (PyTorch's generated classes, or one set on a
TestCase), else the registry's primary device (the first accelerator, else the CPU).
``requires_ranks`` is checked against the world of the test's class (its own device type,
:mod:`pytest_devcaps.marks.multiprocess`). A bad mark errors the test before ``setUp``. While the
pytest plugin runs a test, :data:`PYTEST_TEST` holds it and everything here defers to pytest.

The ``PYTEST_DEVCAPS_*`` variables are read and checked by the session's own parser
(:func:`pytest_devcaps.environment.environment_settings`), so a value pytest refuses is an
error of every test here too (the run is not OK). Honoured: ``HARDWARE`` (other classes skip),
``DEVICES`` / ``EXCEPT`` (a class for a device type left out skips), ``REQUIRE`` (a skip for a
required capability is an error), ``OVERRIDES`` and ``PROBE_TIMEOUT`` (the registry is built
with them). Refused: ``PROFILE`` (planning is pytest's).
"""

from __future__ import annotations

import functools
import os
import sys
import time
import unittest
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pytest_devcaps.marks import classification
from pytest_devcaps.marks import evaluation
from pytest_devcaps.errors import ConfigError, DevcapsError
from pytest_devcaps.marks.expectations import Condition, parse_condition
from pytest_devcaps.marks.names import RANKS_MARKER
from pytest_devcaps.marks.reading import Mark, marks_of
from pytest_devcaps._util.environ import ENV_DEVICES, ENV_EXCEPT, ENV_HARDWARE
from pytest_devcaps.environment import (
    EnvironmentSettings,
    Setting,
    check_device_types,
    environment_settings,
)
from pytest_devcaps.pytorch_compat import class_device_key
from pytest_devcaps._util.current_test import PYTEST_TEST
from pytest_devcaps.marks.tolerances import Tolerances, parse_tolerance
from pytest_devcaps.config.testnames import TestName

if TYPE_CHECKING:
    from pytest_devcaps.config.expectfile import Expectation, Expectations
    from pytest_devcaps.config.facts import FactVocabulary
    import torch

    from pytest_devcaps.model import DeviceIdentity
    from pytest_devcaps.registry import CapabilityRegistry, DeviceCapabilities

    _Base = unittest.TestCase
else:
    _Base = object


def _registry(env: EnvironmentSettings | None = None) -> CapabilityRegistry:
    """The default registry; outside pytest, with ``PYTEST_DEVCAPS_OVERRIDES`` or
    ``PYTEST_DEVCAPS_PROBE_TIMEOUT`` set, one built with them (installed as the default, so
    library code in the process agrees)."""
    from pytest_devcaps.library import default_registry

    if env is None or PYTEST_TEST.get() is not None:
        return default_registry()
    if not env.overrides.value and env.probe_timeout.value is None:
        return default_registry()
    return _env_registry(tuple(str(p) for p in env.overrides.value), env.probe_timeout.value)


@functools.lru_cache(maxsize=4)
def _env_registry(overrides: tuple[str, ...], timeout: float | None) -> CapabilityRegistry:
    from pytest_devcaps.hookspecs import vendor_hooks
    from pytest_devcaps.library import install_default_registry
    from pytest_devcaps.registry import RegistryOptions, build_registry
    from pytest_devcaps._util.durations import DEFAULT_PROBE_TIMEOUT

    options = RegistryOptions(overrides=overrides, probe_timeout=(
        DEFAULT_PROBE_TIMEOUT if timeout is None else timeout))
    # the vendor plugins load here as for the CLI and library code: an out-of-tree backend is
    # seen everywhere or nowhere, whatever the environment sets
    registry = build_registry(options, hook=vendor_hooks())
    install_default_registry(registry)
    return registry


def device_of(test: Any, registry: CapabilityRegistry) -> str:
    """The device key ``test`` (a TestCase, or None) runs on outside pytest."""
    current = PYTEST_TEST.get()
    if current is not None and test is not None and current.cls is type(test):
        return current.device_of()
    key = class_device_key(type(test), registry) if test is not None else None
    return key if key is not None else registry.primary_device.key


@dataclass(frozen=True)
class Verdict:
    """What the marks of one test (and the expectations files) say on its device outside pytest."""

    skip: str | None
    xfail: Condition | None
    identity: DeviceIdentity | None
    expectation: Expectation | None = None


def _hardware_skip(marks: list[Mark], cls: type | None, registry: CapabilityRegistry,
                   hardware: Setting, function: Any = None) -> str | None:
    if not hardware.value:
        return None
    selection = classification.parse_selection(hardware.value, hardware.source, lambda: registry)
    found = classification.classify(marks, cls, lambda: registry, _pytorch_gates(function, cls))
    if found.value in selection:
        return None
    wanted = os.environ.get(ENV_HARDWARE, ",".join(hardware.value))
    return f"hardware class {found.value} ({found.how}) not selected ({ENV_HARDWARE}={wanted})"


def _pytorch_gates(function: Any, cls: type | None) -> tuple[Any, ...]:
    """PyTorch's gates on the test, where a module imported PyTorch's test helpers."""
    from pytest_devcaps.marks import pytorch_gates

    return pytorch_gates.gates_of(function, cls) if pytorch_gates.in_use() else ()


def _class_mismatch(marks: list[Mark], cls: type | None, registry: CapabilityRegistry,
                    device: str, reading: Setting) -> str | None:
    """A declared hardware class that does not run on the test's device (as under pytest),
    unless ``PYTEST_DEVCAPS_HARDWARE_READING=pytorch`` reads classes as labels only."""
    if reading.value not in (None, "devcaps"):  # unset: devcaps' reading
        return None
    if not any(mark.name == "hardware" for mark in marks):
        return None  # none, or PyTorch's hw_classification attribute: a label, as in PyTorch
    value = classification.declared(marks, cls)
    from pytest_devcaps.marks.hardware import check_class

    return classification.mismatch(check_class(value, lambda: registry), registry.identity(device))


def _device_skip(test: Any, device: str, registry: CapabilityRegistry,
                 env: EnvironmentSettings) -> str | None:
    """``PYTEST_DEVCAPS_DEVICES`` / ``_EXCEPT`` for a class made for one device type (as pytest
    leaves such a type out of the ``device`` parameters); names checked as pytest checks them."""
    if not (env.devices.value or env.except_.value):
        return None
    check_device_types(env.devices, env.except_, registry.device_types())
    if test is None or class_device_key(type(test), registry) is None:
        return None
    kind = device.partition(":")[0]
    if env.devices.value and kind not in env.devices.value:
        return f"device type {kind} not selected ({ENV_DEVICES}={','.join(env.devices.value)})"
    if kind in env.except_.value:
        return f"device type {kind} left out ({ENV_EXCEPT}={','.join(env.except_.value)})"
    return None


def _refuse_unhonourable(env: EnvironmentSettings, registry: CapabilityRegistry) -> None:
    """What pytest checks when the session starts: required names against the catalogue; a
    profile, which plans instead of running, cannot be honoured here."""
    if env.require.value:
        from pytest_devcaps.environment import check_required

        check_required(env.require, registry.catalogue)
    if env.profile.value:
        raise ConfigError(f"{env.profile.value!r}: planning against a device profile is pytest's "
                          "(pytest --devcaps-profile); under unittest the tests would run on this "
                          "machine instead. Unset it", file=env.profile.source)


def _required_error(evaluated: Any, registry: CapabilityRegistry, require: Setting) -> None:
    """``PYTEST_DEVCAPS_REQUIRE``: a skip for a required capability is an error, in pytest's
    words (:mod:`pytest_devcaps.session.require`)."""
    if not require.value:
        return
    catalogue = registry.catalogue
    wanted = {catalogue.check_name(name).name for name in require.value}
    named = {name for item in evaluated.missing for name in item.capabilities} & wanted
    if named:
        raise DevcapsError(f"{', '.join(sorted(named))} required on this runner "
                           f"({require.source}) but: {evaluated.reason}")


def verdict(function: Any, test: Any) -> Verdict:
    """Evaluate the devcaps marks of ``function`` (a method of ``test``'s class, or a function)."""
    from pytest_devcaps.runtime import free_memory

    env = environment_settings()  # ConfigError: every test errors, as pytest would not start
    registry = _registry(env)
    _refuse_unhonourable(env, registry)
    cls = type(test) if test is not None else None
    marks = marks_of(function, cls)
    evaluation.validate_marks(marks, registry)
    device = device_of(test, registry)
    skip = _hardware_skip(marks, cls, registry, env.hardware, function) or _device_skip(
        test, device, registry, env) or _class_mismatch(marks, cls, registry, device, env.hardware_reading)
    if skip is not None:
        return Verdict(skip, None, None)
    identity = registry.identity(device)
    expected = _expectation(env, registry, test, function, identity)
    if expected is not None and expected.outcome == "skip":
        return Verdict(expected.text(identity.key), None, identity, expected)
    evaluated = evaluation.evaluate(marks, registry, device,
                                    free_memory=lambda identity: free_memory(identity.key))
    evaluated = _ranks(evaluated, marks, test, function, registry)
    if evaluated.skip:
        _required_error(evaluated, registry, env.require)
        _must_pass(expected, identity, evaluated.reason)
        return Verdict(evaluated.reason, None, None)
    facts = _facts(registry)
    for mark in marks:
        if mark.name == "xfail_on":
            condition = parse_condition(mark.name, mark.args, mark.kwargs, facts)
            if condition.applies(identity):
                return Verdict(None, condition, identity, expected)
    return Verdict(None, None, identity, expected)


def _must_pass(expected: Expectation | None, identity: DeviceIdentity, reason: str) -> None:
    if expected is not None and expected.outcome == "pass":
        raise DevcapsError(f"{expected.text(identity.key)}, but it was skipped: {reason}")


def _expectation(env: EnvironmentSettings, registry: CapabilityRegistry, test: Any,
                 function: Any, identity: DeviceIdentity) -> Expectation | None:
    """The rule of ``PYTEST_DEVCAPS_EXPECT``'s files that decides this test, named as pytest
    names it (the module's file relative to the working directory, class, method)."""
    if not env.expect.value or test is None:
        return None
    from pytest_devcaps.config.testnames import pytorch_generic_names

    expectations = _expectations(tuple(str(p) for p in env.expect.value), registry)
    cls = type(test)
    module = sys.modules.get(cls.__module__)
    path = os.path.relpath(getattr(module, "__file__", None) or cls.__module__.replace(".", "/"))
    name = test._testMethodName
    generic = pytorch_generic_names(cls.__name__, getattr(cls, "device_type", None), name,
                                    getattr(function, "__name__", None))
    nodeid = f"{path.replace(os.sep, '/')}::{cls.__name__}::{name}"
    return expectations.lookup(TestName(nodeid, *generic), identity)


@functools.lru_cache(maxsize=4)
def _expectations(paths: tuple[str, ...], registry: CapabilityRegistry) -> Expectations:
    from pytest_devcaps.config.expectfile import load_expectations

    return load_expectations(paths, registry.facts)


def _ranks(evaluated: evaluation.Evaluation, marks: list[Mark], test: Any, function: Any,
           registry: CapabilityRegistry) -> evaluation.Evaluation:
    """``requires_ranks``: the world of the test's class, checked now
    (:mod:`pytest_devcaps.marks.multiprocess`); a class without one is a MarkerError."""
    if not any(mark.name == RANKS_MARKER for mark in marks):
        return evaluated
    from pytest_devcaps.distributed.settings import share_devices
    from pytest_devcaps.marks import multiprocess

    cls = type(test) if test is not None else None
    method = test._testMethodName if test is not None else getattr(function, "__name__", "")
    missing = multiprocess.ranks_missing(marks, cls, method, registry, share_devices)
    return multiprocess.with_ranks(evaluated, multiprocess.wanted(marks), missing)


def _facts(registry: CapabilityRegistry) -> FactVocabulary:
    from pytest_devcaps.marks.conditions import known_facts

    return known_facts(registry)


def expecting_failure(function: Callable[..., Any], test: Any, raises: Any = None) -> Callable[..., Any]:
    """``function`` as unittest's expected failure (``@unittest.expectedFailure``): unittest
    reads ``__unittest_expecting_failure__`` before the test runs, and has only the strict
    kind, so a pass is an "unexpected success" that fails the run. An exception that is not
    among ``raises`` is a failure, as pytest reports it."""
    catch = raises or Exception

    @functools.wraps(function)
    def run_expecting(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except unittest.SkipTest:
            raise
        except catch:
            raise
        except Exception:
            outcome = getattr(test, "_outcome", None)
            if outcome is not None:  # the flag unittest consults when the exception arrives
                outcome.expecting_failure = False
            raise

    run_expecting.__unittest_expecting_failure__ = True  # type: ignore[attr-defined]
    return run_expecting


def guard(test: unittest.TestCase) -> None:
    """Before unittest runs ``test``: honour its devcaps marks (does nothing under pytest)."""
    name = test._testMethodName
    if PYTEST_TEST.get() is not None or test.__dict__.get("_devcaps_guarded") == name:
        return
    test.__dict__["_devcaps_guarded"] = name
    function = getattr(type(test), name, None)
    if function is None:
        return
    try:
        found = verdict(function, test)
    except DevcapsError as exc:
        message = str(exc)

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise DevcapsError(message)

        setattr(test, name, refuse)
        test.setUp = refuse  # type: ignore[method-assign]  # errors before setUp, as under pytest
        return
    if found.skip is not None:
        setattr(test, name, _skipped(found.skip))
    elif found.xfail is not None:
        setattr(test, name, expecting_failure(getattr(test, name), test, found.xfail.raises))
    if found.skip is None and found.expectation is not None and found.identity is not None:
        setattr(test, name, expected_outcome(getattr(test, name), test, found.expectation,
                                             found.identity.key))


def expected_outcome(function: Callable[..., Any], test: Any, rule: Expectation,
                     device: str) -> Callable[..., Any]:
    """``function`` as an expectations rule has it run under unittest: ``xfail`` strict as
    unittest's expected failure (a pass fails the run), non-strict as a skip naming the failure
    when it fails (unittest has no non-strict kind; pytest's junit XML reports an xfail as a
    skip too); ``flaky`` run again up to ``reruns`` times; ``pass``: a skip is a failure."""
    if rule.outcome == "xfail" and rule.strict:
        return expecting_failure(function, test)
    if rule.outcome == "pass" and getattr(function, "__unittest_skip__", False):
        why = getattr(function, "__unittest_skip_why__", "")
        return _failing(f"{rule.text(device)}, but it was skipped: {why}")

    @functools.wraps(function)
    def run_expected(*args: Any, **kwargs: Any) -> Any:
        attempts = rule.reruns + 1 if rule.outcome == "flaky" else 1
        for attempt in range(attempts):
            try:
                return function(*args, **kwargs)
            except unittest.SkipTest as skip:
                if rule.outcome == "pass":
                    raise AssertionError(f"{rule.text(device)}, but it was skipped: {skip}") from None
                raise
            except Exception as error:
                if rule.outcome == "xfail":
                    first = str(error).strip().split("\n", 1)[0]
                    raise unittest.SkipTest(f"xfailed: {rule.text(device)}: "
                                            f"{type(error).__name__}: {first}") from None
                if attempt + 1 == attempts:
                    raise
                time.sleep(rule.delay)
        return None

    return run_expected


def _failing(message: str) -> Callable[..., None]:
    """A test method that fails with ``message`` (a must-pass test that would be skipped)."""
    def failing(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(message)

    return failing


def _skipped(reason: str) -> Callable[..., None]:
    def skipped(*args: Any, **kwargs: Any) -> None:
        raise unittest.SkipTest(reason)

    # unittest reads these before setUp (TestCase.run), so a skip costs no setUp.
    skipped.__unittest_skip__ = True  # type: ignore[attr-defined]
    skipped.__unittest_skip_why__ = reason  # type: ignore[attr-defined]
    return skipped


def checked_call(wrapper: Callable[..., Any], function: Callable[..., Any],
                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call a decorated test: its marks are honoured first unless pytest or :func:`guard` did."""
    test = args[0] if args and isinstance(args[0], unittest.TestCase) else None
    handled = test is not None and test.__dict__.get("_devcaps_guarded") == test._testMethodName
    if PYTEST_TEST.get() is not None or handled:
        return function(*args, **kwargs)
    found = verdict(wrapper, test)
    if found.skip is not None:
        raise unittest.SkipTest(found.skip)
    rule = found.expectation
    if rule is not None and found.identity is not None:
        if rule.outcome == "xfail" and rule.strict:
            raise DevcapsError(f"{rule.text(found.identity.key)}: under plain unittest, a strict "
                               "xfail needs the TestCase class to use DevcapsMixin or a devcaps "
                               "class decorator (unittest decides expected failures before the "
                               "test method runs)")
        return expected_outcome(function, test, rule, found.identity.key)(*args, **kwargs)
    if found.xfail is not None:
        where = found.xfail.key if found.identity is None else found.xfail.describe(found.identity)
        raise DevcapsError(f"{where}: under plain unittest, xfail_on needs the TestCase class to "
                           "use DevcapsMixin or a devcaps class decorator (unittest decides "
                           "expected failures before the test method runs)")
    return function(*args, **kwargs)


class DevcapsMixin(_Base):
    """Mix into a ``unittest.TestCase`` (before it): ``self.devcaps``, ``self.devcaps_device``,
    ``self.tolerances``, and devcaps marks honoured under plain unittest."""

    def run(self, result: Any = None) -> Any:
        guard(self)
        return super().run(result)

    @property
    def devcaps(self) -> DeviceCapabilities:
        """The registry seen from this test's device (``self.devcaps.has("dtype.bf16")``)."""
        registry = _registry()
        return registry.view(device_of(self, registry))

    @property
    def devcaps_device(self) -> torch.device:
        import torch

        return torch.device(device_of(self, _registry()))

    @property
    def tolerances(self) -> Tolerances:
        """The ``tolerance`` marks of this test and class, for this test's device."""
        registry = _registry()
        function = getattr(type(self), self._testMethodName, None)
        facts = _facts(registry)
        rules = [parse_tolerance(m.args, m.kwargs, facts)
                 for m in marks_of(function, type(self)) if m.name == "tolerance"]
        return Tolerances(rules, registry.identity(device_of(self, registry)))


TORCH_TESTCASE_MODULE = "torch.testing._internal.common_utils"


class DevcapsTestCase(DevcapsMixin, unittest.TestCase):
    """A ``unittest.TestCase`` with :class:`DevcapsMixin`.

    PyTorch's ``run_tests`` refuses a class that is not its own ``TestCase``
    (``common_utils.lint_test_case_extension``: "This test class should extend from
    torch.testing._internal.common_utils.TestCase"). Where that module is imported when a
    subclass is defined (a file that uses ``run_tests`` imports it at the top), the subclass
    derives from PyTorch's ``TestCase`` too, so ``run_tests`` accepts it; elsewhere nothing of
    PyTorch's test helpers is imported (they change global state on import).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if DevcapsTestCase in cls.__bases__ and TORCH_TESTCASE_MODULE in sys.modules \
                and not cls.__dict__.get("_devcaps_torch_variant"):
            base = _torch_variant()
            if base is not None:
                cls.__bases__ = tuple(base if b is DevcapsTestCase else b for b in cls.__bases__)


def _torch_variant() -> type | None:
    """``DevcapsTestCase`` on PyTorch's ``TestCase`` (made once)."""
    global _TORCH_VARIANT
    if _TORCH_VARIANT is None:
        torch_case = getattr(sys.modules.get(TORCH_TESTCASE_MODULE), "TestCase", None)
        if not isinstance(torch_case, type):
            return None
        _TORCH_VARIANT = type("DevcapsTestCase", (DevcapsTestCase, torch_case),
                              {"__module__": __name__, "__doc__": DevcapsTestCase.__doc__,
                               "_devcaps_torch_variant": True})
    return _TORCH_VARIANT


_TORCH_VARIANT: type | None = None
