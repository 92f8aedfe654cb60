"""Gate conditions: which sub-expressions are hardware gates (``Atom``), and what a whole
condition requires for a test to run, as a :class:`~pytest_devcaps.lint.records.Need`.

``skipIf(C)`` runs the test when ``not C``: :func:`need_for` walks ``C`` with a polarity, so
``not A or not B`` needs A and B, ``torch.cuda.is_available() and not SM89OrLater`` needs fp8
(the "on CUDA" half only narrows: the registry answers the capability for every device), and
``torch.cuda.device_count() < 2`` needs two devices.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping, Protocol

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.resolution import qualified
from pytest_devcaps.lint.records import NOTHING, Hardware, Need, join_hardware


@dataclass(frozen=True)
class LocalGate:
    """A gate the file defines: a flag (``HAS_FP8 = SM89OrLater``), a function
    (``def _is_sm_10x(): return ...``) or a skip mark (``requires_fp8 = pytest.mark.skipif(not
    ..., reason=...)``). ``expr`` is read again where it is used (so "as the test uses it"
    picks the capability); ``visible`` are the gates defined before it, all it may name."""

    name: str
    kind: str  # "flag" | "function" | "mark"
    expr: ast.expr
    holds: bool  # a mark: the value of ``expr`` that lets the test run
    statement: ast.stmt
    visible: frozenset[str]


class Uses(Protocol):
    """What the gated code names (a scope reads it lazily: only gates that pick a capability
    by use ask) and the gates the file defines."""

    @property
    def used(self) -> frozenset[str]: ...

    @property
    def local_gates(self) -> Mapping[str, LocalGate]: ...


@dataclass(frozen=True)
class FixedUses:
    used: frozenset[str] = frozenset()
    local_gates: Mapping[str, LocalGate] = field(default_factory=dict)


@dataclass(frozen=True)
class _Restricted:
    """``uses`` seeing only the local gates defined before ``gate`` (no cycles)."""

    inner: Uses
    gate: LocalGate

    @property
    def used(self) -> frozenset[str]:
        return self.inner.used

    @property
    def local_gates(self) -> Mapping[str, LocalGate]:
        return {k: v for k, v in self.inner.local_gates.items() if k in self.gate.visible}


def resolve(gate: rules.Gate, uses: Uses) -> Need:
    return gate.resolve(uses.used if gate.by_use else frozenset())


@dataclass(frozen=True)
class Atom:
    """One gate in a condition: what holding it needs (``when_true``) and what not holding it
    needs (``when_false``); ``code``/``label``/``use`` make its finding."""

    node: ast.expr
    code: str
    label: str
    use: str
    hardware: Hardware | None
    when_true: Need
    when_false: Need
    fact: str | None = None  # where it holds, over device facts (rules.Gate.fact)


def dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(qualified(node))
    elif isinstance(node, ast.Call):
        parts.append(dotted(node.func) + "()")
    else:
        return ""
    return ".".join(reversed(parts))


def last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def deviceish(node: ast.AST) -> bool:
    """An expression that holds a device or device type: ``device``, ``x.device.type``,
    ``self.device_type``, ``str(dev)``, ``GPU_TYPE``, ``torch.device(...)``."""
    if isinstance(node, ast.Call):
        if last_name(node.func) in ("str", "repr", "getattr") and node.args:
            return deviceish(node.args[0])
        return last_name(node.func) == "device"
    parts = dotted(node).split(".")
    return parts != [""] and (parts[-1] == "type" or any(rules.DEVICE_NAME.search(p) for p in parts))


def is_cuda_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(
        rules.CUDA_LITERAL.match(node.value))


def _excluded(label: str, hardware: Hardware | None) -> Need:
    return Need(blockers=(f"skips where {label} holds: no mark expresses an exclusion",), hardware=hardware)


def _from_gate(node: ast.expr, gate: rules.Gate, used: Uses) -> Atom:
    when_true = resolve(gate, used)
    if when_true.accelerator and not (when_true.capabilities or when_true.any_of or when_true.blockers):
        when_false: Need = Need(qualifier=True)  # "not on CUDA": narrows, requires nothing
    else:
        when_false = _excluded(gate.label, None)  # "not there": runs everywhere else, restricts nothing
    return Atom(node, gate.code, gate.label, gate.use, gate.hardware, when_true, when_false, gate.fact)


_ARCH_ANY = re.compile("|".join(f"(?:{p.pattern})" for p, _ in rules.ARCH_PATTERNS))


def _arch_match(name: str) -> rules.Gate | None:
    if not _ARCH_ANY.match(name):
        return None
    for pattern, kind in rules.ARCH_PATTERNS:
        match = pattern.match(name)
        if match is None:
            continue
        if kind == "min":
            gate = rules.sm_gate(int(match.group(1)))
            return replace(gate, fact=rules.sm_at_least_fact(int(match.group(1)))) \
                if rules.TORCHAO_SM_AT_LEAST.match(name) else gate
        if kind == "exact":
            return rules.exact_arch_gate(name, "nvidia")
        if kind == "rocm":
            return replace(rules.exact_arch_gate(name, "amd"), fact=rules.amd_model_fact(name))
        return rules.exact_arch_gate(name, "nvidia")
    return None


def _named_gate(name: str) -> rules.Gate | None:
    if name in rules.GATE_NAMES:
        return rules.GATE_NAMES[name]
    if name.startswith("PLATFORM_SUPPORTS_"):
        return rules.platform_gate(name.removeprefix("PLATFORM_SUPPORTS_"))
    return _arch_match(name)


def _vendor_attribute(node: ast.expr) -> Atom | None:
    name = dotted(node)
    if name in ("torch.version.hip", "version.hip"):
        return Atom(node, "DC007", "torch.version.hip", "requires_capability for what differs on ROCm, "
                    "or an override file for vendor amd", None,
                    Need(blockers=("a ROCm-build check",), hardware="amd"), _excluded("ROCm", None), rules.ON_ROCM)
    if name in ("torch.version.cuda", "version.cuda"):
        return Atom(node, "DC007", "torch.version.cuda", "requires_capability for what the test needs",
                    "cuda", Need(blockers=("a CUDA-build check",), hardware="cuda"),
                    _excluded("a CUDA build", None), rules.ON_NVIDIA)
    return None


def classify(node: ast.expr, used: Uses, *, in_condition: bool = False) -> Atom | None:
    """The gate ``node`` is, or None. ``in_condition`` also takes any name that says CUDA/GPU as
    a device flag we cannot read (a project's own ``has_cuda_fp8()``)."""
    if isinstance(node, ast.Compare):
        return _compare(node, used)
    if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
        return _on_cuda(node)
    vendor = _vendor_attribute(node)
    if vendor is not None:
        return vendor
    target = node.func if isinstance(node, ast.Call) else node
    if not isinstance(target, (ast.Name, ast.Attribute)):
        return None
    name, last = dotted(target), last_name(target)
    local = used.local_gates.get(name) if isinstance(target, ast.Name) else None
    if local is not None and local.kind == ("function" if isinstance(node, ast.Call) else "flag"):
        return local_atom(node, local, used)
    if isinstance(node, ast.Call):
        gate = rules.GATE_CALLS.get(name) or rules.GATE_CALLS.get(last) or _arch_match(last)
        if gate is None and in_condition and name.endswith("cuda.device_count"):
            gate = rules.GATE_CALLS["torch.cuda.is_available"]
    elif name.startswith("torch.") and not name.startswith("torch.testing"):
        gate = None  # torch.cuda.is_available without a call, torch.version...: not a flag
    else:
        gate = _named_gate(last)
    if gate is None and in_condition and not name.startswith("torch."):
        gate = unknown_device_word(last + ("()" if isinstance(node, ast.Call) else ""))
    return _from_gate(node, gate, used) if gate is not None else None


def unknown_device_word(name: str) -> rules.Gate | None:
    """A flag, helper or decorator named like a device check that the lint cannot read
    (imported from a project's own utilities): reported, never rewritten."""
    match = rules.DEVICE_WORD.search(name)
    if match is None:
        return None
    word = match.group(0).lower()
    code = "DC006" if word.startswith("sm") else "DC007" if word in ("rocm", "hip") or "version" in name.lower() \
        else "DC008" if word == "nccl" else "DC001"
    return rules.Gate(code, name, Need(blockers=(f"{name} is a device check the lint cannot read",),
                                       hardware="accelerator"),
                      "requires_capability for what it checks, or the device fixture")


def local_atom(node: ast.expr, gate: LocalGate, uses: Uses) -> Atom | None:
    scoped = _Restricted(uses, gate)
    atoms = [a for a in atoms_in(gate.expr, scoped, in_condition=True) if a.code]
    if not atoms:
        return None
    def atom_of(e: ast.expr) -> Atom | None:
        return classify(e, scoped, in_condition=True) or generic_atom(e)

    when_true = need_for(gate.expr, gate.holds, atom_of)
    when_false = need_for(gate.expr, not gate.holds, atom_of)
    label = f"{gate.name} (line {gate.statement.lineno})"
    main = next((a for a in atoms if a.code != "DC001"), atoms[0])
    return Atom(node, main.code, label, main.use, main.hardware, when_true, when_false,
                fact_condition(gate.expr, gate.holds, atom_of))


def local_gates(tree: ast.Module) -> dict[str, LocalGate]:
    """The gates ``tree`` defines at module level and in its classes' bodies, in order (each
    sees only earlier ones). A class-body flag (``cuda_available = torch.cuda.is_available()``
    read by ``@skipif(not cuda_available, ...)`` on its methods, torchtune's form) is a gate like
    a module-level one: read where it is used, and kept as it is where a gate reading it stays.
    A name defined twice anywhere is none (which one a use reads is not the lint's to guess)."""
    found: dict[str, LocalGate] = {}
    counts: dict[str, int] = {}
    statements = list(_gate_statements(tree.body))
    for statement in statements:
        for name in _defined(statement):
            counts[name] = counts.get(name, 0) + 1
    for statement in statements:
        candidate = _definition(statement, frozenset(found))
        if candidate is None or counts.get(candidate.name) != 1:
            continue
        if any(a.code for a in atoms_in(candidate.expr, FixedUses(local_gates=found))):
            found[candidate.name] = candidate
    return found


def _gate_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, with each top-level class's assignments where the class is
    (its body runs there); its methods are not the module's helpers."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.ClassDef):
            yield from (s for s in statement.body if isinstance(s, (ast.Assign, ast.AnnAssign)))


def _defined(statement: ast.stmt) -> list[str]:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [statement.name]
    if isinstance(statement, ast.Assign):
        return [t.id for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    return []


def _definition(statement: ast.stmt, visible: frozenset[str]) -> LocalGate | None:
    if isinstance(statement, ast.FunctionDef) and not statement.args.args and not statement.decorator_list:
        body = [s for s in statement.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            return LocalGate(statement.name, "function", body[0].value, True, statement, visible)
        guarded = _early_return(body)
        if guarded is not None:
            return LocalGate(statement.name, "function", guarded, True, statement, visible)
        return None
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
            and statement.value is not None:
        name, value = statement.target.id, statement.value
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0], ast.Name):
        name, value = statement.targets[0].id, statement.value
    else:
        return None
    mark = _skip_condition(value)
    if mark is not None:
        return LocalGate(name, "mark", mark[0], mark[1], statement, visible)
    if isinstance(value, (ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Call, ast.Attribute)):
        return LocalGate(name, "flag", value, True, statement, visible)
    return None


def _early_return(body: list[ast.stmt]) -> ast.expr | None:
    """``if not C: return False`` then ``return X`` is ``C and X`` (``return True`` first:
    ``C or X``), the shape of a helper gate such as ``def has_fp8(): if not
    torch.cuda.is_available(): return False; return get_device_capability() >= (8, 9)``."""
    if len(body) != 2 or not isinstance(body[0], ast.If) or body[0].orelse or not isinstance(body[1], ast.Return):
        return None
    guard, last = body[0], body[1]
    first = guard.body[0] if len(guard.body) == 1 else None
    if not (isinstance(first, ast.Return) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, bool) and last.value is not None):
        return None
    if first.value.value:  # if C: return True / return X
        return ast.BoolOp(op=ast.Or(), values=[guard.test, last.value])
    return ast.BoolOp(op=ast.And(), values=[ast.UnaryOp(op=ast.Not(), operand=guard.test), last.value])


