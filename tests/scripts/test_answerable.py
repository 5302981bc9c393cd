"""scripts/answerable.py: which training questions the knowledge base answers, and the others as examples of
abstention."""

from __future__ import annotations

import pytest

from bench_scripts import bench_modules
from openbook.corpus.passages import Passage


@pytest.fixture(scope="module")
def script():
    with bench_modules("answerable") as module:  # scripts/ is on the path too
        yield module


def _p(title: str, text: str) -> Passage:
    return Passage(id=title, title=title, text=text)


ROWS = [{"question": "capital of france", "answers": ["Paris"]},
        {"question": "capital of spain", "answers": ["Madrid"]},
        {"question": "who wrote hamlet", "answers": ["Shakespeare", "William Shakespeare"]},
        {"question": "capital of italy", "answers": ["Rome", "Roma"]},
        {"question": "capital of peru", "answers": ["Lima"]}]
FOUND = [[_p("France", "paris is its capital")],
         [_p("Spain", "a country in europe")],  # no answer anywhere: an example of abstention
         [_p("Hamlet", "a play")],  # no answer anywhere either
         [_p("Italy", "roma is its capital in italian")],  # only a second answer: unclear, left out
         [_p("Lima", "a city")]]  # the answer only in a title: left out


def test_the_answerable_are_kept_and_no_others_without_abstain(script):
    kept, abstaining = script.partition(ROWS, FOUND, None)
    assert kept == ROWS[:1] and abstaining == []


def test_abstain_adds_the_questions_with_no_answer_anywhere_at_most_as_many_as_the_answerable(script):
    kept, abstaining = script.partition(ROWS, FOUND, "not in the passages")
    assert kept == ROWS[:1]
    assert abstaining == [{"question": "capital of spain", "answers": ["not in the passages"]}]  # one, as many as kept
    kept, abstaining = script.partition(ROWS + ROWS[:1], FOUND + FOUND[:1], "none")
    assert [r["question"] for r in abstaining] == ["capital of spain", "who wrote hamlet"]


def test_abstain_share_keeps_at_most_that_share_of_the_mix(script):
    many = ROWS[:1] * 4 + ROWS[1:3] * 2  # four answerable, four with no answer anywhere
    found = FOUND[:1] * 4 + FOUND[1:3] * 2
    for share, n in ((0.5, 4), (0.2, 1), (1 / 3, 2), (0.0, 0)):
        kept, abstaining = script.partition(many, found, "none", share)
        assert len(kept) == 4 and len(abstaining) == n
        assert n / (len(kept) + n) <= share + 1e-12
    with pytest.raises(ValueError, match="0.5"):
        script.partition(many, found, "none", 0.6)
