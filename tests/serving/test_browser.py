"""The web page in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium) opens the page of a running server, translates a
sentence, and finds the translation, the dependency tree and the attention heatmap drawn.

Outside CI the test skips when the browser is not installed; in CI (``CI=true``) a missing
browser fails it (``.ci/run`` installs it).
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from syntaxnmt.analysis.export import word_level

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def require_browser():
    """Selenium's webdriver module, or a skip (a failure in CI) naming what is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).is_file() and os.access(p, os.X_OK))]
    try:
        from selenium import webdriver
    except ImportError:
        webdriver = None
        missing.append("the selenium package")
    if missing:
        reason = f"the browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip install selenium)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI is set but {reason}")
        pytest.skip(reason)
    return webdriver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(trained_run):
    """A real uvicorn server on a free port of 127.0.0.1, in a thread; yields its URL."""
    yield from serving(Path(trained_run.work_dir) / "best.pt", "auto")


@pytest.fixture(scope="module")
def han_server(corpus, tmp_path_factory):
    """The server of a tiny HAN model on both sides (it reads its own translations of the previous lines)."""
    from test_serve_documents import _train_han  # deferred: FastAPI (that module imports its TestClient)

    yield from serving(_train_han(corpus, tmp_path_factory, "both"), "none")


def serving(checkpoint, parser: str):
    """Run a uvicorn server of ``checkpoint`` on a free port in a thread; yield its URL, then stop it."""
    import uvicorn

    from syntaxnmt.serving.server import create_app

    app = create_app(checkpoint, device="cpu", parser=parser)
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(30)


@pytest.fixture
def browser():
    webdriver = require_browser()
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1300", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def translate_on_page(driver, url: str, sentence: str, beam: int | None = None):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    WebDriverWait(driver, 30).until(lambda d: "best.pt" in d.find_element(By.ID, "model-info").text)
    box = driver.find_element(By.ID, "source")
    box.clear()
    box.send_keys(sentence)
    if beam is not None:
        field = driver.find_element(By.ID, "beam")
        field.clear()
        field.send_keys(str(beam))
    driver.find_element(By.ID, "translate").click()


def overlapping_labels(driver) -> list[tuple[str, str]]:
    """The pairs of dependency labels over the heatmap whose drawn boxes overlap (by more than 1 px)."""
    boxes = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap text.heatmap-arc-label')]"
        ".map((t) => { const b = t.getBBox(); return [t.textContent, b.x, b.y, b.width, b.height]; });"
    )
    return [
        (a[0], b[0])
        for k, a in enumerate(boxes)
        for b in boxes[k + 1 :]
        if min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]) > 1 and min(a[2] + a[4], b[2] + b[4]) - max(a[2], b[2]) > 1
    ]