def _skip_condition(value: ast.expr) -> tuple[ast.expr, bool] | None:
    """(condition, value that runs the test) of ``pytest.mark.skipif(c, ...)``,
    ``unittest.skipIf(c, ...)``, ``unittest.skipUnless(c, ...)`` or
    ``functools.partial(unittest.skipIf, c, ...)``."""
    if not isinstance(value, ast.Call):
        return None
    func, args = value.func, value.args
    if last_name(func) == "partial" and args:
        func, args = args[0], args[1:]
    skip = rules.SKIP_DECORATORS.get(dotted(func), rules.SKIP_DECORATORS.get(last_name(func)))
    if skip is None or not args or isinstance(args[0], ast.Constant):
        return None
    return args[0], not skip


_GENERIC_AVAILABILITY = re.compile(r"^torch\.(accelerator|xpu|mps|hpu|npu|mtia|backends\.mps)\.is_available$")


def generic_atom(node: ast.expr) -> Atom | None:
    """``torch.accelerator.is_available()``, other vendors' checks (``torch.xpu.is_available()``)
    and PyTorch's flags for them (``TEST_XPU``): not findings, but a condition made of them and
    real gates still reads as one requirement, keeping the device types it names."""
    if isinstance(node, ast.Call):
        match = _GENERIC_AVAILABILITY.match(dotted(node.func))
        if match is None:
            return None
        vendor = match.group(1).removeprefix("backends.")
        vendors = () if vendor == "accelerator" else (vendor,)
        return Atom(node, "", dotted(node.func) + "()", "", None, Need(accelerator=True, vendors=vendors),
                    Need(qualifier=True))
    name = last_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else ""
    if name in rules.OTHER_VENDOR_FLAGS:
        return Atom(node, "", name, "", None, Need(accelerator=True, vendors=(rules.OTHER_VENDOR_FLAGS[name],)),
                    Need(qualifier=True))
    return None


