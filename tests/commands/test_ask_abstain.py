"""`openbook ask` abstains by default (with the model's threshold), says so in one line or in --json with the
score and threshold, and `--no-abstain` / `--abstain-threshold` change that; on a tiny RAG-Sequence model."""

from __future__ import annotations

import json

import pytest

from openbook import cli
from openbook.commands import options
from serve_helpers import tiny_rag

QUESTION = "capital of france"


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    return tiny_rag(tmp_path_factory.mktemp("ask-abstain"), model="rag-sequence")[0]


@pytest.fixture
def score(rag):
    (answer,) = rag.ask([QUESTION], max_new_tokens=4)
    return answer.abstain_score


def ask(capsys, monkeypatch, rag, threshold, *flags):
    monkeypatch.setattr(rag, "abstain_threshold", threshold, raising=False)  # as load_run sets it
    monkeypatch.setattr(options, "model_from_args", lambda args: rag)
    assert cli.main(["ask", QUESTION, "--max-new-tokens", "4", *flags]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in flags else out


def test_json_says_abstained_with_the_score_and_threshold(capsys, monkeypatch, rag, score):
    record = ask(capsys, monkeypatch, rag, score + 1.0, "--json")
    assert record["abstained"] is True and record["abstain_score"] == pytest.approx(score)
    assert record["abstain_threshold"] == score + 1.0 and record["passages"]  # the passages show why
    record = ask(capsys, monkeypatch, rag, score - 1.0, "--json")
    assert record["abstained"] is False and record["abstain_score"] == pytest.approx(score)


def test_the_plain_output_says_the_book_has_no_answer(capsys, monkeypatch, rag, score):
    out = ask(capsys, monkeypatch, rag, score + 1.0)
    first = out.splitlines()[0]
    assert first.startswith("The knowledge base does not seem to hold the answer")
    assert f"{score:.3f}" in first and f"{score + 1.0:.3f}" in first and "p(z|x)" in out
    assert "does not seem" not in ask(capsys, monkeypatch, rag, score - 1.0)


def test_no_abstain_and_an_explicit_threshold(capsys, monkeypatch, rag, score):
    record = ask(capsys, monkeypatch, rag, score + 1.0, "--json", "--no-abstain")
    assert record["abstained"] is False and record["abstain_score"] == pytest.approx(score)
    record = ask(capsys, monkeypatch, rag, None, "--json")  # a model never calibrated never abstains
    assert record["abstained"] is False and record["abstain_threshold"] is None
    record = ask(capsys, monkeypatch, rag, None, "--json", "--abstain-threshold", str(score + 1.0))
    assert record["abstained"] is True and record["abstain_threshold"] == score + 1.0


def test_a_threshold_that_is_not_a_number_is_refused(capsys):
    assert cli.main(["ask", QUESTION, "--abstain-threshold", "nan"]) == 2
    assert "--abstain-threshold: must be a finite number" in capsys.readouterr().err
