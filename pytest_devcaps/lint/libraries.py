"""Calls into libraries that run on NVIDIA (or CUDA/ROCm) GPUs only (flash-attention, Apex,
bitsandbytes, NVML, ...): not device checks to rewrite, but code that stays CUDA's, so a gate in
front of it stays (:data:`pytest_devcaps.lint.rules.CUDA_ONLY_LIBRARIES`). Also FSDP1
(``FullyShardedDataParallel``) built with no ``device_id``: it runs on the current accelerator and
raises on CPU ranks, so the gate in front of it (``skip_if_lt_x_gpu``) stays. And a CUDA device
string the rewrite leaves where no finding is (``DEVICES.append("cuda")``)."""

from __future__ import annotations

import ast
import re

from pytest_devcaps.lint.gating import dotted, is_cuda_literal
from pytest_devcaps.lint.items import Residue
from pytest_devcaps.lint.records import Span
from pytest_devcaps.lint.regions import within
from pytest_devcaps.lint.rules import CUDA_ONLY_LIBRARIES
from pytest_devcaps.lint.source import SourceFile


def cuda_only(qualified: str) -> str | None:
    """The CUDA-only library ``qualified`` (a module, or a name in one) is or is part of: a key of
    :data:`CUDA_ONLY_LIBRARIES` that is it or a dotted prefix of it (``apex.optimizers`` is
    Apex; ``fairscale.nn.data_parallel.FullyShardedDataParallel`` is, ``fairscale.nn`` is not)."""
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        library = CUDA_ONLY_LIBRARIES.get(".".join(parts[:end]))
        if library is not None:
            return library
    return None


def _bound(tree: ast.Module) -> dict[str, str]:
    """Name -> library, for every import of a CUDA-only library (or of a CUDA-only name of
    another library) in the file (any scope)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                library = cuda_only(alias.name) if alias.asname else cuda_only(alias.name.split(".")[0])
                if library is not None:
                    names[alias.asname or alias.name.split(".")[0]] = library
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                library = cuda_only(f"{node.module}.{alias.name}") if alias.name != "*" else None
                if library is not None:
                    names[alias.asname or alias.name] = library
    return names


def libraries(source: SourceFile) -> list[Residue]:
    """Every use of a name bound to a CUDA-only library, as residue."""
    if not any(name.split(".")[-1] in source.text for name in CUDA_ONLY_LIBRARIES):
        return []
    bound = _bound(source.tree)
    return [Residue(source.span(node), f"{node.id} ({bound[node.id]}, a CUDA-only library)")
            for node in ast.walk(source.tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bound]


FSDP1 = "torch.distributed.fsdp.FullyShardedDataParallel"
_FSDP1_NAMES = (FSDP1, "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel")
FSDP1_NEEDS_AN_ACCELERATOR = (
    "FullyShardedDataParallel with no device_id takes the current accelerator and raises \"FSDP "
    "needs a non-CPU accelerator device\" on CPU ranks (torch/distributed/fsdp/_init_utils.py, "
    "_init_device_handle)")


def _fsdp1_names(tree: ast.Module) -> set[str]:
    """What FSDP1 is called in the file: its dotted names and the names imports bind it to
    (``from torch.distributed.fsdp import FullyShardedDataParallel as FSDP``)."""
    names = set(_FSDP1_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(alias.asname or alias.name for alias in node.names
                         if f"{node.module}.{alias.name}" in _FSDP1_NAMES)
        elif isinstance(node, ast.Import):
            names.update(f"{alias.asname}.FullyShardedDataParallel" for alias in node.names
                         if alias.asname and f"{alias.name}.FullyShardedDataParallel" in _FSDP1_NAMES)
    return names


def accelerator_only_calls(source: SourceFile) -> list[Residue]:
    """Every FSDP1 construction with no ``device_id``, as residue."""
    if "FullyShardedDataParallel" not in source.text:
        return []
    names = _fsdp1_names(source.tree)
    return [Residue(source.span(node), FSDP1_NEEDS_AN_ACCELERATOR, "accelerator-only") for node in ast.walk(source.tree)
            if isinstance(node, ast.Call) and dotted(node.func) in names
            and not any(k.arg == "device_id" or k.arg is None for k in node.keywords)]


# ``x.type() == "torch.cuda.FloatTensor"``: the legacy type name says where the tensor is
LEGACY_CUDA_TYPE = re.compile(r"^torch\.cuda\.[A-Za-z]+Tensor$")


def stray_cuda_strings(source: SourceFile, covered: list[Span]) -> list[Residue]:
    """``"cuda"`` / ``"cuda:1"`` where no finding is, so the rewrite leaves it: a parametrize
    list the test reads as strings, ``DEVICES.append("cuda")`` under a gate, ``pytest.param("cuda",
    marks=...)``, a tolerance table's key. Code reading it runs on CUDA only, so a gate in front
    of it stays. A comparison with it (``device == "cuda"``, ``device.type in ("cuda", "xpu")``)
    answers False elsewhere: not one (an assertion that the type is one of them is --verify's
    to catch)."""
    compared = {id(element) for node in ast.walk(source.tree) if isinstance(node, ast.Compare)
                for operand in (node.left, *node.comparators)
                for element in (operand, *(operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else ()))}
    found = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and LEGACY_CUDA_TYPE.match(node.value):
            found.append(Residue(source.span(node), f"{node.value!r}, a CUDA tensor type's name"))
        elif is_cuda_literal(node) and id(node) not in compared:
            span = source.span(node)
            if not any(within(span, c) for c in covered):
                assert isinstance(node, ast.Constant)
                found.append(Residue(span, f"{node.value!r}, a CUDA device no rewrite takes"))
    return found


def device_index_checks(source: SourceFile) -> list[Residue]:
    """``m.weight.get_device() == 0`` / ``x.device.index == 1``: a device index is CUDA's here
    (the CPU's is -1 / None), so code that compares with one stays CUDA's."""
    if "get_device" not in source.text and ".index" not in source.text:
        return []
    found = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            pair = (node.left, node.comparators[0])
            if any(_device_index(a) and isinstance(b, ast.Constant) and type(b.value) is int and b.value >= 0
                   for a, b in (pair, pair[::-1])):
                found.append(Residue(source.span(node), f"`{source.segment(node)}` compares with a CUDA device index"))
    return found


def _device_index(node: ast.AST) -> bool:
    """``x.get_device()`` or ``x.device.index``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_device" \
            and not node.args and not node.keywords:
        return True
    return isinstance(node, ast.Attribute) and node.attr == "index" and isinstance(node.value, ast.Attribute) \
        and node.value.attr == "device"
