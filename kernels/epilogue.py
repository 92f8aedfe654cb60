"""Pointwise epilogue ops, applied in order to the fp32 accumulator before the cast.

Build them with the constructors below (``ep.gelu(approximate="tanh")``, ``ep.mul(t)``...).
An operand ``t`` is a Python number or a tensor shaped ``[]``, ``[N]``, ``[1, N]``, ``[M, 1]``
or ``[M, N]``; it is converted to fp32 for the math.

Each op is **one definition**, an :class:`OpDef`: its torch reference, its Triton statement(s),
its parameters (from which the Triton kernel's parameter list *and* the launch arguments are
both derived, see :mod:`devcaps_kernels.triton_source`), its oneDNN post-op and whether it
commutes with the final rounding. Adding an op is one ``OpDef`` (plus a constructor) in one
file; every backend reads it from there. A definition whose Triton template names a parameter
it does not declare, or declares one its template never uses, is refused when it is made (or,
for a template built per call, when the kernel source is generated): a mismatch cannot reach a
compiled kernel.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

import torch

from .dtypes import refuse_fp8_operand

Operand = Union[float, int, torch.Tensor]
#: The values an op carries: operands (number or tensor), scalars (float or None: absent) and
#: options (compile-time strings/bools that select the source, e.g. gelu's approximation).
Value = Union[float, int, str, bool, None, torch.Tensor]

OPERAND = "operand"   # a number, or a tensor broadcast to [M, N] (Triton: a scalar or a loaded tile)
SCALAR = "scalar"     # a float, or None when absent (Triton: a scalar kernel parameter, or nothing)
OPTION = "option"     # a compile-time value (Triton: part of the plan's key, selects the statement)
_PARAM_KINDS = (OPERAND, SCALAR, OPTION)


class EpilogueDefinitionError(ValueError):
    """An :class:`OpDef` whose parts disagree (a template parameter it does not declare...)."""


@dataclass(frozen=True)
class Param:
    """One parameter of an op: ``kind`` is ``operand``, ``scalar`` or ``option``."""

    name: str
    kind: str = OPERAND

    def __post_init__(self) -> None:
        if self.kind not in _PARAM_KINDS:
            raise EpilogueDefinitionError(f"Param.kind must be one of {_PARAM_KINDS}, got {self.kind!r}")
        if not self.name.isidentifier():
            raise EpilogueDefinitionError(f"Param.name must be an identifier, got {self.name!r}")


#: ``triton(statics)`` -> the op's Triton statements over the fp32 tile ``x``; ``statics`` maps
#: each option to its value and each operand / scalar to its form ("t" tensor, "c" number,
#: "" absent). ``{name}`` placeholders stand for the present operands and scalars.
TritonTemplate = Union[str, Callable[[Mapping[str, object]], str]]
#: ``onednn(op)`` -> ``(attr, scalars, algorithm)`` of ``torch.ops.mkldnn._linear_pointwise``
#: when oneDNN computes exactly this op as a post-op (NaN included), else None.
OneDnnPostOp = Callable[["EpiOp"], "tuple[str, list[float], str] | None"]


#: ``onednn_binary(op)`` -> the binary post-op (``"add"``, ``"mul"``) of
#: ``torch.ops.mkldnn._linear_pointwise.binary`` that computes this op with its one runtime
#: value (operand or scalar) as the post-op's ``other``, else None. oneDNN computes post-ops in
#: f32 on the accumulator and rounds once into the output (oneDNN developer guide, "Primitive
#: Attributes: Post-ops"), so where ``other`` holds the value exactly the result is the
#: reference's; the backend checks that exactness, the op says only what it computes.
OneDnnBinaryPostOp = Callable[["EpiOp"], "str | None"]


def _no_onednn(op: EpiOp) -> tuple[str, list[float], str] | None:
    return None


def _no_onednn_binary(op: EpiOp) -> str | None:
    return None


def _never_commutes(op: EpiOp, dtype: torch.dtype) -> bool:
    return False


@dataclass(frozen=True, eq=False)
class OpDef:
    """The one definition of an epilogue op.

    * ``reference(x, **values)``: torch on the fp32 block ``x`` (in place where torch allows;
      operands arrive as fp32 tensors broadcastable to ``x`` or as numbers, absent scalars as
      None); the ground truth of every backend.
    * ``triton``: statements assigning ``x`` (see :data:`TritonTemplate`); ``helpers``: extra
      ``@triton.jit`` functions they call (pasted once into the kernel module).
    * ``params``: operands, scalars and options, in order.
    * ``onednn``: the oneDNN post-op that computes it inside the CPU GEMM, if any.
    * ``onednn_binary``: the oneDNN binary post-op that computes it with its value, if any.
    * ``commutes_with_rounding(op, dtype)``: ``op(round(x)) == round(op(x))`` for every x when
      rounding to ``dtype`` (relu, a clamp to representable bounds): a backend may then apply
      it after the one rounding, on the output.
    """

    name: str
    reference: Callable[..., torch.Tensor]
    triton: TritonTemplate
    params: tuple[Param, ...] = ()
    helpers: str = ""
    onednn: OneDnnPostOp = _no_onednn
    onednn_binary: OneDnnBinaryPostOp = _no_onednn_binary
    commutes_with_rounding: Callable[[EpiOp, torch.dtype], bool] = _never_commutes
    doc: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise EpilogueDefinitionError(f"op {self.name!r}: parameter names repeat: {names}")
        if isinstance(self.triton, str):
            self.check_template(self.triton, {p.name: "c" for p in self.runtime_params()})

    def runtime_params(self) -> tuple[Param, ...]:
        """Operands and scalars: the op's part of the kernel's parameter list."""
        return tuple(p for p in self.params if p.kind != OPTION)

    def check_template(self, template: str, forms: Mapping[str, str]) -> None:
        """Refuse a template whose ``{placeholders}`` are not exactly the present runtime params."""
        try:
            used = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        except ValueError as exc:
            raise EpilogueDefinitionError(f"op {self.name!r}: bad Triton template: {exc}") from None
        present = {name for name, form in forms.items() if form}
        if used != present:
            raise EpilogueDefinitionError(
                f"op {self.name!r}: the Triton template uses {sorted(used)} but the op's present "
                f"operands and scalars are {sorted(present)}")

    def template(self, statics: Mapping[str, object]) -> str:
        """The checked Triton template for these statics (options and forms)."""
        template = self.triton(statics) if callable(self.triton) else self.triton
        forms = {p.name: str(statics[p.name]) for p in self.runtime_params()}
        self.check_template(template, forms)
        return template


@dataclass(frozen=True, eq=False)
class EpiOp:
    """One epilogue step: a definition and its values (use the constructors)."""

    definition: OpDef
    values: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        declared = {p.name for p in self.definition.params}
        given = [name for name, _ in self.values]
        if set(given) != declared or len(given) != len(declared):
            raise EpilogueDefinitionError(f"op {self.kind!r} takes {sorted(declared)}, got {given}")

    @property
    def kind(self) -> str:
        return self.definition.name

    def value(self, name: str) -> Value:
        return dict(self.values)[name]

    def operands(self) -> tuple[tuple[str, Value], ...]:
        """``(name, value)`` of each operand param, in order."""
        kinds = {p.name: p.kind for p in self.definition.params}
        return tuple((n, v) for n, v in self.values if kinds[n] == OPERAND)

    @property
    def operand(self) -> Operand | None:
        """The op's (first) operand, or None for an op that has none."""
        found = self.operands()
        return None if not found else found[0][1]  # type: ignore[return-value]

    def statics(self) -> dict[str, object]:
        """Options by value; operands and scalars by form: "t" (a tensor), "c" (a number) or
        "" (an absent scalar). Everything the op's Triton source depends on."""
        out: dict[str, object] = {}
        for p in self.definition.params:
            v = self.value(p.name)
            out[p.name] = (v if p.kind == OPTION else "t" if isinstance(v, torch.Tensor)
                           else "" if v is None else "c")
        return out

    def __repr__(self) -> str:
        shown = [f"{n}=Tensor{list(v.shape)}" if isinstance(v, torch.Tensor) else f"{n}={v!r}"
                 for n, v in self.values]
        return f"{self.kind}({', '.join(shown)})"


