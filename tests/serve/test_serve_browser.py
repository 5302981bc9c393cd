"""The web page of ``openbook serve`` in a real browser: Debian's ``chromium`` driven by Playwright for Python.

The real app (uvicorn in a thread on a free loopback port) serves a tiny random RAG-Token model over two tiny
knowledge bases under one root whose passages differ. The page is driven as a person would: type a question,
press Enter, watch the streamed answer, read the passages and the heat map, swap the knowledge base from the
admin control, ask again; also on a 375-px-wide screen and with the keyboard alone. Without a browser or
without Playwright the browser tests skip and say why (CI installs chromium in .ci/run).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
import time
from fnmatch import fnmatch
from pathlib import Path

import pytest

from openbook.corpus import Passage

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "openbook" / "serve" / "static"
QUESTION = "who wrote the novel"
TOKEN = "s3cret-admin"
K = 3
BOOKS = {  # two knowledge bases whose passages differ, so the same question gets other passages and answer
    "alpha": [("Paris", "paris is the capital of france"), ("Everest", "everest is the largest mountain"),
              ("Pacific", "the pacific is the largest ocean"), ("Seine", "the river of paris")],
    "beta": [("Hemingway", "ernest hemingway wrote the sun rises"), ("Nobel", "the first nobel prize in physics"),
             ("Arms", "a farewell to arms is a novel by hemingway"), ("Peru", "the president of peru")],
}


def meta(book: str, i: int, title: str) -> dict:
    """A passage's metadata: the readers' keys and a user field that looks like markup (the page shows it as text)."""
    return {"owner": "<b>ops</b> & co", "modified": "2026-11-27T12:00:00Z", "page": i + 1, "section": title,
            "source": f"{book}/notes.md"}


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


screenshot_script = load_script("serve_screenshot")


# -- the page's files: shipped with the package, nothing fetched from elsewhere -------------------------


def test_static_files_are_package_data():
    tomllib = pytest.importorskip("tomllib")
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = package_data.get("openbook.serve", [])
    files = sorted(p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file())
    assert {"static/index.html", "static/app.js", "static/style.css"} <= set(files)
    assert [f for f in files if not any(fnmatch(f, pattern) for pattern in patterns)] == []


def test_page_works_offline():
    """No CDN, web font or other origin: every asset the page names is one of its own files."""
    for path in STATIC.rglob("*"):
        text = path.read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, path
    html = (STATIC / "index.html").read_text()
    for asset in ("/static/app.js", "/static/style.css"):
        assert asset in html and (STATIC / asset.removeprefix("/static/")).is_file()


# -- the screenshot script: argument handling only (it runs the real default model) ---------------------


def test_screenshot_script_arguments(tmp_path, monkeypatch):
    fake = tmp_path / "chromium"
    fake.write_text("")
    args = screenshot_script.parse_args(["--chromium", str(fake), "--", "--kb", "some/kb", "--k", "3"])
    assert args.question == screenshot_script.QUESTION and args.model == "rag-token" and args.width == 1000
    assert args.out == ROOT / "docs" / "serve-screenshot.png" and args.chromium == str(fake)
    assert args.serve_options == ["--kb", "some/kb", "--k", "3"]
    args = screenshot_script.parse_args(["--chromium", str(fake), "--model", "rag-sequence", "--out",
                                         str(tmp_path / "x.png"), "--width", "375"])
    assert args.model == "rag-sequence" and args.out == tmp_path / "x.png" and args.serve_options == []


@pytest.mark.parametrize("argv, message", [
    (["--question", "  "], "--question must not be empty"),
    (["--k", "21"], "--k must be between 1 and 20"),
    (["--width", "100"], "--width must be between 320 and 2560"),
    (["--timeout-s", "0"], "--timeout-s must be positive"),
    (["--out", "shot.jpg"], "--out must name a .png file"),
    (["--model", "gpt"], "invalid choice: 'gpt'"),
    (["--", "--port", "9"], "leave --port/--host out"),
    (["--chromium", "/no/such/browser"], "no chromium found"),
])
def test_screenshot_script_refuses_bad_arguments(argv, message, tmp_path, capsys):
    fake = tmp_path / "chromium"
    fake.write_text("")
    if "--chromium" not in argv:
        argv = ["--chromium", str(fake), *argv]
    with pytest.raises(SystemExit) as exit_info:
        screenshot_script.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


# -- the real app over a tiny model ---------------------------------------------------------------------


SERVED: dict = {}  # the model the server answers with (a test gives it an abstention threshold)


def free_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real app on a free loopback port, answering with a tiny RAG-Token model from kb root/alpha."""
    import uvicorn

    from openbook.index import KnowledgeBase
    from openbook.models.generators import Seq2SeqGenerator
    from openbook.rag import RAG
    from openbook.rag.assemble import build_knowledge_base
    from openbook.serve import ServeConfig, create_app
    from tiny import bart_tokenizer, tiny_bart, tiny_encoder

    root = tmp_path_factory.mktemp("books")
    encoder = tiny_encoder()
    for name, rows in BOOKS.items():
        passages = [Passage(f"{name}:{i}", title, text, meta=meta(name, i, title)) for i, (title, text) in enumerate(rows)]
        build_knowledge_base(passages, encoder, root / name, progress=False)
    tok = bart_tokenizer()
    # seed 7: a random generator whose greedy answer to QUESTION starts with another word over each book
    # (others repeat one word whatever they read), so the swap visibly changes the answer
    generator = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=7), tok)
    rag = RAG(encoder, generator, KnowledgeBase.load(root / "alpha"), model="rag-token", k=K)
    SERVED["rag"] = rag
    app = create_app(ServeConfig(kb_root=str(root), admin_token=TOKEN, max_question_chars=1000), rag=rag)
    sock = free_socket()
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "the app did not start"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    uv.should_exit = True
    thread.join(timeout=30)
    sock.close()


