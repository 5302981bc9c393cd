"""Task metrics (openbook.eval.metrics): tiny hand-checked gold/guess fixtures, KILT style."""

from __future__ import annotations

import math

import pytest

from openbook.errors import InputError
from openbook.eval.metrics import (
    DEFAULT_QBLEU_WEIGHTS,
    aggregate,
    bleu_1,
    distinct_ngram_ratio,
    exact_match,
    gold_title_overlap,
    label_accuracy,
    normalize_answer,
    q_bleu_1,
    qbleu_token_classes,
    recall_at_k,
    regex_match,
    rouge_l,
    sentence_bleu_1,
    title_key,
    token_f1,
    word_tokens,
)

RONTGEN_NFC = "R\u00f6ntgen"  # precomposed o-umlaut
RONTGEN_NFD = "Ro\u0308ntgen"  # o + combining diaeresis

# ---------------------------------------------------------------------------------------------------
# normalisation, exact match


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("The  Quick, Brown-Fox!", "quick brownfox"),
        ("an apple a day", "apple day"),
        ("Theater", "theater"),  # articles only as whole words
        ("  A\tB\nC  ", "b c"),
        ("\u2018hi\u2019", "\u2018hi\u2019"),  # only ASCII punctuation is removed, as in SQuAD
    ],
)
def test_normalize_answer(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_normalize_answer_unicode_composition_but_not_accents():
    assert normalize_answer(RONTGEN_NFC) == normalize_answer(RONTGEN_NFD)
    assert normalize_answer("Rontgen") != normalize_answer(RONTGEN_NFC)


def test_exact_match():
    assert exact_match("The Eiffel Tower.", ["eiffel tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower", "Tower"]) == 0.0
    assert exact_match("tower", ["Eiffel Tower", "the Tower!"]) == 1.0  # max over golds
    assert exact_match(f"Wilhelm {RONTGEN_NFD}", [f"wilhelm {RONTGEN_NFC}"]) == 1.0


@pytest.mark.parametrize("golds", [[], "Paris", [None]])
def test_exact_match_rejects_bad_golds(golds):
    with pytest.raises(InputError):
        exact_match("Paris", golds)


# ---------------------------------------------------------------------------------------------------
# regex match (CuratedTrec)


def test_regex_match_anywhere_case_insensitive():
    assert regex_match("It was finished in 1889 by Gustave Eiffel", [r"18\d\d"]) == 1.0
    assert regex_match("GUSTAVE eiffel", ["Gustave Eiffel"]) == 1.0
    assert regex_match("Paris", ["London", "Pa(ris)?"]) == 1.0  # any pattern
    assert regex_match("Lyon", ["London", "Paris"]) == 0.0
    assert regex_match("first line\nParis", ["^Paris$"]) == 1.0  # MULTILINE


def test_regex_match_unicode():
    assert regex_match(f"Wilhelm {RONTGEN_NFD}", [RONTGEN_NFC]) == 1.0
    assert regex_match("Wilhelm Rontgen", [RONTGEN_NFC]) == 0.0


def test_regex_match_invalid_pattern_is_named():
    bad = "xenon|Sievert \\(Sv\\)\\"  # ends in a lone backslash, as one CuratedTrec pattern does
    with pytest.raises(InputError, match=r"Sievert"):
        regex_match("xenon", ["xenon", bad])


# ---------------------------------------------------------------------------------------------------
# token F1


def test_token_f1_partial_overlap():
    # prediction tokens [eiffel, tower, in, paris], gold [eiffel, tower]: P = 2/4, R = 2/2 -> F1 = 2/3
    assert token_f1("the Eiffel Tower in Paris", ["Eiffel Tower"]) == pytest.approx(2 / 3)
    # against "Paris, France": P = 1/4, R = 1/2 -> F1 = 1/3; the max over golds is 2/3
    assert token_f1("the Eiffel Tower in Paris", ["Paris, France"]) == pytest.approx(1 / 3)
    assert token_f1("the Eiffel Tower in Paris", ["Paris, France", "Eiffel Tower"]) == pytest.approx(2 / 3)
    # repeated tokens count once each in the intersection: P = 1/2, R = 1 -> 2/3
    assert token_f1("tower tower", ["tower"]) == pytest.approx(2 / 3)
    assert token_f1("Lyon", ["Paris"]) == 0.0


def test_token_f1_empty_after_normalisation():
    assert token_f1("the", ["a"]) == 1.0  # both empty: agrees with exact match
    assert token_f1("the", ["Paris"]) == 0.0


# ---------------------------------------------------------------------------------------------------
# BLEU-1 and ROUGE-L

CAT, CAT_REF = "the cat sat on the mat", "the cat is on the mat"
DOG, DOG_REF = "a dog barked", "the dog barked loudly"


def test_sentence_bleu_1_by_hand():
    # 5 of 6 unigrams match (clipped: "the" twice in both), same length -> no brevity penalty
    assert sentence_bleu_1(CAT, [CAT_REF]) == pytest.approx(5 / 6)
    # 2 of 3 match, prediction 3 tokens vs reference 4 -> BP = exp(1 - 4/3)
    assert sentence_bleu_1(DOG, DOG_REF) == pytest.approx(2 / 3 * math.exp(1 - 4 / 3))
    # the closest reference length (2) is used for the brevity penalty
    assert sentence_bleu_1("the cat", ["the cat", "a cat is on the mat"]) == pytest.approx(1.0)
    assert sentence_bleu_1("The Cat.", ["the cat."]) == pytest.approx(1.0)
    assert sentence_bleu_1("The Cat", ["the cat"], lowercase=False) == 0.0
    assert sentence_bleu_1("xyz", ["the cat"]) == 0.0


def test_corpus_bleu_1_by_hand():
    # corpus sums: 7 clipped matches of 9 predicted tokens; lengths 9 vs 10 -> BP = exp(1 - 10/9)
    expected = 7 / 9 * math.exp(1 - 10 / 9)
    assert bleu_1([CAT, DOG], [[CAT_REF], [DOG_REF]]) == pytest.approx(expected)
    assert bleu_1([CAT, DOG], [CAT_REF, DOG_REF]) == pytest.approx(expected)  # a string is one reference
    mean_of_sentences = (5 / 6 + 2 / 3 * math.exp(1 - 4 / 3)) / 2
    assert abs(expected - mean_of_sentences) > 0.01  # corpus BLEU is not the mean of sentence BLEUs


def test_corpus_bleu_1_varying_reference_counts():
    # example 2 has two references; "the dog barked" (3 tokens) is closest to the 3-token prediction
    score = bleu_1([CAT, DOG], [[CAT_REF], [DOG_REF, "the dog barked"]])
    assert score == pytest.approx(7 / 9)  # lengths 6 + 3 = 9: no brevity penalty


@pytest.mark.parametrize(
    "predictions, references",
    [([], []), (["a"], []), (["a"], [[]]), ("a", ["a"]), (["a"], [[1]])],
)
def test_bleu_1_rejects_bad_input(predictions, references):
    with pytest.raises(InputError):
        bleu_1(predictions, references)


def test_bleu_1_unknown_tokenizer():
    with pytest.raises(InputError, match="tokenize"):
        bleu_1(["a"], ["a"], tokenize="bogus")


def test_rouge_l_by_hand():
    # LCS "the cat on the mat" = 5 of 6 tokens on both sides
    assert rouge_l(CAT, [CAT_REF]) == pytest.approx(5 / 6)
    # LCS "the gunman" = 2 of 4 on both sides
    assert rouge_l("the gunman kill police", "police killed the gunman") == pytest.approx(0.5)
    # best reference
    assert rouge_l(CAT, ["something else entirely", CAT_REF]) == pytest.approx(5 / 6)
    assert rouge_l("xyz", ["the cat"]) == 0.0


def test_rouge_l_keeps_non_ascii_words():
    # tokens: [röntgen, discovered, x, rays] vs [wilhelm, röntgen, discovered, x, rays]: LCS 4, P 1, R 4/5
    score = rouge_l(f"{RONTGEN_NFD} discovered X-rays", f"Wilhelm {RONTGEN_NFC} discovered x rays")
    assert score == pytest.approx(2 * 0.8 / 1.8)


def test_word_tokens():
    assert word_tokens(f"Dante's {RONTGEN_NFD}, 1895!") == ["dante", "s", RONTGEN_NFC.lower(), "1895"]


# ---------------------------------------------------------------------------------------------------
# Q-BLEU-1


def test_qbleu_token_classes():
    classes = qbleu_token_classes("Which river flows through Paris? Seine is 776 km long.")
    assert classes == {
        "question": ["which", "river"],  # the word after "which" is the answer type
        "function": ["through", "is"],
        "named_entity": ["paris", "776"],  # capitalised mid-sentence, or a number
        "relevant": ["flows", "seine", "km", "long"],  # sentence-initial "Seine" is not taken as an entity
    }


def test_q_bleu_1_identical_is_one():
    clue = "This epic poem by Dante is divided into 3 parts"
    assert q_bleu_1(clue, clue) == pytest.approx(1.0)
    # no named entity on either side: the empty class agrees
    assert q_bleu_1("what is the longest river", "What is the longest river?") == pytest.approx(1.0)


def test_q_bleu_1_by_hand():
    # classes: question [who], relevant [wrote], function [the], entities [divine, comedy] vs [comedy]
    # P = 1; R = 0.36 + 0.20 + 0.03 + 0.41 * 1/2 = 0.795; Answerability = 2PR / (P + R)
    recall = 1 - 0.41 / 2
    answerability = 2 * recall / (1 + recall)
    bleu = math.exp(1 - 5 / 4)  # 4 of 4 unigrams match, 4 vs 5 tokens
    expected = 0.66 * answerability + 0.34 * bleu
    assert q_bleu_1("Who wrote the Comedy?", "Who wrote the Divine Comedy?") == pytest.approx(expected)


def test_q_bleu_1_leaves_out_classes_absent_from_both():
    # no entities on either side: weights 0.36 (relevant), 0.20 (question), 0.03 (function) rescaled by 0.59;
    # relevant [longest, river] vs [widest, river] -> 1/2 each way; question [what, is] and function [the] match
    answerability = (0.36 * 0.5 + 0.20 + 0.03) / 0.59
    expected = 0.66 * answerability + 0.34 * (4 / 5)  # BLEU-1: 4 of 5 unigrams, equal lengths
    assert q_bleu_1("What is the widest river?", "What is the longest river?") == pytest.approx(expected)
    # unrelated one-word questions get nothing for the classes neither has
    assert q_bleu_1("a", "b") == 0.0


def test_q_bleu_1_named_entity_weighs_more_than_function_word():
    reference = "This epic poem by Dante is divided into 3 parts"
    missing_entity = q_bleu_1("This epic poem by is divided into 3 parts", reference)
    missing_function_word = q_bleu_1("This epic poem Dante is divided into 3 parts", reference)
    # both drop one of 10 tokens, so BLEU-1 is equal; the entity carries weight 0.41, "by" 0.03
    assert missing_entity < missing_function_word < 1.0
    # with the n-gram part alone (delta = 0) they tie
    zero = dict(delta=0.0)
    assert q_bleu_1("This epic poem by is divided into 3 parts", reference, **zero) == pytest.approx(
        q_bleu_1("This epic poem Dante is divided into 3 parts", reference, **zero)
    )


def test_q_bleu_1_weights():
    assert DEFAULT_QBLEU_WEIGHTS == {"w_r": 0.36, "w_ne": 0.41, "w_q": 0.20, "w_f": 0.03, "delta": 0.66}
    assert q_bleu_1("a", "b", w_r=0.25, w_ne=0.25, w_q=0.25, w_f=0.25) == 0.0
    with pytest.raises(InputError, match="sum to 1"):
        q_bleu_1("a", "b", w_r=0.5, w_ne=0.5, w_q=0.5, w_f=0.5)
    with pytest.raises(InputError, match="delta"):
        q_bleu_1("a", "b", delta=1.5)


# ---------------------------------------------------------------------------------------------------
# labels, diversity, retrieval, aggregation


def test_label_accuracy():
    predictions = ["SUPPORTS", " refutes ", "NOT ENOUGH INFO"]
    golds = ["supports", "REFUTES", "supports"]
    assert label_accuracy(predictions, golds) == pytest.approx(2 / 3)
    with pytest.raises(InputError, match="length"):
        label_accuracy(["yes"], ["yes", "no"])
    with pytest.raises(InputError):
        label_accuracy([], [])


def test_distinct_ngram_ratio_by_hand():
    texts = ["the cat sat on the mat", "The cat sat down."]
    # trigrams: 4 + 2 = 6, "the cat sat" twice -> 5 distinct
    assert distinct_ngram_ratio(texts) == pytest.approx(5 / 6)
    # unigrams: 6 + 4 = 10 tokens, distinct {the, cat, sat, on, mat, down}
    assert distinct_ngram_ratio(texts, n=1) == pytest.approx(6 / 10)
    with pytest.raises(InputError, match="3-grams"):
        distinct_ngram_ratio(["too short"])
    with pytest.raises(InputError):
        distinct_ngram_ratio(texts, n=0)


def test_recall_at_k():
    hits = [[False, True, False], [True], [False, False], []]
    assert recall_at_k(hits, [1, 2, 10]) == {1: 0.25, 2: 0.5, 10: 0.5}
    with pytest.raises(InputError):
        recall_at_k(hits, [0])
    with pytest.raises(InputError):
        recall_at_k([], [1])


def test_recall_at_k_is_one_function_for_lists_and_arrays():
    """Retrieval evaluation and the task metrics share one recall@k (it also takes a (queries, ranks) array)."""
    import numpy as np

    from openbook.eval import retrieval

    assert retrieval.recall_at_k is recall_at_k
    rectangular = [[False, True, False], [False, False, False], [True, True, False], [False, False, True]]
    want = {1: 0.25, 2: 0.5, 3: 0.75, 10: 0.75}
    assert recall_at_k(np.array(rectangular), np.array([1, 2, 3, 10])) == want == recall_at_k(rectangular, [1, 2, 3, 10])
    with pytest.raises(InputError):
        recall_at_k(np.zeros((0, 3), bool), [1])
    with pytest.raises(InputError, match="list of booleans"):
        recall_at_k(np.array([True, False]), [1])  # one query's hits, not a list of them


def test_gold_title_overlap():
    retrieved = [["Ghost (1990 film)", "Patrick Swayze"], ["Paris", "France", "Seine"], ["Anything"]]
    golds = [{"Ghost_-LRB-1990_film-RRB-"}, {"Seine"}, set()]  # FEVER spelling; no evidence for claim 3
    assert gold_title_overlap(retrieved, golds) == {1: 0.5, 10: 1.0}
    assert gold_title_overlap(retrieved, golds, ks=(1, 10), skip_empty=False) == pytest.approx({1: 1 / 3, 10: 2 / 3})
    with pytest.raises(InputError):
        gold_title_overlap([["A"]], [set()])
    with pytest.raises(InputError, match="length"):
        gold_title_overlap([["A"]], [])
    # any k (the FEVER experiment's --overlap-k); a claim is a hit if any of its gold articles is retrieved
    retrieved = [["Paris", "France"], ["Rome", "Savages (2012 film)"], ["Everest", "Nepal"], ["Nobel", "Alfred Nobel"]]
    golds = [["Paris"], ["Savages_-LRB-2012_film-RRB-"], ["K2"], ["Nobel_Prize", "Alfred_Nobel"]]
    assert gold_title_overlap(retrieved, golds, ks=(1, 2)) == {1: 1 / 4, 2: 3 / 4}
    assert gold_title_overlap(retrieved, golds, ks=1) == {1: 1 / 4}


def test_title_key_reads_fever_and_knowledge_base_titles_alike():
    assert title_key("Savages_-LRB-2012_film-RRB-") == title_key("Savages (2012 film)") == "Savages (2012 film)"
    assert title_key("Star_Trek-COLON-_Discovery") == "Star Trek: Discovery"
    assert title_key("Nikolaj_Coster-Waldau") == "Nikolaj Coster-Waldau"  # a real hyphen stays
    assert title_key("A_-LSB-x-RSB-_-LCB-y-RCB-") == "A [x] {y}"
    assert title_key(" Ghost  (1990_film) ") == "Ghost (1990 film)"  # whitespace collapsed
    assert title_key("Cafe\u0301") == title_key("Caf\u00e9")  # Unicode NFC
    # Wikipedia's case rule: the first letter is always upper case, the rest is part of the title
    assert title_key("iPod") == title_key("IPod") == "IPod"
    assert title_key("Red_Dwarf") != title_key("Red dwarf")  # the sitcom and the star
    assert gold_title_overlap([["Red dwarf"], ["iPod"]], [["Red_Dwarf"], ["IPod"]], ks=1) == {1: 0.5}


def test_aggregate():
    assert aggregate([1.0, 0.0, 0.5]) == pytest.approx(0.5)
    assert aggregate(exact_match(p, g) for p, g in [("Paris", ["paris"]), ("Lyon", ["Paris"])]) == 0.5
    with pytest.raises(InputError, match="no values"):
        aggregate([])
    with pytest.raises(InputError):
        aggregate([float("nan")])
