"""Calls into libraries that run on NVIDIA (or CUDA/ROCm) GPUs only (flash-attention, Apex,
bitsandbytes, NVML, ...): not device checks to rewrite, but code that stays CUDA's, so a gate in
front of it stays (:data:`pytest_devcaps.lint.rules.CUDA_ONLY_LIBRARIES`)."""

from __future__ import annotations

import ast

from pytest_devcaps.lint.items import Residue
from pytest_devcaps.lint.rules import CUDA_ONLY_LIBRARIES
from pytest_devcaps.lint.source import SourceFile


def _bound(tree: ast.Module) -> dict[str, str]:
    """Name -> library, for every import of a CUDA-only library in the file (any scope)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                library = CUDA_ONLY_LIBRARIES.get(alias.name.split(".")[0])
                if library is not None:
                    names[alias.asname or alias.name.split(".")[0]] = library
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            library = CUDA_ONLY_LIBRARIES.get(node.module.split(".")[0])
            if library is not None:
                names.update({alias.asname or alias.name: library for alias in node.names if alias.name != "*"})
    return names


def libraries(source: SourceFile) -> list[Residue]:
    """Every use of a name bound to a CUDA-only library, as residue."""
    if not any(name in source.text for name in CUDA_ONLY_LIBRARIES):
        return []
    bound = _bound(source.tree)
    return [Residue(source.span(node), f"{node.id} ({bound[node.id]}, a CUDA-only library)")
            for node in ast.walk(source.tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bound]