def api(server: str, path: str, body: dict | None = None, token: str | None = None) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.request("GET" if body is None else "POST", server + path, json=body, headers=headers, timeout=60)
    response.raise_for_status()
    return response.json()


def expected(server: str) -> dict:
    """The API's own (non-streamed) answer to QUESTION: what the page must show."""
    body = {"question": QUESTION, "model": "rag-token", "k": K, "beams": 1, "max_new_tokens": 16}
    return api(server, "/v1/ask", body)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed "
                                   "(pip install -e '.[dev]')")
    chromium = screenshot_script.find_chromium()
    if chromium is None:
        pytest.skip("no chromium browser found (apt-get install -y chromium; CI installs it in .ci/run)")
    with sync_api.sync_playwright() as pw:
        # --no-sandbox: CI and this machine run as root, where Chromium's sandbox refuses to start
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    problems = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on("console", lambda msg: problems.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    page.goto(server + "/")
    page.wait_for_function("document.querySelector('#kb-name').textContent !== '…'")
    # every text the answer shows, in order: the streamed tokens' renders, then the final answer
    page.evaluate("""() => {
        window.answerTexts = [];
        new MutationObserver(() => window.answerTexts.push(document.querySelector('#answer').textContent))
            .observe(document.querySelector('#answer'), {childList: true, characterData: true, subtree: true});
    }""")
    yield page
    context.close()
    assert problems == [], problems  # nothing went to the console only


def ask_on_page(page, kb_name: str) -> None:
    """Ask QUESTION with RAG-Token, k=K, by pressing Enter in the box; wait until kb_name's answer is shown."""
    page.select_option("#model", "rag-token")
    page.fill("#k", str(K))
    page.evaluate("window.answerTexts = []")
    page.fill("#question", QUESTION)
    page.press("#question", "Enter")
    wait_for_answer(page, kb_name)


def wait_for_answer(page, kb_name: str) -> None:
    page.wait_for_function("([name]) => document.querySelector('#answer-meta').textContent.includes("
                           "`knowledge base ${name} v`) || !document.querySelector('#error').hidden", arg=[kb_name])
    assert page.is_hidden("#error"), page.inner_text("#error")


def check_result(page, want: dict) -> None:
    """The page shows the API's answer, streamed token by token, its passages and its heat map."""
    from tolerance import probability_sum_bound

    answer = want["answers"][0]
    assert page.inner_text("#answer") == answer["answer"]
    texts = page.evaluate("window.answerTexts")
    streamed = [t for t in texts[:-1] if t]  # the token events' renders before the final answer
    assert len(streamed) >= min(2, len(answer["tokens"])), texts
    titles = page.locator("#passages .passage-title").all_inner_texts()
    assert titles == [p["title"] for p in answer["passages"]] and len(titles) == K
    # each passage's metadata on one line under it: the readers' keys first, then the user's, all as text
    lines = page.locator("#passages .passage-meta")
    assert lines.count() == K
    for z, p in enumerate(answer["passages"]):
        items = lines.nth(z).locator(".meta-item").all_inner_texts()
        assert items == [f"{key}: {p['meta'][key]}" for key in ["source", "section", "page", "modified", "owner"]]
        assert p["meta"]["owner"] == "<b>ops</b> & co"
    assert page.locator("#passages .passage-meta b").count() == 0  # the markup-like value stayed text
    labels = page.locator("#passages .bar-label").all_inner_texts()
    assert labels[0] == f"p(z|x) {answer['passages'][0]['prob']:.3f}"
    assert labels[1] == f"posterior {answer['passages'][0]['posterior']:.3f}"
    # the heat map: one row per passage, one column per answer token, cells labelled for screen readers
    assert page.is_visible("#heatmap")
    assert page.locator("#heatmap tbody tr").count() == K
    columns = page.locator("#heatmap thead th.token").all_inner_texts()
    assert columns == [t.strip() for t in answer["tokens"]] and len(columns) == len(answer["token_posteriors"])
    cells = page.locator("#heatmap td.cell")
    assert cells.count() == K * len(columns)
    shown = [[float(cells.nth(z * len(columns) + t).get_attribute("data-p")) for z in range(K)]
             for t in range(len(columns))]
    assert shown == answer["token_posteriors"]  # the page shows the API's numbers unchanged
    for column in shown:  # each column is a distribution over the k passages
        assert abs(sum(column) - 1.0) <= probability_sum_bound(K)
    label = cells.first.get_attribute("aria-label")
    assert label.startswith(f"passage 1 ({answer['passages'][0]['title']}), token 1 ({columns[0]}):")


def test_ask_stream_heatmap_then_swap_the_book(page, server):
    before = expected(server)
    ask_on_page(page, "alpha")
    check_result(page, before)
    assert page.inner_text("#kb-name") == "alpha"
    try:
        page.click("details.admin summary")
        page.fill("#admin-token", TOKEN)
        page.select_option("#kb-select", "beta")
        page.click("#swap")
        page.wait_for_function("document.querySelector('#kb-name').textContent === 'beta'")
        assert "Now answering from beta" in page.inner_text("#admin-status")
        after = expected(server)
        assert after["kb"]["name"] == "beta"
        ask_on_page(page, "beta")
        check_result(page, after)
        assert after["answers"][0]["answer"] != before["answers"][0]["answer"]  # the answer changed ...
        assert page.locator("#passages .passage-title").all_inner_texts()[0] in {t for t, _ in BOOKS["beta"]}
    finally:  # ... and the next test starts from alpha again
        api(server, "/v1/kb/swap", {"name": "alpha", "version": None}, token=TOKEN)


def test_the_page_says_when_the_book_has_no_answer(page, server):
    """Abstaining (a threshold above any score), the page says so with the score and keeps the passages;
    unticking "Abstain" asks again for the answer itself."""
    rag = SERVED["rag"]
    rag.abstain_threshold = 1e6
    try:
        assert page.is_checked("#abstain")  # on by default, as the API's default says
        ask_on_page(page, "alpha")
        text = page.inner_text("#answer")
        want = api(server, "/v1/ask", {"question": QUESTION, "model": "rag-token", "k": K})["answers"][0]
        assert want["abstained"] and text.startswith("The knowledge base does not seem to hold the answer"), text
        assert f"score {want['abstain_score']:.3f} below 1000000.000" in text and want["answer"] in text
        assert page.locator("#passages .passage-title").count() == K  # the passages show why
        page.uncheck("#abstain")
        ask_on_page(page, "alpha")
        assert page.inner_text("#answer") == want["answer"]
    finally:
        rag.abstain_threshold = None


def test_api_errors_are_shown_in_the_page(page, server):
    page.click("details.admin summary")
    page.fill("#admin-token", "wrong")
    page.select_option("#kb-select", "beta")
    page.click("#swap")
    page.wait_for_function("document.querySelector('#admin-status').textContent.startsWith('Swap failed')")
    assert page.inner_text("#kb-name") == "alpha"
    page.fill("#question", "x" * 1500)  # over the server's limit on question length
    page.press("#question", "Enter")
    page.wait_for_selector("#error", state="visible")
    assert page.inner_text("#error").startswith("Error: question")


def test_phone_width_has_no_horizontal_scroll(page, server):
    ask_on_page(page, "alpha")
    page.set_viewport_size({"width": 375, "height": 800})
    page.click("details.admin summary")
    widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    too_wide = page.evaluate("""() => [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
        .slice(0, 5).map((e) => `${e.tagName}#${e.id}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`)""")
    assert widths[0] <= widths[1] == 375, too_wide


def test_keyboard_alone(page, server):
    """Tab reaches the box first, the focus is visible and moves in reading order; Enter asks."""
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "question"  # the question box comes first
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"  # focus is visible
    page.keyboard.type(QUESTION)
    order = []
    for _ in range(4):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order == ["ask", "model", "k", "retriever"]
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type(str(K))
    for _ in range(3):
        page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.press("Enter")
    wait_for_answer(page, "alpha")
    want = api(server, "/v1/ask", {"question": QUESTION, "k": K})  # what the page asked: the server's model
    assert page.inner_text("#answer") == want["answers"][0]["answer"]
    assert page.get_attribute("#answer", "aria-live") == "polite"
    for control in ("question", "model", "k", "retriever", "admin-token", "kb-select", "kb-version-input"):
        assert page.locator(f"label[for='{control}']").count() == 1  # every control is labelled


def test_sse_parser_handles_split_chunks_and_crlf(page):
    """Events may arrive cut anywhere and with CRLF line ends (sse-starlette's default)."""
    events = page.evaluate("""async () => {
        const chunks = ["event: token\\r\\ndata: {\\"a\\"", ": 1}\\r\\n\\r", "\\n: ping\\r\\n\\r\\nevent: done\\r\\n",
                        "data: {\\"b\\": 2}\\r\\n\\r\\n"];
        const body = new ReadableStream({start(c) { for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
                                                    c.close(); }});
        const out = [];
        for await (const e of serverEvents(new Response(body))) out.push(e);
        return out;
    }""")
    assert [(e["event"], json.loads(e["data"])) for e in events] == [("token", {"a": 1}), ("done", {"b": 2})]