def _on_cuda(node: ast.expr) -> Atom:
    return Atom(node, "DC003", "a CUDA device-type check", "requires_capability / devcaps.has(...) for "
                "what differs on CUDA", "cuda",
                Need(blockers=("a CUDA-only branch",), hardware="cuda"), Need(qualifier=True))


_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}
_NEGATE: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _compare(node: ast.Compare, used: Uses) -> Atom | None:
    if len(node.ops) != 1:
        return None
    left, op, right = node.left, type(node.ops[0]), node.comparators[0]
    literal_left, literal_right = is_cuda_literal(left), is_cuda_literal(right)
    if op in (ast.Eq, ast.NotEq, ast.In, ast.NotIn) and (
            (literal_left and deviceish(right)) or (literal_right and deviceish(left))):
        atom = _on_cuda(node)
        if op in (ast.NotEq, ast.NotIn):
            return Atom(node, atom.code, atom.label, atom.use, atom.hardware, atom.when_false, atom.when_true)
        return atom
    for probe in (_count_atom, _capability_atom):
        found = probe(node, left, op, right, used) or (
            probe(node, right, _FLIP[op], left, used) if op in _FLIP else None)
        if found is not None:
            return found
    return None


def _int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _count_atom(node: ast.Compare, side: ast.expr, op: type[ast.cmpop], bound: ast.expr,
                used: Uses) -> Atom | None:
    if not (isinstance(side, ast.Call) and dotted(side.func).endswith("cuda.device_count")):
        return None
    n = _int(bound)
    if n is None:
        return None

    def need(run_op: type[ast.cmpop]) -> Need:
        bounds: dict[type[ast.cmpop], int] = {ast.GtE: n, ast.Gt: n + 1}
        least = bounds.get(run_op)
        if least is None:
            return Need(blockers=(f"runs only with a bounded GPU count ({ast.unparse(node)})",))
        return Need(accelerator=True, devices=least if least > 1 else 0)

    return Atom(node, "DC005", "GPU count", "@pytest.mark.requires_devices(n)",
                "accelerator", need(op), need(_NEGATE[op]))


