"""scripts/train_judge.py: each set's yes and no pairs weigh the same, so the judge cannot learn a set's style; a
judge that reads the answer trains on gold answers its passages hold and on wrong answers that look like them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def script():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        patch.syspath_prepend(str(SCRIPTS.parent / "bench"))
        sys.modules.pop("train_judge", None)
        import train_judge
    return train_judge


def test_each_sets_yes_and_no_pairs_weigh_the_same(script):
    balance = script.balance
    pairs = [{"source": "nq", "y": 1}] * 3 + [{"source": "nq", "y": 0}] + [{"source": "wq", "y": 1}] + \
        [{"source": "wq", "y": 0}] * 9
    weight = balance(pairs)
    for source in ("nq", "wq"):
        yes = sum(weight[(p["source"], p["y"])] for p in pairs if p["source"] == source and p["y"])
        no = sum(weight[(p["source"], p["y"])] for p in pairs if p["source"] == source and not p["y"])
        assert yes == pytest.approx(no)
    assert sum(weight[(p["source"], p["y"])] for p in pairs) == pytest.approx(len(pairs))


def test_a_run_is_balanced_unless_told_and_an_answer_reading_judge_pools_the_question_and_answer(script):
    pairs = [{"source": "nq", "y": 1}] + [{"source": "nq", "y": 0}] * 3
    weight, pooling = script.settings(pairs, reads_answer=True, pooling=None, balanced=True)
    assert weight == script.balance(pairs) and pooling == "first"
    weight, pooling = script.settings(pairs, reads_answer=False, pooling=None, balanced=False)
    assert [weight[(p["source"], p["y"])] for p in pairs] == [1.0] * 4 and pooling == "mean"
    assert script.settings(pairs, reads_answer=True, pooling="mean", balanced=False)[1] == "mean"


TEXT = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was designed by Gustave Eiffel's "
        "company and built from 1887 to 1889 as the entrance to the 1889 World's Fair.")


def test_a_wrong_span_looks_like_the_answer_and_is_not_it(script):
    import random

    from openbook.eval.retrieval import answer_in_passage

    def avoid(span):
        return answer_in_passage(span, ["Gustave Eiffel"])

    for seed in range(20):
        rng = random.Random(seed)
        name = script.wrong_span(TEXT, script._shape("Gustave Eiffel"), avoid, rng)
        assert name and len(name.split()) == 2 and all(w[:1].isupper() for w in name.split()) and not avoid(name)
        year = script.wrong_span(TEXT, script._shape("1889"), lambda s: "1889" in s, rng)
        assert year == "1887"  # the only one-word span with a digit that is not the answer
    assert script.wrong_span("the of and", (1, False, False), avoid, random.Random(0)) is None  # stop words only
    echo = script.echo_span("who designed the eiffel tower?", "Eiffel Tower", TEXT, avoid, random.Random(0))
    assert echo == "Eiffel Tower"  # the title repeats the question


def test_answer_pairs_hold_the_gold_answer_or_a_wrong_one(script):
    from openbook.eval.retrieval import answer_in_passage

    rows = [{"question": "who designed the eiffel tower?", "answers": ["Gustave Eiffel"], "mode": "dpr"},
            {"question": "When was the tower built?", "answers": [r"18(87|89)"], "mode": "regex"}]
    pairs = [{"question": r["question"], "title": "Eiffel Tower", "text": TEXT, "source": "nq", "y": 1} for r in rows]
    pairs += [{"question": rows[0]["question"], "title": "Moon", "text": "The Moon orbits the Earth once a month.",
               "source": "nq", "y": 0}]
    for seed in range(8):
        out = script.answer_pairs(pairs, rows, seed=seed)
        gold = [p for p in out if p["y"]]
        assert [p["answer"] for p in gold] == ["Gustave Eiffel", "1887"]  # a regex's answer as the passage has it
        for p in out:  # yes: a gold answer the passage holds; no: a wrong answer, or a gold one it does not hold
            row = next(r for r in rows if r["question"] == p["question"])
            is_gold = answer_in_passage(p["answer"], row["answers"], row["mode"])
            assert p["y"] == (is_gold and answer_in_passage(p["text"], [p["answer"]]))
        assert sum(not p["y"] for p in out) == 3  # one wrong answer for every passage


def test_own_answer_pairs_are_yes_only_where_the_answer_is_right_and_the_passage_holds_it(script):
    def got(answers, mode, answer, texts):
        return {"row": {"question": "who q?", "answers": answers, "mode": mode, "source": "wq"}, "answer": answer,
                "passages": [(1.0, 0.5, f"T{i}", text) for i, text in enumerate(texts)]}

    texts = ["Nothing here.", "It was Ada Lovelace who wrote it.", "Ada Lovelace again."]
    pairs = script.own_answer_pairs([got(["Ada Lovelace"], "dpr", "Ada Lovelace", texts)])
    # the passages holding the answer, and the top one though it does not
    assert [(p["title"], p["y"]) for p in pairs] == [("T0", 0), ("T1", 1), ("T2", 1)]
    assert all(p["answer"] == "Ada Lovelace" and p["source"] == "wq" for p in pairs)
    # a wrong answer the passages hold is no everywhere; a regex row is right by its pattern
    wrong = script.own_answer_pairs([got(["Babbage"], "dpr", "Ada Lovelace", texts)])
    assert [(p["title"], p["y"]) for p in wrong] == [("T0", 0), ("T1", 0), ("T2", 0)]
    regex = script.own_answer_pairs([got(["Ada\\s+Lovelace"], "regex", "Ada Lovelace", texts[1:])])
    assert [p["y"] for p in regex] == [1, 1]
    # an empty answer gives no pair
    assert script.own_answer_pairs([got(["x"], "dpr", " ", texts)]) == []


def test_own_answers_need_an_answer_reading_judge(script, capsys):
    with pytest.raises(SystemExit):
        script.main(["--own-answers"])
    assert "--own-answers needs --reads-answer" in capsys.readouterr().err
