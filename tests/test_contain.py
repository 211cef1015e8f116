"""judge/contain.py: contestant text as the ledger keeps it and as reports, the terminal, JSON and charts show it.

Exact outputs, and the Markdown checked the way a reader meets it: rendered by a CommonMark parser with GitHub's
tables and strikethrough (markdown-it-py, which rich brings), where contained text must make no HTML, no link,
no image, no emphasis and no block of its own."""

import unicodedata

import pytest
from markdown_it import MarkdownIt

from judge import contain
from judge.contain import (cap, cap_strings, cap_tail, chart_label, json_safe, md_code, md_quote, md_text, one_line,
                           strip_controls, terminal)

ESC = "\x1b"
# What the held-out cheat's crash message carried: an unclosed comment, a forged status, an image tag with a
# handler, a link and an image, ANSI colours, other controls, pipes and newlines.
PAYLOAD = ("<!-- rest | **faster** <img src=x onerror=alert(1)> [scorecard](https://evil.example/r.md) "
           f"![ok](https://evil.example/ok.png) {ESC}[31mRED{ESC}[0m \x07\x08\x00\r| a | b |\n## Winner\n\n"
           "- Status: **faster**")
FORGED = ("&lt;!-- rest | \\*\\*faster\\*\\* &lt;img src=x onerror=alert(1)> [scorecard\\](https://evil.example/r.md) "
          "![ok\\](https://evil.example/ok.png) RED | a | b | ## Winner - Status: \\*\\*faster\\*\\*")


def tokens(markdown: str) -> list:
    """Every token, inline ones included, of `markdown` as GitHub-flavoured CommonMark parses it."""
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    out = []
    for token in parser.parse(markdown):
        out.append(token)
        out.extend(token.children or [])
    return out


def inert(markdown: str) -> set[str]:
    """The kinds of token in `markdown` that contained text must never make; empty when it made none."""
    bad = {"html_inline", "html_block", "link_open", "image", "em_open", "strong_open", "s_open", "heading_open",
           "fence", "code_block", "table_open", "hr", "blockquote_open"}
    return {t.type for t in tokens(markdown)} & bad


# ---- caps ----------------------------------------------------------------------------------------------------


def test_cap_keeps_short_text_and_says_how_much_it_cut():
    assert cap("x" * 40, 40) == "x" * 40
    assert cap("x" * 100, 40) == "x" * 19 + " (81 more characters)"
    assert len(cap("x" * 100, 40)) == 40
    assert cap(cap("x" * 100, 40), 40) == cap("x" * 100, 40)  # capping again changes nothing
    assert cap("y" * (16 << 20), contain.LINE_CAP) == "y" * 4069 + " (16773147 more characters)"
    assert len(cap("y" * (16 << 20), contain.LINE_CAP)) == contain.LINE_CAP


def test_cap_tail_keeps_the_end_of_a_log():
    assert cap_tail("abc\n", 10) == "abc\n"
    assert cap_tail("0123456789" * 10, 40) == "(88 more characters before)\n890123456789"
    assert len(cap_tail("0123456789" * 10, 40)) == 40


def test_cap_strings_caps_every_string_of_a_detail():
    detail = {"error": "e" * 50, "cases": [{"reason": "r" * 50, "seconds": 1.5}], "k" * 50: None, 3: "ok"}
    assert cap_strings(detail, 40) == {
        "error": "e" * 19 + " (31 more characters)",
        "cases": [{"reason": "r" * 19 + " (31 more characters)", "seconds": 1.5}],
        "k" * 19 + " (31 more characters)": None,
        3: "ok",
    }


# ---- control characters --------------------------------------------------------------------------------------


def test_escape_sequences_and_controls_are_stripped_whole():
    text = (f"a{ESC}]8;;https://evil{ESC}\\link{ESC}]8;;{ESC}\\ \u202eevil\u202c \u200bx\ud800y \x9b31mz\x85w "
            f"{ESC}[2J{ESC}[1;31mred{ESC}[0m{ESC}(B{ESC}P1$r{ESC}\\ \x00\x07\x08\x7f\ufeffend")
    assert strip_controls(text) == "alink evil xy zw red end"


def test_blocks_keep_newlines_and_tabs():
    assert strip_controls("a\r\nb\rc\td\x0be\u2028f\x85g\x00", lines=True) == "a\nb\nc\tde\nf\ng"
    assert one_line("a\r\n b\t\tc\x00 \x1b[1m d\n") == "a b c d"
    assert one_line(None) == ""


def test_every_unicode_format_character_is_stripped():
    """The hand-written class of format characters (bidi overrides, zero-width ones, tags) against unicodedata."""
    format_chars = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert strip_controls("".join(format_chars)) == ""
    kept = [chr(c) for c in range(0xA0, 0x110000) if unicodedata.category(chr(c)) not in ("Cf", "Cs")]
    assert strip_controls("".join(kept)) == "".join(kept)


# ---- Markdown ------------------------------------------------------------------------------------------------


def test_the_payload_on_a_line_renders_as_its_text():
    assert md_text(PAYLOAD) == FORGED
    assert inert(f"- Status: **crashed** (evaluation #3): {md_text(PAYLOAD)}") == {"strong_open"}  # judge's own only
    rendered = MarkdownIt("commonmark").render(f"x {md_text(PAYLOAD)}")
    assert "<img" not in rendered and "<!--" not in rendered and "href" not in rendered and "<em>" not in rendered


def test_the_payload_in_a_table_cell_stays_in_its_cell():
    cell = md_text(PAYLOAD, cell=True)
    assert cell == FORGED.replace(" | ", " \\| ")
    table = f"| a | reason | b |\n|---|---|---|\n| 1 | {cell} | 2 |\n"
    parsed = tokens(table)
    assert [t.type for t in parsed].count("td_open") == 3
    assert inert(table) == {"table_open"}


