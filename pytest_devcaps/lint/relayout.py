"""Writing the layouts :mod:`pytest_devcaps.lint.layout` decides, with LibCST: the
``hw_classification`` line first in the class, a ``device`` parameter on every test of an
instantiated class, ``instantiate_device_type_tests(...)`` after it, and for a mixed class its
split: the other members in a mixin base (``_TestXBase``), one class per kind.

Imported only through :mod:`pytest_devcaps.lint.transform` (the ``lint`` extra).
"""

from __future__ import annotations

from typing import Sequence, Union

import libcst as cst

from pytest_devcaps.lint.layout import ATTRIBUTE, CLASSIFICATION, INSTANTIATE, SUFFIX, ClassLayout, Kind

COMMON_UTILS = "torch.testing._internal.common_utils"
COMMON_DEVICE_TYPE = "torch.testing._internal.common_device_type"
GENERIC_ONLY_DECORATORS = frozenset({"instantiate_parametrized_tests"})
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]


def relayout(module: cst.Module, layouts: Sequence[ClassLayout]) -> tuple[cst.Module, set[str]]:
    """``module`` with ``layouts`` applied, and the names the new code needs imported
    (``HardwareClassification``, ``instantiate_device_type_tests``)."""
    by_name = {layout.name: layout for layout in layouts}
    needed: set[str] = set()
    body: list[cst.BaseStatement] = []
    for statement in module.body:
        layout = by_name.get(statement.name.value) if isinstance(statement, cst.ClassDef) else None
        if layout is None:
            body.append(statement)
            continue
        assert isinstance(statement, cst.ClassDef)
        new = _laid_out(statement, layout)
        needed.add("HardwareClassification")
        if any(_is_instantiation(s) for s in new) and not layout.instantiated:
            needed.add("instantiate_device_type_tests")
        body.extend(new)
    return module.with_changes(body=body), needed


def _laid_out(cls: cst.ClassDef, layout: ClassLayout) -> list[cst.BaseStatement]:
    if layout.instantiated:
        (kind,) = layout.kinds
        return [_classified(cls, kind, set(layout.device_tests))]
    if len(layout.kinds) == 1:
        kind = layout.kinds[0]
        tests = {name for _, names in layout.groups for name in names} if kind != "generic" else set()
        out: list[cst.BaseStatement] = [_classified(cls, kind, tests)]
        if kind != "generic":
            out.append(_instantiate(cls.name.value, kind))
        return out
    return _split(cls, layout)


def _classified(cls: cst.ClassDef, kind: Kind, device_tests: set[str]) -> cst.ClassDef:
    """``cls`` with the classification line first (after its docstring) and ``device`` on the
    named tests."""
    members = [_with_device(m) if isinstance(m, cst.FunctionDef) and m.name.value in device_tests else m
               for m in cls.body.body]
    docstring = 1 if members and _is_docstring(members[0]) else 0
    members.insert(docstring, _classification_line(kind, after_docstring=bool(docstring)))
    return cls.with_changes(body=cls.body.with_changes(body=_spaced(members)))


def _spaced(members: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """A blank line before each method that follows other code (ruff format's layout); none
    before a class body's first statement."""
    out: list[cst.BaseStatement] = []
    for index, member in enumerate(members):
        if isinstance(member, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            blank = [line for line in member.leading_lines if line.comment is None]
            comments = [line for line in member.leading_lines if line.comment is not None]
            if index == 0:
                member = member.with_changes(leading_lines=comments)
            elif index == 1 and _is_docstring(members[0]):
                pass  # the classification line after a docstring keeps its blank line
            elif isinstance(member, (cst.FunctionDef, cst.ClassDef)) and not blank:
                member = member.with_changes(leading_lines=[cst.EmptyLine(indent=False), *comments])
        out.append(member)
    return out


def _classification_line(kind: Kind, after_docstring: bool = False) -> cst.SimpleStatementLine:
    line = cst.parse_statement(f"{ATTRIBUTE} = HardwareClassification.{CLASSIFICATION[kind]}")
    assert isinstance(line, cst.SimpleStatementLine)
    return line.with_changes(leading_lines=[cst.EmptyLine(indent=False)]) if after_docstring else line


def _instantiate(name: str, kind: Kind) -> cst.SimpleStatementLine:
    line = cst.parse_statement(f"instantiate_device_type_tests({name}, globals(), {INSTANTIATE[kind]})")
    assert isinstance(line, cst.SimpleStatementLine)
    return line.with_changes(leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)])


def _is_instantiation(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and "instantiate_device_type_tests(" in \
        cst.Module([]).code_for_node(statement)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def _with_device(function: cst.FunctionDef) -> cst.FunctionDef:
    """``def test_x(self, ...)`` -> ``def test_x(self, device, ...)`` (instantiate_device_type_tests
    passes the device as the first argument after self)."""
    params = function.params
    names = {p.name.value for p in (*params.params, *params.kwonly_params)}
    if names & {"device", "devices"}:
        return function
    positional = list(params.params)
    index = 1 if positional and positional[0].name.value in ("self", "cls") else 0
    positional.insert(index, cst.Param(cst.Name("device")))
    return function.with_changes(params=params.with_changes(params=positional))


def _decorator_name(decorator: cst.Decorator) -> str:
    target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
    if isinstance(target, cst.Name):
        return target.value
    return target.attr.value if isinstance(target, cst.Attribute) else ""


def _split(cls: cst.ClassDef, layout: ClassLayout) -> list[cst.BaseStatement]:
    """One class per kind; the members that are not tests (setUp, helpers, attributes) in a
    mixin base they share, ahead of the original bases so ``super()`` reaches TestCase."""
    name = cls.name.value
    tests = {m.name.value: m for m in cls.body.body if isinstance(m, cst.FunctionDef) and m.name.value.startswith("test_")}
    members = [m for m in cls.body.body if not (isinstance(m, cst.FunctionDef) and m.name.value in tests)]
    docstring = members.pop(0) if members and _is_docstring(members[0]) else None
    out: list[cst.BaseStatement] = []
    bases = list(cls.bases)
    if members:
        base = f"_{name}Base"
        out.append(cst.ClassDef(name=cst.Name(base), body=cst.IndentedBlock(body=_spaced(members)),
                                leading_lines=cls.leading_lines))
        bases = [cst.Arg(cst.Name(base)), *bases]
    for kind, names in layout.groups:
        if not names:
            continue
        body: list[cst.BaseStatement] = [docstring] if docstring is not None and kind == "generic" else []
        body.append(_classification_line(kind, after_docstring=bool(body)))
        body += [tests[n] if kind == "generic" else _with_device(tests[n]) for n in names]
        decorators = [d for d in cls.decorators if kind == "generic" or _decorator_name(d) not in GENERIC_ONLY_DECORATORS]
        leading = [cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)] if out else list(cls.leading_lines)
        out.append(cls.with_changes(name=cst.Name(name + SUFFIX[kind]), bases=_commas(bases),
                                    decorators=decorators, body=cls.body.with_changes(body=_spaced(body)),
                                    leading_lines=leading if not decorators else [],
                                    lines_after_decorators=cls.lines_after_decorators))
        if decorators:
            out[-1] = out[-1].with_changes(decorators=[decorators[0].with_changes(leading_lines=leading),
                                                       *decorators[1:]])
        if kind != "generic":
            out.append(_instantiate(name + SUFFIX[kind], kind))
    return out


def _commas(args: list[cst.Arg]) -> list[cst.Arg]:
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [a.with_changes(comma=space if i < len(args) - 1 else cst.MaybeSentinel.DEFAULT) for i, a in enumerate(args)]
