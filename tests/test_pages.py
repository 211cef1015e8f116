"""The pages for people, in a real headless browser (Debian's chromium, driven by Selenium): each page loads, shows
the winner, its links lead to pages that load, its charts are drawn, and contestant text stays text."""

import shutil

import pytest
from serving import LiveServer, contest, knob_patch

from judge.ledger import Ledger
from judge.records import Proposal
from judge.server import Config

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
HOSTILE = '<b>bold</b> [click](http://evil.example/) ![x](http://evil.example/x.png) <script>alert(1)</script> *em*'

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver; .ci/run does)")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A contest whose round 1 ran (stage fakes): 'fast' by alice won, bob's proposal has a hostile title."""
    from fakestages import FakeStages

    from judge.rounds import Settings, run_round

    root = tmp_path_factory.mktemp("pages")
    contest(root)
    ledger = Ledger(root / "ledger.db")
    for pid, author, verdict, title in [("fast", "alice", "speedup 1.25", "Fuse the scale"),
                                        ("sly", "bob", "speedup 0.9", HOSTILE)]:
        ledger.submit(Proposal(id=pid, title=title, author=author, round=1, target="axpy", pitch="p",
                               claim={"low": 1.1, "high": 1.3}, patch=knob_patch(verdict)), "test")
    run_round(ledger, 1, settings=Settings(kernels_dir=root / "kernels", work_dir=root / "work", cache_dir=root / "cache",
                                           stages=FakeStages()))
    ledger.close()
    server = LiveServer(Config(ledger=root / "ledger.db", kernels=root / "kernels"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _images(browser) -> list[tuple[str, int]]:
    """Each image of the page: its address and the width the browser drew it at (0: it did not load)."""
    return browser.execute_script(
        "return Array.from(document.images).map(i => [i.src, i.complete ? i.naturalWidth : 0]);")


def _links(browser) -> list[str]:
    return browser.execute_script("return Array.from(document.links).map(a => a.href);")


def test_the_leaderboard_shows_the_winner_and_its_chart(site, browser):
    browser.get(f"{site.url}/pages/leaderboard.html")
    assert browser.title == "judge: leaderboard"
    assert browser.find_element("tag name", "h1").text == "Leaderboard"
    rows = [r.text for r in browser.find_elements("css selector", "table tr")]
    assert any(" fast r1 alice 1.250x [1.244, 1.256]" in row for row in rows)
    [(src, width)] = _images(browser)
    assert (src, width > 0) == (f"{site.url}/pages/leaderboard-axpy.svg", True)


def test_every_link_of_every_page_leads_to_a_page_that_loads(site, browser):
    seen, todo = set(), [f"{site.url}/pages/index.html"]
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        browser.get(url)
        assert browser.title.startswith("judge: "), (url, browser.page_source[:300])
        assert all(width > 0 for _, width in _images(browser)), (url, _images(browser))
        todo += [link for link in _links(browser) if link.startswith(site.url)]
    assert sorted(u.rsplit("/", 1)[1] for u in seen) == ["brief-axpy.html", "index.html", "leaderboard.html",
                                                          "proposal-fast.html", "round-1.html"]


def test_the_round_page_shows_the_winner_its_charts_and_contestant_text_as_text(site, browser):
    browser.get(f"{site.url}/pages/index.html")
    browser.find_element("link text", "Round 1").click()
    assert browser.current_url == f"{site.url}/pages/round-1.html"
    body = browser.find_element("tag name", "main").text
    assert "Winner: fast revision 1 by alice, geomean 1.250x [1.244, 1.256] (evaluation #3)." in body
    assert sorted(src.rsplit("/", 1)[1] for src, width in _images(browser) if width > 0) == [
        "round-1-axpy-claims.svg", "round-1-axpy-times.svg"]
    assert HOSTILE in body  # shown as written, every character of it
    assert browser.find_elements("css selector", "main b, main script, main em") == []
    assert [link for link in _links(browser) if "evil" in link] == []


def test_the_brief_page_names_the_next_round_and_its_base(site, browser):
    browser.get(f"{site.url}/pages/brief-axpy.html")
    assert browser.find_element("tag name", "h1").text == "Brief: round 2 of axpy"
    assert "fast" in browser.find_element("tag name", "main").text
