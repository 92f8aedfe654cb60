"""Fleet reports: many ``pytest --devcaps-json`` / ``devcaps check --json`` / ``devcaps probe
--json`` reports (hosts, devices, ranks) merged into one document, and that document as one
HTML page. ``devcaps report merge|html|schema`` is the command line; the formats and their
JSON Schemas are described in ``docs/REPORTS.md``. Standard library only.

The names below are imported on first use: the pytest plugin's JSON report needs only
``formats``, and every session must not pay for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_devcaps._util.lazy import lazy_names

if TYPE_CHECKING:
    from pytest_devcaps.report.formats import FORMATS, ReportError, classify_outcome
    from pytest_devcaps.report.html import render as render_html
    from pytest_devcaps.report.fleet import merge
    from pytest_devcaps.report.sources import Source, load_source, parse_argument

_WHERE = {"FORMATS": ".formats", "ReportError": ".formats", "classify_outcome": ".formats",
          "render_html": ".html:render", "merge": ".fleet", "Source": ".sources",
          "load_source": ".sources", "parse_argument": ".sources"}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
