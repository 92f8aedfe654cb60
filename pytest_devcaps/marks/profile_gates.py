"""PyTorch's own gates evaluated against a device profile: would this test skip on that host?

A plan runs nothing, so every gate is read, never called: the decorator's wrapper and its
arguments (``pytest_devcaps.marks.pytorch_gates.decorator_layers``: ``onlyOn``'s device types,
``largeTensorTest``'s size, ``skipIf``'s reason and device type, ``deviceCountAtLeast``'s n,
``skip_if_lt_x_gpu``'s x), and the decorator as the source writes it
(``pytorch_gates.written_decorators``): a condition such as ``skipCUDAIf(not SM80OrLater, ...)``
or ``unittest.skipIf(not TEST_CUDA, ...)`` was decided when the module was imported on this
host, so it is evaluated again with PyTorch's flags read from the profile (:data:`FLAGS`:
``TEST_CUDA``, ``TEST_WITH_ROCM``, ``SM90OrLater``, ``PLATFORM_SUPPORTS_FP8``... the last from
the registry's answers for the profile, which the vendor rules give). A name that is not a
device fact (``TEST_WITH_SLOW``, ``IS_WINDOWS``) keeps this host's value, said in a note; a
condition that cannot be read (a call we do not model) leaves the test planned to run, with a
note naming the gate: a plan says what it does not know.

Each skip says PyTorch's own words (``Only runs on ['cpu']``, ``Insufficient cuda:0 memory``)
and the torch 2.13 line the reading mirrors.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.gate_table import CUTILS, GATES
from pytest_devcaps.marks.pytorch_gates import decorator_layers, installed_torch, written_decorators
from pytest_devcaps.model import DeviceIdentity

UNITTEST = "unittest.skipIf / skipUnless / skip"


def _cited(gate: str) -> str:
    """Where ``gate`` is defined in the installed torch (the gate table's citation)."""
    return GATES[gate].source(installed_torch())


#: The device type each of PyTorch's device-type flags tests (common_utils.py:1533-1537,
#: common_cuda.py:18-24; a ROCm device's type is cuda too): the one table these readings use.
FLAG_TYPES: dict[str, str] = {
    "TEST_CUDA": "cuda", "HAS_CUDA": "cuda", "TEST_CUDNN": "cuda",  # cuDNN, or MIOpen on ROCm
    "TEST_XPU": "xpu", "HAS_XPU": "xpu", "TEST_MPS": "mps", "HAS_MPS": "mps", "TEST_HPU": "hpu"}
CUDA = FLAG_TYPES["TEST_CUDA"]
#: The device types of ``skip_if_lt_x_gpu`` / ``skip_if_no_gpu`` (common_distributed.py:213, :310).
DIST_GPU_TYPES = (CUDA, FLAG_TYPES["TEST_HPU"], FLAG_TYPES["TEST_XPU"])
#: ``HAS_GPU`` (inductor_utils.py:91): CUDA or XPU.
GPU_TYPES = (CUDA, FLAG_TYPES["TEST_XPU"])


@dataclass(frozen=True)
class Target:
    """The device a plan is for, and the registry's answer for a capability on it."""

    identity: DeviceIdentity
    answer: Callable[[str], bool | None]
    """True / False, or None for an unknown answer."""

    @property
    def type(self) -> str:
        return self.identity.type

    def is_type(self, *types: str) -> bool:
        return self.identity.type in types

    @property
    def rocm(self) -> bool:
        return self.is_type(CUDA) and self.identity.vendor == "amd"

    @property
    def count(self) -> int:
        return max(int(self.identity.count or 1), 1)


def device_capability(identity: DeviceIdentity) -> tuple[int, int] | None:
    """``torch.cuda.get_device_capability()`` on such a device: NVIDIA's compute capability
    (``compute_capability`` / ``sm`` fact, or ``sm_90``), on ROCm HIP's major / minor of the
    gfx arch (``gfx942`` -> (9, 4), ``gfx90a`` -> (9, 0), ``gfx1100`` -> (11, 0))."""
    facts = identity.rule_facts()
    if isinstance(facts.get("compute_capability"), (int, float)):
        major, _, minor = f"{float(facts['compute_capability']):.1f}".partition(".")
        return int(major), int(minor)
    sm = facts.get("sm")
    arch = str(identity.arch or "")
    if not isinstance(sm, int) and arch.startswith("sm_") and arch[3:].isdigit():
        sm = int(arch[3:])
    if isinstance(sm, int):
        return sm // 10, sm % 10
    found = re.fullmatch(r"gfx(\d+)([0-9a-f])([0-9a-f])", str(facts.get("gcn_arch") or arch))
    if found:
        return int(found.group(1)), int(found.group(2), 16)
    return None


def _sm(target: Target, bound: tuple[int, int], equal: bool = False, major: int | None = None
        ) -> bool | None:
    if not target.is_type(CUDA):
        return False
    capability = device_capability(target.identity)
    if capability is None:
        return None
    if major is not None:
        return capability[0] == major
    return capability == bound if equal else capability >= bound


def _type_flag(kind: str) -> Callable[[Target], bool]:
    return lambda target: target.is_type(kind)


#: PyTorch's flags as the profile's device would set them (torch 2.13 lines in the comments).
FLAGS: dict[str, Callable[[Target], Any]] = {
    **{name: _type_flag(kind) for name, kind in FLAG_TYPES.items()},
    "TEST_WITH_ROCM": lambda t: t.rocm,                 # common_utils.py (torch.version.hip)
    "TEST_MULTIGPU": lambda t: t.is_type(CUDA) and t.count >= 2,  # common_cuda.py:18
    "TEST_PRIVATEUSE1": lambda t: not t.is_type("cpu", "meta", *FLAG_TYPES.values()),
    "HAS_GPU": lambda t: t.is_type(*GPU_TYPES), "TEST_GPU": lambda t: t.is_type(*GPU_TYPES),
    "PLATFORM_SUPPORTS_FP8": lambda t: t.answer("dtype.fp8"),          # common_cuda.py:231
    "PLATFORM_SUPPORTS_BF16": lambda t: t.answer("dtype.bf16"),
    "PLATFORM_SUPPORTS_FLASH_ATTENTION": lambda t: t.answer("attention.flash_attention"),
    "PLATFORM_SUPPORTS_MEM_EFF_ATTENTION": lambda t: t.answer("attention.mem_efficient_attention"),
    "PLATFORM_SUPPORTS_CUDNN_ATTENTION": lambda t: t.answer("attention.cudnn"),
    "IS_SM10X": lambda t: _sm(t, (10, 0), major=10), "IS_SM12X": lambda t: _sm(t, (12, 0), major=12),
}
_SM_FLAG = re.compile(r"(?:SM(\d+)OrLater|IS_SM(\d+))")  # common_cuda.py:29-47
#: ``skipIf`` string dependencies (an attribute of the CUDA test base, ``setUpClass``).
STRING_DEPS = {"no_cudnn": lambda t: False, "no_magma": lambda t: False}
#: ``skipIf`` layers PyTorch's named decorators make, by their fixed reason: the condition each
#: decorator's body writes (common_device_type.py), on the profile's device.
REASON_CONDITIONS: dict[str, tuple[str, Callable[[Target], bool]]] = {
    "test doesn't currently work on the CUDA stack":                     # :2093
        ("skipCUDAIfNotRocm", lambda t: not t.rocm),
    "cuSOLVER not available": ("skipCUDAIfNoCusolver", lambda t: False),  # :2057, CUDA and ROCm builds
    "PyTorch compiled without Lapack": ("skipCPUIfNoLapack", lambda t: False),  # :2001
}
#: Calls a condition may make, as the profile's device answers them.
CALLS: dict[str, Callable[[Target], Any]] = {
    "torch.cuda.is_available": lambda t: t.is_type(CUDA),
    "torch.cuda.device_count": lambda t: t.count if t.is_type(CUDA) else 0,
    "torch.cuda.get_device_capability": lambda t: device_capability(t.identity),
    "torch.cuda.is_bf16_supported": lambda t: t.answer("dtype.bf16"),
    "torch.xpu.is_available": lambda t: t.is_type(FLAG_TYPES["TEST_XPU"]),
    "torch.backends.mps.is_available": lambda t: t.is_type(FLAG_TYPES["TEST_MPS"]),
}


def flag(name: str, target: Target) -> Any:
    """A PyTorch flag on the profile's device; :class:`Undecided` for one not modelled."""
    if name in FLAGS:
        return FLAGS[name](target)
    found = _SM_FLAG.fullmatch(name)
    if found:
        digits = found.group(1) or found.group(2)
        bound = (int(digits[:-1]), int(digits[-1]))
        return _sm(target, bound, equal=found.group(2) is not None)
    raise Undecided(name)


class Undecided(DevcapsError):
    """A condition names something a profile does not say."""


@dataclass
class ConditionReader:
    """Evaluates a condition as written: flags from the profile, other names from the
    function's module (this host's value, noted)."""

    target: Target
    namespace: Mapping[str, Any]
    notes: list[str] = field(default_factory=list)

    def read(self, node: ast.expr) -> Any:
        """The condition's value on the profile; :class:`Undecided` where it is not known."""
        return self._known(self.value(node), node)

    def value(self, node: ast.expr) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise Undecided(ast.unparse(node))
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.value(e) for e in node.elts)

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        if isinstance(node.op, ast.Not):
            return not self._known(self.value(node.operand), node.operand)
        raise Undecided(ast.unparse(node))

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self._known(self.value(v), v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)

    def _Compare(self, node: ast.Compare) -> Any:
        left = self._known(self.value(node.left), node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = self._known(self.value(right_node), right_node)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _Subscript(self, node: ast.Subscript) -> Any:
        return self._known(self.value(node.value), node.value)[self.value(node.slice)]

    def _Name(self, node: ast.Name) -> Any:
        return self._named(node.id)

    def _Attribute(self, node: ast.Attribute) -> Any:
        dotted = ast.unparse(node)
        if dotted == "torch.version.hip":
            return "rocm" if self.target.rocm else None
        if dotted == "torch.version.cuda":
            return self.target.identity.runtime_version if self.target.is_type(CUDA) and \
                not self.target.rocm else None
        return self._named(node.attr)

    def _Call(self, node: ast.Call) -> Any:
        dotted = ast.unparse(node.func)
        if dotted in CALLS and not node.args:
            return CALLS[dotted](self.target)
        raise Undecided(ast.unparse(node))

    def _named(self, name: str) -> Any:
        try:
            return flag(name, self.target)
        except Undecided:
            pass
        value = self.namespace.get(name, _MISSING)
        if isinstance(value, (bool, int, float, str, type(None))):
            self.notes.append(f"{name} is this host's value ({value!r}): not a device fact")
            return value
        raise Undecided(name)

    @staticmethod
    def _known(value: Any, node: ast.expr) -> Any:
        """``value``, unless it is an answer the profile does not know (None), which leaves the
        whole condition undecided; ``torch.version.hip`` / ``.cuda`` are None where they are."""
        definite = isinstance(node, ast.Constant) or ast.unparse(node).startswith("torch.version.")
        if value is None and not definite:
            raise Undecided(f"{ast.unparse(node)} (unknown on the profile)")
        return value


_MISSING = object()
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}


