"""How findings are printed: ``text`` (``path:line:col: DCnnn message (use: ...)`` and a
hardware line per file), ``json`` (one document, stable keys and order) and ``github``
(workflow commands that GitHub shows as annotations on the pull request)."""

from __future__ import annotations

import json
from typing import Sequence

from pytest_devcaps.lint.analyze import classify_file
from pytest_devcaps.lint.records import Analysis, Finding

FORMATS = ("text", "json", "github")


def hardware_line(analysis: Analysis) -> str:
    found = classify_file(analysis.findings)
    return (f'{analysis.path}: suggest @pytest.mark.hardware("{found.hardware}"): {found.reason}')


def render_text(analyses: Sequence[Analysis]) -> str:
    lines: list[str] = []
    for analysis in analyses:
        if not analysis.findings:
            continue
        lines.extend(str(f) for f in analysis.findings)
        if analysis.readable:
            lines.append(hardware_line(analysis))
    return "".join(line + "\n" for line in lines)


def _finding(finding: Finding) -> dict[str, object]:
    return {"line": finding.line, "column": finding.column, "code": finding.code, "message": finding.message,
            "use": finding.use, "fixable": finding.fixable, "fix": finding.fix}


def render_json(analyses: Sequence[Analysis], migration: Sequence[dict[str, object]] | None = None) -> str:
    files = []
    for analysis in analyses:
        if not analysis.findings:
            continue
        found = classify_file(analysis.findings)
        files.append({"path": analysis.path,
                      "hardware": found.hardware if analysis.readable else None,
                      "hardware_reason": found.reason if analysis.readable else None,
                      "findings": [_finding(f) for f in analysis.findings]})
    findings = [f for a in analyses for f in a.findings]
    summary = {"files": len(files), "findings": len(findings), "fixable": sum(f.fixable for f in findings)}
    document: dict[str, object] = {"version": 1, "files": files, "summary": summary}
    if migration is not None:  # --fix: found / fixed / left per file, by rule code
        document["migration"] = list(migration)
    return json.dumps(document, indent=2) + "\n"


def _escape(text: str, *, property_: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_ else text


def render_github(analyses: Sequence[Analysis]) -> str:
    lines: list[str] = []
    for analysis in analyses:
        if not analysis.findings:
            continue
        path = _escape(analysis.path, property_=True)
        for f in analysis.findings:
            lines.append(f"::error file={path},line={f.line},col={f.column},title={f.code}::"
                         f"{_escape(f.message)} (use: {_escape(f.use)})")
        if analysis.readable:
            lines.append(f"::notice file={path},title=hardware::"
                         f"{_escape(hardware_line(analysis).split(': ', 1)[1])}")
    return "".join(line + "\n" for line in lines)


def render(analyses: Sequence[Analysis], fmt: str, migration: Sequence[dict[str, object]] | None = None) -> str:
    ordered = sorted(analyses, key=lambda a: a.path)
    if fmt == "json":
        return render_json(ordered, migration)
    return {"text": render_text, "github": render_github}[fmt](ordered)


def summary(analyses: Sequence[Analysis]) -> str:
    """The findings counted apart from the DC000s: a file not checked (a FIFO, too large...) or a
    bad pragma is no hardcoded device check."""
    findings = [f for a in analyses for f in a.findings if f.code != "DC000"]
    files = sum(1 for a in analyses if any(f.code != "DC000" for f in a.findings))
    fixable = sum(f.fixable for f in findings)
    unchecked = sum(1 for a in analyses if not a.readable)
    pragmas = sum(f.code == "DC000" for a in analyses if a.readable for f in a.findings)
    return (f"devcaps lint: {len(findings)} hardcoded device check(s) in {files} file(s)"
            f" ({fixable} fixable with --fix)" + (f"; {unchecked} file(s) not checked (DC000)" if unchecked else "")
            + (f"; {pragmas} bad pragma(s) (DC000)" if pragmas else ""))
