"""Module-level device constants (``DEVICE = "cuda"``, ``device = torch.device("cuda:0")``,
``DEVICE = "cuda" if torch.cuda.is_available() else "cpu"``) and their uses.

When every use sits where a device is at hand (a test with the ``device`` fixture, a helper
with a ``device`` parameter), the uses take that device and the constant goes. Otherwise the
constant becomes "the accelerator, else the CPU" and its uses stay as they are.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.gating import FixedUses, classify, dotted, generic_atom, is_cuda_literal
from pytest_devcaps.lint.items import Item
from pytest_devcaps.lint.records import AddParameter, Edit, EnsureDeviceType, ReplaceExpr, ReplaceStatement
from pytest_devcaps.lint.scopes import DeviceContext
from pytest_devcaps.lint.source import SourceFile


@dataclass(frozen=True)
class DeviceValue:
    """What a device expression is: a string or a ``torch.device``, with its index."""

    kind: str  # "str" | "device"
    index: int | None

    def replacement(self, context: DeviceContext, role: str | None) -> str:
        if role in ("device", "move") or (role is None and self.kind == "device"):
            if self.index:
                return f"torch.device({context.expr('type')}, {self.index})"
            return context.expr("device")
        if role is None and self.index is not None:
            return context.expr("str")
        return context.expr("type")

    @property
    def accelerator(self) -> str:
        return rules.ACCELERATOR_DEVICE if self.kind == "device" else rules.ACCELERATOR_TYPE


def _index(text: str) -> int | None:
    return int(text.split(":", 1)[1]) if ":" in text else None


def device_value(node: ast.expr) -> DeviceValue | None:
    """``"cuda"``, ``"cuda:0"``, ``torch.device("cuda"[, i])``, or ``<that> if <CUDA is
    available> else "cpu"`` (either way round)."""
    if is_cuda_literal(node):
        assert isinstance(node, ast.Constant)
        return DeviceValue("str", _index(str(node.value)))
    if isinstance(node, ast.Call) and dotted(node.func) in ("torch.device", "device") and node.args \
            and is_cuda_literal(node.args[0]) and not node.keywords and len(node.args) <= 2:
        first = node.args[0]
        assert isinstance(first, ast.Constant)
        index = _index(str(first.value))
        if len(node.args) == 2:
            second = node.args[1]
            index = second.value if isinstance(second, ast.Constant) and isinstance(second.value, int) else -1
        return None if index == -1 else DeviceValue("device", index)
    if isinstance(node, ast.IfExp):
        return _conditional(node)
    if isinstance(node, ast.Call) and dotted(node.func) in ("torch.device", "device") and len(node.args) == 1 \
            and not node.keywords and isinstance(node.args[0], ast.IfExp):  # torch.device("cuda" if ... else "cpu")
        chosen = _conditional(node.args[0])
        return DeviceValue("device", None) if chosen is not None and chosen.index is None else None
    return None


def _is_cpu(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(rules.CPU_LITERAL.match(node.value))
    return isinstance(node, ast.Call) and dotted(node.func) in ("torch.device", "device") and bool(node.args) \
        and _is_cpu(node.args[0])


def _conditional(node: ast.IfExp) -> DeviceValue | None:
    test, positive = node.test, True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, positive = test.operand, not positive
    atom = classify(test, FixedUses(), in_condition=True) or generic_atom(test)
    if atom is None or not atom.when_true.accelerator:
        return None
    chosen, other = (node.body, node.orelse) if positive else (node.orelse, node.body)
    value = device_value(chosen)
    return value if value is not None and _is_cpu(other) else None


@dataclass
class Alias:
    name: str
    statement: ast.stmt
    value: ast.expr
    device: DeviceValue
    item: Item
    uses: list[tuple[Item | None, ast.Name, str | None, DeviceContext | None]] = field(default_factory=list)
    pinned: str | None = None  # why the constant stays as it is


class Aliases:
    """The module's device constants, their uses, and (``decide``) how ``--fix`` treats them."""

    def __init__(self, source: SourceFile, owned: set[int]) -> None:
        self.source = source
        self.by_name: dict[str, Alias] = {}
        counts: dict[str, int] = {}
        for statement in source.tree.body:
            for target in _targets(statement):
                counts[target] = counts.get(target, 0) + 1
        for statement in source.tree.body:
            alias = self._alias(statement, counts)
            if alias is not None:
                self.by_name[alias.name] = alias
                owned.add(id(alias.value))
        if self.by_name:
            for name, line in _compared_with_another_device(source.tree).items():
                if name in self.by_name:
                    self.by_name[name].pinned = (f"line {line} compares it with another device's name: "
                                                 "widened, it would change where that code runs")

    def _alias(self, statement: ast.stmt, counts: dict[str, int]) -> Alias | None:
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        targets = _targets(statement)
        if value is None or len(targets) != 1 or counts[targets[0]] != 1 or not rules.DEVICE_NAME.search(targets[0]):
            return None
        device = device_value(value)
        if device is None:
            return None
        name = targets[0]
        text = " ".join(self.source.segment(value).split())
        item = Item(self.source.span(statement), "DC003", f"`{name} = {text}` hardcodes the device",
                    "the device fixture in tests, torch.accelerator.current_accelerator(check_available=True) elsewhere",
                    "accelerator", blocks_cpu=True,
                    suppressed=self.source.allowed(statement.lineno, "DC003"))
        return Alias(name, statement, value, device, item)

    def use(self, node: ast.Name, role: str | None, context: DeviceContext | None) -> Item:
        alias = self.by_name[node.id]
        item = Item(self.source.span(node), "DC003",
                    f"`{node.id}` is the hardcoded device of line {alias.statement.lineno}",
                    "the device fixture", "accelerator", blocks_cpu=True,
                    suppressed=self.source.allowed(node.lineno, "DC003"))
        alias.uses.append((item, node, role, context))
        return item

    def blocked_use(self, node: ast.AST) -> None:
        """Uses inside code the lint leaves as it is (a gate): the constant must stay."""
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and child.id in self.by_name:
                self.by_name[child.id].uses.append((None, child, None, None))

    def items(self) -> list[Item]:
        """Every finding of the constants: their definitions and their uses."""
        return [i for alias in self.by_name.values()
                for i in (alias.item, *(use[0] for use in alias.uses)) if i is not None]

    def decide(self) -> list[Item]:
        items: list[Item] = []
        for alias in self.by_name.values():
            _decide(alias, self.source)
            items.append(alias.item)
        return items


