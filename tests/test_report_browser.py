"""report.html as a person sees it: rendered by headless Chromium (Debian's `chromium`, driven by Playwright)
at 1024×768, every figure loaded, the page never scrolling sideways (the matrix may, in its own box), every
table-of-contents link landing on a section, the headline and a figure (a comparison: its matrix) on the first
screen, and at 1280×900 the matrix's top on the first screen. The real test builds the report from the committed runs and
saves screenshots under build/browser/; the fast tests check the checks on small hand-made pages.

Skips, saying how to install what is missing, without Chromium (`apt-get install chromium`, or `make
browser`) or without Playwright (`pip install -e ".[test]"`, or `make test`)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
SHOTS = REPO / "build" / "browser"

NARROW = (1024, 768)  # the first screen a person is checked against
MATRIX_SCREEN = (1280, 900)  # the screen whose first view holds the matrix's top (a comparison's first table)
FIGURE_SHOWN_PX = 200  # of a figure's height at least this much (or all of it) on the first screen
WIDE = (1400, 900)  # the full-page screenshot; one screen of this size is the unit of the page height


# ------------------------------------------------------------------------------------------ the browser
def _chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    """Why the browser tests cannot run here, with how to fix it; None when they can."""
    try:
        import playwright.sync_api  # noqa: F401, PLC0415
    except ImportError:
        return (
            "Playwright for Python is not installed: .venv/bin/pip install -e '.[test]' (or make test), "
            "which installs playwright==1.63.0"
        )
    if _chromium() is None:
        return (
            "Chromium is not installed (no `chromium` on PATH): apt-get install chromium (Debian), or make browser; "
            "or set CHROMIUM to a Chromium executable"
        )
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as p:
        # Playwright cannot download its own browsers here: Debian's chromium; root needs --no-sandbox.
        b = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


# Lazy images (and images in closed <details>) load only when shown; a person would open and scroll, so
# every image is made eager and awaited (an error counts as done: naturalWidth stays 0), for 20 s at most.
_LOAD_ALL_IMAGES = """() => Promise.race([
    Promise.all([...document.images].map(img => {
        img.loading = 'eager';
        if (img.complete) return null;
        return new Promise(done => { img.addEventListener('load', done); img.addEventListener('error', done); });
    })),
    new Promise(done => setTimeout(done, 20000)),
]).then(() => null)"""


def open_page(browser, url: str, size: tuple[int, int]):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.goto(url, wait_until="load")
    page.evaluate(_LOAD_ALL_IMAGES)
    page.evaluate("() => document.fonts.ready.then(() => null)")
    page.evaluate("() => window.scrollTo(0, 0)")
    return page


# ------------------------------------------------------------------------------------------- the checks
# Each takes an open Playwright page and returns its problems, one sentence each; [] when it passes.
def image_problems(page) -> list[str]:
    images = page.evaluate(
        "() => [...document.images].map(img => ({src: img.getAttribute('src'), w: img.naturalWidth}))"
    )
    if not images:
        return ["no <img> on the page: the report shows no figure"]
    return [f"image {img['src']!r} did not load (naturalWidth 0)" for img in images if not img["w"] > 0]


def verdict_table_problems(page, width: int = NARROW[0]) -> list[str]:
    """The matrix (#verdicts table) within the window, or scrolling in its own box; the page never sideways."""
    box = page.evaluate(
        """() => {
            const t = document.querySelector('#verdicts table');
            if (!t) return null;
            const r = t.getBoundingClientRect();
            return {right: r.right + window.scrollX, width: r.width, boxed: t.closest('.wide') !== null};
        }"""
    )
    if box is None:
        return ["no verdict table (#verdicts table)"]
    problems = []
    if box["right"] > width and not box["boxed"]:
        problems.append(
            f"the verdict table (#verdicts table) ends at {box['right']:.0f} px, past the {width} px window "
            f"(it is {box['width']:.0f} px wide)"
        )
    page_width = page.evaluate("() => document.documentElement.scrollWidth")
    if page_width > width:
        problems.append(f"the page scrolls sideways at {width} px: it is {page_width} px wide (scrollWidth)")
    return problems


def matrix_problems(page, height: int = MATRIX_SCREEN[1]) -> list[str]:
    """The matrix's top (#verdicts table) on the first `height` px of the page."""
    top = page.evaluate(
        "() => { const t = document.querySelector('#verdicts table');"
        " return t ? t.getBoundingClientRect().top + window.scrollY : null; }"
    )
    if top is None:
        return ["no matrix (#verdicts table)"]
    return [] if top < height else [f"the matrix's top is at {top:.0f} px, below the first {height} px screen"]


def toc_problems(page) -> list[str]:
    links = page.evaluate(
        """() => [...document.querySelectorAll('#toc a[href^="#"]')].map(a => {
            const href = a.getAttribute('href');
            let id = href.slice(1);
            try { id = decodeURIComponent(id); } catch (e) {}
            return {href, text: a.textContent.trim(), found: id !== '' && document.getElementById(id) !== null};
        })"""
    )
    if not page.query_selector("#toc"):
        return ["no table of contents (nav#toc)"]
    if not links:
        return ["the table of contents (#toc) has no links to sections (a[href^='#'])"]
    return [
        f"TOC link {link['text']!r} -> {link['href']}: no element with that id" for link in links if not link["found"]
    ]


def _machine_of(headline: str) -> str:
    """ "On AMD EPYC, 2 cores (vm) · cpu (run ..." -> "AMD EPYC, 2 cores (vm)"."""
    return headline.removeprefix("On ").split(" · ")[0]


def headline_problems(page, height: int = NARROW[1]) -> list[str]:
    """The headline paragraphs: the <p> in #first-screen before the verdict table (one per machine and source).
    Every one shown; those of the report's first machine start on the first screen (with several machines beside
    the first figure, the others follow below)."""
    if not page.query_selector("#first-screen"):
        return ["no first screen (section#first-screen)"]
    headlines = page.evaluate(
        """() => {
            const verdicts = document.getElementById('verdicts');
            return [...document.querySelectorAll('#first-screen p')]
                .filter(p => !p.closest('#verdicts, #toc, #first-figure, #notes'))
                .filter(p => !verdicts || (p.compareDocumentPosition(verdicts) & Node.DOCUMENT_POSITION_FOLLOWING))
                .map(p => {
                    const r = p.getBoundingClientRect();
                    return {text: p.textContent.trim(), top: r.top + window.scrollY, h: r.height,
                            shown: p.checkVisibility ? p.checkVisibility() : r.height > 0};
                });
        }"""
    )
    if not headlines:
        return ["no headline paragraph (#first-screen p before #verdicts)"]
    problems, first_machine = [], _machine_of(headlines[0]["text"])
    for i, line in enumerate(headlines, 1):
        name = f"headline {i} ({line['text'][:60]!r})"
        if not line["text"]:
            problems.append(f"headline {i} is empty")
        elif not (line["shown"] and line["h"] > 0):
            problems.append(f"{name} is not shown")
        elif line["top"] >= height and _machine_of(line["text"]) == first_machine:
            problems.append(f"{name} starts at {line['top']:.0f} px, below the first {height} px screen")
    return problems


def first_figure_problems(page, height: int = NARROW[1]) -> list[str]:
    """A loaded figure in #first-screen, shown, with FIGURE_SHOWN_PX of it (or all of it) inside the first
    `height` px."""
    if not page.query_selector("#first-screen"):
        return []  # headline_problems names it
    if page.query_selector("#first-screen #first-figure") and not page.query_selector("#lead #first-figure"):
        return []  # a comparison: its question and matrix first (matrix_problems), the figure under them
    figures = page.evaluate(
        """() => [...document.querySelectorAll('#first-screen img')].map(img => {
            const r = img.getBoundingClientRect();
            return {src: img.getAttribute('src'), w: img.naturalWidth, top: r.top + window.scrollY,
                    h: r.height, shown: img.checkVisibility ? img.checkVisibility() : r.height > 0};
        })"""
    )
    if not figures:
        return ["no figure on the first screen (no <img> in #first-screen)"]
    for fig in figures:
        inside = min(fig["top"] + fig["h"], height) - fig["top"]
        if fig["w"] > 0 and fig["shown"] and inside >= min(FIGURE_SHOWN_PX, fig["h"]) and fig["h"] > 0:
            return []
    first = figures[0]
    return [
        f"no figure on the first {height} px screen: the first, {first['src']!r}, starts at {first['top']:.0f} px "
        f"and is {first['h']:.0f} px high"
    ]


CHECKS = (image_problems, verdict_table_problems, toc_problems, headline_problems, first_figure_problems)


def page_problems(page) -> list[str]:
    return [problem for check in CHECKS for problem in check(page)]


def capture(browser, url: str, out: Path) -> dict:
    """The first screen at 1024×768 and the whole page at 1400 px wide, saved under out; the page's height
    at 1400 px in screens of 1400×900; the paths written to screenshots.txt and the height to screens.txt."""
    out.mkdir(parents=True, exist_ok=True)
    first = out / "first-screen-1024x768.png"
    full = out / "full-page-1400.png"
    page = open_page(browser, url, NARROW)
    page.screenshot(path=str(first))
    page.close()
    page = open_page(browser, url, WIDE)
    page.screenshot(path=str(full), full_page=True)
    height = page.evaluate("() => document.documentElement.scrollHeight")
    # and with every <details> opened, as a reader who opens every section sees it
    opened = page.evaluate(
        "() => { document.querySelectorAll('details').forEach(d => { d.open = true; });"
        " return document.documentElement.scrollHeight; }"
    )
    page.close()
    screens, screens_opened = height / WIDE[1], opened / WIDE[1]
    (out / "screenshots.txt").write_text(f"{first}\n{full}\n")
    (out / "screens.txt").write_text(
        f"{screens:.2f} screens of {WIDE[0]}x{WIDE[1]} ({height} px high at {WIDE[0]} px wide)\n"
        f"{screens_opened:.2f} screens with every section opened ({opened} px)\n"
    )
    return {
        "first_screen": first,
        "full_page": full,
        "height_px": height,
        "screens": screens,
        "screens_opened": screens_opened,
    }


# ------------------------------------------------------------------------------------- the real report
def committed_run_dirs() -> list[Path]:
    """Every stored run under results/: a folder holding a meta.json, at any depth (results/<run-id>/ and
    results/reference/<machine-id>/<run-id>/ alike), minus the gitignored scratch folders."""
    runs = {
        meta.parent
        for meta in RESULTS.rglob("meta.json")
        if not any(part.startswith("_scratch") for part in meta.relative_to(RESULTS).parts)
    }
    return sorted(runs)


@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    from bench.cli import main  # noqa: PLC0415

    shutil.rmtree(SHOTS, ignore_errors=True)  # no screenshots of an earlier report left to mistake for this one
    runs = committed_run_dirs()
    assert runs, f"no stored runs (folders with a meta.json) under {RESULTS}"
    out = tmp_path_factory.mktemp("report")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(["report", "--results", *map(str, runs), "--out", str(out)])
    assert code == 0, f"bench report on {len(runs)} stored runs failed ({code}): {stderr.getvalue().strip()}"
    html = out / "report.html"
    assert html.exists(), f"bench report wrote no {html}"
    return html


@pytest.mark.slow
def test_report_in_a_browser(browser, real_report, record_property):
    # The screenshots first, so they are there to look at when a check fails.
    shots = capture(browser, real_report.as_uri(), SHOTS)
    for key in ("first_screen", "full_page", "screens", "screens_opened"):
        record_property(key, str(shots[key]))
    print(f"\nfirst screen (1024x768): {shots['first_screen']}")
    print(f"full page (1400 px wide): {shots['full_page']}")
    print(f"page height at 1400 px: {shots['screens']:.2f} screens of 1400x900 ({shots['height_px']} px)")
    print(f"with every section opened: {shots['screens_opened']:.2f} screens")

    page = open_page(browser, real_report.as_uri(), NARROW)
    problems = page_problems(page)
    page.close()
    page = open_page(browser, real_report.as_uri(), MATRIX_SCREEN)
    problems += matrix_problems(page) + verdict_table_problems(page, MATRIX_SCREEN[0])
    page.close()
    assert not problems, f"{real_report} at 1024x768 and 1280x900:\n" + "\n".join(problems)


# -------------------------------------------------------------------------- the checks, on made-up pages
def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x40\x80\xc0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _page(
    folder: Path,
    *,
    table_width: str = "auto",
    img_src: str = "figures/a.png",
    toc_target: str = "timing",
    above: str = "",
    before_figure: str = "",
) -> str:
    """A small page with the report's structure; the keywords break one thing each."""
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    (folder / "figures" / "a.png").write_bytes(_png(40, 30))
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>made-up report</title></head><body>
{above}
<section id="first-screen">
  <div id="lead"><p class="headline">cpu-box: attention beats the LSTM from n = 64; the table's O(n² d) holds.</p>
  <div id="first-figure">{before_figure}<p><img src="figures/a.png" alt="Table 1" width="400" height="300"></p>
  <p><em>Table 1, measured</em></p></div></div>
  <div id="verdicts"><table style="width: {table_width}">
    <tr><th>claim</th><th>verdict</th></tr><tr><td>attention is O(n² d)</td><td>holds</td></tr>
  </table></div>
  <nav id="toc"><a href="#{toc_target}">Timing</a> <a href="#memory">Memory</a></nav>
</section>
<details id="timing"><summary>Timing</summary><img src="{img_src}" alt="time"></details>
<details id="memory"><summary>Memory</summary><img src="figures/a.png" alt="memory" loading="lazy"></details>
</body></html>"""
    path = folder / "report.html"
    path.write_text(html, encoding="utf-8")
    return path.as_uri()


def test_the_height_is_counted_in_screens_of_1400x900(browser, tmp_path):
    shots = capture(browser, _page(tmp_path, above='<div style="height: 2700px"></div>'), tmp_path / "shots")
    assert 3 < shots["screens"] < 4, shots
    assert shots["screens_opened"] >= shots["screens"]


def test_a_good_page_passes_and_is_captured(browser, tmp_path):
    url = _page(tmp_path)
    page = open_page(browser, url, NARROW)
    assert page_problems(page) == []
    page.close()
    shots = capture(browser, url, tmp_path / "shots")
    assert shots["first_screen"].stat().st_size > 0 and shots["full_page"].stat().st_size > 0
    assert shots["screens"] == 1.0  # scrollHeight is at least the window's height
    assert shots["screens_opened"] == 1.0
    assert (tmp_path / "shots" / "screenshots.txt").read_text().split() == [
        str(shots["first_screen"]),
        str(shots["full_page"]),
    ]
    assert (tmp_path / "shots" / "screens.txt").read_text().startswith(f"{shots['screens']:.2f} screens")


@pytest.mark.parametrize(
    ("broken", "check", "expected"),
    [
        ({"table_width": "1500px"}, verdict_table_problems, "past the 1024 px window"),
        ({"table_width": "1500px"}, verdict_table_problems, "scrolls sideways"),
        ({"img_src": "figures/missing.png"}, image_problems, "'figures/missing.png' did not load"),
        ({"toc_target": "nowhere"}, toc_problems, "#nowhere: no element with that id"),
        ({"above": '<div style="height: 900px"></div>'}, headline_problems, "below the first 768 px screen"),
        ({"before_figure": '<div style="height: 700px"></div>'}, first_figure_problems, "starts at"),
    ],
)
def test_a_broken_page_fails_its_check(browser, tmp_path, broken, check, expected):
    page = open_page(browser, _page(tmp_path, **broken), NARROW)
    problems = check(page)
    others = [
        p
        for c in CHECKS
        if c is not check and not (broken.get("above") and c is first_figure_problems)
        for p in c(page)
    ]
    page.close()
    assert any(expected in p for p in problems), problems
    assert others == [], others


def test_a_page_without_the_structure_names_what_is_missing(browser, tmp_path):
    (tmp_path / "report.html").write_text("<!doctype html><title>empty</title><p>nothing here</p>")
    page = open_page(browser, (tmp_path / "report.html").as_uri(), NARROW)
    problems = page_problems(page)
    page.close()
    assert problems == [
        "no <img> on the page: the report shows no figure",
        "no verdict table (#verdicts table)",
        "no table of contents (nav#toc)",
        "no first screen (section#first-screen)",
    ]  # first_figure_problems leaves the missing first screen to headline_problems


@pytest.mark.slow
def test_two_machines_side_by_side_still_fit_1024_px(browser, tmp_path):
    """One machine's committed sweeps, and the same sweeps as if measured on a second machine: the verdict table
    grows a column and a row per machine, and must still fit (the real report, every machine, is the slow test's)."""
    import json  # noqa: PLC0415

    from bench.cli import main  # noqa: PLC0415

    by_machine: dict[Path, list[Path]] = {}
    for run in committed_run_dirs():
        if json.loads((run / "meta.json").read_text())["kind"] == "run":
            by_machine.setdefault(run.parent, []).append(run)
    runs = max(by_machine.values(), key=len)
    for run in runs:
        copy = tmp_path / "other" / run.name
        shutil.copytree(run, copy)
        meta = json.loads((copy / "meta.json").read_text())
        (copy / "meta.json").write_text(json.dumps(meta | {"hostname": "a-second-machine-with-a-long-name"}))
    out = tmp_path / "report"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["report", "--results", *map(str, runs), str(tmp_path / "other"), "--out", str(out)]) == 0
    page = open_page(browser, (out / "report.html").as_uri(), NARROW)
    problems = image_problems(page) + verdict_table_problems(page) + toc_problems(page)
    page.close()
    assert not problems, "\n".join(problems)


def test_a_matrix_below_the_first_screen_is_named(browser, tmp_path):
    page = open_page(browser, _page(tmp_path, above='<div style="height: 1000px"></div>'), MATRIX_SCREEN)
    problems = matrix_problems(page)
    page.close()
    assert problems and "below the first 900 px screen" in problems[0], problems


def test_a_headline_names_its_machine_before_its_source():
    assert (
        _machine_of("On reference: AMD EPYC, 2 cores (vm) · cpu-train (run 1)") == "reference: AMD EPYC, 2 cores (vm)"
    )
    assert _machine_of("On Intel Xeon, 2 cores (laptop) · cpu (run 2)") == "Intel Xeon, 2 cores (laptop)"
