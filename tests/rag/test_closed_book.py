"""The closed-book baseline (paper Table 1): the generator alone, its loss, decoding and training;
and trained runs loading back (run.json + checkpoint) as the same model."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from openbook.errors import InputError
from openbook.models.generators import Seq2SeqGenerator
from openbook.models.weights import load_weights
from openbook.rag.closed_book import ClosedBook
from openbook.train import TrainConfig, train
from tiny_causal import make_generator
from tiny_runs import ANSWERS, QUESTIONS, bart_generator, close_to, save_tiny_models, train_run


def brute_force_nll(generator: Seq2SeqGenerator, question: str, answer: str) -> float:
    """-log p(answer + EOS | question) from one plain transformers forward, token by token."""
    with torch.no_grad():
        return _nll(generator, question, answer)


def _nll(generator, question, answer) -> float:
    tok = generator.tokenizer
    enc = tok([question], return_tensors="pt")
    target = tok(answer, add_special_tokens=False)["input_ids"] + [generator.eos_token_id]
    decoder_in = [generator.start_token_id] + target[:-1]
    logits = generator.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                             decoder_input_ids=torch.tensor([decoder_in])).logits[0]
    lp = torch.log_softmax(logits.float(), -1)
    return -float(sum(lp[t, y] for t, y in enumerate(target)))


def test_closed_book_context_is_the_question_alone():
    gen = bart_generator()
    ctx = ClosedBook(gen).contexts(QUESTIONS)
    assert ctx.n_docs == 1 and ctx.input_ids.shape[0] == 2
    assert gen.tokenizer.decode(ctx.input_ids[0], skip_special_tokens=True) == QUESTIONS[0]
    causal = ClosedBook(make_generator(chat=False))
    ids = causal.contexts(["what is the capital of france ?"]).input_ids[0]
    text = causal.generator.tokenizer.decode(ids, skip_special_tokens=True)
    assert "Passage" not in text and "Title" not in text and text.endswith("Answer :")
    assert causal.generator.prompt_template.startswith("Title")  # the generator itself is untouched


def test_loss_is_the_brute_force_nll():
    gen = bart_generator()
    model = ClosedBook(gen)
    with torch.no_grad():
        loss = float(model.loss(QUESTIONS, ANSWERS, k=5))
    expected = sum(brute_force_nll(gen, q, a) for q, a in zip(QUESTIONS, ANSWERS)) / 2
    assert loss == close_to(expected, gen)
    with pytest.raises(InputError, match="2 questions but 1 answers"):
        model.loss(QUESTIONS, ANSWERS[:1])


def test_causal_closed_book_loss_is_the_nll_after_the_question_prompt():
    model = ClosedBook(make_generator(chat=True))
    gen, question, answer = model.generator, "what is the capital of france ?", "paris"
    loss = model.loss([question], [answer])
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in gen.parameters())
    prompt = model.contexts([question]).input_ids[0].tolist()
    target = gen.encode_targets([answer])[0][0].tolist()
    with torch.no_grad():
        logits = gen.model(input_ids=torch.tensor([prompt + target])).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1: -1], -1)
    assert float(loss.detach()) == close_to(-float(sum(lp[t, y] for t, y in enumerate(target))), gen)


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_ask_answers_without_passages(num_beams, causal):
    model = ClosedBook(make_generator(chat=True) if causal else bart_generator())
    questions = ["what is the capital of france ?", "who wrote the play ?"] if causal else QUESTIONS
    answers = model.ask(questions, k=5, num_beams=num_beams, max_new_tokens=4, n_best=num_beams)
    assert [a.question for a in answers] == questions
    for a in answers:
        assert a.model == "closed-book" and a.passages == [] and isinstance(a.answer, str)
        assert len(a.tokens) <= 4 and len(a.alternatives) == num_beams - 1 and a.token_posteriors is None
    # greedy decoding is the argmax of the generator's own distribution after the question
    if num_beams == 1 and not causal:
        gen = model.generator
        memory = gen.encode(model.contexts(QUESTIONS[:1]))
        first = gen.begin(memory, torch.arange(1)).step(torch.tensor([gen.start_token_id]))
        forced = gen.forced_bos_token_id
        expected = forced if forced is not None else int(first.argmax())
        assert gen.tokenizer.convert_tokens_to_ids(answers[0].tokens[0]) == expected


def test_label_logprobs_are_the_first_token_distribution():
    gen = bart_generator()
    model = ClosedBook(gen)
    lp = model.label_logprobs(QUESTIONS, ["paris", "france"])
    assert lp.shape == (2, 2) and (lp < 0).all()
    for b, q in enumerate(QUESTIONS):  # log p(first answer token = label | question)
        assert float(lp[b, 0].detach()) == close_to(-_token_only(gen, q, "paris"), gen)
    with pytest.raises(InputError, match="one token"):
        model.label_logprobs(QUESTIONS, ["paris", "paris"])


def _token_only(gen, question, answer) -> float:
    """-log p(y_1 = answer | question) for a one-token answer."""
    tok = gen.tokenizer
    enc = tok([question], return_tensors="pt")
    (target,) = tok(answer, add_special_tokens=False)["input_ids"]
    start = torch.tensor([[gen.start_token_id]])
    logits = gen.model(input_ids=enc["input_ids"], decoder_input_ids=start).logits.detach()
    return -float(torch.log_softmax(logits[0, 0].float(), -1)[target])


def test_training_closed_book_lowers_the_loss(tmp_path):
    model = ClosedBook(bart_generator())
    examples = [("capital of france", "paris")] * 4
    with torch.no_grad():
        before = float(model.loss(["capital of france"], ["paris"]))
    cfg = TrainConfig(max_steps=2, batch_size=4, lr_generator=3e-3, freeze_retriever=False)
    state = train(model, examples, cfg, tmp_path / "run", progress=False)
    model.eval()
    with torch.no_grad():
        after = float(model.loss(["capital of france"], ["paris"]))
    assert state.step == 2 and after < before, (before, after)
    saved = load_file(tmp_path / "run" / "checkpoint" / "model.safetensors")  # tied weights stored once
    assert set(saved) <= set(model.state_dict()) and all(k.startswith("generator.") for k in saved)


# ------------------------------------------------------------------------------------------ load_run


@pytest.mark.parametrize("model", ["rag-token", "closed-book"])
def test_load_run_rebuilds_the_trained_model(tmp_path, model):
    from openbook.rag.assemble import load_rag, load_run

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    run = train_run(tmp_path, "run", model, gen_dir, enc_dir, kb_dir, "--learn-scale")
    spec = json.loads((run / "run.json").read_text())
    assert spec["model"] == model and spec["generator"] == str(gen_dir) and spec["kb"] == str(kb_dir)
    loaded = load_run(run)
    assert type(loaded).__name__ == ("ClosedBook" if model == "closed-book" else "RAG")
    # the same weights as the trained model in memory, which differ from the untrained ones
    trained = load_file(run / "checkpoint" / "model.safetensors")  # tied weights stored once
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in trained.items())
    if model == "closed-book":
        fresh = ClosedBook(Seq2SeqGenerator(*_load_seq2seq(gen_dir)))
    else:
        fresh = load_rag(model=model, kb=str(kb_dir), generator=str(gen_dir), encoder=str(enc_dir), k=2)
        assert loaded.retriever.name == "dense" and loaded.k == 2 and loaded.log_scale.requires_grad
    with torch.no_grad():
        loss = float(loaded.loss(QUESTIONS, ANSWERS))
        assert loss != close_to(float(fresh.loss(QUESTIONS, ANSWERS)), fresh.generator)
        load_weights(fresh, run / "checkpoint" / "model.safetensors")
        fresh.eval()
        assert loss == close_to(float(fresh.loss(QUESTIONS, ANSWERS)), fresh.generator)
    ask = dict(num_beams=2, max_new_tokens=4)
    assert [a.to_dict() for a in loaded.ask(QUESTIONS, **ask)] == [a.to_dict() for a in fresh.ask(QUESTIONS, **ask)]


def _load_seq2seq(path):
    from openbook.models import load_seq2seq

    return load_seq2seq(str(path))


def test_load_run_overrides_and_errors(tmp_path):
    from openbook.rag.assemble import load_run

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    run = train_run(tmp_path, "run", "rag-sequence", gen_dir, enc_dir, kb_dir)
    assert load_run(run, model="rag-token", k=3, retriever="bm25").model_type == "rag-token"
    with pytest.raises(InputError, match="unknown"):
        load_run(run, colour="blue")
    (run / "run.json").unlink()
    with pytest.raises(InputError, match="run.json.*model.*generator.*encoder"):
        load_run(run)
    older = load_run(run, model="rag-sequence", generator=str(gen_dir), encoder=str(enc_dir), kb=str(kb_dir))
    assert older.model_type == "rag-sequence"
    with pytest.raises(InputError, match="no trained weights"):
        load_run(tmp_path / "nothing", model="closed-book", generator=str(gen_dir))
