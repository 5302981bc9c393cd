"""Text a tokenizer cannot take (a lone surrogate, NUL) is refused where it enters the API: 422 naming the field for
that request alone, while the ordinary requests of the batch it would have joined answer 200."""

from __future__ import annotations

import asyncio
import json

import pytest

from serve_helpers import ADMIN, QUESTIONS, client, config, create_app, run, tiny_rag


def escaped(payload: dict) -> dict:
    """``payload`` as a request body with its text as JSON escapes (``"\\udfff"``), as a client would send it."""
    return {"content": json.dumps(payload), "headers": {"Content-Type": "application/json", **ADMIN}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-text")
    rag, encoder = tiny_rag(root)
    return root, rag, encoder


def test_one_bad_question_fails_alone_in_its_batch(tiny):
    root, rag, encoder = tiny

    async def go():
        app = create_app(config(root, encoder, max_wait_ms=300.0, max_batch_size=8), rag=rag)
        async with client(app) as http:
            body = {"k": 2, "max_new_tokens": 3}
            good = [http.post("/v1/ask", json={"question": q, **body}) for q in QUESTIONS]
            bad = http.post("/v1/ask", **escaped({"question": "who wrote \udfff", **body}))
            return await asyncio.gather(*good, bad)

    *good, bad = run(go())
    assert [r.status_code for r in good] == [200] * len(QUESTIONS), [r.text for r in good]
    assert bad.status_code == 422, bad.text
    error = bad.json()["error"]
    assert error["field"] == "question" and "surrogate" in error["message"]


@pytest.mark.parametrize("path,method,payload,field", [
    ("/v1/ask", "POST", {"question": ["capital of france", "nul\x00here"]}, "question"),
    ("/v1/retrieve", "POST", {"question": "bad \udfff"}, "question"),
    ("/v1/kb/passages", "POST", {"passages": [{"title": "t", "text": "bad \udfff text"}]}, "passages.0.text"),
    ("/v1/kb/passages", "POST", {"passages": [{"id": "x\x00", "text": "fine"}]}, "passages.0.id"),
    ("/v1/kb/passages", "PUT", {"passages": [{"id": "p0", "title": "\udfff", "text": "fine"}]}, "passages.0.title"),
    ("/v1/kb/passages", "DELETE", {"ids": ["p0", "\udfff"]}, "ids.1"),
    ("/v1/kb/swap", "POST", {"name": "main\udfff"}, "name"),
])
def test_text_a_tokenizer_cannot_take_is_a_422_naming_the_field(tiny, path, method, payload, field):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.request(method, path, **escaped(payload))
            kb = (await http.get("/v1/kb")).json()
            return r, kb

    r, kb = run(go())
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field and "not valid text" in error["message"], error
    assert kb["version"] == 1  # nothing was written
