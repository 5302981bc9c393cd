"""Abstention (openbook/rag/abstain.py): the decision rule, RAG.ask's fields on a tiny model, the threshold a run
carries (used only for the model it was calibrated on), the paper preset never abstaining; the slow test asks
the real shipped default a question its book cannot answer and one it can."""

from __future__ import annotations

import json
import math

import pytest

from openbook.errors import InputError
from openbook.models.adapters import LoraSettings
from openbook.models.judge import PassageJudge
from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS, INTERACTIVE, PAPER
from openbook.rag.abstain import (
    FEATURES,
    JUDGED,
    abstain_features,
    abstain_score,
    abstains,
    combined_score,
    content_words,
    run_threshold,
)
from serve_helpers import tiny_rag

JUDGE_LORA = LoraSettings(r=2, alpha=4, dropout=0.0, target_modules=("query", "value"))

QUESTION = "capital of france"


def test_the_rule_is_one_comparison_and_never_without_a_threshold():
    assert abstains(0.49, 0.5) and not abstains(0.5, 0.5) and not abstains(0.51, 0.5)
    assert not abstains(-math.inf, None)  # a model never calibrated never abstains
    assert INTERACTIVE.abstain and not PAPER.abstain and "--no-abstain" in PAPER.flags()


PASSAGES = [(0.2, 0.125, "Lyon", "Lyon is a city."), (0.7, 0.5, "Zürich", "Zürich is the largest city of Switzerland."),
            (0.4, 0.375, "Switzerland", "The city of ZURICH, switzerland")]
ASKED = "What is the largest city of Switzerland?"


def test_the_features_are_read_from_the_answer_and_its_passages():
    f = abstain_features(ASKED, "zurich, Switzerland", PASSAGES, -1.5)
    # the answer's words in order, case and accents aside: in the last passage only (the second has "of" between);
    # the question's content words "largest", "city", "switzerland": 1 of 3 in the first passage, all in the
    # second, 2 in the third (its title counts), averaged under p(z|x); the passage holding the answer mentions 2
    assert f == pytest.approx({"top_score": 0.7, "logprob": -1.5, "support": 0.375, "words": 2.0,
                               "coverage": (0.125 * 1 + 0.5 * 3 + 0.375 * 2) / 3, "judge": -math.inf,
                               "judge_answer": -math.inf, "answer_coverage": 2 / 3})
    assert tuple(f) == FEATURES
    judged = [seen + (logit,) for seen, logit in zip(PASSAGES, (-2.0, 1.5, None))]  # a judge's logits; one missing
    # judge_answer: the best logit of the passages holding the answer; the third holds it but was not judged, so
    # none judged does: the smallest logit
    assert abstain_features(ASKED, "zurich, Switzerland", judged, -1.5) == {**f, "judge": 1.5, "judge_answer": -2.0}
    judged[2] = PASSAGES[2] + (-0.5,)
    assert abstain_features(ASKED, "zurich, Switzerland", judged, -1.5)["judge_answer"] == -0.5
    assert abstain_features(ASKED, "Zürich", judged, -1.5)["judge_answer"] == 1.5  # in the second and the third
    assert abstain_features(ASKED, "Zürich", PASSAGES, None)["support"] == pytest.approx(0.875)
    assert abstain_features(ASKED, "Switzerland Zurich", PASSAGES, -1.0)["support"] == 0.0  # order matters
    # answer_coverage: the best of the passages holding the answer (the second names all three), 0 if none holds it
    assert abstain_features(ASKED, "Zürich", PASSAGES, None)["answer_coverage"] == 1.0
    assert abstain_features(ASKED, "Switzerland Zurich", PASSAGES, -1.0)["answer_coverage"] == 0.0
    empty = abstain_features("", "", [], None)
    assert empty["support"] == empty["words"] == empty["coverage"] == empty["answer_coverage"] == 0.0
    assert empty["top_score"] == empty["logprob"] == -math.inf
    stop_only = abstain_features("Who is it?", "Lyon", PASSAGES, None)  # a question of stop words only
    assert stop_only["coverage"] == stop_only["answer_coverage"] == 0.0 and stop_only["support"] == 0.125
    assert content_words("What is the city, the CITY of Zürich?") == ["city", "zurich"]


