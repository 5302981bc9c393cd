"""The passage judge (openbook/models/judge.py) on a tiny random BERT: it reads question and passage as one input,
saves only its adapters and head, and loads them folded into the base weights with the same logits."""

from __future__ import annotations

import json

import pytest
import torch

from openbook.errors import InputError
from openbook.models.adapters import LoraSettings
from openbook.models.judge import PassageJudge
from tiny_encoders import save_bert

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=("query", "key", "value", "dense"))
PASSAGES = [("Paris", "paris is the capital of france ."), ("", "the sun rises ."), ("Hamlet", "a play . " * 80)]


@pytest.fixture
def judge(tmp_path):
    base = save_bert(tmp_path / "bert")
    torch.manual_seed(1)
    judge = PassageJudge.new(LORA, max_length=48, base=base)
    with torch.no_grad():  # adapters as if trained: B is zero at first, which would make merging trivially exact
        for name, tensor in judge.named_parameters():
            if "lora_B" in name:
                tensor.normal_(std=0.5)
    return judge.eval(), base


def test_only_the_adapters_and_head_train(judge):
    model, _ = judge
    trainable = {name for name, t in model.named_parameters() if t.requires_grad}
    assert trainable and all("lora_" in name or name.startswith("head.") for name in trainable)
    assert {"head.weight", "head.bias"} <= trainable


def test_saved_and_loaded_it_gives_the_same_logits(judge, tmp_path):
    model, base = judge
    with torch.no_grad():
        before = model(["capital of france ?"] * 3, PASSAGES)
    model.save(tmp_path / "judge.safetensors")
    data = json.loads((tmp_path / "judge.json").read_text())
    assert data == {"lora": LORA.to_dict(), "max_length": 48, "reads_answer": False, "pooling": "mean"}
    loaded = PassageJudge.load(tmp_path / "judge.safetensors", base=base)
    after = loaded.score(["capital of france ?"] * 3, PASSAGES)
    assert not any(t.requires_grad and "lora_" in n for n, t in loaded.named_parameters())  # folded, no adapters
    # merging changes only the order of float32 sums of 32-wide products: a few ulps of logits of order 1
    assert after == pytest.approx(before.tolist(), abs=1e-4)
    assert len(set(round(x, 4) for x in after)) == 3  # the passages are told apart


def test_a_long_passage_is_cut_to_the_input_length(judge):
    model, _ = judge
    assert len(model.score(["what play ?"] * 40, [PASSAGES[2]] * 40)) == 40  # more pairs than one batch


def test_a_file_that_is_not_a_judge_is_refused(judge, tmp_path):
    model, base = judge
    model.save(tmp_path / "judge.safetensors")
    from openbook.models.weights import read_tensors, write_tensors

    tensors = read_tensors(tmp_path / "judge.safetensors")
    del tensors["head.bias"]
    write_tensors(tmp_path / "bad.safetensors", tensors, json.loads((tmp_path / "judge.json").read_text()))
    with pytest.raises(InputError, match="not a passage judge"):
        PassageJudge.load(tmp_path / "bad.safetensors", base=base)


