"""Fleet reports: many ``pytest --devcaps-json`` / ``devcaps check --json`` / ``devcaps probe
--json`` reports (hosts, devices, ranks) merged into one document, and that document as one
HTML page. ``devcaps report merge|html|schema`` is the command line; the formats and their
JSON Schemas are described in ``docs/REPORTS.md``. Standard library only.
"""

from __future__ import annotations

from pytest_devcaps.report.formats import FORMATS, ReportError, classify_outcome
from pytest_devcaps.report.html import render as render_html
from pytest_devcaps.report.merge import merge
from pytest_devcaps.report.sources import Source, load_source, parse_argument

__all__ = ["FORMATS", "ReportError", "Source", "classify_outcome", "load_source", "merge",
           "parse_argument", "render_html"]