def _capability_level(side: ast.expr) -> tuple[str, int] | None:
    """("tuple", 0) for get_device_capability(), ("major", 0) for [0] or .major."""
    if isinstance(side, ast.Call) and last_name(side.func) == "get_device_capability":
        return "tuple", 0
    if isinstance(side, ast.Subscript) and _int(side.slice) == 0 and isinstance(side.value, ast.Call) \
            and last_name(side.value.func) == "get_device_capability":
        return "major", 0
    if isinstance(side, ast.Attribute) and side.attr == "major" and isinstance(side.value, ast.Call) \
            and last_name(side.value.func) in ("get_device_properties", "get_device_capability"):
        return "major", 0
    return None


def _level(kind: str, bound: ast.expr) -> int | None:
    if kind == "major":
        major = _int(bound)
        return None if major is None else major * 10
    if isinstance(bound, ast.Tuple) and len(bound.elts) == 2:
        major, minor = _int(bound.elts[0]), _int(bound.elts[1])
        if major is not None and minor is not None:
            return major * 10 + minor
    return None


def _capability_atom(node: ast.Compare, side: ast.expr, op: type[ast.cmpop], bound: ast.expr,
                     used: Uses) -> Atom | None:
    kind = _capability_level(side)
    level = _level(kind[0], bound) if kind else None
    if kind is None or level is None:
        return None
    step = 10 if kind[0] == "major" else 1
    label = f"compute capability ({ast.unparse(node)})"

    def need(run_op: type[ast.cmpop]) -> Need:
        bounds: dict[type[ast.cmpop], int] = {ast.GtE: level, ast.Gt: level + step}
        least = bounds.get(run_op)
        if least is None:
            return rules.exact_arch_gate(label, "nvidia").need
        return resolve(rules.sm_gate(least), used)

    gate = rules.sm_gate(level)
    return Atom(node, "DC006", gate.label, gate.use, gate.hardware, need(op), need(_NEGATE[op]))


