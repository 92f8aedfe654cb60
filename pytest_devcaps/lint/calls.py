"""Rules for code inside tests and helpers: ``torch.cuda.*`` calls, ``.cuda()`` moves, device
literals in device positions, ``torch.cuda.amp``, NCCL, pinned memory, backend settings.

Each rule reports through a :class:`Host` (the finder) and fixes with the device the scope
has: the ``device`` fixture in a test (``typed``), a ``device`` parameter in a helper, or none.
"""

from __future__ import annotations

import ast
from typing import Protocol

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.aliases import device_value
from pytest_devcaps.lint.gating import deviceish, dotted, is_cuda_literal, last_name
from pytest_devcaps.lint.resolution import SHADOWED, file_binds, qualified
from pytest_devcaps.lint.items import Item, mark_decorators
from pytest_devcaps.lint.records import (
    AddMarks, Edit, EditCall, Hardware, Need, RemoveUnusedImport, ReplaceExpr, ReplaceStatement, Span,
)
from pytest_devcaps.lint.scopes import DeviceContext, Scope
from pytest_devcaps.lint.source import SourceFile


class Host(Protocol):
    source: SourceFile
    roles: dict[int, str]
    signatures: dict[str, list[str]]
    imports: dict[str, str]
    statements: list[ast.stmt]
    instantiations: list[tuple[Item, str]]
    own_cuda: dict[str, int]  # classes of this file that define a cuda() method, and its line
    scopes: list[Scope]

    def cuda_object(self, node: ast.Call) -> bool: ...

    def owned_nodes(self) -> set[int]: ...

    @property
    def scope(self) -> Scope: ...

    def add(self, node: ast.AST, code: str, message: str, use: str, hardware: Hardware | None = None,
            blocks: bool | None = None, span: Span | None = None) -> Item: ...

    def own(self, node: ast.AST) -> None: ...

    def why_no_device(self) -> str: ...

    def param_edits(self, context: DeviceContext, *fixtures: str) -> list[Edit]: ...

    def call_of(self, argument: ast.AST) -> ast.Call | None: ...


def assign_roles(host: Host, node: ast.Call) -> None:
    """Say which arguments of ``node`` are devices, device types or distributed backends."""
    last = last_name(node.func)
    move = last == "to"
    for keyword in node.keywords:
        if keyword.arg in rules.DEVICE_SELECTION_KEYWORDS:
            mark_named(host, keyword.value, "selection")
        elif keyword.arg in rules.DEVICE_TYPE_KEYWORDS:
            host.roles[id(keyword.value)] = "amp" if last in rules.DEVICE_TYPE_FIRST_ARG else "type"
        elif keyword.arg in rules.DEVICE_KEYWORDS or (keyword.arg and rules.DEVICE_NAME.search(keyword.arg)):
            host.roles[id(keyword.value)] = "move" if move else "device"
        elif keyword.arg == "backend":
            host.roles[id(keyword.value)] = "backend"
    if not node.args:
        return
    if isinstance(node.func, ast.Name) and node.func.id in host.signatures:
        for arg, name in zip(node.args, host.signatures[node.func.id]):
            if rules.DEVICE_NAME.search(name):
                host.roles[id(arg)] = "type" if "type" in name else "device"
    first = node.args[0]
    if last == "device" and len(node.args) == 2:
        host.roles[id(first)] = "type"
    elif last in rules.DEVICE_FIRST_ARG:
        host.roles[id(first)] = "move" if move else "device"
    elif last in rules.DEVICE_TYPE_FIRST_ARG:
        host.roles[id(first)] = "amp"
    elif last in rules.DEVICE_TYPE_ARG:
        host.roles[id(first)] = "type"
    elif last == "init_process_group":
        host.roles[id(first)] = "backend"


