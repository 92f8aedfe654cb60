"""Which test of the converted file is which test of the original, and what changed.

A converted test is matched to the original by the ``def`` behind it (its ``__qualname__``,
which ``functools.wraps`` keeps through ``instantiate_device_type_tests`` and skip decorators):
``TestX::test_a`` and the instantiated ``TestXCPU::test_a_cpu`` / ``TestXEMU::test_a_emu`` are
``TestX.test_a``; ``test_b`` and ``test_b[cpu]`` / ``test_b[emu]`` are ``test_b``. Within one
function, the variant (parameters and dtype suffixes, device names taken out) picks the
counterpart; a function the original did not have (a class the rewrite split off) is matched by
its method name when that name is unique in the original. Where the original ran that function
and variant on the converted test's device type too, that test is the counterpart (the CPU with
emu devices runs ``TestXCPU::test_a_cpu`` and ``TestXPRIVATEUSE1::test_a_emu`` side by side: the
emu copy is compared with the emu copy, not with the better of the two); otherwise an
accelerator's copy is compared with the original's accelerator copies (``test_b[emu]`` with the
``test_b[cuda]`` a ``parametrize("device", ["cpu", "cuda"])`` made, not with ``test_b[cpu]``), and
then with every copy of that function and variant. Outcomes are compared
within one device environment (the CPU alone; the CPU with emu devices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_devcaps.commands.verify_runs import Outcome, RunResult

_DEVICE_TOKEN = re.compile(r"(cpu|cuda|xpu|mps|hpu|mtia|meta|emu|privateuse1|privateuseone)(:\d+)?", re.I)
_RANK = {"passed": 4, "xfailed": 3, "xpassed": 3, "skipped": 2, "not run": 1}


def variant(name: str, function: str | None) -> str:
    """``test_a_cpu_float32`` of ``test_a`` -> ``float32``; ``test_b[emu-x1]`` -> ``x1``."""
    params = ""
    if name.endswith("]") and "[" in name:
        name, params = name[:-1].split("[", 1)
    suffix = name[len(function):] if function and name.startswith(function) else ""
    tokens = [t for t in re.split(r"[-_]", f"{suffix}-{params}") if t and not _DEVICE_TOKEN.fullmatch(t)]
    return "-".join(tokens)


def _key(test: Outcome) -> tuple[str, str]:
    function = test.qualname.rsplit(".", 1)[-1] if test.qualname else None
    return test.qualname or test.nodeid, variant(test.name, function)


def rank(outcome: str) -> int:
    """How good an outcome is: passed > xfailed > skipped > not run > failed / error / crashed."""
    return _RANK.get(outcome, 0)


@dataclass(frozen=True)
class Change:
    """One converted test (or a vanished original one) against its counterpart."""

    environment: str
    qualname: str  # the function in the ORIGINAL file a rewrite would be undone for
    nodeid: str
    device: str | None
    before: str  # the original's outcome ("absent": no counterpart)
    after: str  # the converted one's ("absent": vanished)
    message: str = ""

    def line(self) -> str:
        why = f": {self.message}" if self.message and self.after not in ("passed", "absent") else ""
        return f"{self.nodeid} ({self.environment} run): {self.before} -> {self.after}{why}"


@dataclass
class Comparison:
    worse: list[Change] = field(default_factory=list)
    gained: list[Change] = field(default_factory=list)
    new: list[Change] = field(default_factory=list)
    vanished: list[Change] = field(default_factory=list)
    collection: list[str] = field(default_factory=list)  # new collection errors, as messages


@dataclass
class _Counterparts:
    """The original's tests by function, variant and device type; by function and variant; by
    function."""

    by_device: dict[tuple[str, str, str | None], list[Outcome]] = field(default_factory=dict)
    by_key: dict[tuple[str, str], list[Outcome]] = field(default_factory=dict)
    by_function: dict[str, list[Outcome]] = field(default_factory=dict)


def _counterparts(original: RunResult) -> _Counterparts:
    found = _Counterparts()
    for test in original.tests.values():
        key = _key(test)
        found.by_device.setdefault((*key, test.device), []).append(test)
        found.by_key.setdefault(key, []).append(test)
        found.by_function.setdefault(key[0], []).append(test)
    return found


def _match(test: Outcome, originals: _Counterparts) -> tuple[str, list[Outcome]]:
    """(the original function's qualified name, its tests this one stands for)."""
    function, kind = _key(test)
    by_function = originals.by_function
    if test.device is not None and (function, kind, test.device) in originals.by_device:
        return function, originals.by_device[(function, kind, test.device)]
    if test.device not in (None, "cpu"):  # an accelerator's copy stands for the original's ones
        accelerators = [t for t in originals.by_key.get((function, kind), ()) if t.device not in (None, "cpu")]
        if accelerators:
            return function, accelerators
    if (function, kind) in originals.by_key:
        return function, originals.by_key[(function, kind)]
    if function in by_function:
        return function, by_function[function]
    method = function.rsplit(".", 1)[-1]
    named = {f for f in by_function if f.rsplit(".", 1)[-1] == method}
    if len(named) == 1:
        found = named.pop()
        return found, by_function[found]
    return function, []


def compare(original: RunResult, converted: RunResult) -> Comparison:
    """Per converted test: worse (it fails where its counterpart passed, skipped or xfailed, or
    it is new and fails), gained (it passes where its counterpart did not, or it is new); none
    of these where the original's run ended before the counterpart ran;
    vanished: original tests no converted test stands for (worse when they passed)."""
    result = Comparison()
    originals = _counterparts(original)
    matched: set[str] = set()
    for test in converted.tests.values():
        function, before = _match(test, originals)
        matched.update(t.nodeid for t in before)
        best = max(before, key=lambda t: rank(t.outcome), default=None)
        if best is not None and best.outcome == "not run":
            continue  # the original's run ended before it: nothing to compare with
        change = Change(converted.environment, function, test.nodeid, test.device,
                        best.outcome if best else "absent", test.outcome, test.message)
        if best is None:
            result.new.append(change)
        if test.failing and (best is None or not best.failing):
            result.worse.append(change)
        elif test.outcome == "passed" and (best is None or best.outcome != "passed"):
            result.gained.append(change)
    for test in original.tests.values():
        if test.nodeid not in matched:
            change = Change(original.environment, _key(test)[0], test.nodeid, test.device, test.outcome, "absent")
            result.vanished.append(change)
            if test.outcome == "passed" and not converted.collection_errors:
                result.worse.append(change)
    if not original.collection_errors:  # one that was there before is no worse now
        result.collection = [e.message for e in converted.collection_errors]
    return result