@dataclass(frozen=True)
class GateVerdict:
    """What PyTorch's gates would do with one test on the profile's device."""

    skip: str | None = None
    gate: str | None = None
    source: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"skip": self.skip, "gate": self.gate, "source": self.source,
                "notes": list(self.notes)}


class _Skip(DevcapsError):
    """A gate that skips the test on the profile: why, the gate, and where it is defined."""

    def __init__(self, reason: str, gate: str, source: str) -> None:
        super().__init__(reason)
        self.reason, self.gate, self.source = reason, gate, source


def evaluate(function: Any, cls: type | None, target: Target) -> GateVerdict:
    """PyTorch's gates on ``function`` (a generated test, or a plain one) and its class, as a
    host with the profile's device would decide them: the class's decorators first, then the
    method's as written (unittest decides those before the test runs), then the wrappers
    outermost first (the first to raise ``SkipTest`` gives the reason)."""
    notes: list[str] = []
    try:
        for owner in _user_classes(cls):
            _written(owner, vars(sys.modules.get(owner.__module__, object())), target, notes)
        inner = _innermost(function)
        _written(function, getattr(inner, "__globals__", {}), target, notes)
        for name, closure in decorator_layers(function):
            _layer(name, closure, target, notes, function)
    except _Skip as skip:
        return GateVerdict(skip.reason, skip.gate, skip.source, tuple(dict.fromkeys(notes)))
    return GateVerdict(notes=tuple(dict.fromkeys(notes)))