def mark_named(host: Host, value: ast.AST, role: str) -> None:
    """A CUDA literal that is ``value``, or an element of it (a list, tuple or set, an
    ``a if c else b``, a ``pytest.param(...)``), is a device: assigned to a device name, returned
    by a device fixture, or an ``only_for=`` device-type selection. Inside other calls it is data
    (``DeviceIdentity(type="cuda")``)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        host.roles.setdefault(id(value), role)
    elif isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        for element in value.elts:
            mark_named(host, element, role)
    elif isinstance(value, ast.IfExp):
        mark_named(host, value.body, role)
        mark_named(host, value.orelse, role)
    elif isinstance(value, ast.BinOp):
        mark_named(host, value.left, role)
        mark_named(host, value.right, role)
    elif isinstance(value, ast.Call) and last_name(value.func) == "param" and value.args:
        mark_named(host, value.args[0], role)


def _unfixed(host: Host, item: Item, why: str | None = None) -> Item:
    item.why = why or host.why_no_device()
    return item


def _marks(host: Host, context: DeviceContext, capability: str | None) -> list[Edit] | None:
    """The mark a rewritten call needs on its test (None: it has no test to carry it, or the
    target cannot say it)."""
    if capability is None or capability in host.scope.declared:
        return []
    if context.mark_owner is None:
        return None
    need = Need(capabilities=(capability,))
    if host.source.target == "devcaps":
        return [AddMarks(context.mark_owner, need, prefix="" if host.scope.testcase else "pytest.mark.")]
    decorators = mark_decorators(need, host.scope.testcase, host.source.target)
    return None if decorators is None else [AddMarks(context.mark_owner, need, decorators)]


def cuda_call(host: Host, node: ast.Call, name: str) -> None:
    parts = name.split(".")
    entry = rules.CUDA_CALLS.get(parts[2], rules.DEFAULT_CUDA_CALL) if len(parts) == 3 \
        else rules.DEFAULT_CUDA_CALL
    hardware = entry.hardware if len(parts) == 3 else "cuda"
    code = "DC008" if parts[2:3] == ["nccl"] else entry.code
    item = host.add(node, code, f"`{name}()` is CUDA-only", entry.use, hardware, blocks=entry.blocks_cpu)
    host.own(node.func)
    context = host.scope.context
    fix = _cuda_fix(host, node, parts[2], entry, context) if len(parts) == 3 else None
    if fix is None:
        why = None if context is None else "no device-generic replacement here"
        if parts[2:3] in (["Stream"], ["Event"]) and host.cuda_object(node):
            why = (f"its CUDA-only attributes ({', '.join(sorted(rules.CUDA_OBJECT_ATTRIBUTES))}) are read: "
                   "decide whether the test needs CUDA's object or can drop them")
        elif entry.module and context is not None and host.source.target == "torch":
            why = (f"torch has no mark for requires_capability('{entry.capability}') (the devices whose module "
                   f"has {parts[2]}): convert with --target devcaps")
        elif parts[2:3] == ["current_device"] and context is not None and not context.source:
            why = ("the test's device may be the CPU, whose current_device() is 'cpu', not an index "
                   "(torch/cpu/__init__.py): decide what the index stands for there")
        elif parts[2:3] == ["get_device_capability"]:
            why = ("torch.accelerator.get_device_capability() returns supported dtypes, not (major, minor): "
                   "decide which capability the number stands for")
        _unfixed(host, item, why)
        return
    head = node.func
    while isinstance(head, ast.Attribute):
        head = head.value
    if isinstance(head, ast.Name) and head.id in host.imports:  # from torch.cuda import synchronize
        fix[1].append(RemoveUnusedImport(host.imports[head.id], head.id))
    elif isinstance(head, ast.Name) and qualified(head) not in (head.id, SHADOWED):  # import torch.cuda as tc
        fix[1].append(RemoveUnusedImport(qualified(head), "", head.id))
    item.fixed(fix[0], *fix[1])


Fix = tuple[str, list[Edit]]


def _device_index(host: Host, node: ast.Call) -> str | None:
    """The index in ``set_device(f"cuda:{rank}")`` / ``set_device("cuda:1")`` (an index API
    takes the index, not a device string)."""
    if len(node.args) != 1 or node.keywords:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and rules.CUDA_LITERAL.match(arg.value):
        return arg.value.split(":", 1)[1] if ":" in arg.value else None
    if isinstance(arg, ast.JoinedStr) and len(arg.values) == 2 and isinstance(arg.values[0], ast.Constant) \
            and arg.values[0].value == "cuda:" and isinstance(arg.values[1], ast.FormattedValue) \
            and arg.values[1].conversion == -1 and arg.values[1].format_spec is None:
        host.own(arg)
        return host.source.segment(arg.values[1].value)
    return None


def _cuda_fix(host: Host, node: ast.Call, attr: str, entry: rules.CudaCall,
              context: DeviceContext | None) -> Fix | None:
    span = host.source.span(node)
    index = _device_index(host, node) if attr in ("set_device", "set_device_index") and context is not None else None
    if index is not None and context is not None:
        code = f"torch.get_device_module({context.expr('device')}).set_device({index})"
        return f"replaced by {code}", [ReplaceExpr(span, "Call", code), *host.param_edits(context)]
    if context is not None and context.fixtures and entry.test and host.source.target == "devcaps":
        return _fixture_fix(host, node, attr, entry, context)
    if attr in ("Stream", "Event") and host.cuda_object(node):
        return None  # the finding says why (see cuda_call)
    if attr in ("Stream", "Event") and context is not None:
        marks = _marks(host, context, entry.capability)
        if marks is None and context.mark_owner is not None:
            return None
        device = (("device", context.expr("device")),) if context.fixtures and not node.args else ()
        return (f"replaced by {entry.accelerator}",
                [EditCall(span, func=entry.accelerator, keywords=device), *(marks or []),
                 *(host.param_edits(context) if device else [])])
    if attr == "empty_cache":
        return _guarded_statement(host, node, "torch.accelerator.empty_cache()")
    if entry.module and context is not None:
        return _module_function(host, node, attr, entry, context)
    if attr == "current_device" and context is not None and not context.source:
        return None  # an index on CUDA, the string 'cpu' on the CPU copy a fixture or parameter may be
    if attr in rules.CPU_MODULE_CALLS and context is not None:
        module = f"torch.get_device_module({context.expr('device')})"
        return (f"replaced by {module}.{attr}() (the device may be the CPU, where torch.accelerator raises)",
                [EditCall(span, func=f"{module}.{attr}"), *host.param_edits(context)])
    if entry.accelerator:
        args = _positional_device(host, node)
        marks = _marks(host, context, entry.capability) if context is not None else []
        if args is False or (marks is None and context is not None and context.mark_owner is not None):
            return None
        note = "" if marks is not None else f" (the tests calling it need requires_capability('{entry.capability}'))"
        edit: Edit = ReplaceExpr(span, "Call", f"{entry.accelerator}({args[0]})") if isinstance(args, tuple) \
            else EditCall(span, func=entry.accelerator)
        return f"replaced by {entry.accelerator}{note}", [edit, *(marks or [])]
    if entry.anywhere:
        return f"replaced by {entry.anywhere}", [EditCall(span, func=entry.anywhere)]
    if attr == "stream" and context is not None and len(node.args) == 1 and not node.keywords:
        marks = _marks(host, context, entry.capability)
        if marks is not None and isinstance(node.args[0], (ast.Name, ast.Attribute)):
            return ("replaced by the stream itself (torch.Stream is a context manager)",
                    [ReplaceExpr(span, "Call", host.source.segment(node.args[0])), *marks])
    return None


def _module_function(host: Host, node: ast.Call, attr: str, entry: rules.CudaCall,
                     context: DeviceContext) -> Fix | None:
    """``torch.cuda._sleep(n)`` -> ``torch.get_device_module(device)._sleep(n)``, the test marked
    with the capability that says the device's module has it (``--target torch`` has no mark for
    it: left)."""
    marks = _marks(host, context, entry.capability)
    if marks is None and (context.mark_owner is not None or host.source.target == "torch"):
        return None
    module = f"torch.get_device_module({context.expr('device')})"
    note = "" if marks is not None else f" (the tests calling it need requires_capability('{entry.capability}'))"
    return (f"replaced by {module}.{attr}{note}",
            [EditCall(host.source.span(node), func=f"{module}.{attr}"), *(marks or []), *host.param_edits(context)])


def cycles_per_ms(host: Host, node: ast.Call, name: str) -> None:
    """PyTorch's ``get_cycles_per_ms()`` (its device defaults to "cuda") -> our
    ``cycles_per_ms(device)`` (``--target devcaps``), with the ``runtime.sleep`` mark the spin it
    times needs; ``--target torch`` has no mark for that, and keeps it as it keeps the spin."""
    if len(node.args) > 1 or node.keywords or (node.args and not is_cuda_literal(node.args[0])):
        return
    item = host.add(node, "DC004", f"`{host.source.segment(node.func)}()` times CUDA's spin (its device "
                    "defaults to \"cuda\")", "pytest_devcaps.runtime.cycles_per_ms(device), or "
                    "get_cycles_per_ms(device.type) on torch 2.14+", "accelerator", blocks=True)
    host.own(node.func)
    for arg in node.args:
        host.own(arg)
    context = host.scope.context
    if context is None:
        _unfixed(host, item)
        return
    if host.source.target == "torch":
        _unfixed(host, item, f"torch has no mark for requires_capability('{rules.SLEEP}'): convert with "
                 "--target devcaps")
        return
    marks = _marks(host, context, rules.SLEEP)
    if marks is None and context.mark_owner is not None:
        _unfixed(host, item)
        return
    code = f"cycles_per_ms({context.expr('device')})"
    item.fixed(f"replaced by {code}", ReplaceExpr(host.source.span(node), "Call", code), *(marks or []),
               *host.param_edits(context))


def _fixture_fix(host: Host, node: ast.Call, attr: str, entry: rules.CudaCall, context: DeviceContext) -> Fix | None:
    """A pytest test with the device fixtures: ``device_runtime`` (``--target devcaps``)."""
    assert entry.test is not None
    marks = _marks(host, context, entry.capability)
    if marks is None or (attr != "manual_seed" and not _device_args_only(node)):
        return None
    args = None if attr == "manual_seed" else ()
    return (f"replaced by {entry.test}()",
            [EditCall(host.source.span(node), func=entry.test, args=args),
             *host.param_edits(context, "device_runtime"), *marks])


def _positional_device(host: Host, node: ast.Call) -> tuple[str, ...] | None | bool:
    """torch.accelerator takes the device positionally: ``device=x`` -> ``x`` (None: the
    arguments stay; False: an argument torch.accelerator does not take)."""
    keywords = [k for k in node.keywords if k.arg is not None]
    if not keywords:
        return None
    if len(keywords) > 1 or keywords[0].arg not in ("device", "device_index") or node.args:
        return False
    return (host.source.segment(keywords[0].value),)


def _guarded_statement(host: Host, node: ast.Call, code: str) -> Fix | None:
    """A call CUDA answers with a no-op on a machine without CUDA (``empty_cache``): the same
    statement, run only where an accelerator is (torch.accelerator raises without one)."""
    statement = host.statements[-1] if host.statements else None
    if not (isinstance(statement, ast.Expr) and statement.value is node) or node.args or node.keywords:
        return None
    new = f"if {rules.ACCELERATOR_AVAILABLE}:\n    {code}"
    return f"replaced by `{new.replace(chr(10) + '   ', ';')}`", [ReplaceStatement(host.source.span(statement), new)]


def _device_args_only(node: ast.Call) -> bool:
    """No arguments, or only the device (``synchronize(device)``, ``synchronize(0)``)."""
    if node.keywords or len(node.args) > 1:
        return False
    return not node.args or (isinstance(node.args[0], ast.Name) and node.args[0].id == "device") or (
        isinstance(node.args[0], ast.Constant) and node.args[0].value in (0, None))


def cuda_amp(host: Host, node: ast.Call, name: str) -> None:
    attr = name.rsplit(".", 1)[1]
    item = host.add(node, "DC009", f"`{name}()` is CUDA-only", rules.AMP_USE, "accelerator")
    host.own(node.func)
    context = host.scope.context
    target = rules.CUDA_AMP.get(attr)
    if context is None or target is None or node.args:
        _unfixed(host, item, None if context is None else "pass the device type explicitly")
        return
    keywords = _cuda_autocast_dtype(node, target.split(".")[0]) if attr == "autocast" else ()
    item.fixed(f"replaced by {target}({context.expr('type')}, ...)",
               EditCall(host.source.span(node), func=target, prepend=(context.expr("type"),), keywords=keywords),
               *host.param_edits(context))


def _cuda_autocast_dtype(call: ast.Call, torch_name: str) -> tuple[tuple[str, str], ...]:
    """CUDA autocasts to float16 unless told otherwise, the CPU (and others) to bfloat16
    (``torch.get_autocast_dtype``): a CUDA autocast given another device type keeps CUDA's
    dtype, or the test's float16 assertions fail on its other copies (CUDA's included)."""
    if any(k.arg in ("dtype", None) for k in call.keywords) or len(call.args) > 1:
        return ()
    return (("dtype", f"{torch_name}.float16"),)


def _literal_index(arg: ast.expr) -> bool:
    return isinstance(arg, ast.Constant) and type(arg.value) is int


def _own_cuda_method(host: Host, node: ast.Call) -> str | None:
    """Why ``x.cuda()`` may be the file's own method rather than torch's (a class here defines
    ``cuda``): ``.to(device)`` would not exist on it, or would skip what its ``cuda`` does."""
    classes = host.own_cuda
    if not classes or not isinstance(node.func, ast.Attribute):
        return None
    receiver = node.func.value
    named = receiver.func if isinstance(receiver, ast.Call) else receiver
    cls = last_name(named) if isinstance(named, (ast.Name, ast.Attribute)) else ""
    if cls == "self":
        cls = next((s.node.name for s in reversed(host.scopes) if isinstance(s.node, ast.ClassDef)), "")
    elif isinstance(receiver, ast.Name):
        cls = _constructed_as(host.scope.node, receiver.id) or cls
    if cls in classes:
        return f"{cls} defines its own cuda() (line {classes[cls]}): .to(device) is not that method"
    if isinstance(receiver, (ast.Name, ast.Attribute)) and not isinstance(named, ast.Call):
        first = min(classes.items(), key=lambda kv: kv[1])
        return (f"the file defines its own cuda() ({first[0]}, line {first[1]}): decide whether "
                f"{host.source.segment(receiver)} is a torch tensor or module")
    return None


def _constructed_as(scope: ast.AST, name: str) -> str | None:
    """``name = Cls(...)`` in ``scope``: ``Cls``."""
    for child in ast.walk(scope):
        if isinstance(child, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in child.targets) \
                and isinstance(child.value, ast.Call):
            return last_name(child.value.func) or None
    return None


def move(host: Host, node: ast.Call) -> None:
    """``x.cuda()``, ``x.cuda(0)``, ``x.cuda(rank)``, ``x.cuda(non_blocking=True)`` (reported
    where ``cuda`` is written: a chain spans lines)."""
    func = host.source.span(node.func)
    where = Span(func.end_line, func.end_col - len("cuda"), func.end_line, func.end_col)
    item = host.add(node, "DC002", "`.cuda()` moves to CUDA", ".to(device)", "accelerator", span=where)
    context = host.scope.context
    own = _own_cuda_method(host, node)
    if own is not None:
        _unfixed(host, item, own)
        return
    if context is None:
        _unfixed(host, item)
        return
    span = host.source.span(node)
    device = context.expr("device")
    if any(k.arg == "device" for k in node.keywords) or len(node.args) > 1:
        _unfixed(host, item, "an unusual .cuda() call")
        return
    target = device
    if not node.args:
        edit = EditCall(span, method="to", prepend=(device,))
    elif _device_args_only(node) and not (context.source and _literal_index(node.args[0])):
        edit = EditCall(span, method="to", args=(device,))
    else:  # an index; without a fixture (device_type, self.device_type) ``.cuda(0)`` keeps it:
        # in a rank that called set_device(rank), device 0 is not the current device
        target = f"torch.device({context.expr('type')}, {host.source.segment(node.args[0])})"
        edit = EditCall(span, method="to", args=(target,))
    item.fixed(f"replaced by .to({target})", edit, *host.param_edits(context))


def device_call(host: Host, node: ast.Call) -> bool:
    """``torch.device("cuda")`` in a test becomes the test's device; True when handled."""
    context = host.scope.context
    value = device_value(node)
    if context is None or not context.typed or value is None or value.index or len(node.args) != 1:
        return False
    item = host.add(node, "DC003", f"`{host.source.segment(node)}` hardcodes the device", "the device fixture",
                    "accelerator")
    host.own(node)
    item.fixed("replaced by device", ReplaceExpr(host.source.span(node), "Call", context.expr("device")),
               *host.param_edits(context))
    return True


