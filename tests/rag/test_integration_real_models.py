"""One integration test on the real offline default models (MiniLM retriever, SmolLM2 generator).

A fact that exists only in the knowledge base (an invented office holder) is answered from the first
knowledge base, and after a hot swap the answer follows the second one, with no model reload: the
paper's index hot-swapping (section 4.5) on a small corpus.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from openbook.corpus import Passage
from openbook.rag.assemble import build_knowledge_base, load_rag

FILLER = [
    Passage("f1", "Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    Passage("f2", "Pacific Ocean", "The Pacific Ocean is the largest and deepest of Earth's five oceanic divisions."),
    Passage("f3", "Paris", "Paris is the capital and most populous city of France."),
    Passage("f4", "Photosynthesis", "Photosynthesis is a process used by plants to convert light energy into chemical energy."),
]
QUESTION = "Who is the president of Veltravia?"
DEMO_QUESTION, DEMO_ANSWER = "Who wrote Hamlet?", "William Shakespeare"  # `make demo`'s question and its answer


def kb_with(president: str, path):
    fact = Passage("fact", "Veltravia", f"{president} is the president of Veltravia, a small island republic.")
    from openbook.models import load_encoder

    return build_knowledge_base([fact, *FILLER], load_encoder("minilm"), path, progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_real_models_answer_from_the_book_and_follow_a_hot_swap(tmp_path, model):
    first = kb_with("Odalys Brenner", tmp_path / "kb2016")
    second = kb_with("Tamsin Okafor", tmp_path / "kb2018")
    rag = load_rag(model=model, kb=first, k=2)
    answer = rag.ask([QUESTION], num_beams=2, max_new_tokens=20)[0]
    assert answer.passages[0].id == "fact" and answer.passages[0].prob > 0.5
    assert "Brenner" in answer.answer, answer.answer
    generator = rag.generator
    rag.use_knowledge_base(second)
    swapped = rag.ask([QUESTION], num_beams=2, max_new_tokens=20)[0]
    assert rag.generator is generator
    assert "Okafor" in swapped.answer and "Brenner" not in swapped.answer, swapped.answer


@pytest.mark.slow
@pytest.mark.shipped_default
def test_the_shipped_default_answers_in_a_few_words_from_the_demo_book():
    """`openbook ask`'s model: the packaged generator with the shipped LoRA adapters folded in, answering with
    the few words of the answer rather than a copied sentence (the untrained generator's habit)."""
    import torch

    from openbook.data import default_run_path
    from openbook.rag.assemble import load_model

    assert default_run_path() is not None, "openbook/data/default is missing: run scripts/train_default.sh"
    rag = load_model()
    answer = rag.ask([DEMO_QUESTION], num_beams=1, decoding="fast", max_new_tokens=16)[0]
    assert answer.answer == DEMO_ANSWER and not answer.truncated, answer.answer
    untrained = load_model(kb=rag.kb, untrained=True)
    name = "model.layers.0.self_attn.q_proj.weight"  # the adapters are folded into the base weights
    assert not torch.equal(rag.generator.model.state_dict()[name], untrained.generator.model.state_dict()[name])


def test_make_demo_asks_the_question_checked_here():
    """`make demo` must show a new user a short correct answer: its question is the one the tests above and below
    check against the shipped default, so the two cannot drift apart."""
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^QUESTION \?= (.+)$", makefile, re.M).group(1) == DEMO_QUESTION


@pytest.mark.slow
@pytest.mark.shipped_default
def test_make_demo_answers_correctly_with_ask_s_own_defaults(capsys):
    """What `make demo` runs: `openbook ask QUESTION` with every default (Lazy decoding, --dtype auto)."""
    from openbook import cli

    assert cli.main(["ask", DEMO_QUESTION, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["answer"] == DEMO_ANSWER and not answer["truncated"], answer


@pytest.mark.slow
@pytest.mark.shipped_default
def test_the_shipped_default_reads_an_invented_fact(tmp_path):
    """For an entity it cannot know, the answer is the fact in the passage, not the passage's title: defaults v1 and v2
    answered "Veltravia" (their prompt began with the title); v3 puts the title after the text."""
    from openbook.rag.assemble import load_model

    rag = load_model(kb=kb_with("Odalys Brenner", tmp_path / "kb"), k=2)
    answer = rag.ask([QUESTION], num_beams=1, decoding="fast", max_new_tokens=16)[0]
    assert "Brenner" in answer.answer, answer.answer