def _compared_with_another_device(root: ast.AST) -> dict[str, int]:
    """Names ``root`` compares with another device's name (``DEVICE == "cpu"``, ``DEVICE.type !=
    "cpu"``), each with the first line doing so: true on a CPU-only machine before the rewrite,
    false on an emu one after it, so such a constant stays (a comparison with ``"cuda"`` answers
    the same once widened)."""
    found: dict[str, int] = {}
    for compare in (n for n in ast.walk(root) if isinstance(n, ast.Compare)):
        operands = (compare.left, *compare.comparators)
        if not any(isinstance(o, ast.Constant) and isinstance(o.value, str) and not is_cuda_literal(o)
                   for o in operands):
            continue
        for operand in operands:
            if isinstance(operand, ast.Attribute) and operand.attr == "type":
                operand = operand.value
            if isinstance(operand, ast.Name):
                found[operand.id] = min(found.get(operand.id, compare.lineno), compare.lineno)
    return found


def _targets(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.Assign):
        return [t.id for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    return []


def _decide(alias: Alias, source: SourceFile) -> None:
    if alias.item.frozen:
        return
    if alias.item.suppressed or any(item is not None and item.suppressed for item, *_ in alias.uses):
        alias.item.why = "suppressed with # devcaps: allow"
        return
    if alias.pinned is not None:
        alias.item.why = alias.pinned
        for item, *_ in alias.uses:
            if item is not None:
                item.why = item.why or f"the constant of line {alias.statement.lineno} stays: {alias.pinned}"
        return
    if alias.uses and all(item is not None and not item.frozen and context is not None
                          for item, _, _, context in alias.uses):
        for item, node, role, context in alias.uses:
            assert item is not None and context is not None
            edits: list[Edit] = [ReplaceExpr(source.span(node), "Name", alias.device.replacement(context, role))]
            if context.source == "global":  # the module's device_type: defined once, after the imports
                edits.append(EnsureDeviceType())
            if context.param_owner is not None:
                edits.append(AddParameter(context.param_owner, context.name, keyword_only=context.keyword_only))
            item.fixed("replaced by the test's device", *edits)
        alias.item.fixed("removed: every use now takes the device fixture",
                         ReplaceStatement(source.span(alias.statement), ""))
        return
    if not alias.device.index:
        value = alias.device.accelerator
        alias.item.fixed(f"becomes {value}",
                         ReplaceExpr(source.span(alias.value), type(alias.value).__name__, value))
        for item, *_ in alias.uses:
            if item is not None:  # a held use too: the constant's new value is CUDA wherever it ran
                item.fix = f"fixed with line {alias.statement.lineno}"
                item.held = None
        return
    alias.item.why = "a fixed device index outside tests"