def test_code_spans_that_pair_up_stay_code_and_the_rest_is_escaped():
    assert md_text("`a | b` `` c ` d `` e ` f") == "`a | b` `` c ` d `` e \\` f"
    assert md_text("`a | b`", cell=True) == "`a \\| b`"
    assert md_text("x `<b>`") == "x \\`&lt;b>\\`"  # no tag left in the file, even an inert one
    assert md_text("ValueError: no (submission.py:46: `raise ValueError(f\"x {a} [1]\")`)") == \
        "ValueError: no (submission.py:46: `raise ValueError(f\"x {a} [1]\")`)"


def test_emphasis_links_and_backslashes_are_neutralised():
    assert md_text("_x_ a_b __init__ at__b ._c *y* ~~z~~ $m$") == \
        "\\_x\\_ a_b \\_\\_init\\_\\_ at__b .\\_c \\*y\\* \\~\\~z\\~\\~ \\$m\\$"
    assert md_text("[1] [a](b) [a][b] c]: x]") == "[1] [a\\](b) [a\\][b] c\\]: x\\]"
    assert md_text("\\ \\* a\\b x\\") == "\\ \\\\\\* a\\b x\\\\"
    assert md_text("a & b &lt; c") == "a &amp; b &amp;lt; c"
    assert inert(md_text("_x_ __init__ ._c_ *y* ~~z~~ [a](b) ![i](j) [a][b]\n\n[b]: http://x")) == set()


def test_judges_own_phrases_pass_unchanged():
    for text in ("geomean 0.980x [0.953, 1.012] over 2 benchmarks", "needs sm_100, this machine has none",
                 "knobs changed: num_ab_stages 1 -> 3", "crashed: exited with code 0 before returning (test 0 (size=127))"):
        assert md_text(text) == text


def test_code_is_fenced_longer_than_any_backtick_run_in_it():
    assert md_code("plain") == "`plain`"
    assert md_code("a ``b` c") == "``` a ``b` c ```"
    assert md_code("x < y") == "\\`x &lt; y\\`"
    assert md_code("line\nbreak\x1b[1m") == "`line break`"
    assert inert(f"- ({md_code('a ``b` **c**')})") == set()


def test_a_pitch_is_a_quote_it_cannot_close():
    pitch = "# T\n\n```py\n    code\n---\n===\n- item\n> q\n[r]: u\n<div>\n\tx  \n" + PAYLOAD
    assert md_quote(pitch).split("\n") == [
        "> \\# T", ">", "> \\`\\`\\`py", ">    code", "> \\---", "> \\===", "> - item", "> \\> q", "> \\[r\\]: u",
        "> &lt;div>", ">    x",
        "> &lt;!-- rest \\| \\*\\*faster\\*\\* &lt;img src=x onerror=alert(1)> \\[scorecard\\](https://evil.example/r.md) "
        "!\\[ok\\](https://evil.example/ok.png) RED",
        "> \\| a \\| b \\|", "> \\## Winner", ">", "> - Status: \\*\\*faster\\*\\*",
    ]
    document = f"before\n\n{md_quote(pitch)}\n\nafter [r]\n"
    parsed = tokens(document)
    assert [t.type for t in parsed if t.type.startswith("blockquote")] == ["blockquote_open", "blockquote_close"]
    assert inert(document) == {"blockquote_open"}
    assert parsed[-2].content == "after [r]"  # judge's text after the quote is outside it, and no link


def test_a_long_pitch_is_capped_with_its_count():
    assert md_quote("word " * 1000) == "> " + "word " * 395 + "wo (3023 more characters)"
    assert md_quote("") == ">"


# ---- the terminal, JSON and charts -----------------------------------------------------------------------------


def test_the_terminal_gets_one_plain_capped_line():
    assert terminal(PAYLOAD) == ("<!-- rest | **faster** <img src=x onerror=alert(1)> [scorecard](https://evil.example/"
                                 "r.md) ![ok](https://evil.example/ok.png) RED | a | b | ## Winner - Status: **faster**")
    assert terminal("[bold red]x" * 200) == ("[bold red]x" * 200)[:977] + " (1223 more characters)"


def test_json_strips_controls_and_caps_by_field():
    data = {"log_tail": f"a{ESC}[1mb\nc\x00", "reason": "r" * 5000, "pitch": "p" * 70000,
            "nested": [{"title": "\u202et\x07"}, 3, None], "f\x00": 1.5}
    safe = json_safe(data)
    assert safe["log_tail"] == "ab\nc"
    assert safe["reason"] == "r" * 4074 + " (926 more characters)"
    assert len(safe["pitch"]) == contain.PITCH_JSON_CAP and safe["pitch"] == "p" * 65513 + " (4487 more characters)"
    assert safe["nested"] == [{"title": "t"}, 3, None]
    assert safe["f"] == 1.5


def test_the_servers_json_strips_controls_and_caps_nothing():
    """judge serve's answers: a scorecard's Markdown and charts are longer than any field's cap."""
    data = {"markdown": "m" * 9000 + "\u202e\u2066x\u2069\u200b", "charts": {"a.svg": "<svg>\n" + "s" * 9000}}
    assert json_safe(data, capped=False) == {"markdown": "m" * 9000 + "x", "charts": {"a.svg": "<svg>\n" + "s" * 9000}}


@pytest.mark.parametrize("text, label", [("$\\frac{1}{0}$", "\\$\\frac{1}{0}\\$"), ("_hidden", " _hidden"),
                                         ("a\nb\x1b[1m", "a b"), ("x" * 80, "x" * 39 + " (41 more characters)")])
def test_chart_labels(text, label):
    assert chart_label(text) == label
