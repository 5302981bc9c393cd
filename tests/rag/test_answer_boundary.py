"""Answers that decoding cut at max_new_tokens end at a sensible boundary, never mid-number; answers
that ended with EOS are left alone, and the Answer says which is which (openbook.rag.boundary)."""

from __future__ import annotations

import pytest
import torch

from openbook.models.generators import Seq2SeqGenerator
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from openbook.rag.boundary import hit_limit, trim_truncated
from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder


@pytest.mark.parametrize("cut,trimmed", [
    # the examples: a number cut after its thousands separator, a date cut inside a bracket
    ("The first Nobel Prize in Physics went to Wilhelm Röntgen, who received 150,",
     "The first Nobel Prize in Physics went to Wilhelm Röntgen, who received"),
    ("Vincenzo Peruggia: Vincenzo Peruggia (October 8, 1881 – October 8, 1", "Vincenzo Peruggia: Vincenzo Peruggia"),
    # numbers with separators or decimals, cut or perhaps cut, are never kept as the last word
    ("The prize was worth 1,5", "The prize was worth"),
    ("It weighs 3.5", "It weighs"),
    ("It costs 3.", "It costs"),  # "3." may be the start of "3.5"
    ("The war ended in 1945.", "The war ended"),  # the same ambiguity: nothing after the point is known
    ("He was born on 8 October 18", "He was born on 8 October"),
    ("He was born on 8 October 1881, in Du", "He was born on 8 October 1881"),
    # words that only lead into what was cut off go too
    ("The first Nobel Prize in Physics was awarded in 1901 to Wilhelm",
     "The first Nobel Prize in Physics was awarded in 1901"),
    ("Wilhelm Röntgen, who was the first to", "Wilhelm Röntgen, who was the first"),
    ("Wilhelm Röntgen, who was", "Wilhelm Röntgen"),
    # the end of the last complete sentence wins over the words after it
    ("Wilhelm Röntgen. He received 150,78", "Wilhelm Röntgen."),
    ("Paris is the capital of France. It is", "Paris is the capital of France."),
    ("Who? Nobody knows the an", "Who?"),
    ('He said "yes." Then he', 'He said "yes."'),
    ("The answer is 42!", "The answer is 42!"),
    # abbreviations and initials do not end a sentence
    ("Dr. Smith went to the U.S. in 19", "Dr. Smith went to the U.S."),
    ("J. R. R. Tolkien wrote The Lord of the", "J. R. R. Tolkien wrote The Lord"),
    # trailing commas, colons and dashes go; a single word is all there is, so it stays
    ("Ernest Hemingway, American novelist:", "Ernest Hemingway, American"),
    ("Pneumonoultramicroscopicsilicovolcanoconiosis", "Pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("150,", "150"),
    ("  Paris  ", "Paris"),
])
def test_trim_truncated(cut, trimmed):
    assert trim_truncated(cut) == trimmed


EOS, PAD = 2, 1


@pytest.mark.parametrize("row,limit,pad,forced,cut", [
    ([5, 6, EOS, PAD], 4, PAD, False, False),  # ended with EOS before the limit
    ([5, 6, 7, 8], 4, PAD, False, True),  # the limit, no EOS
    ([5, 6, PAD, PAD], 4, PAD, False, False),  # a shorter row of a batch: it stopped (EOS cut off with the pads)
    ([5, 6, 7], 3, EOS, False, True),  # pad == EOS (SmolLM): the limit reached
    ([5, 6, EOS], 3, EOS, False, False),  # pad == EOS: ended with EOS in the last place
    ([5, 6, EOS], 3, PAD, True, True),  # BART's forced EOS in the last place is the limit, not the model's choice
    ([5, EOS, PAD], 3, PAD, True, False),  # the model's own EOS
])
def test_hit_limit(row, limit, pad, forced, cut):
    assert hit_limit(row, limit, EOS, pad, forced) is cut


def tiny_rag(tmp_path, seed: int) -> RAG:
    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    tok = bart_tokenizer()
    return RAG(encoder, Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=seed), tok), kb, k=3)


def _untrimmed(rag, answer) -> str:
    ids = rag.generator.tokenizer.convert_tokens_to_ids(answer.tokens)
    return rag.generator.decode_tokens(torch.tensor([ids]))[0]


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_ask_trims_answers_that_hit_the_token_limit(tmp_path, model):
    rag = tiny_rag(tmp_path, seed=3)
    rag.model_type = model
    questions = ["who wrote the sun rises", "capital of france"]
    # EOS is suppressed until the last place, where BART's generation config forces it: the limit decides
    for answer in rag.ask(questions, num_beams=2, max_new_tokens=5, min_new_tokens=5, n_best=2):
        raw = _untrimmed(rag, answer)
        assert answer.truncated and answer.to_dict()["truncated"]
        assert len(raw.split()) >= 2 and answer.answer == trim_truncated(raw) != raw
        assert len(answer.alternatives) == 1


def test_answers_that_end_with_eos_are_left_alone(tmp_path):
    rag = tiny_rag(tmp_path, seed=5)  # answers "capital of france" with 4 tokens, then EOS of its own choice
    (answer,) = rag.ask(["capital of france"], num_beams=1, max_new_tokens=8)
    raw = _untrimmed(rag, answer)
    assert len(answer.tokens) < 8 and answer.tokens[-1] == "</s>"
    assert not answer.truncated and not answer.to_dict()["truncated"]
    assert answer.answer == raw and trim_truncated(raw) != raw  # trimming would have changed it
    (cut,) = rag.ask(["capital of france"], num_beams=1, max_new_tokens=3)  # the same answer, cut by the limit
    assert cut.truncated and cut.answer == trim_truncated(_untrimmed(rag, cut))


def test_closed_book_answers_are_trimmed_the_same_way(tmp_path):
    from openbook.rag.closed_book import ClosedBook

    closed = ClosedBook(tiny_rag(tmp_path, seed=3).generator)
    for answer in closed.ask(["who wrote the sun rises", "capital of france"], num_beams=2, max_new_tokens=5,
                             min_new_tokens=5):
        raw = _untrimmed(closed, answer)
        assert answer.truncated and answer.answer == trim_truncated(raw) != raw
