"""HTML pages of the scorecards, the leaderboard and the brief: the same views and templates as the Markdown,
the Markdown turned into HTML by markdown-it-py.

Contestant text must reach a browser as text and nothing else. Three layers make it so (and the whole page is
stripped of control and format characters, as judge/contain.py strips them everywhere):
- every string of the view under a key that holds text from contestants or their kernels (`CONTESTANT_KEYS`)
  is swapped for a random placeholder before the template runs, and after the Markdown became HTML each
  placeholder becomes that text, HTML-escaped: no Markdown of a contestant's is ever parsed;
- raw HTML in the Markdown is not passed through (markdown-it's `html` option is off), it is escaped;
- the only links the page keeps from the Markdown lead to judge's own pages (`PAGE`), and the only images are
  the charts judge drew for it; every other link becomes its text and every other image its alt text.
"""

from __future__ import annotations

import html
import re
import secrets
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ..contain import one_line, strip_controls
from .rendering import render_text

# The pages judge serves beside each other (judge/server/pages.py): the only links a page keeps.
PAGE = re.compile(r"(index|leaderboard|round-[0-9]+|brief-[A-Za-z0-9_.-]+|proposal-[a-z0-9-]+)\.html")

# Keys of the report, leaderboard and brief views whose strings come from contestants, sharks or a kernel's
# own output (its errors, its compile signature), never judge's fixed words.
CONTESTANT_KEYS = frozenset({
    "author", "title", "notes", "shark_title", "source", "summary", "reason", "error", "lines", "text", "why",
    "label", "note", "cleared_by", "changes", "pitch", "risks", "references", "message", "log_tail",
})

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 80rem; padding: 0 1rem; line-height: 1.45; }
nav { margin-bottom: 1.5rem; padding-bottom: .5rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 1rem 0; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .2rem .5rem; vertical-align: top; overflow-wrap: anywhere; }
code { background: #f4f4f4; padding: 0 .2rem; }
img { max-width: 100%; }
"""


class Contained:
    """A view whose contestant strings are placeholders, and the way back from placeholders to escaped text."""

    def __init__(self, view: Any):
        self.nonce = secrets.token_hex(6)
        self.texts: list[str] = []
        self.view = self._walk(view, contestant=False)

    def _placeholder(self, text: str) -> str:
        if not text:
            return text
        self.texts.append(text)
        return f"jdg{self.nonce}n{len(self.texts) - 1}x"

    def _walk(self, value: Any, contestant: bool) -> Any:
        if isinstance(value, dict):
            return {k: self._walk(v, contestant or k in CONTESTANT_KEYS) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._walk(v, contestant) for v in value]
        if contestant and isinstance(value, str):
            return self._placeholder(value)
        return value

    def restore(self, page: str) -> str:
        """Each placeholder as its text on one line, without controls or format characters (bidi overrides,
        zero-width spaces: as in Markdown, judge.contain.one_line), HTML-escaped (quotes too: it may stand in an
        attribute)."""
        pattern = re.compile(f"jdg{self.nonce}n([0-9]+)x")
        return pattern.sub(lambda m: html.escape(one_line(self.texts[int(m.group(1))]), quote=True), page)


def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _allowed(tokens: list[Token], charts: set[str]) -> list[Token]:
    """Inline tokens with every link but those to judge's own pages reduced to its text, and every image but
    judge's charts to its alt text."""
    kept, dropped = [], 0
    for token in tokens:
        if token.type == "link_open" and not PAGE.fullmatch(token.attrGet("href") or ""):
            dropped += 1
            continue
        if token.type == "link_close" and dropped:  # links do not nest in CommonMark
            dropped -= 1
            continue
        if token.type == "image" and token.attrGet("src") not in charts:
            text = Token("text", "", 0)
            text.content = token.content
            kept.append(text)
            continue
        kept.append(token)
    return kept


def markdown_html(markdown: str, charts: set[str]) -> str:
    """The Markdown as HTML: no raw HTML, links only to judge's pages, images only of `charts` (file names beside
    the page)."""
    md = _markdown()
    tokens = md.parse(markdown)
    for token in tokens:
        if token.children:
            token.children = _allowed(token.children, charts)
    return md.renderer.render(tokens, md.options, {})


def render_page(template: str, view: dict, charts: dict, title: str, nav: list[tuple[str, str]]) -> str:
    """One page: the template rendered on the contained view, as HTML, inside judge's own frame.
    `charts` is what judge.report.charts returned for the view (file names); `nav` the frame's (href, words) links."""
    contained = Contained(view)
    markdown = render_text(template, view=contained.view, charts=charts)
    body = markdown_html(markdown, _names(charts))
    links = " · ".join(f'<a href="{html.escape(href)}">{html.escape(words)}</a>' for href, words in nav)
    page = (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n<nav>{links}</nav>\n<main>\n{body}</main>\n</body>\n</html>\n")
    return strip_controls(contained.restore(page), lines=True)  # and any that came another way than a placeholder


def _names(charts: dict) -> set[str]:
    """Every chart file name in a judge.report.charts answer (nested per target and kind)."""
    found: set[str] = set()
    for value in (charts or {}).values():
        if isinstance(value, dict):
            found |= _names(value)
        elif isinstance(value, str) and value.endswith(".svg"):
            found.add(value)
    return found


def read_charts(directory: Path) -> dict[str, bytes]:
    """The SVG files judge.report.charts drew into `directory`, by name."""
    return {path.name: path.read_bytes() for path in sorted(Path(directory).glob("*.svg"))}
