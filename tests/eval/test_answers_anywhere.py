"""answers_anywhere: recall at k = every passage, equal to answer_in_passage over every text, however chunked."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest

from openbook.eval.retrieval import answer_in_passage, answers_anywhere

WORDS = ["Röntgen", "RÖNTGEN", "Rontgen", "ΟΔΟΣ", "οδος", "Straße", "STRASSE", "18", ",", "2018", "U.S.",
         "u.s", "the", "a", "İstanbul", "istanbul", "Deadpool", "deadpool 2", "May", "1", "-", "x"]


def brute(texts, answers, mode):
    return np.array([any(answer_in_passage(t, row, mode) for t in texts) for row in answers])


def random_texts(rng: random.Random, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 12))]
        text = " ".join(words)
        texts.append(unicodedata.normalize(rng.choice(["NFC", "NFD"]), text))
    return texts


@pytest.mark.parametrize("mode", ["dpr", "lenient"])
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_equal_to_matching_every_passage(mode, chunk):
    rng = random.Random(f"{mode}{chunk}")
    for _ in range(20):
        texts = random_texts(rng, rng.randint(0, 15))
        answers = [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
                    for _ in range(rng.randint(1, 3))] for _ in range(12)]
        answers.append([""])  # no tokens: never found
        answers.append(["!!!", "..."])  # punctuation only: no letters in the cue
        got = answers_anywhere(iter(texts), answers, mode, chunk=chunk)
        np.testing.assert_array_equal(got, brute(texts, answers, mode))


def test_regex_answers_are_patterns_found_in_one_passage():
    texts = ["founded in 1998 by", "Larry Page", "and Sergey", "Brin"]
    answers = [[r"Larry\s+Page"], [r"Page\s+and"], [r"sergey brin|nobody"], [r"^Brin$"], [r"19\d\d"],
               [r"\ABrin\Z"], [r"\ABrin"], [r"^Larry"], [r"by$"], [r"^and\s+Sergey$"]]
    for chunk in (1, 2, 10):
        got = answers_anywhere(texts, answers, "regex", chunk=chunk)
        np.testing.assert_array_equal(got, brute(texts, answers, "regex"))
        assert got.tolist() == [True, False, False, True, True, True, True, True, True, True]  # never across two


def test_a_bad_mode_or_chunk_is_an_input_error():
    from openbook.errors import InputError

    with pytest.raises(InputError, match="mode"):
        answers_anywhere(["x"], [["x"]], "exact")
    with pytest.raises(InputError, match="chunk"):
        answers_anywhere(["x"], [["x"]], chunk=0)
