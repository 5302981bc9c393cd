"""The API's ``"filter"`` on /v1/retrieve and /v1/ask: the exact top k among the matching passages, each
passage with its metadata; malformed filters are a 422 naming the part at fault."""

from __future__ import annotations

import pytest

from openbook.corpus import Passage
from openbook.models.generators import Seq2SeqGenerator
from openbook.models.knowledge import build_knowledge_base
from openbook.rag import RAG
from serve_helpers import OTHER, client, config, create_app, run
from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder

GIVEN = [Passage(p.id, p.title, p.text, {"source": f"part{i % 2}.md", "page": i, "modified": f"2026-0{1 + i}-01"})
         for i, p in enumerate(PASSAGES)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-filters")
    encoder = tiny_encoder()
    kb = build_knowledge_base(GIVEN, encoder, root / "kbs" / "main", progress=False)
    build_knowledge_base(OTHER, encoder, root / "kbs" / "other", progress=False)
    tok = bart_tokenizer()
    rag = RAG(encoder, Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok), kb, model="rag-token", k=3)
    return root, rag.eval(), encoder


def test_retrieve_and_ask_take_a_filter_and_return_metadata(tiny):
    root, rag, encoder = tiny
    spec = {"source": "part1.md", "modified": {"gte": "2026-03-01"}}

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.post("/v1/retrieve", json={"question": ["capital of france", "largest ocean"], "k": 2,
                                                      "filter": spec})
            assert r.status_code == 200, r.text
            expected = rag.retrieve(["capital of france", "largest ocean"], 2, where=spec)
            for result, passages in zip(r.json()["results"], expected.passages):
                assert [p["id"] for p in result["passages"]] == [p.id for p in passages]
                assert [p["meta"] for p in result["passages"]] == [p.meta for p in passages]
                assert all(p["meta"]["source"] == "part1.md" and p["meta"]["modified"] >= "2026-03-01"
                           for p in result["passages"])
            # fewer matches than k: the matches (p3, p5)
            r = await http.post("/v1/retrieve", json={"question": "capital of france", "k": 5, "filter": spec})
            assert r.status_code == 200, r.text
            assert sorted(p["id"] for p in r.json()["results"][0]["passages"]) == ["p3", "p5"]
            # without a filter every passage still carries its metadata
            r = await http.post("/v1/retrieve", json={"question": "capital of france", "k": 6})
            assert {p["id"]: p["meta"] for p in r.json()["results"][0]["passages"]} == {p.id: p.meta for p in GIVEN}

            r = await http.post("/v1/ask", json={"question": "capital of france", "k": 2, "max_new_tokens": 3,
                                                 "filter": {"page": {"lte": 1}}})
            assert r.status_code == 200, r.text
            (answer,) = r.json()["answers"]
            assert sorted(p["id"] for p in answer["passages"]) == ["p0", "p1"]
            assert [p["meta"]["page"] for p in answer["passages"]] == [
                p.meta["page"] for p in rag.retrieve(["capital of france"], 2, where={"page": {"lte": 1}}).passages[0]]
            r = await http.post("/v1/ask", json={"question": "capital of france", "k": 2, "max_new_tokens": 3,
                                                 "filter": {"source": {"prefix": "part0"}}, "retriever": "bm25"})
            assert r.status_code == 200, r.text
            assert all(p["meta"]["source"] == "part0.md" for p in r.json()["answers"][0]["passages"])

    run(go())


@pytest.mark.parametrize("spec, field, message", [
    ({"page": {"gt": 1}}, "filter.page", "filter.page: unknown operator 'gt'; use one of eq, prefix, gte, lte"),
    ({"page": {"gte": True}}, "filter.page.gte", "filter.page.gte: a bound must be a number or a string"),
    ({"page": [1]}, "filter.page.eq", "filter.page.eq: the value must be a string, number or boolean"),
    ({"bad field": 1}, "filter.bad field", "filter.bad field: field 'bad field' must be"),
    ({"source": "nowhere.md"}, "filter", "no passage of knowledge base"),
    ([1], "filter", "filter: "),
])
def test_bad_filters_are_a_422_naming_the_field(tiny, spec, field, message):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            for path in ("/v1/retrieve", "/v1/ask"):
                r = await http.post(path, json={"question": "capital of france", "filter": spec})
                assert r.status_code == 422, r.text
                error = r.json()["error"]
                assert error["field"] == field and error["message"].startswith(message), error

    run(go())
