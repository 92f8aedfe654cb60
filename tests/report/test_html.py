"""devcaps report html: one self-contained page, parsed here, and rendered by headless Chromium
when it is installed (Debian: apt-get install chromium)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.commands.report import merged
from pytest_devcaps.report.html import render as render_html

import fleet_data as data


class _Page(HTMLParser):
    """Tables by id (rows of (tag, attributes, text) cells), every id, href and resource."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, dict[str, str], str]]]] = {}
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.tags: set[str] = set()
        self._table: str | None = None
        self._cell: tuple[str, dict[str, str], list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        if "id" in attributes:
            self.ids.add(attributes["id"])
        if "href" in attributes:
            self.hrefs.append(attributes["href"])
        if tag == "table":
            self._table = attributes.get("id", "")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = (tag, attributes, [])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            name, attributes, text = self._cell
            self.tables[self._table][-1].append((name, attributes, " ".join(" ".join(text).split())))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, text: str) -> None:
        if self._cell is not None:
            self._cell[2].append(text)


def _fleet_files(tmp_path: Path) -> list[str]:
    evil = data.cpu_check()
    evil["suites"][0]["tests"].append(data.entry('t.py::test_x[<script>alert("x")</script>]',
                                                 "cpu", "failed"))
    return [data.write(tmp_path, "rank0.json", data.node1_rank(0)),
            data.write(tmp_path, "rank1.json", data.node1_rank(1)),
            data.write(tmp_path, "mi300-a.json", data.node2_probe("native")),
            data.write(tmp_path, "mi300-b.json", data.node2_probe("unsupported")),
            data.write(tmp_path, "cpu.json", evil)]


@pytest.fixture
def page(tmp_path: Path) -> tuple[Path, str]:
    fleet = tmp_path / "fleet.json"
    assert main(["report", "merge", *_fleet_files(tmp_path), "-o", str(fleet)]) == 1  # failing
    html = tmp_path / "fleet.html"
    assert main(["report", "html", str(fleet), "-o", str(html)]) == 1
    return html, html.read_text()


def _parse(text: str) -> _Page:
    parsed = _Page()
    parsed.feed(text)
    parsed.close()
    return parsed


def test_capability_matrix_colours_levels_with_reason_and_source_on_hover(page: tuple[Path, str]) -> None:
    parsed = _parse(page[1])
    rows = parsed.tables["capability-matrix"]
    header = [text for _, _, text in rows[0]]
    assert header == ["capability", "cpuhost cpu AMD EPYC", "node1 cpu AMD EPYC",
                      "node1 cuda:0 NVIDIA H100 80GB HBM3", "node1 cuda:1 NVIDIA H100 80GB HBM3",
                      "node2 cuda:0 AMD Instinct MI300X"]
    assert "arch=gfx942" in rows[0][5][1]["title"]
    fp8 = next(r for r in rows if r[0][2] == "dtype.fp8_e4m3fn")
    assert [(a["class"], text) for _, a, text in fp8[1:]] == [
        ("unsupported", "unsupported"), ("emulated", "emulated"), ("native", "native"),
        ("native", "native"), ("conflict", "conflict")]
    assert fp8[3][1]["title"] == "native (vendor-rule: sm_90 has fp8) [report #1, #2]"
    assert fp8[5][1]["title"] == ("native (probe: probe ran it) [report #3]\n"
                                  "unsupported (probe: probe ran it) [report #4]")
    assert fp8[1][1]["title"] == "unsupported (probe: no fp8 <cast>) [report #5]"
    bf16 = next(r for r in rows if r[0][2] == "dtype.bf16")
    assert [a["class"] for _, a, _ in bf16[1:]] == ["none", "none", "none", "none", "native"]


def test_suites_by_device_count_outcomes_and_link_the_failing_ids(page: tuple[Path, str]) -> None:
    parsed = _parse(page[1])
    rows = parsed.tables["suite-matrix"]
    assert [text for _, _, text in rows[0]][1:] == [
        "cpuhost cpu AMD EPYC", "node1 cuda:0 NVIDIA H100 80GB HBM3",
        "node1 cuda:1 NVIDIA H100 80GB HBM3", "node1 -"]
    by_suite = {r[0][2]: r[1:] for r in rows[1:]}
    assert [text for _, _, text in by_suite["kernels"]] == [
        "1 passed 2 failed 1 skipped by capability", "–", "–", "–"]
    assert [text for _, _, text in by_suite["pytest"]] == [
        "–", "3 passed 0 failed 0 skipped by capability",
        "2 passed 1 failed 0 skipped by capability",
        "1 passed 0 failed 0 skipped by capability"]
    assert by_suite["kernels"][0][1]["class"] == "bad" and by_suite["pytest"][1][1]["class"] == "ok"
    links = [h for h in parsed.hrefs if h.startswith("#failing-")]
    assert len(links) == 2 and all(link[1:] in parsed.ids for link in links)
    text = page[1]
    assert "<code>test_scaled_mm.py::test_bf16[cpu]</code>" in text
    assert "<code>test_dist.py::test_allreduce[cuda]</code>" in text


def test_the_page_is_self_contained_and_escapes_what_reports_say(page: tuple[Path, str]) -> None:
    parsed = _parse(page[1])
    assert not parsed.tags & {"script", "link", "img", "iframe", "object"}
    assert all(h.startswith("#") for h in parsed.hrefs)
    assert "test_x[&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;]" in page[1]
    assert {"capabilities", "suites", "failing", "reports", "summary"} <= parsed.ids


