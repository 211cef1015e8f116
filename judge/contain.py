"""Contestant text, contained: the one place that decides how text judge did not write is stored and shown.

Everything a contestant or a shark wrote (titles, pitches, risks, references, authors, notes) and everything
candidate code printed or raised (error lines, stage summaries and reasons, log tails) goes through here on its
way into the ledger (capped), a Markdown report (escaped, one line or inside a quote it cannot close), an HTML page
(judge/report/html.py: as Markdown, then HTML-escaped), the terminal (no markup, no escapes) or JSON (no control
characters; the server's answers too). Judge's own words and numbers go around it.

Rules, for every way out: control characters are stripped (ANSI and other escape sequences whole, C0 and C1
controls, Unicode format characters such as bidi overrides and zero-width spaces, lone surrogates), keeping a
newline or a tab only where a block allows them; and each field has a length cap, past which it ends with
"(N more characters)". Markdown adds: HTML escaped (`<` and `&`), and whatever could reach outside its cell
or line neutralised (emphasis, strikethrough, math, unpaired backticks, link and image brackets, pipes in cells).
"""

from __future__ import annotations

import re
from typing import Any

# ---- caps ----------------------------------------------------------------------------------------------------

# What the ledger keeps of text a candidate's processes produced. A line (a stage's summary, an error, a string of
# a stage's detail): judge's own longest lines are timing summaries and audit findings of a few hundred
# characters, and a Python error's first line rarely passes 1,000; 4 KiB keeps all of them whole. A reason is a
# summary with judge's words around it (the stage's name, an implausible verdict's findings): twice that.
LINE_CAP = 4 << 10
REASON_CAP = 8 << 10
# A log tail: its last 40 lines (judge.sandbox.isolation.LOG_TAIL_LINES), read from at most this many bytes of the end of
# the log: 40 lines of a traceback are a few KiB; 64 KiB keeps 40 lines of 1,600 characters.
LOG_CAP = 64 << 10

# What a report, the terminal or JSON shows of one field. Ids, names and authors; titles and list items (risks,
# references); lines (errors, summaries, reasons, notes); a pitch, in a report's quote. JSON shows every stored
# line whole, a log tail whole and a pitch up to PITCH_JSON_CAP.
NAME_CAP = 100
TITLE_CAP = 200
TEXT_CAP = 1000
PITCH_CAP = 2000
PITCH_JSON_CAP = 64 << 10
JSON_CAPS = {"log_tail": LOG_CAP, "pitch": PITCH_JSON_CAP}


def cap(text: str, limit: int) -> str:
    """`text` whole when it has at most `limit` characters; else its start and "(N more characters)", `limit`
    characters in all, so that capping again changes nothing."""
    if len(text) <= limit:
        return text
    keep = _kept(len(text), limit, " ({} more characters)")
    return f"{text[:keep]} ({len(text) - keep} more characters)"


def cap_tail(text: str, limit: int) -> str:
    """The end of `text` (a log's tail): whole when it has at most `limit` characters; else "(N more characters
    before)" on a line of its own and the last characters, `limit` in all."""
    if len(text) <= limit:
        return text
    keep = _kept(len(text), limit, "({} more characters before)\n")
    return f"({len(text) - keep} more characters before)\n{text[len(text) - keep:]}"


def _kept(length: int, limit: int, note: str) -> int:
    """How many characters of `length` to keep so that they and the note of how many were left out fill `limit`."""
    keep = max(0, limit - len(note.format(length)))
    while keep < limit and keep + 1 + len(note.format(length - keep - 1)) <= limit:
        keep += 1
    return keep


def cap_strings(data: Any, limit: int) -> Any:
    """JSON-like `data` with every string in it capped at `limit` (a stage's detail, before the ledger stores it)."""
    if isinstance(data, str):
        return cap(data, limit)
    if isinstance(data, dict):
        return {cap(str(k), limit) if isinstance(k, str) else k: cap_strings(v, limit) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [cap_strings(v, limit) for v in data]
    return data


# ---- control characters --------------------------------------------------------------------------------------

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clears
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks; ended by BEL or ST
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM and APC strings
    r"|\x1b[ -/]*[0-~]"  # the short escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # CSI in its one-byte C1 form
)
# Unicode's format characters (category Cf: bidi overrides and isolates, zero-width spaces and joiners, the BOM,
# tags, ...), as of Python 3.11's Unicode 14; tests/test_contain.py checks this list against unicodedata.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_FORMAT}]")
_CONTROLS_IN_BLOCKS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff{_FORMAT}]")
_LINE_ENDS = re.compile("\r\n|[\r\x85\u2028\u2029]")


def strip_controls(text: str, lines: bool = False) -> str:
    """`text` without escape sequences and control or format characters; with `lines`, newlines and tabs stay
    (every other line end becomes a newline)."""
    text = _ESCAPES.sub("", text)
    if lines:
        return _CONTROLS_IN_BLOCKS.sub("", _LINE_ENDS.sub("\n", text))
    return _CONTROLS.sub("", text)


def one_line(value: Any) -> str:
    """Text on one line: controls stripped, every run of whitespace (newlines included) one space."""
    if value is None:
        return ""
    return " ".join(strip_controls(" ".join(str(value).split())).split())


# ---- the terminal, JSON and charts -----------------------------------------------------------------------------


def terminal(value: Any, limit: int = TEXT_CAP) -> str:
    """One line for the terminal: no escapes, no controls, capped. Print it with markup off (or as rich's Text), so
    that `[bold]` in it is text."""
    return cap(one_line(value), limit)