def test_it_loads_in_bfloat16_with_close_logits(judge, tmp_path):
    model, base = judge
    model.save(tmp_path / "judge.safetensors")
    full = PassageJudge.load(tmp_path / "judge.safetensors", base=base)
    half = PassageJudge.load(tmp_path / "judge.safetensors", base=base, dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16 and half.head.weight.dtype == torch.float32
    a, b = (j.score(["capital of france ?"] * 3, PASSAGES) for j in (full, half))
    # bfloat16 keeps 8 significant bits (a relative error of up to 2**-9 a rounding); a few roundings through two
    # layers of width 32 leave hidden states of order 1 off by about 1%, which the float32 head (weights of order
    # 1/sqrt(32) over 32 inputs) turns into about 0.01 of logit: 0.02 allows twice that
    assert b == pytest.approx(a, abs=0.02)
    with pytest.raises(InputError, match="float32 or bfloat16"):
        PassageJudge.load(tmp_path / "judge.safetensors", base=base, dtype="int8")


def test_a_judge_that_reads_the_answer_scores_each_answer_and_keeps_reading_it(tmp_path):
    base = save_bert(tmp_path / "bert")
    torch.manual_seed(2)
    model = PassageJudge.new(LORA, max_length=48, base=base, reads_answer=True).eval()
    questions, passages = ["capital of france ?"] * 2, [PASSAGES[0]] * 2
    logits = model.score(questions, passages, ["paris", "the sun"])
    assert logits[0] != pytest.approx(logits[1], abs=1e-6)  # the same passage, two answers, two logits
    with pytest.raises(InputError, match="reads the answer"):
        model.score(questions, passages)
    model.save(tmp_path / "judge.safetensors")
    assert json.loads((tmp_path / "judge.json").read_text())["reads_answer"] is True
    loaded = PassageJudge.load(tmp_path / "judge.safetensors", base=base)
    assert loaded.reads_answer and loaded.score(questions, passages, ["paris", "the sun"]) == pytest.approx(
        logits, abs=1e-4)
    # a judge that does not read answers ignores them
    plain = PassageJudge.new(LORA, max_length=48, base=base).eval()
    assert plain.score(questions, passages, ["paris", "the sun"]) == plain.score(questions, passages)


def test_a_judge_file_with_a_bad_reads_answer_flag_is_refused(judge, tmp_path):
    model, base = judge
    model.save(tmp_path / "judge.safetensors")
    data = json.loads((tmp_path / "judge.json").read_text())
    (tmp_path / "judge.json").write_text(json.dumps(dict(data, reads_answer="yes")))
    with pytest.raises(InputError, match="reads_answer"):
        PassageJudge.load(tmp_path / "judge.safetensors", base=base)


def test_a_judge_pooling_the_first_segment_reads_only_the_question_and_answer_states(tmp_path):
    base = save_bert(tmp_path / "bert")
    torch.manual_seed(3)
    model = PassageJudge.new(LORA, max_length=48, base=base, reads_answer=True, pooling="first").eval()
    question, passage, answer = "capital of france ?", PASSAGES[0], "paris"
    encoded = model.tokenizer([f"{question} answer: {answer}"], [f"{passage[0]}. {passage[1]}"],
                              return_tensors="pt")
    with torch.no_grad():
        states = model.model(**encoded).last_hidden_state[0]
        first = encoded["token_type_ids"][0] == 0
        expected = model.head(states[first].mean(0)).item()
        every = model.head(states.mean(0)).item()
    logit = model.score([question], [passage], [answer])[0]
    assert logit == pytest.approx(expected, abs=1e-4)
    assert expected != pytest.approx(every, abs=1e-4)  # the passage's own states are not pooled
    model.save(tmp_path / "judge.safetensors")
    assert json.loads((tmp_path / "judge.json").read_text())["pooling"] == "first"
    loaded = PassageJudge.load(tmp_path / "judge.safetensors", base=base)
    assert loaded.pooling == "first" and loaded.score([question], [passage], [answer])[0] == pytest.approx(
        logit, abs=1e-4)


def test_a_judge_with_an_unknown_pooling_is_refused(judge, tmp_path):
    model, base = judge
    with pytest.raises(InputError, match="pools mean or first"):
        PassageJudge.new(LORA, max_length=48, base=base, pooling="max")
    untyped = PassageJudge.__new__(PassageJudge)  # a base whose tokenizer gives no segment ids
    with pytest.raises(InputError, match="token_type_ids"):
        PassageJudge.__init__(untyped, model.model, type("T", (), {"model_input_names": ["input_ids"]})(),
                              pooling="first")
    model.save(tmp_path / "judge.safetensors")
    data = json.loads((tmp_path / "judge.json").read_text())
    (tmp_path / "judge.json").write_text(json.dumps(dict(data, pooling="cls")))
    with pytest.raises(InputError, match="'pooling' must be one of mean, first"):
        PassageJudge.load(tmp_path / "judge.safetensors", base=base)