def make(definition: OpDef, **values: Value) -> EpiOp:
    """An op of ``definition`` with ``values``: every declared param, by name (an op's
    constructor validates its values first; see the constructors below)."""
    unknown = sorted(set(values) - {p.name for p in definition.params})
    if unknown:
        raise EpilogueDefinitionError(f"op {definition.name!r} has no parameter(s) {unknown}")
    return EpiOp(definition, tuple((p.name, values.get(p.name)) for p in definition.params))


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a Python number, got {type(value).__name__}")
    return float(value)


def _operand(kind: str, t: object) -> Operand:
    if isinstance(t, torch.Tensor):
        if not t.is_floating_point():
            raise TypeError(f"{kind}(t): t must be a floating-point tensor, got dtype {t.dtype}")
        refuse_fp8_operand(f"{kind}(t): t", t)
        return t
    return _number(f"{kind}(t)", t)


def representable(value: float | None, dtype: torch.dtype) -> bool:
    """``value`` is exactly a ``dtype`` value (None: no bound, trivially true)."""
    return value is None or torch.tensor(value, dtype=torch.float64).to(dtype).double().item() == value


# -- the definitions -----------------------------------------------------------------------------

_TANH_HELPER = '''
@triton.jit
def _tanh(x):
    # exp-based so it also runs under the interpreter; saturates to +-1, keeps NaN.
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -r, r)
'''


def _gelu_triton(statics: Mapping[str, object]) -> str:
    if statics["approximate"] == "tanh":
        return "x = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))"
    return "x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))"