def atoms_in(expr: ast.expr, used: Uses, *, in_condition: bool = False) -> Iterator[Atom]:
    """Every gate in ``expr``, outermost first, without looking inside a gate."""
    atom = classify(expr, used, in_condition=in_condition)
    if atom is not None:
        yield atom
        return
    for child in ast.iter_child_nodes(expr):
        if isinstance(child, ast.expr):
            yield from atoms_in(child, used, in_condition=in_condition)


def either(needs: list[Need]) -> Need:
    """The need of ``a or b``: an "on CUDA"-style qualifier or a bare availability next to a
    capability drops out (the capability is asked on every device); one capability each
    becomes ``any_of``."""
    real = [n for n in needs if not n.qualifier]
    if not real:
        return Need(qualifier=True)
    hardware = join_hardware([n.hardware for n in needs]) if any(n.hardware for n in needs) else None
    if any(n.capabilities or n.any_of for n in real):
        real = [n for n in real if n.capabilities or n.any_of or n.blockers or n.devices]
    if len(real) == 1:
        return real[0]
    options: list[str] = []
    for n in real:
        alternatives = _alternatives(n)
        if alternatives is None:
            return Need(blockers=("an 'or' of requirements no single mark expresses",), hardware=hardware)
        options.extend(alternatives)
    if not options:
        named = [n.vendors for n in real]
        vendors = tuple(sorted({v for group in named for v in group})) if all(named) else ()
        return Need(accelerator=True, hardware=hardware, vendors=vendors)
    return Need(any_of=(tuple(dict.fromkeys(options)),), hardware=hardware)


def _alternatives(need: Need) -> tuple[str, ...] | None:
    if need.blockers or need.devices or need.memory:
        return None
    if len(need.capabilities) == 1 and not need.any_of:
        return need.capabilities
    if not need.capabilities and len(need.any_of) == 1:
        return need.any_of[0]
    if not need.capabilities and not need.any_of:
        return ()
    return None


def both(needs: list[Need]) -> Need:
    result = NOTHING
    for need in needs:
        if need.qualifier:
            need = Need(blockers=("runs only where CUDA is absent",), hardware=need.hardware)
        result = result & need
    return result