def _user_classes(cls: type | None) -> Iterable[type]:
    """The classes of ``cls``'s MRO that a test file wrote (not torch's, unittest's, ours)."""
    for klass in getattr(cls, "__mro__", ()):
        if not klass.__module__.startswith(("unittest", "torch.", "expecttest", "builtins",
                                            "pytest_devcaps")):
            yield klass


def _innermost(function: Any) -> Any:
    seen = 0
    while getattr(function, "__wrapped__", None) is not None and seen < 64:
        function, seen = function.__wrapped__, seen + 1
    return function


def _text(node: ast.expr | None) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return "" if node is None else ast.unparse(node)


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _is_unittest(dotted: str, namespace: Mapping[str, Any]) -> bool:
    import unittest

    head, _, last = dotted.rpartition(".")
    if head:
        return head == "unittest"
    return namespace.get(last, None) is getattr(unittest, last, _MISSING)


def _condition(node: ast.expr, target: Target, namespace: Mapping[str, Any],
               notes: list[str], gate: str) -> bool | None:
    reader = ConditionReader(target, namespace)
    try:
        value = bool(reader.read(node))
    except Undecided as what:
        notes.append(f"{gate}: {what} is not known for the profile: decided on the host")
        return None
    except Exception as error:  # a condition that does not evaluate (a type mismatch)
        notes.append(f"{gate}: cannot be evaluated ({type(error).__name__}: {error})")
        return None
    notes.extend(reader.notes)
    return value