LITERAL_CODE = {"move": "DC002", "amp": "DC009", "backend": "DC008"}


def _rank_like(node: ast.expr) -> bool:
    """An integer that stands for a device: ``0``, ``rank``, ``self.rank``, ``dist.get_rank()``
    (``torch.rand(2, device=rank)`` is ``cuda:rank``: an integer device is a CUDA index)."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, (ast.Name, ast.Attribute)):
        return last_name(node).endswith("rank")
    return isinstance(node, ast.Call) and last_name(node.func) in ("get_rank", "get_local_rank") and not node.args


def integer_devices(host: Host, node: ast.Call) -> None:
    """``device=<int>`` in a torch call and ``x.to(<int>)``: the CUDA device of that index."""
    name = dotted(node.func)
    if name.startswith("torch.cuda."):
        return  # torch.cuda.memory_stats(device=0): the call's own rule passes the index on
    values = [k.value for k in node.keywords if k.arg == "device" and name.startswith(("torch.", "nn."))]
    if last_name(node.func) == "to" and len(node.args) == 1 and not node.keywords:
        values.append(node.args[0])
    for value in values:
        if not _rank_like(value) or id(value) in host.owned_nodes():
            continue
        item = host.add(value, "DC003", f"`{host.source.segment(value)}` as a device is a CUDA index",
                        "torch.device(device_type, index)", "accelerator")
        host.own(value)
        context = host.scope.context
        if context is None:
            _unfixed(host, item)
            continue
        code = f"torch.device({context.expr('type')}, {host.source.segment(value)})"
        item.fixed(f"replaced by {code}", ReplaceExpr(host.source.span(value), type(value).__name__, code),
                   *host.param_edits(context))


def literal(host: Host, node: ast.Constant, role: str | None) -> None:
    if role is None:
        return  # "cuda" that is not a device here: data
    value = str(node.value)
    code = LITERAL_CODE.get(role or "", "DC003")
    what = {"DC002": "moves to", "DC009": "autocasts on", "DC008": "picks a backend for"}.get(code, "names")
    item = host.add(node, code, f"{value!r} {what} the CUDA device", "the device fixture (device / device.type)",
                    "accelerator")
    context = host.scope.context
    if context is None:
        _unfixed(host, item)
        return
    if role not in ("device", "move", "type", "amp"):
        _unfixed(host, item, "restricts tests to CUDA; list the capability they need instead"
                 if role == "selection" else "a device inside a larger value; build it from the test's device")
        return
    index = int(value.split(":")[1]) if ":" in value else 0
    if role in ("type", "amp"):
        code_text = context.expr("type")
    elif index:
        code_text = f"torch.device({context.expr('type')}, {index})"
    else:
        code_text = context.expr("device")
    edits: list[Edit] = [ReplaceExpr(host.source.span(node), "Constant", code_text), *host.param_edits(context)]
    call = host.call_of(node)
    if role == "amp" and call is not None and last_name(call.func) == "autocast":
        keywords = _cuda_autocast_dtype(call, dotted(call.func).split(".")[0] if "." in dotted(call.func) else "torch")
        if keywords:
            edits.append(EditCall(host.source.span(call), keywords=keywords))
    item.fixed(f"replaced by {code_text}", *edits)


def nccl(host: Host, node: ast.Constant, role: str | None, call: ast.Call | None) -> None:
    if role is None:
        return
    item = host.add(node, "DC008", "'nccl' is the CUDA-only distributed backend", rules.DIST_USE, "accelerator")
    context = host.scope.context
    if role != "backend" or context is None:
        _unfixed(host, item)
        return
    span = host.source.span(node)
    if context.typed and context.fixture_owner is not None:
        item.fixed("replaced by the dist_backend fixture", ReplaceExpr(span, "Constant", "dist_backend"),
                   *host.param_edits(context, "dist_backend"))
        return
    prefix = "torch.distributed"
    if call is not None and isinstance(call.func, ast.Attribute) and dotted(call.func.value) in ("dist", "c10d"):
        prefix = dotted(call.func.value)
    code = f"{prefix}.get_default_backend_for_device({context.expr('device')})"
    item.fixed(f"replaced by {code}", ReplaceExpr(span, "Constant", code), *host.param_edits(context))


def fstring(host: Host, node: ast.JoinedStr) -> bool:
    """``f"cuda:{rank}"`` -> ``f"{device.type}:{rank}"``; True when it was one."""
    first = node.values[0] if node.values else None
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("cuda:")):
        return False
    item = host.add(node, "DC003", "an f-string builds a CUDA device", 'f"{device.type}:{index}"', "accelerator")
    host.own(first)
    context = host.scope.context
    text = host.source.segment(node)
    quote = min((i for i in (text.find('"'), text.find("'")) if i >= 0), default=-1)
    if context is None or quote < 0 or not text[quote + 1:].startswith("cuda:"):
        _unfixed(host, item)
        return True
    code = text[:quote + 1] + "{" + context.expr("type") + "}" + text[quote + 5:]
    item.fixed(f"replaced by {code}", ReplaceExpr(host.source.span(node), "JoinedStr", code),
               *host.param_edits(context))
    return True


def pin_memory(host: Host, node: ast.Call, name: str) -> None:
    capability = rules.PINNED_MEMORY
    if capability in host.scope.declared:
        return
    item = host.add(node, "DC012", f"`{name or 'pin_memory'}` pins host memory for an accelerator",
                    f"requires_capability('{capability}')", "accelerator")
    context = host.scope.context
    marks = _marks(host, context, capability) if context is not None else None
    if not marks:
        _unfixed(host, item, f"torch has no mark for requires_capability('{capability}'): convert with "
                 "--target devcaps" if context is not None and context.mark_owner is not None
                 and host.source.target == "torch" else f"no test here to carry requires_capability('{capability}')")
        return
    item.fixed(f"marked requires_capability('{capability}')", *marks)


def settings(host: Host, node: ast.Attribute, name: str, called: bool = False) -> None:
    attr = name.split(".")[3] if name.count(".") >= 3 else ""
    leaf = name.rsplit(".", 1)[1]
    if called and name in rules.CUDNN_QUERIES:
        # ``torch.backends.cudnn.is_acceptable(x)`` is False for every tensor not on CUDA, and
        # ``version()`` None where cuDNN is not: what the test asserts of them is CUDA's
        item = host.add(node, "DC010", f"`{name}()` asks cuDNN", rules.CUDNN_QUERIES[name], "cuda", blocks=True)
        host.own(node)
        _unfixed(host, item, "cuDNN is CUDA's: a test asserting what it answers stays on CUDA")
        return
    use = rules.SETTINGS_USE.get(leaf, rules.SETTINGS_USE.get(attr, rules.DEFAULT_SETTINGS_USE))
    item = host.add(node, "DC010", f"`{name}` is a CUDA/cuDNN setting", use, None)
    host.own(node)
    _unfixed(host, item, "a setting's device-generic form depends on what the test means")


def torch_cuda_name(host: Host, node: ast.Attribute, name: str) -> None:
    item = host.add(node, "DC004", f"`{name}` names the CUDA module", rules.DEFAULT_CUDA_CALL.use, "cuda")
    host.own(node)
    _unfixed(host, item, "no device-generic replacement here")


def module_fallback(host: Host, node: ast.Attribute, call: ast.Call | None) -> bool:
    """``getattr(torch, torch_device, torch.cuda)`` (Hugging Face's accelerate, transformers, peft):
    the device's module, CUDA's where torch has no module of that name. The fallback becomes
    ``torch.get_device_module()``, the current accelerator's module (the CPU's where none is;
    torch/__init__.py): the same ``torch.cuda`` wherever CUDA is the accelerator, which is where
    the code ran before, and the device's own module elsewhere. It is asked only when the lookup
    finds nothing (``getattr(torch, d, None) or ...``: a module is truthy), since it raises on a
    backend that registers no module. True when ``node`` was one."""
    if call is None or not (isinstance(call.func, ast.Name) and call.func.id == "getattr") \
            or len(call.args) != 3 or call.keywords or call.args[2] is not node \
            or dotted(call.args[0]) != "torch" or file_binds("getattr"):
        return False
    item = host.add(node, "DC004", "`torch.cuda` is the fallback module of a device-module lookup",
                    "torch.get_device_module()", None, blocks=False)
    host.own(node)
    segment = host.source.segment
    code = (f"(getattr({segment(call.args[0])}, {segment(call.args[1])}, None) "
            f"or {segment(node.value)}.get_device_module())")
    item.fixed(f"replaced by {code}", ReplaceExpr(host.source.span(call), "Call", code))
    return True


def local_alias(host: Host, statement: ast.Assign) -> bool:
    """``device = "cuda"`` (or ``torch.device("cuda")``, or the is_available() choice) in a function."""
    value = device_value(statement.value)
    target = statement.targets[0]
    if value is None or not isinstance(target, (ast.Name, ast.Attribute)) or not deviceish(target):
        return False
    text = " ".join(host.source.segment(statement).split())
    item = host.add(statement, "DC003", f"`{text}` hardcodes the device", "the device fixture", "accelerator")
    host.own(statement.value)
    context = host.scope.context
    span = host.source.span(statement)
    body = getattr(host.scope.node, "body", [])
    if context is None:
        if value.index:
            _unfixed(host, item)
        else:
            item.fixed(f"becomes {value.accelerator}", ReplaceExpr(
                host.source.span(statement.value), type(statement.value).__name__, value.accelerator))
        return True
    if isinstance(target, ast.Name) and target.id == "device" and statement in body and len(body) > 1 and context.param_owner is not None:
        item.fixed("removed: `device` is the device fixture", ReplaceStatement(span, ""),
                   *host.param_edits(context))
        return True
    code = value.replacement(context, None)
    item.fixed(f"replaced by {code}", ReplaceExpr(host.source.span(statement.value),
                                                  type(statement.value).__name__, code),
               *host.param_edits(context))
    return True


def choice(host: Host, node: ast.IfExp) -> bool:
    """``"cuda" if torch.cuda.is_available() else "cpu"`` anywhere else."""
    value = device_value(node)
    if value is None:
        return False
    item = host.add(node, "DC003", "picks CUDA when it is available, else the CPU", "the device fixture",
                    "accelerator", blocks=False)
    host.own(node)
    context = host.scope.context
    code = value.replacement(context, host.roles.get(id(node))) if context is not None else value.accelerator
    item.fixed(f"replaced by {code}", ReplaceExpr(host.source.span(node), "IfExp", code),
               *(host.param_edits(context) if context is not None else []))
    return True


def only_for(host: Host, node: ast.Call) -> bool:
    """``instantiate_device_type_tests(T, globals(), only_for=("cuda",))`` -> ``except_for="cpu"``
    (the campaign's choice, pytorch#192015: the tuple had also shut out PrivateUse1); True when
    handled. It widens the class to every accelerator, and says so."""
    keyword = next((k for k in node.keywords if k.arg == "only_for"), None)
    if keyword is not None and _declared_cuda(host, node):
        host.own(keyword.value)  # the form TEST_LINTER demands of a CUDA class: no finding
        return False
    if keyword is None or any(k.arg == "except_for" for k in node.keywords):
        return False
    values = keyword.value.elts if isinstance(keyword.value, (ast.Tuple, ast.List)) else [keyword.value]
    if not values or not all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values) \
            or not any(is_cuda_literal(v) for v in values) or any(v.value == "cpu" for v in values):  # type: ignore[attr-defined]
        return False
    item = host.add(keyword.value, "DC003", f"`only_for={host.source.segment(keyword.value)}` restricts "
                    "the tests to CUDA", 'except_for="cpu"', "accelerator")
    host.own(keyword.value)
    parts = [host.source.segment(a) for a in node.args]
    parts += ['except_for="cpu"' if k is keyword else host.source.segment(k) for k in node.keywords]
    code = f"{host.source.segment(node.func)}({', '.join(parts)})"
    classified = _classify_device_type_class(host, node)
    item.fixed('replaced by except_for="cpu" (widens the tests from CUDA to every accelerator)'
               + ('; the class is marked hardware("accelerator")' if classified else ""),
               ReplaceExpr(host.source.span(node), "Call", code), *classified)
    if node.args and isinstance(node.args[0], ast.Name):
        host.instantiations.append((item, node.args[0].id))  # kept where the class is CUDA's (analyze)
    return True


def _declared_cuda(host: Host, node: ast.Call) -> bool:
    """The class instantiated declares ``hw_classification = HardwareClassification.CUDA``: its
    ``only_for="cuda"`` is what PyTorch's TEST_LINTER demands of it, not a gate to widen."""
    if not node.args or not isinstance(node.args[0], ast.Name):
        return False
    name = node.args[0].id
    for cls in host.source.tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == name:
            return any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "hw_classification"
                                                         for t in s.targets)
                       and isinstance(s.value, ast.Attribute) and s.value.attr == "CUDA" for s in cls.body)
    return False


def _classify_device_type_class(host: Host, node: ast.Call) -> list[Edit]:
    """``@hardware("accelerator")`` on the generic class of an accelerator-only
    ``instantiate_device_type_tests`` (``--target devcaps``): it sets ``hw_classification``, the
    attribute upstream PyTorch's HardwareClassification reads (not in torch 2.13), and a class
    mark; instantiate_device_type_tests copies both onto every generated class. None where the
    class already says its class, or is not defined in this module."""
    if host.source.target != "devcaps" or not node.args or not isinstance(node.args[0], ast.Name):
        return []
    name = node.args[0].id
    found = [c for c in host.source.tree.body if isinstance(c, ast.ClassDef) and c.name == name]
    if len(found) != 1:
        return []
    cls = found[0]
    if any(last_name(d.func if isinstance(d, ast.Call) else d) == "hardware" for d in cls.decorator_list) or any(
            isinstance(s, (ast.Assign, ast.AnnAssign)) and "hw_classification" in ast.dump(s) for s in cls.body):
        return []
    return [AddMarks((cls.name, cls.lineno), Need(), ('hardware("accelerator")',), prefix="")]