def test_html_merges_reports_given_directly(tmp_path: Path) -> None:
    out = tmp_path / "direct.html"
    assert main(["report", "html", *_fleet_files(tmp_path), "-o", str(out)]) == 1
    assert _parse(out.read_text()).tables["capability-matrix"]
    fleet = merged(_fleet_files(tmp_path))
    assert fleet["summary"]["reports"] == 5


def _chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if (found := shutil.which(name))), None)


def _pixels(png: bytes) -> set[tuple[int, int, int]]:
    """The distinct RGB colours of an 8-bit RGB/RGBA PNG (what Chromium's screenshots are)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    idat = b""
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        body = png[offset + 8:offset + 8 + length]
        if kind == b"IDAT":
            idat += body
        chunks.setdefault(kind, body)
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and colour in (2, 6)
    step = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * step
    previous, colours = bytearray(stride), set()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - step] if x >= step else 0
            up, corner = previous[x], previous[x - step] if x >= step else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        colours.update(tuple(line[i:i + 3]) for i in range(0, stride, step))
        previous = line
    return colours


def test_headless_chromium_renders_the_page(page: tuple[Path, str], tmp_path: Path) -> None:
    """A real browser parses the page and paints the colour-coded matrix."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium); the page was only "
                    "parsed, not rendered")
    html, _ = page
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900"]
    dom = subprocess.run([*flags, "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<table id="capability-matrix">' in dom.stdout and "node2<br>cuda:0" in dom.stdout
    shot = tmp_path / "fleet.png"
    done = subprocess.run([*flags, f"--screenshot={shot}", html.as_uri()], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    colours = _pixels(shot.read_bytes())
    for css in ("#bfe5c0", "#fbe7a6", "#f2c4c4", "#e2c7f0"):  # native, emulated, unsupported, conflict
        assert tuple(bytes.fromhex(css[1:])) in colours, f"{css} not painted"


# -- hostile input: nothing a report says runs as script ------------------------------------------

MARK = "PWN" + "ED"
"""What a script in the page would write; the payloads build it at run time, so the escaped
payload text itself never contains it."""
PAYLOADS = ("<script>document.title='PWN'+'ED'</script>",
            "\"><img src=x onerror=\"document.title='PWN'+'ED'\">",
            "'><svg onload=document.title='PWN'+'ED'>")


def _hostile_reports(tmp_path: Path) -> list[str]:
    """Every string a report carries into the page is a payload: host, device name, capability,
    reason, source, suite, test id, file name, version."""
    files = []
    for i, payload in enumerate(PAYLOADS):
        report = data.node1_rank(0)
        report.update(host=f"h{i}{payload}", rank=0, world_size=1, devcaps_version=payload,
                      created=payload, suite=f"s{payload}")
        report["devices"] = [{**data.gpu(0), "name": payload, "vendor": payload}]
        report["capabilities"] = [data.record(f"c{payload}", "cuda:0", "native", payload, payload)]  # devcaps: allow
        report["tests"] = [data.entry(f"t.py::x[{payload}]", "cuda:0", outcome)  # devcaps: allow
                           for outcome in ("failed", "passed")]
        name = f"r{i}{payload.replace('/', '_')}.json"
        files.append(data.write(tmp_path, name, report))
    return files


def test_hostile_reports_are_escaped_everywhere(tmp_path: Path) -> None:
    out = tmp_path / "hostile.html"
    assert main(["report", "html", *_hostile_reports(tmp_path), "-o", str(out)]) == 1
    parsed = _parse(out.read_text())
    assert not parsed.tags & {"script", "img", "svg"}, parsed.tags
    assert not any(a.startswith("on") for a in _attribute_names(out.read_text()))


def _attribute_names(text: str) -> set[str]:
    names: set[str] = set()

    class _Attributes(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            names.update(name for name, _ in attrs)

    _Attributes().feed(text)
    return names


def test_numbers_are_escaped_too_even_without_the_schema(tmp_path: Path) -> None:
    """render() itself trusts nothing: summary numbers and counts are escaped like text."""
    fleet = merged([data.write(tmp_path, "c.json", data.cpu_check())])
    for key in fleet["summary"]:
        fleet["summary"][key] = PAYLOADS[0]
    fleet["suites"][0]["counts"] = {"passed": PAYLOADS[1], "skipped-by-capability": PAYLOADS[2]}
    fleet["sources"][0].update(format=PAYLOADS[0], exitstatus=PAYLOADS[1], rank=PAYLOADS[2])
    parsed = _parse(render_html(fleet))
    assert not parsed.tags & {"script", "img", "svg"}


def test_a_hostile_fleet_document_is_refused_not_rendered(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fleet = merged(_hostile_reports(tmp_path))
    fleet["summary"]["failing_tests"] = PAYLOADS[0]
    fleet["suites"][0]["counts"]["passed"] = PAYLOADS[1]
    path = data.write(tmp_path, "fleet.json", fleet)
    assert main(["report", "html", path, "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "not a fleet report this pytest-devcaps wrote" in err
    assert "expected integer, got str" in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


def test_headless_chromium_runs_no_script_from_hostile_input(tmp_path: Path) -> None:
    """The hostile page in a real browser: no script ran (the title is still the page's own,
    no payload element exists), and the hostile fleet document itself is refused."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium); the hostile page "
                    "was only parsed, not rendered")
    out = tmp_path / "hostile.html"
    assert main(["report", "html", *_hostile_reports(tmp_path), "-o", str(out)]) == 1
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=2000"]
    dom = subprocess.run([*flags, "--dump-dom", out.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<title>devcaps fleet report</title>" in dom.stdout  # rendered, and its own title
    assert MARK not in dom.stdout
    assert "<script" not in dom.stdout and "<img" not in dom.stdout and "<svg" not in dom.stdout
    assert "document.title='PWN'+'ED'" in dom.stdout  # the payloads are shown, as text