def _clamp_triton(statics: Mapping[str, object]) -> str:
    lines = []
    if statics["lo"]:
        lines.append("x = tl.where(x < {lo}, {lo}, x)")
    if statics["hi"]:
        lines.append("x = tl.where(x > {hi}, {hi}, x)")
    return "\n".join(lines)


# relu is not a oneDNN post-op here: oneDNN's relu turns NaN into 0, torch.relu keeps NaN. It
# commutes with rounding (round is monotone and keeps 0), so a backend may apply it to the output.
RELU = OpDef("relu", lambda x: torch.relu_(x), "x = tl.where(x < 0, 0.0, x)",
             commutes_with_rounding=lambda op, dtype: True)
GELU = OpDef("gelu", lambda x, approximate: torch.nn.functional.gelu(x, approximate=approximate),
             _gelu_triton, (Param("approximate", OPTION),), helpers=_TANH_HELPER,
             onednn=lambda op: ("gelu", [], str(op.value("approximate"))))
SILU = OpDef("silu", lambda x: torch.nn.functional.silu(x, inplace=True), "x = x * (1.0 / (1.0 + tl.exp(-x)))",
             onednn=lambda op: ("swish", [], ""))
SIGMOID = OpDef("sigmoid", lambda x: torch.sigmoid_(x), "x = 1.0 / (1.0 + tl.exp(-x))",
                onednn=lambda op: ("sigmoid", [], ""))
TANH = OpDef("tanh", lambda x: torch.tanh_(x), "x = _tanh(x)", helpers=_TANH_HELPER,
             onednn=lambda op: ("tanh", [], ""))
ADD = OpDef("add", lambda x, t: x.add_(t), "x = x + {t}", (Param("t"),), onednn_binary=lambda op: "add")
MUL = OpDef("mul", lambda x, t: x.mul_(t), "x = x * {t}", (Param("t"),), onednn_binary=lambda op: "mul")
SCALE = OpDef("scale", lambda x, alpha: x.mul_(alpha), "x = x * {alpha}", (Param("alpha", SCALAR),),
              onednn_binary=lambda op: "mul")
CLAMP = OpDef("clamp", lambda x, lo, hi: x.clamp_(lo, hi), _clamp_triton,
              (Param("lo", SCALAR), Param("hi", SCALAR)),
              commutes_with_rounding=lambda op, dtype: all(
                  representable(op.value(b), dtype) for b in ("lo", "hi")))  # type: ignore[arg-type]

GELU_APPROXIMATIONS = ("none", "tanh")
#: Every built-in definition, by name.
DEFINITIONS: dict[str, OpDef] = {d.name: d for d in (RELU, GELU, SILU, SIGMOID, TANH, ADD, MUL, SCALE, CLAMP)}


def relu() -> EpiOp:
    return EpiOp(RELU)


def gelu(approximate: str = "none") -> EpiOp:
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"gelu(approximate=...) expects one of {GELU_APPROXIMATIONS}, "
                         f"got {approximate!r}")
    return EpiOp(GELU, (("approximate", approximate),))


def silu() -> EpiOp:
    return EpiOp(SILU)


def sigmoid() -> EpiOp:
    return EpiOp(SIGMOID)


def tanh() -> EpiOp:
    return EpiOp(TANH)


def add(t: Operand) -> EpiOp:
    """``x + t``."""
    return EpiOp(ADD, (("t", _operand("add", t)),))


def mul(t: Operand) -> EpiOp:
    """``x * t``."""
    return EpiOp(MUL, (("t", _operand("mul", t)),))


def scale(alpha: float) -> EpiOp:
    """``x * alpha`` for a Python number ``alpha``."""
    return EpiOp(SCALE, (("alpha", _number("scale(alpha)", alpha)),))


def clamp(lo: float | None = None, hi: float | None = None) -> EpiOp:
    """``torch.clamp(x, lo, hi)``; at least one bound is required."""
    if lo is None and hi is None:
        raise ValueError("clamp() expects at least one of lo, hi; got neither")
    lo_f = None if lo is None else _number("clamp(lo)", lo)
    hi_f = None if hi is None else _number("clamp(hi)", hi)
    if lo_f is not None and math.isnan(lo_f) or hi_f is not None and math.isnan(hi_f):
        raise ValueError(f"clamp() bounds must not be NaN, got lo={lo}, hi={hi}")
    return EpiOp(CLAMP, (("lo", lo_f), ("hi", hi_f)))


def apply_torch(x: torch.Tensor, op: EpiOp, operands: Mapping[str, torch.Tensor | float | None]) -> torch.Tensor:
    """Apply ``op``'s reference to the fp32 block ``x`` (in place where possible); returns the
    result. ``operands`` holds each operand already broadcast to ``x``'s rows (fp32 view) or a
    number; scalars and options come from the op itself."""
    kwargs = {name: operands[name] if name in operands else value for name, value in op.values}
    return op.definition.reference(x, **kwargs)
