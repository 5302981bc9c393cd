"""Hot swap under load: knowledge-base swaps and edits while requests are in flight lose none of them,
every answer comes wholly from the version it names, and an old version is closed when its last
request finishes (reference counts in openbook/serve/books.py)."""

from __future__ import annotations

import asyncio
import random

import pytest

from openbook.index import KnowledgeBase
from openbook.serve.books import Books
from serve_helpers import ADMIN, QUESTIONS, client, config, create_app, run, tiny_rag


def test_old_version_closes_when_its_last_lease_ends(tmp_path):
    rag, _ = tiny_rag(tmp_path)
    books = Books(rag.kb, root=tmp_path / "kbs")
    first = books.acquire()
    second = books.acquire()
    other = KnowledgeBase.load(tmp_path / "kbs" / "other")
    books.install(other, "other")
    assert books.current.kb is other and not first.closed  # two batches still use the old version
    books.release(first)
    assert not second.closed
    books.release(second)
    assert second.closed and first is second  # the last one out closes it
    with books.lease() as book:
        books.install(KnowledgeBase.load(tmp_path / "kbs" / "main"), "main")
        assert not book.closed and book.kb is other
    assert book.closed
    with pytest.raises(RuntimeError):
        books.release(book)


def _visible(root, name: str, version: int) -> set[str]:
    kb = KnowledgeBase.load(root / "kbs" / name, version=version, verify="size")
    try:
        return {p.id for p in kb}
    finally:
        kb.close()


def test_swaps_and_edits_under_load_lose_no_request_and_never_mix_versions(tmp_path, monkeypatch):
    """Concurrent asks (k above every knowledge base's size, so an answer's passages are exactly the
    visible passages of its version) while an admin client swaps between two knowledge bases and adds and
    deletes passages: every request is answered, and each answer's passages are those of the version it names."""
    rag, encoder = tiny_rag(tmp_path)
    closed = []
    original_close = Books._close

    def recording_close(book):
        closed.append((book.name, book.version))
        original_close(book)

    monkeypatch.setattr(Books, "_close", staticmethod(recording_close))

    async def go():
        app = create_app(config(tmp_path, encoder, max_batch_size=4, max_wait_ms=5.0, max_queue=256), rag=rag)
        answers, versions_seen = [], set()
        async with client(app) as http:
            async def asker(n: int):
                rng = random.Random(n)
                for _ in range(6):
                    body = {"question": rng.choice(QUESTIONS), "k": 20, "max_new_tokens": 2,
                            "retriever": rng.choice(["dense", "dense", "bm25"])}
                    r = await http.post("/v1/ask", json=body)
                    assert r.status_code == 200, r.text
                    answers.append(r.json())

            async def admin():
                for step in range(6):
                    if step % 3 == 2:
                        r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": "other" if step % 2 else "main"})
                    elif step % 3 == 0:
                        r = await http.post("/v1/kb/passages", headers=ADMIN, json={"passages": [
                            {"id": f"e{step}", "title": "Edit", "text": f"edit number {step} about music"}]})
                    else:
                        r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": "main"})
                    assert r.status_code == 200, r.text
                    versions_seen.add((r.json()["kb"]["name"], r.json()["kb"]["version"]))
                    await asyncio.sleep(0.05)

            await asyncio.gather(admin(), *[asker(n) for n in range(5)])
        return app, answers, versions_seen

    app, answers, versions_seen = run(go())
    assert len(answers) == 5 * 6  # none lost
    named = {(body["kb"]["name"], body["kb"]["version"]) for body in answers}
    assert len(named) >= 2  # the load really straddled swaps
    visible = {key: _visible(tmp_path, *key) for key in named}
    for body in answers:
        key = (body["kb"]["name"], body["kb"]["version"])
        (answer,) = body["answers"]
        assert {p["id"] for p in answer["passages"]} == visible[key], key
    # every version that stopped being current was closed once its requests were done (the last stays open)
    current = app.state.server.books.current
    assert len(closed) == app.state.server.books.swaps and (current.name, current.version) not in closed[-1:]