def need_for(expr: ast.expr, holds: bool, atom_of: Callable[[ast.expr], Atom | None]) -> Need:
    """What the test needs for ``expr`` to be ``holds``; a part that is no gate blocks."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return need_for(expr.operand, not holds, atom_of)
    if isinstance(expr, ast.BoolOp):
        parts = [need_for(v, holds, atom_of) for v in expr.values]
        conjunction = isinstance(expr.op, ast.And) == holds
        return both(parts) if conjunction else either(parts)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(expr.comparators[0], ast.Constant) and expr.comparators[0].value is None:
        inner = atom_of(expr.left)
        if inner is not None:  # torch.version.hip is None
            truth = holds if isinstance(expr.ops[0], ast.IsNot) else not holds
            return inner.when_true if truth else inner.when_false
    atom = atom_of(expr)
    if atom is None:
        return Need(blockers=(f"'{ast.unparse(expr)}' is not a device condition",))
    return atom.when_true if holds else atom.when_false


def fact_condition(expr: ast.expr, holds: bool, atom_of: Callable[[ast.expr], Atom | None]) -> str | None:
    """Where ``expr`` is ``holds``, as a condition over device facts (skip_on's language), when
    every part of it is a gate whose facts say exactly what it checks (:attr:`Atom.fact`); None
    otherwise. ``not`` stays ``not``: a fact a device lacks compares False, so ``not
    (compute_capability >= 9.0)`` holds where ``compute_capability < 9.0`` does not."""
    tree = _fact_tree(expr, atom_of)
    if tree is None:
        return None
    return _unparse(tree if holds else ast.UnaryOp(op=ast.Not(), operand=tree))


def _unparse(node: ast.expr, outer: int = 0) -> str:
    """Python's own spelling with no more parentheses than precedence needs (``a and not (b
    and c)``; ``ast.unparse`` also wraps the ``not``)."""
    if isinstance(node, ast.BoolOp):
        level = 1 if isinstance(node.op, ast.Or) else 2
        text = (" or " if level == 1 else " and ").join(_unparse(v, level + 1) for v in node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        level, text = 3, "not " + _unparse(node.operand, 4)
    else:
        level, text = 4, ast.unparse(node)
    return f"({text})" if level < outer else text


def _fact_tree(expr: ast.expr, atom_of: Callable[[ast.expr], Atom | None]) -> ast.expr | None:
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = _fact_tree(expr.operand, atom_of)
        return None if inner is None else ast.UnaryOp(op=ast.Not(), operand=inner)
    if isinstance(expr, ast.BoolOp):
        parts = [_fact_tree(v, atom_of) for v in expr.values]
        if any(p is None for p in parts):
            return None
        return ast.BoolOp(op=expr.op, values=[p for p in parts if p is not None])
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(expr.comparators[0], ast.Constant) and expr.comparators[0].value is None:
        inner = _fact_tree(expr.left, atom_of)  # torch.version.hip is not None
        if inner is None or isinstance(expr.ops[0], ast.IsNot):
            return inner
        return ast.UnaryOp(op=ast.Not(), operand=inner)
    atom = atom_of(expr)
    if atom is None or atom.fact is None:
        return None
    return ast.parse(atom.fact, mode="eval").body


# Devices a gate that only excludes must still let in: the CPU and an accelerator of no CUDA
# vendor (their facts as the backends report them; the facts they lack compare False).
_NOT_CUDA_DEVICES: tuple[dict[str, object], ...] = (
    {"type": "cpu", "vendor": "cpu", "index": None},
    {"type": "xpu", "vendor": "intel", "index": 0, "arch": "pvc"},
)


def only_excludes(skip: str) -> bool:
    """True when a skip that holds where ``skip`` does (a condition over device facts) takes
    devices away from a test that runs elsewhere (``vendor == 'amd'``, ``type == 'cuda' and not
    (compute_capability >= 9.0)``) rather than keeping it on CUDA: it holds on neither the CPU
    nor a non-CUDA accelerator."""
    from pytest_devcaps.config.expressions import compile_expression

    expression = compile_expression(skip)
    return not any(expression.evaluate(device) for device in _NOT_CUDA_DEVICES)
