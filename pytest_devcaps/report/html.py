"""A fleet document as one self-contained HTML page (inline CSS, no script, nothing fetched).

Every value taken from the document goes through :func:`_e` (numbers included): the page is
made from a fleet document the schema allows (``command.checked_fleet``), and even so it never
trusts one.

Sections: the verdict, a summary and every problem (failed reports, missing or repeated ranks);
the capability x device matrix (levels colour-coded, the reason and source
of each answer in the cell's tooltip, every answer of a conflict listed); suites x devices with
passed / failed / skipped-by-capability counts, failing counts linking to the failing test ids;
tests the reports disagree about; the reports merged.
"""

from __future__ import annotations

from html import escape
from typing import Any, Iterable, Mapping, Sequence


def _e(value: Any) -> str:
    """Any value as HTML text or attribute value (quotes escaped too)."""
    return escape(str(value), quote=True)

LEVELS = ("native", "emulated", "unsupported", "unknown", "conflict")
_STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#1b1b1b}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.2em;margin:1.6em 0 .5em}
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #c9c9c9;padding:2px 6px}
thead th{background:#f2f2f2;position:sticky;top:0;vertical-align:bottom;font-weight:600}
tbody th{text-align:left;font-weight:normal;font-family:ui-monospace,Menlo,Consolas,monospace}
td{text-align:center;white-space:nowrap}small{color:#555}code{font-size:.95em}
.native{background:#bfe5c0}.emulated{background:#fbe7a6}.unsupported{background:#f2c4c4}
.unknown{background:#dedede}.none{background:#fff;color:#999}
.conflict{background:repeating-linear-gradient(45deg,#e2c7f0,#e2c7f0 4px,#f7edfc 4px,#f7edfc 8px)}
.ok{background:#e6f4e6}.bad{background:#fbdada}.legend span{padding:1px 8px;margin-right:4px;border:1px solid #c9c9c9}
.fail{color:#a00000;font-weight:600}ul.ids{margin:.2em 0 1em}
.verdict{font-size:1.2em;font-weight:700;padding:2px 8px;display:inline-block}
"""


def render(fleet: Mapping[str, Any]) -> str:
    """The page for ``fleet`` (a ``devcaps report merge`` document)."""
    devices = list(fleet["devices"])
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>devcaps fleet report</title>", f"<style>{_STYLE}</style>", "</head>", "<body>",
        "<h1>devcaps fleet report</h1>", _verdict(fleet), _summary(fleet), *_problems(fleet),
        '<h2 id="capabilities">Capabilities &times; devices</h2>', _legend(),
        _capability_matrix(fleet, devices),
        '<h2 id="suites">Suites &times; devices</h2>', _suite_matrix(fleet, devices),
        *_failing(fleet), *_disagreements(fleet),
        '<h2 id="reports">Reports merged</h2>', _sources(fleet),
        "</body>", "</html>",
    ]
    return "\n".join(parts) + "\n"


def _verdict(fleet: Mapping[str, Any]) -> str:
    passed = fleet.get("passed") is True
    return (f'<p id="verdict" class="verdict {"ok" if passed else "bad"}">'
            f'{"passed" if passed else "FAILED"}</p>')


def _summary(fleet: Mapping[str, Any]) -> str:
    s = fleet["summary"]
    failing = s["failing_tests"] or s["failed_reports"] or s["missing_ranks"] or s["repeated_ranks"]
    return (f'<p id="summary">{_e(s["reports"])} report(s) from {_e(s["hosts"])} host(s), '
            f'{_e(s["devices"])} device(s); {_e(s["capability_conflicts"])} capability '
            f'conflict(s), <span class="{"fail" if failing else ""}">{_e(s["failing_tests"])} '
            f'failing test(s), {_e(s["failed_reports"])} failed report(s), '
            f'{_e(s["missing_ranks"])} missing and {_e(s["repeated_ranks"])} repeated '
            f'rank(s)</span>, {_e(s["disagreeing_tests"])} test(s) the reports disagree about, '
            f'{_e(s["duplicate_tests"])} duplicate test result(s) merged. Merged '
            f'{_e(fleet.get("created", ""))} by pytest-devcaps '
            f'{_e(fleet.get("devcaps_version", ""))}.</p>')


def _problems(fleet: Mapping[str, Any]) -> list[str]:
    items = "".join(f"<li>{_e(problem)}</li>" for problem in fleet["problems"])
    if not items:
        return []
    return ['<h2 id="problems" class="fail">Failed reports and missing ranks</h2>',
            f'<ul class="ids">{items}</ul>']


def _legend() -> str:
    items = "".join(f'<span class="{level}">{level}</span>' for level in LEVELS)
    return f'<p class="legend">{items}<span class="none">&ndash; no answer</span> (hover a cell ' \
           'for the reason and where it came from)</p>'


def _device_header(device: Mapping[str, Any]) -> str:
    tip = "; ".join(f"{k}={v}" for k, v in device.get("identity", {}).items()
                    if v not in (None, "", {}, []))
    name = f'<br><small>{_e(device.get("name") or "")}</small>' if device.get("name") else ""
    return (f'<th scope="col" title="{_e(tip)}">{_e(device["host"])}<br>'
            f'{_e(device["key"])}{name}</th>')


def _capability_matrix(fleet: Mapping[str, Any], devices: Sequence[Mapping[str, Any]]) -> str:
    with_answers = {c["device"] for c in fleet["cells"]}
    columns = [d for d in devices if d["id"] in with_answers]
    if not columns:
        return "<p>No report carried capability answers.</p>"
    cells = {(c["capability"], c["device"]): c for c in fleet["cells"]}
    rows = []
    for capability in fleet["capabilities"]:
        tds = "".join(_level_cell(cells.get((capability, d["id"]))) for d in columns)
        rows.append(f'<tr><th scope="row">{_e(capability)}</th>{tds}</tr>')
    head = "".join(_device_header(d) for d in columns)
    return (f'<table id="capability-matrix"><thead><tr><th scope="col">capability</th>{head}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table>')


def _level_cell(cell: Mapping[str, Any] | None) -> str:
    if cell is None:
        return '<td class="none" title="no report answered">&ndash;</td>'
    tips = [f'{a["level"]} ({a["source"]}: {a["reason"]})' + _from(a["sources"])
            for a in cell["answers"]]
    level = cell["level"]
    css = level if level in LEVELS else "unknown"
    return f'<td class="{css}" title="{_e(chr(10).join(tips))}">{_e(level)}</td>'


def _from(sources: Iterable[int]) -> str:
    return " [report " + ", ".join(f"#{i + 1}" for i in sources) + "]"


def _suite_matrix(fleet: Mapping[str, Any], devices: Sequence[Mapping[str, Any]]) -> str:
    rows = {(r["suite"], r["device"]): (i, r) for i, r in enumerate(fleet["suites"])}
    if not rows:
        return "<p>No report carried test outcomes.</p>"
    columns = [d for d in devices if any(key[1] == d["id"] for key in rows)]
    body = []
    for suite in sorted({key[0] for key in rows}):
        tds = "".join(_suite_cell(rows.get((suite, d["id"]))) for d in columns)
        body.append(f'<tr><th scope="row">{_e(suite)}</th>{tds}</tr>')
    head = "".join(_device_header(d) for d in columns)
    return (f'<table id="suite-matrix"><thead><tr><th scope="col">suite</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _suite_cell(found: tuple[int, Mapping[str, Any]] | None) -> str:
    if found is None:
        return '<td class="none" title="not run here">&ndash;</td>'
    index, row = found
    counts = row["counts"]
    failing = len(row["failing"])
    tip = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    shown = [f'{_e(counts.get("passed", 0))} passed']
    if failing:
        shown.append(f'<a class="fail" href="#failing-{_e(index)}">{_e(failing)} failed</a>')
    else:
        shown.append("0 failed")
    shown.append(f'{_e(counts.get("skipped-by-capability", 0))} skipped by capability')
    css = "bad" if failing else "ok"
    return f'<td class="{css}" title="{_e(tip)}">{"<br>".join(shown)}</td>'


def _failing(fleet: Mapping[str, Any]) -> list[str]:
    parts = []
    for index, row in enumerate(fleet["suites"]):
        if not row["failing"]:
            continue
        ids = "".join(f"<li><code>{_e(nodeid)}</code></li>" for nodeid in row["failing"])
        parts.append(f'<h3 id="failing-{_e(index)}">{_e(row["suite"])} on '
                     f'{_e(row["device"])}: {_e(len(row["failing"]))} failing</h3>'
                     f'<ul class="ids">{ids}</ul>')
    return ['<h2 id="failing">Failing tests</h2>', *parts] if parts else []


def _disagreements(fleet: Mapping[str, Any]) -> list[str]:
    items = []
    for row in fleet["suites"]:
        for entry in row["disagreements"]:
            outcomes = "; ".join(f"{outcome}{_from(where)}"
                                 for outcome, where in entry["outcomes"].items())
            items.append(f'<li>{_e(row["suite"])} on {_e(row["device"])}: '
                         f'<code>{_e(entry["nodeid"])}</code>: {_e(outcomes)}</li>')
    if not items:
        return []
    return ['<h2 id="disagreements">Tests the reports disagree about</h2>',
            f'<ul class="ids">{"".join(items)}</ul>']


def _sources(fleet: Mapping[str, Any]) -> str:
    rows = []
    for i, s in enumerate(fleet["sources"]):
        rank = "" if s.get("rank") is None else f'{s["rank"]} of {s.get("world_size")}'
        status = "" if s.get("exitstatus") is None else s["exitstatus"]
        failed = "; ".join(s.get("failed") or ())
        cells = [f"#{i + 1}", s["file"], s["kind"], s["format"], s["host"], rank, status,
                 failed or "-", s.get("created") or "", s.get("devcaps_version") or "",
                 ", ".join(s["suites"])]
        css = ' class="bad"' if failed else ""
        rows.append(f"<tr{css}>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f'<th scope="col">{h}</th>' for h in (
        "report", "file", "kind", "format", "host", "rank", "exit status", "failed", "created",
        "devcaps", "suites"))
    return f'<table id="reports"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