def test_translate_a_sentence_and_see_its_tree_and_attention(server, browser, corpus, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    sentence = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[0]
    translate_on_page(browser, server, sentence)
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "translation").text.strip())

    api = httpx.post(f"{server}/translate", json={"sentences": [sentence], "attention": True}, timeout=60).json()
    assert browser.find_element(By.ID, "translation").text == api["translations"][0].strip()
    att = api["attention"][0]
    parse = att["parse"]
    assert parse is not None, "the English parser should give the page a tree"

    # the dependency tree: one arc per non-root word, every word and its label drawn
    tree_arcs = browser.find_elements(By.CSS_SELECTOR, "#tree path.arc")
    roots = sum(h == 0 for h in parse["heads"])
    assert len(tree_arcs) == len(parse["words"]) - roots > 0
    assert [w.text for w in browser.find_elements(By.CSS_SELECTOR, "#tree text.word")] == parse["words"]
    labels = {t.text for t in browser.find_elements(By.CSS_SELECTOR, "#tree text.arc-label")}
    assert set(parse["deprel"]) <= labels

    # the heatmap: cross-attention of the last layer, first head, at the word level by default
    # (pieces combined as syntaxnmt.analysis.export.word_level does), one cell per (target, source) unit
    cross = word_level(np.asarray(att["cross"]), att["target"]["word_of_piece"], att["source"]["word_of_piece"])[-1, 0]
    assert Select(browser.find_element(By.ID, "kind")).first_selected_option.get_attribute("value") == "cross"
    cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
    assert len(cells) == cross.size
    assert len({c.get_attribute("fill") for c in cells}) > 1  # the weights are drawn, not a flat colour
    shown = [float(c.find_element(By.TAG_NAME, "title").get_attribute("textContent").rsplit(": ", 1)[1]) for c in cells]
    np.testing.assert_allclose(shown, cross.reshape(-1), atol=2e-3)
    # the source tree over the columns, as in `syntaxnmt plot`: one labelled arc per dependent
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap path.heatmap-arc")) == len(parse["words"]) - roots
    assert sorted(t.text for t in browser.find_elements(By.CSS_SELECTOR, "#heatmap text.heatmap-arc-label")) == sorted(
        d for d, h in zip(parse["deprel"], parse["heads"]) if h
    )
    assert overlapping_labels(browser) == []  # the compact word-level map once drew "amodnsubj"

    # encoder self-attention, head 2, subword pieces: an S x S map of the model's weights
    S = len(att["source"]["pieces"])
    Select(browser.find_element(By.ID, "kind")).select_by_value("encoder")
    Select(browser.find_element(By.ID, "head")).select_by_value("1")
    Select(browser.find_element(By.ID, "units")).select_by_value("pieces")
    WebDriverWait(browser, 10).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")) == S * S)
    first = browser.find_element(By.CSS_SELECTOR, "#heatmap rect.cell title").get_attribute("textContent")
    assert first.endswith(f"{att['encoder'][-1][1][0][0]:.3f}")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap text.heatmap-arc-label")) == len(parse["words"]) - roots
    assert overlapping_labels(browser) == []

    shot = tmp_path / "page.png"  # the whole page, beyond the window (Chrome DevTools)
    png = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
    shot.write_bytes(base64.b64decode(png))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_the_page_checks_its_input_and_shows_the_servers_errors(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    error = lambda d: d.find_element(By.ID, "error")
    translate_on_page(browser, server, "   ")
    WebDriverWait(browser, 10).until(lambda d: error(d).is_displayed())
    assert error(browser).text == "Type a sentence first."

    # a beam above the server's limit: the form refuses it (the page read the limit from /health)
    translate_on_page(browser, server, "every quiet student likes the window .", beam=99)
    beam = browser.find_element(By.ID, "beam")
    assert beam.get_attribute("max") == "16" and browser.execute_script("return arguments[0].validity.rangeOverflow", beam)
    time.sleep(1)
    assert not browser.find_element(By.ID, "result").is_displayed()

    # without the form's check, the server's 422 message is shown
    browser.execute_script("arguments[0].removeAttribute('max')", beam)
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 30).until(lambda d: error(d).is_displayed() and "out of range" in error(d).text)
    assert error(browser).text == "Translation failed: beam: 99 is out of range (1 to 16)"


