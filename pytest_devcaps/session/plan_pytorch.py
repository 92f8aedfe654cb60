"""Plan mode for PyTorch-style suites: the instances a host of the profile's device would
generate, with PyTorch's gates evaluated against the profile, instead of this host's.

For every ``instantiate_device_type_tests`` call of a collected module (recorded in plan mode:
:mod:`pytest_devcaps.marks.pytorch_instances`), the classes of the profile's device types are
generated as such a host would (``TestFooCUDA.test_bar_cuda_float16``) and each test planned:
skipped with PyTorch's reason where one of its gates would skip it there
(:mod:`pytest_devcaps.marks.profile_gates`), else by the devcaps marks it carries, else by the
expectations files; skipped too where the base's ``test_exclusions`` leaves it out. This host's
own instances (``TestFooCPU``) are left out of the plan and counted: they are this machine's,
not the profile's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.config.testnames import TestName

if TYPE_CHECKING:
    from pytest_devcaps.config.expectfile import Expectation, Expectations
    from pytest_devcaps.marks.pytorch_instances import Generated, Instantiation
    from pytest_devcaps.model import DeviceIdentity
    from pytest_devcaps.session.state import SessionState


@dataclass
class PytorchPlan:
    entries: list[dict[str, Any]] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)
    """This host's instances left out, by device type."""
    generated: Counter[str] = field(default_factory=Counter)
    """Tests generated as a host of the profile would, by device type."""
    notes: list[str] = field(default_factory=list)

    def fields(self) -> dict[str, Any]:
        return {"left_out": dict(self.left_out), "generated": dict(self.generated),
                "notes": list(self.notes)}


def _recorded_generic(cls: Any, recorded: list[Instantiation]) -> bool:
    return isinstance(cls, type) and any(issubclass(cls, call.generic) for call in recorded)


def _module_paths(items: list[pytest.Item]) -> dict[str, str]:
    """Module name -> its node id path, for the modules collected."""
    paths: dict[str, str] = {}
    for item in items:
        module = item.getparent(pytest.Module)
        if module is not None:
            paths.setdefault(module.obj.__name__, module.nodeid)
    return paths


def host_instances(items: list[pytest.Item], plan: PytorchPlan) -> list[pytest.Item]:
    """``items`` without this host's instances of recorded generic classes (counted in ``plan``)."""
    from pytest_devcaps.marks.pytorch_instances import RECORDED

    kept = []
    for item in items:
        cls = getattr(item, "cls", None)
        if RECORDED and _recorded_generic(cls, RECORDED):
            plan.left_out[str(getattr(cls, "device_type", "?"))] += 1
        else:
            kept.append(item)
    return kept


def plan_pytorch(items: list[pytest.Item], state: SessionState,
                 expectations: Expectations | None) -> PytorchPlan:
    """The generated instances for the profile's device types, planned, and this host's left out."""
    from pytest_devcaps.marks.pytorch_instances import RECORDED, recorded_in

    plan = PytorchPlan()
    if not RECORDED:
        return plan
    paths = _module_paths(items)
    registry = state.registry
    types = list(dict.fromkeys(identity.type for identity in registry.devices))
    for call in recorded_in(list(paths)):
        for device_type in types:
            identity = registry.identity(device_type)
            _plan_call(plan, call, paths[call.module], identity, state, expectations)
    return plan


def _plan_call(plan: PytorchPlan, call: Instantiation, path: str, identity: DeviceIdentity,
               state: SessionState, expectations: Expectations | None) -> None:
    from pytest_devcaps.marks.profile_gates import Target
    from pytest_devcaps.marks.pytorch_instances import generate

    found = generate(call, identity.type, identity.count)
    name = call.generic.__name__
    if found.not_generated is not None:
        plan.notes.append(f"{path}::{name}: no {identity.type} class: {found.not_generated}")
        return
    plan.notes += [f"{path}::{name}.{test}: PyTorch cannot instantiate it for {identity.type} "
                   f"(a {identity.type} host fails at import): {error}" for test, error in found.errors]
    target = Target(identity, lambda capability: _answer(state, capability, identity.key))
    for test in found.tests:
        plan.entries.append(_generated_entry(test, path, identity, target, state, expectations))
        plan.generated[identity.type] += 1
    for excluded, why in found.excluded:
        nodeid = f"{path}::{name}{identity.type.upper()}" + ("" if excluded == "*" else f"::{excluded}")
        plan.entries.append({"nodeid": nodeid, "outcome": "would-skip", "device": identity.key,
                             "reason": f"not generated: {why}", "generated": True,
                             "requires": [], "missing": []})


def _answer(state: SessionState, capability: str, device: str) -> bool | None:
    from pytest_devcaps.errors import DevcapsError
    from pytest_devcaps.model import Level

    try:
        level = state.registry.record(capability, device).level
    except (DevcapsError, KeyError):
        return None
    return None if level is Level.UNKNOWN else level.available


def _generated_entry(test: Generated, path: str, identity: DeviceIdentity, target: Any,
                     state: SessionState, expectations: Expectations | None) -> dict[str, Any]:
    from pytest_devcaps.marks.profile_gates import evaluate

    nodeid = f"{path}::{test.class_name}::{test.name}"
    entry: dict[str, Any] = {"nodeid": nodeid, "outcome": "would-run", "device": identity.key,
                             "generated": True, "requires": [], "missing": []}
    verdict = evaluate(test.function, test.device_class, target)
    if verdict.notes:
        entry["notes"] = list(verdict.notes)
    if verdict.skip is not None:
        entry.update(outcome="would-skip", reason=verdict.skip,
                     gate={"gate": verdict.gate, "source": verdict.source})
    else:
        _devcaps_marks(entry, test, state, identity)
    if expectations is not None:
        name = TestName(nodeid, test.generic_class, test.generic_test)
        apply_rule(entry, expectations.lookup(name, identity), identity.key)
    return entry


def _devcaps_marks(entry: dict[str, Any], test: Generated, state: SessionState,
                   identity: DeviceIdentity) -> None:
    """The devcaps marks a generated test carries, evaluated against the profile's device."""
    from pytest_devcaps.marks.evaluation import evaluate
    from pytest_devcaps.marks.names import MARKER_NAMES

    marks = [getattr(m, "mark", m) for m in getattr(test.function, "pytestmark", [])]
    marks += [getattr(m, "mark", m) for klass in test.device_class.__mro__
              for m in klass.__dict__.get("pytestmark", [])]
    ours = [m for m in marks if isinstance(m, pytest.Mark) and m.name in MARKER_NAMES
            and m.name != "dtypes"]
    if not ours:
        return
    evaluation = evaluate(ours, state.registry, identity.key)
    entry.update(requires=list(evaluation.required), missing=[m.to_dict() for m in evaluation.missing])
    if evaluation.skip:
        entry["outcome"] = "would-skip"


def apply_rule(entry: dict[str, Any], rule: Expectation | None, device: str) -> None:
    """An expectations rule on a plan entry: a skip skips, the others are recorded; a must-pass
    test that would be skipped says so."""
    if rule is None:
        return
    entry["expectation"] = {**rule.to_dict(), "device": device}
    if rule.outcome == "skip" and entry["outcome"] != "would-skip":
        entry.update(outcome="would-skip", reason=rule.text(device))
    elif rule.outcome == "pass" and entry["outcome"] == "would-skip":
        entry["must_pass"] = f"{rule.text(device)}, but it would be skipped"
