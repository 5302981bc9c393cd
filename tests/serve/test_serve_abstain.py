"""`POST /v1/ask` abstains by default with the model's calibrated threshold, says `abstained` with the score and
the threshold, `"abstain": false` turns it off, and a request the threshold was not calibrated for (another
retriever or model kind) never abstains; on a tiny RAG-Sequence model."""

from __future__ import annotations

import pytest

from serve_helpers import client, config, create_app, run, tiny_rag

QUESTION = "capital of france"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-abstain")
    rag, encoder = tiny_rag(root, model="rag-sequence")
    (answer,) = rag.ask([QUESTION], k=3, max_new_tokens=4)
    return root, rag, encoder, answer.abstain_score


def post_all(tiny, threshold, bodies):
    root, rag, encoder, _ = tiny
    rag.abstain_threshold = threshold  # as load_run sets it for the shipped default

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            out = []
            for body in bodies:
                r = await http.post("/v1/ask", json={"question": QUESTION, "max_new_tokens": 4, "k": 3, **body})
                out.append(r.json()["answers"][0] if r.status_code == 200 else r)
            return out

    try:
        return run(go())
    finally:
        rag.abstain_threshold = None


def test_the_api_says_abstained_with_the_score_and_threshold(tiny):
    score = tiny[3]
    default, forced, off = post_all(tiny, score + 1.0, [{}, {"abstain_threshold": score - 1.0}, {"abstain": False}])
    assert default["abstained"] is True and default["abstain_threshold"] == score + 1.0
    assert default["abstain_score"] == pytest.approx(score) and default["passages"]  # the passages show why
    assert forced["abstained"] is False and forced["abstain_threshold"] == score - 1.0
    assert off["abstained"] is False and off["abstain_score"] == pytest.approx(score)


def test_without_a_calibrated_threshold_the_api_never_abstains(tiny):
    score = tiny[3]
    (plain, given) = post_all(tiny, None, [{}, {"abstain_threshold": score + 1.0}])
    assert plain["abstained"] is False and plain["abstain_threshold"] is None
    assert given["abstained"] is True
    other_retriever, other_model, other_k = post_all(
        tiny, score + 1.0, [{"retriever": "bm25"}, {"model": "rag-token"}, {"k": 2}])
    for answer in (other_retriever, other_model, other_k):  # the threshold holds for the model's own settings
        assert answer["abstained"] is False and answer["abstain_threshold"] is None, answer


def test_a_threshold_that_is_not_a_number_is_refused(tiny):
    root, rag, encoder, _ = tiny

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            for bad in ("NaN", "1e999", '"high"'):
                r = await http.post("/v1/ask", content=f'{{"question": "{QUESTION}", "abstain_threshold": {bad}}}',
                                    headers={"content-type": "application/json"})
                assert r.status_code == 422 and "abstain_threshold" in r.text, (bad, r.text)

    run(go())
