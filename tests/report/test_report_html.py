"""The HTML of the pages (judge/report/html.py): contestant text as text, links and images only judge's own."""

from judge.report.html import Contained, markdown_html, render_page


def test_contestant_strings_become_placeholders_and_come_back_escaped():
    contained = Contained({"title": "*a* <b>", "outcome": "faster", "rows": [{"author": "x|y\nz", "rank": 1}], "note": ""})
    view = contained.view
    assert view["outcome"] == "faster" and view["rows"][0]["rank"] == 1 and view["note"] == ""
    assert view["title"] != "*a* <b>" and view["title"].isalnum()
    page = f"<p>{view['title']}</p><td>{view['rows'][0]['author']}</td>"
    assert contained.restore(page) == "<p>*a* &lt;b&gt;</p><td>x|y z</td>"


def test_markdown_keeps_only_judges_links_and_charts():
    markdown = ("[leaderboard](leaderboard.html) [away](http://evil.example/) <http://evil.example/> "
                "![chart](round-1-axpy-times.svg) ![other](http://evil.example/x.png) <i>raw</i>\n")
    assert markdown_html(markdown, {"round-1-axpy-times.svg"}) == (
        '<p><a href="leaderboard.html">leaderboard</a> away http://evil.example/ '
        '<img src="round-1-axpy-times.svg" alt="chart" /> other &lt;i&gt;raw&lt;/i&gt;</p>\n')


def test_a_page_is_the_template_on_the_contained_view_in_judges_frame():
    view = {"targets": [{"target": "axpy"}], "rounds": [{"round": 1, "target": "axpy", "winner": "fast",
                                                         "author": "[me](http://evil.example/)"}]}
    page = render_page("index.md.j2", view, {}, "judge: the contest", [("index.html", "contest")])
    assert page.startswith('<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>judge: the contest</title>')
    assert '<nav><a href="index.html">contest</a></nav>' in page
    assert ('<p><a href="round-1.html">Round 1</a>, axpy: winner <a href="proposal-fast.html">fast</a> by [me](http://evil.example/)</p>') in page