def _written(obj: Any, namespace: Mapping[str, Any], target: Target, notes: list[str]) -> None:
    """The decorators as the source writes them that decide at import (unittest's), or by
    what this environment sets (``slowTest``, ``skipIfTorchDynamo``), or by vendor."""
    for node in written_decorators(obj, every=True):
        call = node if isinstance(node, ast.Call) else None
        dotted = ast.unparse(call.func if call is not None else node)
        last = dotted.rpartition(".")[2]
        if last in ("skipIf", "skipUnless", "skip") and call is not None and \
                _is_unittest(dotted, namespace):
            _unittest_skip(last, call, namespace, target, notes)
        elif last == "slowTest" and not _host_flag("TEST_WITH_SLOW"):
            raise _Skip("test is slow; run with PYTORCH_TEST_WITH_SLOW to enable test",
                        "slowTest", f"{CUTILS}:2642")
        elif last == "skipIfTorchDynamo" and _host_flag("TEST_WITH_TORCHDYNAMO"):
            message = _text(_argument(call, 0, "msg")) if call else ""
            raise _Skip(message or "test doesn't currently work with dynamo",
                        "skipIfTorchDynamo", f"{CUTILS}:1917")
        elif last == "skipIfRocm" and target.rocm:
            message = (_text(_argument(call, 0, "msg")) if call else "") or \
                "test doesn't currently work on the ROCm stack"
            raise _Skip(f"skipIfRocm: {message}", "skipIfRocm", _cited("skipIfRocm"))


def _unittest_skip(kind: str, call: ast.Call, namespace: Mapping[str, Any], target: Target,
                   notes: list[str]) -> None:
    if kind == "skip":
        raise _Skip(_text(_argument(call, 0, "reason")), "unittest.skip", UNITTEST)
    condition = _argument(call, 0, "condition")
    if condition is None:
        return
    gate = f"unittest.{kind}({ast.unparse(condition)})"
    holds = _condition(condition, target, namespace, notes, gate)
    if holds is not None and holds == (kind == "skipIf"):
        raise _Skip(_text(_argument(call, 1, "reason")), gate, UNITTEST)


def _host_flag(name: str) -> bool:
    """A flag of PyTorch's test environment on this host (set by environment variables)."""
    module = sys.modules.get("torch.testing._internal.common_utils")
    return bool(getattr(module, name, False))


