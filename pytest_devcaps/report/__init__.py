"""Fleet reports: many ``pytest --devcaps-json`` / ``devcaps check --json`` / ``devcaps probe
--json`` reports (hosts, devices, ranks) merged into one document, and that document as one
HTML page. ``devcaps report merge|html|schema`` is the command line; the formats and their
JSON Schemas are described in ``docs/REPORTS.md``. Standard library only.

The names below are imported on first use: the pytest plugin's JSON report needs only
``formats``, and every session must not pay for the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_devcaps.report.formats import FORMATS, ReportError, classify_outcome
    from pytest_devcaps.report.html import render as render_html
    from pytest_devcaps.report.fleet import merge
    from pytest_devcaps.report.sources import Source, load_source, parse_argument

_WHERE = {"FORMATS": ("formats", "FORMATS"), "ReportError": ("formats", "ReportError"),
          "classify_outcome": ("formats", "classify_outcome"), "render_html": ("html", "render"),
          "merge": ("fleet", "merge"), "Source": ("sources", "Source"),
          "load_source": ("sources", "load_source"), "parse_argument": ("sources", "parse_argument")}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _WHERE[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