def test_keep_markup_and_show_alignments(server, browser, corpus):
    """The two checkboxes send ``markup`` and ``alignments``: the tag comes back in the
    translation (shown as text), and the links are listed over the words they join."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    words = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[0].split()
    sentence = f"<b>{words[0]}</b> " + " ".join(words[1:])
    translate_on_page(browser, server, sentence)
    for box in ("markup", "show-alignments"):
        assert not browser.find_element(By.ID, box).is_selected()  # off by default
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "translation").text.strip())
    assert "<b>" not in browser.find_element(By.ID, "translation").text  # without markup the tags are words
    assert not browser.find_element(By.ID, "alignment-section").is_displayed()

    browser.find_element(By.ID, "markup").click()
    browser.find_element(By.ID, "show-alignments").click()
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 60).until(lambda d: "</b>" in d.find_element(By.ID, "translation").text)
    api = httpx.post(f"{server}/translate", json={"sentences": [sentence], "markup": True, "alignments": True}, timeout=60).json()
    assert browser.find_element(By.ID, "translation").text == api["translations"][0].strip()
    assert api["translations"][0].count("<b>") == api["translations"][0].count("</b>") == 1

    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, "alignment-section").is_displayed())
    aligned = api["alignment_words"][0]
    assert [w.text for w in browser.find_elements(By.CSS_SELECTOR, "#alignment-source .aw")] == aligned["source"] == words
    assert [w.text for w in browser.find_elements(By.CSS_SELECTOR, "#alignment-target .aw")] == aligned["target"]
    pairs = [tuple(map(int, link.split("-"))) for link in api["alignments"][0].split()]
    assert pairs
    listed = [li.get_attribute("title") for li in browser.find_elements(By.CSS_SELECTOR, "#alignment-links li")]
    assert listed == [f"{i}-{j}" for i, j in pairs]
    # pointing at a source word lights up the target words it is linked to
    i = pairs[0][0]
    ActionChains(browser).move_to_element(browser.find_elements(By.CSS_SELECTOR, "#alignment-source .aw")[i]).perform()
    lit = [k for k, w in enumerate(browser.find_elements(By.CSS_SELECTOR, "#alignment-target .aw")) if "linked" in w.get_attribute("class")]
    assert lit == sorted(j for s, j in pairs if s == i)
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_a_document_shows_every_translation_and_the_context_each_sentence_read(han_server, browser, corpus):
    """"lines as a document" sends the lines as one document: every line's translation is listed,
    and the chosen line's context -- the previous sentences, the model's own translations of them
    (target-side HAN) and both sides' sentence-level weights -- is shown as the API returns it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    lines = [" ".join(s.split()[:8]) for s in corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:3]]
    browser.get(han_server + "/")
    WebDriverWait(browser, 30).until(lambda d: "context: han (both, 2 sentences)" in d.find_element(By.ID, "model-info").text)
    browser.find_element(By.ID, "as-document").click()
    assert not browser.find_element(By.ID, "markup").is_enabled()  # markup and alignments are per sentence
    browser.find_element(By.ID, "source").send_keys("\n".join(lines))
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#doc-translations li")) == 3)

    api = httpx.post(f"{han_server}/translate", json={"documents": [lines], "attention": True}, timeout=60).json()
    translations, records = api["translations"][0], api["attention"][0]
    assert [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#doc-translations li")] == [t.strip() for t in translations]
    assert browser.find_element(By.ID, "translation").text == translations[2].strip()

    def shown_rows():
        return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")] for tr in browser.find_elements(By.CSS_SELECTOR, "#context-table tbody tr")]

    # the last line (chosen by default) read the two lines before it, nearest first, and the model's translations of them
    context = records[2]["context"]
    assert context["sources"] == [lines[1], lines[0]] and context["targets"] == [translations[1], translations[0]]
    source = np.asarray(context["han_sentence"]).mean(axis=(0, 1))  # (H, S, k) -> k
    target = np.asarray(context["han_target_sentence"]).mean(axis=(0, 1))  # (H, T, k) -> k
    assert target.sum() == pytest.approx(1.0, abs=1e-3)  # the weights of sentences that exist, each a distribution
    expected = [[f"{j + 1} back", lines[1 - j], translations[1 - j].strip(), f"{source[j]:.3f}", f"{target[j]:.3f}"] for j in range(2)]
    assert shown_rows() == expected
    note = browser.find_element(By.ID, "context-note").text
    assert f"target-side HAN gate λ (mean over the translation): {np.mean(context['han_target_gate']):.3f}" in note

    # the first line read nothing; its tree and heatmap follow the choice
    Select(browser.find_element(By.ID, "doc-sentence")).select_by_value("0")
    WebDriverWait(browser, 10).until(lambda d: not shown_rows())
    assert "the document's first sentence: no context" in browser.find_element(By.ID, "context-note").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")) > 0
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_chromium_is_found_where_the_test_looks():
    """Keeps the paths honest: when Debian's packages are installed, they are where the test looks."""
    for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)):
        found = shutil.which(name)
        if found:
            assert Path(found).resolve() == Path(path).resolve()


def test_required_phrases_are_sent_as_the_sentences_constraints(server, browser, corpus):
    """The "Required phrases" field (phrases separated by | or tabs) is sent as ``constraints``:
    the page shows the constrained translation the API gives, with every phrase; the term
    dictionary's checkbox is hidden on a server started without one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    sentence = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[0]
    browser.get(server + "/")
    WebDriverWait(browser, 30).until(lambda d: "best.pt" in d.find_element(By.ID, "model-info").text)
    assert not browser.find_element(By.ID, "terminology-control").is_displayed()
    browser.execute_script("window.sent = []; const f = window.fetch; window.fetch = (u, o) => { if (o && o.body) window.sent.push(JSON.parse(o.body)); return f(u, o); };")
    browser.find_element(By.ID, "source").send_keys(sentence)
    browser.find_element(By.ID, "constraints").send_keys(" mado |  sono   kawa\t| ")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "translation").text.strip())
    sent = browser.execute_script("return window.sent")
    assert len(sent) == 1 and sent[0]["constraints"] == [["mado", "sono kawa"]] and "terminology" not in sent[0]
    api = httpx.post(f"{server}/translate", json={"sentences": [sentence], "constraints": [["mado", "sono kawa"]]}, timeout=60).json()
    shown = browser.find_element(By.ID, "translation").text
    assert shown == api["translations"][0].strip() and "mado" in shown and "sono kawa" in shown
    plain = httpx.post(f"{server}/translate", json={"sentences": [sentence]}, timeout=60).json()
    assert plain["translations"][0] != api["translations"][0]
    # the server's 422 for a phrase it cannot write is shown
    field = browser.find_element(By.ID, "constraints")
    field.clear()
    field.send_keys("\u2603")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "outside the model's target vocabulary" in browser.find_element(By.ID, "error").text
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and "422" not in e["message"]]
    assert severe == []
