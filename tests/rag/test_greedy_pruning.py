"""Greedy search drops the rows whose answers have ended (``select``), so a finished answer stops costing
compute, and every row's tokens and scores stay what they were when every row was stepped to the end.

* A scripted decoding state (row r writes its own tokens, then EOS): with ``select`` the rows stepped shrink
  as answers end and each row keeps receiving its own previous token; the output equals that of stepping all
  rows (bit for bit: the state's logits do not depend on the batch).
* Real tiny models through ``RAG.ask`` (RAG-Sequence Fast and RAG-Token, greedy): the same answers as with
  pruning switched off, and scores equal within float32 rounding of the model's reductions.
"""

from __future__ import annotations

import math

import pytest
import torch

import openbook.rag.decoding as decoding
from openbook.rag.beam import BeamConfig, greedy_search

EOS, PAD, START, V = 2, 0, 1, 12
SCRIPTS = [[5, 6], [7], [5, 8, 9, 10], [11, 3, 4]]  # each row's tokens before its EOS


class Scripted:
    """Row r's next-token logits favour ``SCRIPTS[r]`` then EOS; ``select`` keeps the rows it is given."""

    def __init__(self):
        self.rows = list(range(len(SCRIPTS)))
        self.written = [[] for _ in SCRIPTS]
        self.calls = []  # how many rows each step computed

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        assert tokens.shape == (len(self.rows),)
        self.calls.append(len(self.rows))
        logits = torch.zeros(len(self.rows), V)
        for i, row in enumerate(self.rows):
            fed = int(tokens[i])
            if self.written[row] and self.written[row][-1] != EOS:
                assert fed == self.written[row][-1], "a row must be fed its own previous token"
            script = SCRIPTS[row] + [EOS]
            token = script[len(self.written[row])] if len(self.written[row]) < len(script) else EOS
            logits[i] = torch.linspace(-1.0, 1.0, V) * (row + 1)  # a distinct distribution per row
            logits[i, token] = 4.0 + row
            self.written[row].append(token)
        return logits

    def select(self, index: torch.Tensor) -> None:
        self.rows = [self.rows[i] for i in index.tolist()]


def test_greedy_search_steps_only_the_running_rows_and_returns_the_same():
    cfg = BeamConfig(eos_token_id=EOS, pad_token_id=PAD, max_length=8)
    pruned, full = Scripted(), Scripted()
    seen = {"pruned": [], "full": []}
    a = greedy_search(pruned.step, 4, START, cfg, "cpu", select=pruned.select,
                      on_step=lambda pos, tok: seen["pruned"].append(tok.tolist()))
    b = greedy_search(full.step, 4, START, cfg, "cpu", on_step=lambda pos, tok: seen["full"].append(tok.tolist()))
    # answers of 2, 1, 4 and 3 tokens (+ EOS): the second row ends first, the third last
    assert pruned.calls == [4, 4, 3, 2, 1] and full.calls == [4, 4, 4, 4, 4]
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.lengths, b.lengths)
    assert torch.equal(a.scores, b.scores) and torch.equal(a.raw_logprobs, b.raw_logprobs)
    assert seen["pruned"] == seen["full"]  # streaming sees every row, pads for the finished ones
    assert a.sequences[2, 0].tolist() == [START, 5, 8, 9, 10, EOS]
    assert a.sequences[1, 0].tolist() == [START, 7, EOS, PAD, PAD, PAD]


def test_rows_cut_by_the_maximum_length_are_returned_as_when_all_rows_are_stepped():
    cfg = BeamConfig(eos_token_id=EOS, pad_token_id=PAD, max_length=4)  # too short for rows 2 and 3
    pruned, full = Scripted(), Scripted()
    a = greedy_search(pruned.step, 4, START, cfg, "cpu", select=pruned.select)
    b = greedy_search(full.step, 4, START, cfg, "cpu")
    assert pruned.calls == [4, 4, 3] and full.calls == [4, 4, 4]  # row 1 ended at its second token
    assert a.lengths[:, 0].tolist() == [3, 2, 3, 3]
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.scores, b.scores)
    assert torch.equal(a.raw_logprobs, b.raw_logprobs)


def _unpruned(monkeypatch):
    original = decoding.greedy_search
    monkeypatch.setattr(decoding, "greedy_search", lambda *a, **kw: original(*a, **{**kw, "select": None}))


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_rag_ask_greedy_answers_equal_with_and_without_pruning(tmp_path, monkeypatch, model, family):
    from openbook.rag import RAG
    from openbook.rag.assemble import build_knowledge_base
    from tiny import PASSAGES, tiny_encoder
    from tiny_causal import make_generator
    from tolerance import model_tolerance

    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    if family == "causal":
        generator = make_generator()
    else:
        from openbook.models.generators import Seq2SeqGenerator
        from tiny import bart_tokenizer, tiny_bart

        tok = bart_tokenizer()
        generator = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)
    rag = RAG(encoder, generator, kb, model=model, k=3).eval()
    questions = ["what is the capital of france ?", "who wrote the play ?", "where does the river flow ?",
                 "which city ?", "the poet was born in rome", "capital"]
    selects = []
    original = decoding.greedy_search

    def spy(*a, **kw):
        inner = kw["select"]
        kw["select"] = lambda index: (selects.append(len(index)), inner(index))
        return original(*a, **kw)

    monkeypatch.setattr(decoding, "greedy_search", spy)
    # a random model seldom writes EOS: raise EOS's logit by a bias, found by bisection on its logarithm, until
    # the answers end at different steps (too small a bias: every answer runs to the end; too large: EOS first)
    head = generator.model.get_output_embeddings()
    low, high = math.log(1e-4), math.log(1e3)
    for _ in range(30):
        bias = math.exp((low + high) / 2)
        hook = head.register_forward_hook(lambda m, i, out, b=bias: out.index_add(
            -1, torch.tensor([generator.eos_token_id]), torch.full((*out.shape[:-1], 1), b)))
        selects.clear()
        pruned = rag.ask(questions, num_beams=1, decoding="fast", max_new_tokens=10)
        lengths = {len(a.tokens) for a in pruned}
        if selects and len(lengths) > 1:
            break  # the hook stays for the comparison below
        hook.remove()
        low, high = (low, math.log(bias)) if max(lengths) < 10 else (math.log(bias), high)
    assert selects, "no answer ended before the others: the test would not exercise pruning"
    monkeypatch.undo()
    _unpruned(monkeypatch)
    full = rag.ask(questions, num_beams=1, decoding="fast", max_new_tokens=10)
    # a posterior is a softmax over documents of log p(z|x) + log p(y|x,z), a sum of <= 10 token log-probs of
    # magnitude <= ~10 each: its error is at most twice that sum's, whose terms are of scale 10 * 10
    tol = 2 * model_tolerance(1.0, generator.model.config, 64, dtype=torch.float32, scale=100.0)["atol"]
    for p, f in zip(pruned, full):
        assert (p.answer, p.tokens) == (f.answer, f.tokens)
        for a, b in zip(p.passages, f.passages):
            assert a.id == b.id and abs(a.posterior - b.posterior) <= tol
        if model == "rag-token":
            assert torch.allclose(torch.tensor(p.token_posteriors), torch.tensor(f.token_posteriors), atol=tol, rtol=0)