def _primary(target: Target) -> str:
    return target.type if target.type == "cpu" else f"{target.type}:0"


def _layer(name: str, closure: dict[str, Any], target: Target, notes: list[str],
           function: Any) -> None:
    """One wrapper of a PyTorch decorator, as it would decide on the profile's device."""
    handler = _LAYERS.get(name)
    if handler is not None:
        handler(closure, target, notes, function)


def _only_on(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    types = getattr(c.get("self"), "device_type", None)
    if types is not None and target.type not in types:  # CDT:1649, `in` as PyTorch writes it
        shown = {"cpu": "onlyCPU", "cuda": "onlyCUDA", "mps": "onlyMPS", "xpu": "onlyXPU",
                 "hpu": "onlyHPU"}.get(types, f"onlyOn({types!r})") if isinstance(types, str) \
            else f"onlyOn({types!r})"
        source = _cited(shown if shown in GATES else "onlyOn")
        raise _Skip(f"Only runs on {types}", shown, source)


def _only_native(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    utils = sys.modules.get("torch.testing._internal.common_utils")
    native = tuple(getattr(utils, "NATIVE_DEVICES", ("cpu", "cuda", "xpu", "meta", "mps", "mtia")))
    extra = tuple(c.get("devices") or ())
    if target.type not in native and target.type not in extra:
        gate = "onlyNativeDeviceTypesAnd" if "devices" in c else "onlyNativeDeviceTypes"
        reason = (f"onlyNativeDeviceTypesAnd {list(extra)} : doesn't run on {target.type}"
                  if extra else f"onlyNativeDeviceTypes: doesn't run on {target.type}")
        raise _Skip(reason, gate, _cited(gate))


def _only_accelerator(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    if target.type in ("cpu", "meta"):
        raise _Skip("onlyAccelerator: doesn't run on CPU or meta devices", "onlyAccelerator",
                    _cited("onlyAccelerator"))


def _only_cuda_pu1(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    if target.type in ("cpu", "xpu", "mps", "hpu", "meta"):
        raise _Skip(f"onlyCUDAAndPRIVATEUSE1: doesn't run on {target.type}",
                    "onlyCUDAAndPRIVATEUSE1", _cited("onlyCUDAAndPRIVATEUSE1"))


def _skip_if(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    """``skipIf`` / ``skipCUDAIf``...: the device types it names, then its condition: a string
    an attribute of the test base, a bool decided at import (read again from the source)."""
    instance = c.get("self")
    where, dep = getattr(instance, "device_type", None), getattr(instance, "dep", None)
    reason = str(getattr(instance, "reason", ""))
    named = [where] if isinstance(where, str) else list(where or ())
    if named and target.type not in named:
        return
    kind = type(instance).__name__
    if isinstance(dep, str):
        read = STRING_DEPS.get(dep)
        gate = f"{kind}({dep!r})"
        if read is None:
            notes.append(f"{gate}: depends on the test base's {dep!r}: decided on the host")
        elif read(target):
            raise _Skip(reason, gate, _cited("skipIf"))
        return
    if reason.startswith("skipCUDAIfRocm"):
        if target.rocm:
            raise _Skip(reason, "skipCUDAIfRocm", _cited("skipCUDAIfRocm"))
        return
    if reason in REASON_CONDITIONS:
        named_gate, holds_on = REASON_CONDITIONS[reason]
        if holds_on(target):
            raise _Skip(reason, named_gate, _cited("skipIf"))
        return
    holds, gate = _written_condition(function, reason, target, notes, kind, bool(dep))
    if holds:
        raise _Skip(reason, gate, _cited("skipIf"))


def _written_condition(function: Any, reason: str, target: Target, notes: list[str], kind: str,
                       host: bool) -> tuple[bool, str]:
    """The condition of the written ``skip*If(condition, reason)`` whose reason is ``reason``,
    on the profile, and the gate as written; this host's verdict (noted) where none is."""
    inner = _innermost(function)
    for node in written_decorators(inner, every=True):
        if isinstance(node, ast.Call) and node.args and _text(_argument(node, 1, "reason")) == reason:
            gate = f"{kind}({ast.unparse(node.args[0])})"
            holds = _condition(node.args[0], target, getattr(inner, "__globals__", {}), notes, gate)
            return (host if holds is None else holds), gate
    gate = f"{kind}({reason!r})"
    notes.append(f"{gate}: its condition is not written where the test is: this host decided "
                 f"{'skip' if host else 'run'}")
    return host, gate


def _count(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    n = getattr(c.get("self"), "num_required_devices", None)
    have = 1 if target.type == "cpu" else target.count
    if isinstance(n, int) and have < n:
        raise _Skip(f"fewer than {n} devices detected", f"deviceCountAtLeast({n})",
                    _cited("deviceCountAtLeast"))


def _large_tensor(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    """``largeTensorTest(size, device=)``: the free memory of the device must hold ``size``
    (CDT:1512 ``_has_sufficient_memory``); a profile knows the total, and free is less."""
    size, device = c.get("size"), c.get("device")
    if not isinstance(size, int) or isinstance(size, bool):
        notes.append("largeTensorTest: its size is computed when the test runs: decided on the host")
        return
    shown = str(device) if device else _primary(target)
    kind = shown.partition(":")[0]
    gib = size / 2**30
    if kind != target.type:
        if kind not in GPU_TYPES:  # another accelerator's check passes (CDT:1521)
            notes.append(f"largeTensorTest({gib:g} GiB on {kind}): this host's memory decides")
        return
    total = target.identity.memory_bytes
    if total is None:
        notes.append(f"largeTensorTest({gib:g} GiB): the profile does not say the memory")
        return
    gate = f"largeTensorTest({gib:g} GiB)"
    if size >= total:
        notes.append(f"{gate}: needs {gib:g} GiB free; {shown} has {total / 2**30:g} GiB in all")
        raise _Skip(f"Insufficient {shown} memory", gate, _cited("largeTensorTest"))
    if size > 0.9 * total:
        notes.append(f"{gate}: nearly all of {total / 2**30:g} GiB: may skip on a busy device")


def _lt_x_gpu(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    x = c.get("x")
    if not isinstance(x, int):
        return
    if target.is_type(*DIST_GPU_TYPES) and target.count >= x:
        return
    if c.get("allow_cpu") and target.type == "cpu":
        return
    raise _Skip(f"Need at least {x} CUDA device{'s' if x != 1 else ''}", f"skip_if_lt_x_gpu({x})",
                _cited("skip_if_lt_x_gpu"))


def _nccl(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    n = c.get("x", c.get("n"))
    if c.get("backend") == "nccl" and isinstance(n, int) and \
            (not target.is_type(CUDA) or target.count < n):
        raise _Skip(f"Need at least {n} CUDA device{'s' if n != 1 else ''}",
                    f"nccl_skip_if_lt_x_gpu({n})", _cited("nccl_skip_if_lt_x_gpu"))


def _lazy(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    message = str(c.get("msg", c.get("reason", "")))
    if message.startswith("skipIfRocm") and target.rocm:
        raise _Skip(message, "skipIfRocm", _cited("skipIfRocm"))
    if "compiled with XPU" in message and target.type != "xpu":
        raise _Skip(message, "skipIfNoXPU", _cited("skipIfNoXPU"))


def _no_gpu(c: dict[str, Any], target: Target, notes: list[str], function: Any) -> None:
    if not target.is_type(*DIST_GPU_TYPES):
        raise _Skip("CUDA is not available.", "skip_if_no_gpu", _cited("skip_if_no_gpu"))


_LAYERS: dict[str, Callable[[dict[str, Any], Target, list[str], Any], None]] = {
    "onlyOn": _only_on, "onlyNativeDeviceTypes": _only_native,
    "onlyNativeDeviceTypesAnd": _only_native, "onlyAccelerator": _only_accelerator,
    "onlyCUDAAndPRIVATEUSE1": _only_cuda_pu1, "skipIf": _skip_if, "deviceCountAtLeast": _count,
    "largeTensorTest": _large_tensor, "skip_if_lt_x_gpu": _lt_x_gpu,
    "nccl_skip_if_lt_x_gpu": _nccl, "require_n_gpus_for_nccl_backend": _nccl,
    "lazy_skip_if": _lazy, "skipIfRocm_BUGGY": _lazy, "skip_if_no_gpu": _no_gpu,
}
