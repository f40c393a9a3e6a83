"""The report's two pages from one markdown text: report.md, and report.html with every `## ` section collapsible."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import markdown

HTML_STYLE = """
h1 { font-size: 1.55rem; margin: 0.5rem 0; }
body { font-family: system-ui, sans-serif; max-width: 78rem; margin: 1.5rem auto; padding: 0 1rem; line-height: 1.45; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 1rem 0; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; }
th { background: #f3f3f3; }
#verdicts table { font-size: 0.74rem; }
#verdicts td, #verdicts th { padding: 0.15rem 0.35rem; }
#lead { display: flex; gap: 1.2rem; align-items: flex-start; }
#headline { flex: 1 1 0; min-width: 0; font-size: 0.92rem; }
#first-figure { flex: 0 1 31rem; min-width: 0; font-size: 0.8rem; }
#first-figure p { margin: 0.2rem 0 0.6rem; }
@media (max-width: 56rem) { #lead { display: block; } }
#toc ul { columns: 2; margin: 0.5rem 0; }
details { border-top: 1px solid #ddd; padding: 0.3rem 0; }
details > summary { cursor: pointer; }
details > summary h2 { display: inline; font-size: 1.3rem; }
img { max-width: 100%; }
#strip { display: flex; flex-wrap: wrap; gap: 0.6rem; margin: 0.6rem 0; }
#strip a { display: flex; flex-direction: column; width: 9.5rem; font-size: 0.75rem; text-decoration: none; }
#strip img { height: 5.5rem; object-fit: cover; object-position: left top; border: 1px solid #ddd; }
code { background: #f5f5f5; padding: 0 0.2rem; }
.wide { overflow-x: auto; }
"""
# Opens the section a table-of-contents link points to (a closed <details> would hide it).
HTML_SCRIPT = """
function openTarget() { const t = document.getElementById(location.hash.slice(1)); if (t && t.tagName === 'DETAILS') t.open = true; }
window.addEventListener('hashchange', openTarget); window.addEventListener('DOMContentLoaded', openTarget);
"""


class ShownNotRun(markdown.Extension):
    """Raw HTML shown as text, never run: a report quotes run folders, which may come from anyone."""

    def extendMarkdown(self, md):
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")


MD_EXTENSIONS = ["tables", "fenced_code", ShownNotRun()]
ANCHOR = re.compile(r'&lt;a id="([a-z0-9-]+)"&gt;&lt;/a&gt;')  # the report's own anchors, put back
SAFE_SCHEMES = ("http", "https", "mailto")
ADDRESS = re.compile(r'(href|src)="([^"]*)"')


def _safe_address(found: re.Match) -> str:
    attribute, value = found.groups()
    plain = re.sub(r"[\x00-\x20]", "", html.unescape(value)).lower()
    scheme = re.match(r"([a-z][a-z0-9+.-]*):", plain)
    return f'{attribute}="{value}"' if scheme is None or scheme.group(1) in SAFE_SCHEMES else f'{attribute}="#"'


def markdown_to_html(text: str) -> str:
    body = ANCHOR.sub(r'<a id="\1"></a>', markdown.markdown(text, extensions=MD_EXTENSIONS))
    return ADDRESS.sub(_safe_address, body)


@dataclass
class Section:
    anchor: str
    title: str
    body: str


def split_sections(md_text: str) -> list[Section]:
    sections, seen = [], set()
    for chunk in re.split(r"(?m)^## ", md_text):
        if not chunk.strip():
            continue
        title, _, body = chunk.partition("\n")
        anchor = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"
        while anchor in seen:
            anchor += "-2"
        seen.add(anchor)
        sections.append(Section(anchor, title.strip(), body))
    return sections


def _toc(sections: list[Section]) -> str:
    return "\n".join(f"- [{s.title}](#{s.anchor})" for s in sections) + "\n"


def to_markdown(title: str, first_screen: str, sections: list[Section]) -> str:
    parts = [f"# {title}\n", first_screen, "**Contents**\n", _toc(sections)]
    parts += [f'<a id="{s.anchor}"></a>\n\n## {s.title}\n{s.body}' for s in sections]
    return "\n".join(parts)


def _html(md_text: str) -> str:
    body = markdown_to_html(md_text)
    return body.replace("<table>", '<div class="wide"><table>').replace("</table>", "</table></div>")


FIGURE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _strip(sections: list[Section]) -> str:
    """A thumbnail of each section's first figure, linking to the section (which the link opens)."""
    links = []
    for s in sections:
        found = FIGURE.search(s.body)
        if found:
            alt, src = (html.escape(v, quote=True) for v in found.groups())
            links.append(
                f'<a href="#{s.anchor}"><img src="{src}" alt="{alt}" loading="lazy">{html.escape(s.title)}</a>'
            )
    return f"<nav id='strip'>\n{''.join(links)}\n</nav>\n" if links else ""


def to_html(
    title: str,
    headline: str,
    verdicts: str,
    intro: str,
    sections: list[Section],
    figure: str = "",
    facts: str = "",
    figure_beside: bool = True,
) -> str:
    """The page: headline and figure, then the matrix; a comparison: question, matrix, figure, `facts`."""
    toc = markdown_to_html(_toc(sections))
    details = "\n".join(
        f'<details id="{s.anchor}"><summary><h2>{html.escape(s.title)}</h2></summary>\n{_html(s.body)}\n</details>'
        for s in sections
    )
    shown = f"<div id='first-figure'>\n{_html(figure)}\n</div>\n" if figure.strip() else ""
    matrix = f"<div id='verdicts'>\n{_html(verdicts)}\n</div>\n"
    lead = f"<div id='lead'>\n<div id='headline'>\n{_html(headline)}\n</div>\n{shown if figure_beside else ''}</div>\n"
    after = "" if figure_beside else shown + (f"<div id='facts'>\n{_html(facts)}\n</div>\n" if facts.strip() else "")
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
        f"<style>{HTML_STYLE}</style><script>{HTML_SCRIPT}</script></head><body>\n"
        f"<section id='first-screen'>\n<h1>{html.escape(title)}</h1>\n{lead}{matrix}{after}"
        f"<nav id='toc'><strong>Contents</strong> (each section opens on a click)\n{toc}</nav>\n{_strip(sections)}"
        f"{_html(intro)}\n"
        f"</section>\n{details}\n</body></html>\n"
    )