def test_the_score_is_the_chosen_signal():
    f = abstain_features(ASKED, "Zürich", PASSAGES, -1.5)
    expected = {"top_score": 0.7, "logprob": -1.5, "combined": combined_score(f, ABSTAIN_WEIGHTS)}[ABSTAIN_SIGNAL]
    assert abstain_score(ASKED, "Zürich", PASSAGES, -1.5) == pytest.approx(expected)
    assert combined_score(f, {"top_score": 2.0, "logprob": 0.5, "support": 0.25, "words": -0.125}) == pytest.approx(
        1.4 - 0.75 + 0.25 * 0.875 - 0.125)
    assert combined_score({**f, "logprob": -math.inf}, {"top_score": 1.0, "logprob": 0.0}) == 0.7  # left out
    assert combined_score(f, {"top_score": 1.0, "judge": 2.0}) == 0.7  # never judged: unknown, left out
    assert set(ABSTAIN_WEIGHTS) <= set(FEATURES)


CALIBRATED = {"signal": ABSTAIN_SIGNAL, "weights": ABSTAIN_WEIGHTS}


def test_a_runs_threshold_is_read_only_for_its_signal():
    assert run_threshold({}, "run.json") is None
    assert run_threshold({"abstain": {**CALIBRATED, "threshold": 0.25}}, "run.json", judged=True) == 0.25
    assert run_threshold({"abstain": {**CALIBRATED, "signal": "something-else", "threshold": 0.25}}, "run.json",
                         judged=True) is None
    if ABSTAIN_SIGNAL == "combined":  # a threshold for another weighting of the two signals is another signal's
        other = {**CALIBRATED, "weights": {**ABSTAIN_WEIGHTS, "logprob": ABSTAIN_WEIGHTS["logprob"] + 1.0},
                 "threshold": 0.25}
        assert run_threshold({"abstain": other}, "run.json", judged=True) is None
    if any(ABSTAIN_WEIGHTS.get(name) for name in JUDGED):  # weights that read the judge need a model with one
        assert run_threshold({"abstain": {**CALIBRATED, "threshold": 0.25}}, "run.json", judged=False) is None
    for bad in (CALIBRATED, {**CALIBRATED, "threshold": "high"}, [0.5]):
        with pytest.raises(InputError, match="run.json"):
            run_threshold({"abstain": bad}, "run.json")


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    return tiny_rag(tmp_path_factory.mktemp("abstain"), model="rag-sequence")[0]


def test_ask_abstains_below_the_threshold_and_says_so(rag):
    (base,) = rag.ask([QUESTION], max_new_tokens=4)
    assert base.abstained is False and base.abstain_threshold is None  # the tiny model has no calibrated threshold
    score = base.abstain_score
    seen = [(p.score, p.prob, p.title, p.text) for p in base.passages]
    assert score == abstain_score(QUESTION, base.answer, seen, base.logprob)
    (high,) = rag.ask([QUESTION], max_new_tokens=4, abstain_threshold=score + 1.0)
    (low,) = rag.ask([QUESTION], max_new_tokens=4, abstain_threshold=score - 1.0)
    assert high.abstained and not low.abstained
    record = high.to_dict()
    assert record["abstained"] is True and record["abstain_score"] == score
    assert record["abstain_threshold"] == score + 1.0
    assert record["answer"] == base.answer and len(record["passages"]) == len(base.passages)  # the user sees why
    assert low.to_dict()["abstained"] is False and low.to_dict()["abstain_score"] == score
    with pytest.raises(InputError, match="abstain_threshold"):
        rag.ask([QUESTION], abstain_threshold=math.nan)


def test_the_models_own_threshold_applies_unless_abstain_is_off(rag, monkeypatch):
    (base,) = rag.ask([QUESTION], max_new_tokens=4)
    monkeypatch.setattr(rag, "abstain_threshold", base.abstain_score + 1.0, raising=False)
    (own,) = rag.ask([QUESTION], max_new_tokens=4)
    (off,) = rag.ask([QUESTION], max_new_tokens=4, abstain=False)
    (paper,) = rag.ask([QUESTION], max_new_tokens=4, abstain=PAPER.abstain)
    assert own.abstained and own.abstain_threshold == base.abstain_score + 1.0
    assert not off.abstained and not paper.abstained and off.abstain_score == base.abstain_score


def test_predict_uses_the_paper_preset_and_never_abstains(rag, monkeypatch):
    from openbook.eval.evaluate import predict

    monkeypatch.setattr(rag, "abstain_threshold", math.inf, raising=False)  # would abstain on everything
    (answer,) = predict(rag, [QUESTION], num_beams=1, max_new_tokens=4)
    assert answer.abstained is False


