"""A very long question is cut to the generator's question budget (half its context), with one warning,
so every context keeps part of its passage and stays within ``max_context_length`` tokens (a
20,000-word question used to reach the generator whole: ``openbook ask`` did not answer in 300 s)."""

from __future__ import annotations

import warnings

import pytest

from openbook.models.budget import QUESTION_SHARE, fit_questions, question_budget
from openbook.models.generators import Seq2SeqGenerator
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from tiny import PASSAGES, WORDS, bart_tokenizer, tiny_bart, tiny_encoder
from tiny_causal import P, make_generator

LIMIT = 64
LONG = " ".join(["who wrote the novel"] * 5000)  # 20,000 words
PASSAGE = P("France", "paris is the capital of france")
SHORT = "who wrote the novel ?"


def seq2seq() -> Seq2SeqGenerator:
    return Seq2SeqGenerator(tiny_bart(), bart_tokenizer(), max_context_length=LIMIT)


def causal(chat: bool):
    return make_generator(chat=chat, max_context_length=LIMIT)


def passage_ids(generator) -> set[int]:
    return set(generator.tokenizer(PASSAGE.text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("make", [seq2seq, lambda: causal(True), lambda: causal(False)],
                         ids=["seq2seq", "causal-chat", "causal-plain"])
def test_long_question_is_cut_with_one_warning(make):
    generator = make()
    with pytest.warns(UserWarning, match=r"^2 question\(s\) longer than the generator's 32-token") as caught:
        ctx = generator.contexts([LONG, SHORT, LONG], [[PASSAGE, PASSAGE]] * 3)
    assert len([w for w in caught if "question budget" in str(w.message)]) == 1
    assert ctx.input_ids.shape == (6, ctx.input_ids.shape[1]) and ctx.input_ids.shape[1] <= LIMIT
    lengths = ctx.attention_mask.sum(-1)
    assert (lengths <= LIMIT).all()
    for row in range(6):  # every context keeps (part of) its passage
        kept = set(ctx.input_ids[row][ctx.attention_mask[row].bool()].tolist())
        assert kept & passage_ids(generator)
    # the short question is whole and its contexts did not change
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alone = generator.contexts([SHORT], [[PASSAGE, PASSAGE]])
    width = int(alone.attention_mask.sum(-1).max())
    row = ctx.input_ids[2][ctx.attention_mask[2].bool()]
    assert row.tolist() == alone.input_ids[0][alone.attention_mask[0].bool()].tolist() and len(row) == width


def test_questions_within_the_budget_are_kept_exactly():
    tok = bart_tokenizer()
    budget = question_budget(LIMIT)
    assert budget == int(LIMIT * QUESTION_SHARE) == 32
    exact = " ".join(WORDS[:budget])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fit_questions(tok, [exact, SHORT], LIMIT) == [exact, SHORT]
    with pytest.warns(UserWarning, match="1 question"):
        (cut,) = fit_questions(tok, [exact + " paris"], LIMIT)
    assert cut == exact  # cut at a token boundary, after exactly ``budget`` tokens


def test_ask_with_a_20000_word_question_answers_with_both_warnings(tmp_path):
    """End to end: retrieval cuts the question to its encoder's limit, the generator to its budget."""
    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    rag = RAG(encoder, Seq2SeqGenerator(tiny_bart(), bart_tokenizer()), kb, k=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (answer,) = rag.ask([LONG], max_new_tokens=2, num_beams=2)
    messages = [str(w.message) for w in caught]
    assert any("question budget" in m for m in messages) and any("encoder" in m for m in messages)
    assert len(answer.passages) == 2