def json_safe(data: Any, key: str = "", capped: bool = True) -> Any:
    """JSON-like `data` as `--json` prints it: every string without escapes or controls (newlines and tabs kept),
    capped by its key (JSON_CAPS; LINE_CAP for any other). Not `capped`: as judge's server answers, whose documents
    (a scorecard's Markdown, its charts) run past any field's cap, and whose client caps what it prints."""
    if isinstance(data, str):
        text = strip_controls(data, lines=True)
        return cap(text, JSON_CAPS.get(key, LINE_CAP)) if capped else text
    if isinstance(data, dict):
        return {json_safe(k, capped=capped) if isinstance(k, str) else k:
                json_safe(v, k if isinstance(k, str) else "", capped) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v, key, capped) for v in data]
    return data


def chart_label(value: Any, limit: int = 60) -> str:
    """A label matplotlib draws as it reads: no controls, `$` not the start of mathtext (a stray one would stop the
    chart, and the report with it), not hidden from the legend by a leading underscore."""
    text = cap(one_line(value), limit).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


# ---- Markdown ------------------------------------------------------------------------------------------------

_RUNS = re.compile(r"`+")
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_BREAK_LINE = re.compile(r"[-=][-= ]*")  # a setext underline or a thematic break


def md_text(value: Any, limit: int = TEXT_CAP, cell: bool = False) -> str:
    """Text on one Markdown line, or in a table cell (`cell`: its pipes escaped too), that renders as written and
    cannot reach past its line: no HTML, emphasis, strikethrough, math, link or image; a code span only where its
    backticks pair up within the text and it holds no `<`."""
    return _inline(cap(one_line(value), limit), cell=cell, brackets=False)


def md_code(value: Any, limit: int = TEXT_CAP) -> str:
    """Inline code on one line, fenced by more backticks than any run inside it; text with a `<` is shown as
    escaped text between backticks instead (a code span cannot escape it, and a tag, even an inert one, is
    not left in the file)."""
    text = cap(one_line(value), limit)
    if "<" in text:
        return "\\`" + _escape(text, cell=False, brackets=False) + "\\`"
    longest = max((len(run) for run in _RUNS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"`{text}`"


def md_quote(value: Any, limit: int = PITCH_CAP) -> str:
    """Text of several lines (a pitch) as a Markdown quote, every line prefixed, so it cannot close it: inline
    Markdown as in md_text (brackets and pipes always escaped), and nothing that starts a block of its own
    (headings, fences, code indents, underlines, HTML)."""
    text = cap(strip_controls(str(value or ""), lines=True).expandtabs(4).strip("\n"), limit)
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        if not body.strip():
            out.append(">")
            continue
        indent = " " * min(len(line) - len(body), 3)  # four would start a code block
        head = "\\" if body[0] in "#>" or _BREAK_LINE.fullmatch(body.rstrip()) else ""
        out.append(f"> {indent}{head}{_inline(body, cell=True, brackets=True)}".rstrip())
    return "\n".join(out) if out else ">"


def _inline(text: str, cell: bool, brackets: bool) -> str:
    """`text` escaped outside its code spans; each code span kept as it is (pipes escaped in a cell), or escaped
    like the rest where it holds a `<`."""
    out, at = [], 0
    for start, end in _code_spans(text):
        out.append(_escape(text[at:start], cell, brackets))
        span = text[start:end]
        out.append(_escape(span, cell, brackets) if "<" in span else span.replace("|", "\\|") if cell else span)
        at = end
    out.append(_escape(text[at:], cell, brackets))
    return "".join(out)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where CommonMark finds code spans in `text`: a run of backticks and the next run of the same length."""
    runs = [(m.start(), m.end()) for m in _RUNS.finditer(text)]
    spans, i = [], 0
    while i < len(runs):
        size = runs[i][1] - runs[i][0]
        close = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == size), None)
        if close is None:
            i += 1
            continue
        spans.append((runs[i][0], runs[close][1]))
        i = close + 1
    return spans


def _escape(text: str, cell: bool, brackets: bool) -> str:
    """Markdown outside code spans made inert: `<` and `&` as entities; `*`, backticks, `~` and `$` escaped; a run
    of `_` escaped unless it is inside a word (where it cannot open or close emphasis); `]` escaped where a link or image could follow it (every bracket with
    `brackets`); pipes escaped in a cell; a backslash escaped where it would escape what follows it."""
    out = []
    last = len(text) - 1
    for i, ch in enumerate(text):
        after = text[i + 1] if i < last else ""
        if ch == "\\":
            out.append("\\\\" if after == "" or after in _PUNCTUATION else "\\")
        elif ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch in "*`~$" or (ch == "|" and cell) or (ch == "[" and brackets):
            out.append("\\" + ch)
        elif ch == "_":
            out.append("_" if _inside_word(text, i) else "\\_")
        elif ch == "]":
            out.append("\\]" if brackets or after in ("", "(", "[", ":") else "]")
        else:
            out.append(ch)
    return "".join(out)


def _inside_word(text: str, i: int) -> bool:
    """Whether the run of underscores around text[i] has a letter or digit on both sides (snake_case, a__b)."""
    start, end = i, i
    while start > 0 and text[start - 1] == "_":
        start -= 1
    while end < len(text) - 1 and text[end + 1] == "_":
        end += 1
    return start > 0 and end < len(text) - 1 and text[start - 1].isalnum() and text[end + 1].isalnum()