def test_a_run_carries_its_threshold_for_its_own_settings_only(tmp_path, monkeypatch):
    from openbook.rag.assemble import load_run
    from tiny_encoders import save_bert
    from tiny_runs import save_tiny_models, train_run

    # the judge's base is the packaged MiniLM; a tiny BERT stands in for it here
    monkeypatch.setattr("openbook.models.loading.packaged_minilm_path", lambda: save_bert(tmp_path / "bert"))

    run = train_run(tmp_path, "run", "rag-sequence", *save_tiny_models(tmp_path))
    assert load_run(run).abstain_threshold is None  # never calibrated
    spec = json.loads((run / "run.json").read_text())
    spec["abstain"] = {**CALIBRATED, "threshold": 0.125, "calibrated_by": "bench/abstention.py"}
    (run / "run.json").write_text(json.dumps(spec))
    if any(ABSTAIN_WEIGHTS.get(name) for name in JUDGED):  # the weights read the judge: no judge, no threshold
        assert load_run(run).abstain_threshold is None and load_run(run).passage_judge is None
    PassageJudge.new(JUDGE_LORA).save(run / "judge.safetensors")
    spec["abstain"]["judge"] = "judge.safetensors"
    (run / "run.json").write_text(json.dumps(spec))
    judge = load_run(run).passage_judge
    assert judge is not None and judge._judge is None  # loaded when it first judges, not for retrieval
    assert len(judge.score(["q"], [("t", "paris")])) == 1 and isinstance(judge._judge, PassageJudge)
    assert load_run(run).abstain_threshold == 0.125
    assert load_run(run, k=spec["k"]).abstain_threshold == 0.125  # the same settings, named
    from openbook.rag.assemble import load_model

    for dtype in ("bfloat16", "float32"):  # the judge runs in bfloat16 only with a bfloat16 generator
        assert load_model(run=run, dtype=dtype).passage_judge.dtype == dtype
    for other in ({"retriever": "bm25"}, {"model": "rag-token"}, {"k": spec["k"] + 1}):
        assert load_run(run, **other).abstain_threshold is None, other
    for bad in ("../judge.safetensors", "missing.safetensors", 3):
        spec["abstain"]["judge"] = bad
        (run / "run.json").write_text(json.dumps(spec))
        with pytest.raises(InputError, match="abstain judge"):
            load_run(run)


def test_ask_judges_every_passage_and_the_score_reads_it(rag, tmp_path):
    from tiny_encoders import save_bert

    (plain,) = rag.ask([QUESTION], max_new_tokens=4)
    assert all(p.judge is None for p in plain.passages)
    judge = PassageJudge.new(JUDGE_LORA, base=save_bert(tmp_path / "bert")).eval()
    rag.use_judge(judge)
    try:
        (judged,) = rag.ask([QUESTION], max_new_tokens=4)
    finally:
        rag.use_judge(None)
    logits = judge.score([QUESTION] * len(judged.passages), [(p.title, p.text) for p in judged.passages])
    assert [p.judge for p in judged.passages] == pytest.approx(logits, abs=1e-5)
    assert "passage_judge" not in dict(rag.named_children())  # not part of the model's weights
    seen = [(p.score, p.prob, p.title, p.text, p.judge) for p in judged.passages]
    assert judged.abstain_score == abstain_score(QUESTION, judged.answer, seen, judged.logprob)
    assert judged.to_dict()["passages"][0]["judge"] == judged.passages[0].judge


def test_ask_hands_a_judge_that_reads_answers_each_passage_s_answer(rag, tmp_path):
    from tiny_encoders import save_bert

    judge = PassageJudge.new(JUDGE_LORA, base=save_bert(tmp_path / "bert"), reads_answer=True).eval()
    rag.use_judge(judge)
    try:
        answers = rag.ask([QUESTION, "what else ?"], max_new_tokens=4)
    finally:
        rag.use_judge(None)
    for answer in answers:
        logits = judge.score([answer.question] * len(answer.passages), [(p.title, p.text) for p in answer.passages],
                             [answer.answer] * len(answer.passages))
        assert [p.judge for p in answer.passages] == pytest.approx(logits, abs=1e-5)


# -- the real shipped default -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.shipped_default
def test_the_default_abstains_on_a_question_its_book_cannot_answer():
    """The shipped default has a calibrated threshold; the demo book (Wikipedia) answers "Who wrote Hamlet?" but
    holds nothing on a company's holiday rules."""
    from openbook.rag import RAG

    rag = RAG.load()
    assert rag.abstain_threshold is not None
    known, unknown = rag.ask(["Who wrote Hamlet?", "How many vacation days do new employees get at Initech?"])
    assert not known.abstained and "Shakespeare" in known.answer, known
    assert unknown.abstained and unknown.abstain_score < unknown.abstain_threshold, unknown
    (forced,) = rag.ask([unknown.question], abstain=False)
    assert not forced.abstained
