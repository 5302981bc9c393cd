"""bench/abstention_generator.py: the abstention text's RAG-Sequence score on a tiny random generator, and how
lost right answers and the candidate's cached answers are counted (a check of the script, not a figure)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from bench_scripts import bench_modules
from tiny_causal import make_generator

PASSAGES = [(0.5, 0.2, "Rome", "the poet was born in rome"), (0.7, 0.2, "Paris", "paris is the capital of france ."),
            (0.2, 0.2, "Berlin", "berlin is the capital city of germany")]


@pytest.fixture(scope="module")
def bench():
    with bench_modules("abstention_generator") as module:
        yield module


def test_the_abstention_score_is_the_rag_sequence_marginal_per_token(bench):
    """Batched over items (and cut where the size of the top k changes), each score equals log sum_z p(z|x)
    p(y|x,z) / |y| computed one passage at a time, with p(z|x) the softmax of the scale times the scores."""
    from openbook.corpus.passages import Passage

    gen = make_generator(chat=True)
    scale = 3.0
    items = [{"question": "what is the capital of france ?", "passages": PASSAGES},
             {"question": "who wrote the play ?", "passages": PASSAGES[::-1]},
             {"question": "where was the poet born ?", "passages": PASSAGES[:2]}]
    rag = SimpleNamespace(generator=gen, score_scale=torch.tensor(scale))
    got = bench.abstain_logprob(rag, items, "not in the passages", batch_size=8)
    targets, mask = gen.encode_targets(["not in the passages"])
    n = int(mask[0].sum())
    for item, value in zip(items, got):
        per_doc = []
        for p in item["passages"]:
            with torch.inference_mode():
                memory = gen.encode(gen.contexts([item["question"]], [[Passage(id="", title=p[2], text=p[3])]]))
                per_doc.append(float(gen.target_token_logprobs(memory, torch.arange(1), targets)[0, :n].sum()))
        prior = torch.log_softmax(scale * torch.tensor([p[0] for p in item["passages"]]), -1)
        expected = float(torch.logsumexp(prior + torch.tensor(per_doc), -1)) / n
        # float32 sums of n log-probabilities of magnitude log(vocabulary) ~ 4.5, over at most 3 passages
        assert value == pytest.approx(expected, abs=1e-4)
    assert got[0] != pytest.approx(got[1], abs=1e-6)  # the prior follows each item's own scores


def test_a_right_answer_lost_is_lost_at_every_threshold(bench):
    scores = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0, -4.0]
    unanswerable = [-5.0, -3.5, 0.5, 6.0]
    # all still right: 95% of 10 is 10, so the threshold is the lowest right score and abstains below it
    assert bench.kept_at(scores, [True] * 10, unanswerable) == 0.25
    # one lost: fewer than 95% can be kept, at any threshold
    assert bench.kept_at(scores, [True] * 9 + [False], unanswerable) is None
    assert bench.kept_at(scores, [True] * 9 + [False], unanswerable, keep=0.9) == 0.5  # threshold -3.0
    # the lost one was the best: the threshold is -4.0
    assert bench.kept_at(scores, [False] + [True] * 9, unanswerable, keep=0.9) == 0.25


def test_the_abstention_text_is_recognised_however_it_is_written(bench):
    assert bench.is_abstention("Not in the passages.", "not in the passages")
    assert bench.is_abstention("not  in the passages", "not in the passages")
    assert not bench.is_abstention("not in the passages of Paris", "not in the passages")


class FakeRag:
    def __init__(self):
        self.kb, self.asked = "full", []

    def use_knowledge_base(self, kb):
        self.kb = kb

    def ask(self, questions, k):
        self.asked.append((self.kb if isinstance(self.kb, str) else "without", list(questions)))
        book = self.kb if isinstance(self.kb, str) else "without"
        return [SimpleNamespace(answer=f"{q} @ {book}") for q in questions]


def test_the_candidates_answers_are_asked_of_their_own_book_and_kept(bench, tmp_path, monkeypatch):
    from openbook.index.kb import api

    monkeypatch.setattr(api.KnowledgeBase, "load", classmethod(lambda cls, path: ("book", str(path))))
    rag = FakeRag()
    todo = [("q1", None), ("q2", "test"), ("q1", None)]
    got = bench.ask_cached(rag, todo, tmp_path, "key", k=5)
    assert got == {("q1", None): "q1 @ full", ("q2", "test"): "q2 @ without"}
    assert rag.asked == [("full", ["q1"]), ("without", ["q2"])] and rag.kb == "full"  # its book given back
    again = bench.ask_cached(FakeRag(), todo + [("q3", None)], tmp_path, "key", k=5)  # only q3 is asked
    assert again[("q2", "test")] == "q2 @ without" and again[("q3", None)] == "q3 @ full"
    lines = [json.loads(line) for line in (tmp_path / "generator-answers-key.jsonl").read_text().splitlines()]
    assert [r["question"] for r in lines] == ["q1", "q2", "q3"]
