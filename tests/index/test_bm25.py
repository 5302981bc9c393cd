"""BM25 index (openbook.index.bm25) and reciprocal rank fusion (openbook.index.hybrid), on tiny corpora."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from openbook.corpus import Passage
from openbook.errors import InputError
from openbook.index.bm25 import META_FILE, PAD_SCORE, BM25Index, passage_string, top_k
from openbook.index.hybrid import reciprocal_rank_fusion
from tolerance import tolerance

PASSAGES = [
    Passage("p0", "Paris", "Paris is the capital and largest city of France"),
    Passage("p1", "Ernest Hemingway", "He wrote The Sun Also Rises and A Farewell to Arms"),
    Passage("p2", "Nobel Prize in Physics", "The first prize went to Wilhelm Röntgen in 1901"),
    Passage("p3", "Pacific Ocean", "The Pacific is the largest and deepest ocean on Earth"),
    Passage("p4", "", "Mount Everest is the highest mountain above sea level"),
    Passage("p5", "Berlin", "Berlin is the capital of Germany"),
]


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(PASSAGES)


def test_passage_string_is_title_space_text():
    assert passage_string(Passage("x", "T", "body")) == "T body"
    assert passage_string(Passage("x", "", "body")) == "body"


def test_exact_term_match_ranks_first_and_shapes_follow_the_dense_api(index):
    scores, ids = index.search(["who wrote a farewell to arms", "capital of germany", "highest mountain"], 3)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert scores.shape == ids.shape == (3, 3)
    assert ids[:, 0].tolist() == [1, 5, 4]
    assert (np.diff(scores, axis=1) <= 0).all()  # best first


def test_title_is_indexed_and_accents_and_case_are_folded(index):
    _, ids = index.search(["HEMINGWAY"], 1)  # only in the title
    assert ids[0, 0] == 1
    _, ids = index.search(["rontgen"], 1)  # "Röntgen" in the text
    assert ids[0, 0] == 2
    assert index.tokenize("Röntgen, 1901!") == ["rontgen", "1901"]


def test_scores_are_lucene_bm25():
    corpus = [Passage("a", "", "apple banana apple"), Passage("b", "", "banana cherry"), Passage("c", "", "cherry")]
    bm25 = BM25Index.build(corpus, k1=1.2, b=0.75, stopwords=None)
    avg = (3 + 2 + 1) / 3

    def term(tf, df, length):  # Lucene >= 8: no (k1 + 1) factor, idf always positive
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avg))

    expected = [term(2, 1, 3) + term(1, 2, 3), term(1, 2, 2), 0.0]  # query "apple banana"
    # float32: per query term a log, a ratio and a product (depth 3), summed over 2 query terms
    np.testing.assert_allclose(bm25.scores("apple banana"), expected, **tolerance(expected, terms=2, depth=3, dtype=np.float32))


def test_k_is_clamped_and_queries_without_known_terms_score_zero_in_row_order(index):
    scores, ids = index.search(["zzz unknown", "the of"], 50)  # unknown words; only stopwords
    assert ids.shape == (2, len(PASSAGES))
    assert (scores == 0).all() and ids.tolist() == [list(range(6))] * 2


def test_exclude_skips_rows_and_pads_when_too_few_remain(index):
    _, ids = index.search(["capital"], 2, exclude=[5])
    assert 5 not in ids and ids[0, 0] == 0
    scores, ids = index.search(["capital"], 6, exclude=np.array([0, 1, 2]))
    assert ids[0, :3].tolist() == [5, 3, 4] and ids[0, 3:].tolist() == [-1, -1, -1]
    assert (scores[0, 3:] == PAD_SCORE).all()
    with pytest.raises(InputError, match="out of range"):
        index.search(["capital"], 2, exclude=[6])


def test_top_k_breaks_ties_by_row_and_skips_minus_infinity():
    scores, ids = top_k(np.array([1, 3, 3, 2, 3, -np.inf], np.float32), 3)
    assert ids.tolist() == [1, 2, 4] and scores.tolist() == [3, 3, 3]
    _, ids = top_k(np.array([3, 3, 3, 2], np.float32), 2)
    assert ids.tolist() == [0, 1]
    scores, ids = top_k(np.array([-np.inf, 1.0], np.float32), 2)
    assert ids.tolist() == [1, -1] and scores[1] == PAD_SCORE


def test_save_load_round_trip_memory_maps_and_replaces_atomically(index, tmp_path):
    target = tmp_path / "bm25"
    index.save(target)
    loaded = BM25Index.load(target)
    assert isinstance(loaded._bm25.scores["data"], np.memmap)
    queries = ["largest ocean", "capital city of france", "rontgen"]
    for a, b in zip(index.search(queries, 4), loaded.search(queries, 4)):
        np.testing.assert_array_equal(a, b)
    assert loaded.settings == index.settings and len(loaded) == len(PASSAGES)
    # saving again replaces the directory whole, leaving no temporary siblings behind
    BM25Index.build(PASSAGES[:2], source={"v": 2}).save(target)
    assert len(BM25Index.load(target)) == 2 and BM25Index.load(target).source == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["bm25"]


def test_save_refuses_to_replace_other_directories(index, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a BM25 index"):
        index.save(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_load_errors_name_the_directory(tmp_path):
    with pytest.raises(InputError, match="is not a BM25 index"):
        BM25Index.load(tmp_path)
    (tmp_path / META_FILE).write_text("{not json")
    with pytest.raises(InputError, match="corrupt"):
        BM25Index.load(tmp_path)
    (tmp_path / META_FILE).write_text(json.dumps({"format_version": 99}))
    with pytest.raises(InputError, match="format_version"):
        BM25Index.load(tmp_path)


def test_bad_input_is_an_input_error(index):
    with pytest.raises(InputError, match="empty"):
        BM25Index.build([])
    with pytest.raises(InputError, match="k1"):
        BM25Index.build(PASSAGES, k1=-1)
    with pytest.raises(InputError, match="b must be"):
        BM25Index.build(PASSAGES, b=2)
    with pytest.raises(InputError, match="single string"):
        index.search("capital", 2)
    with pytest.raises(InputError, match="positive integer"):
        index.search(["capital"], 0)


def test_stemmer_is_optional_and_recorded(tmp_path):
    pytest.importorskip("Stemmer")
    stemmed = BM25Index.build(PASSAGES, stemmer="english")
    _, ids = stemmed.search(["writing capitals"], 1)
    assert ids[0, 0] in (0, 5)
    stemmed.save(tmp_path / "s")
    assert BM25Index.load(tmp_path / "s").settings["stemmer"] == "english"


# ---------------------------------------------------------------------------------------------------
# reciprocal rank fusion


def rrf_close(want) -> object:
    """float32 sums of at most two reciprocal ranks (tests/helpers/tolerance.py)."""
    return pytest.approx(want, **_rel_abs(tolerance(want, terms=2, depth=2, dtype=np.float32)))


def _rel_abs(tol: dict[str, float]) -> dict[str, float]:
    return {"rel": tol["rtol"], "abs": tol["atol"]}


def test_rrf_hand_computed():
    a = np.array([[1, 2, 3]])
    b = np.array([[3, 1, -1]])
    scores, ids = reciprocal_rank_fusion([a, b], k=3, c=1)
    # doc1: 1/2 + 1/3; doc3: 1/4 + 1/2; doc2: 1/3
    assert ids.tolist() == [[1, 3, 2]]
    assert scores[0].tolist() == rrf_close([1 / 2 + 1 / 3, 1 / 4 + 1 / 2, 1 / 3])
    scores, ids = reciprocal_rank_fusion([a, b], k=2, c=1, weights=[1, 2])
    # doc3: 1/4 + 2/2 = 1.25 beats doc1: 1/2 + 2/3
    assert ids.tolist() == [[3, 1]]
    assert scores[0].tolist() == rrf_close([1.25, 1 / 2 + 2 / 3])


def test_rrf_default_constant_is_60_and_rows_are_independent():
    scores, ids = reciprocal_rank_fusion([np.array([[4, 5], [6, 7]]), np.array([[5, 4], [7, 8]])], k=2)
    assert ids.tolist() == [[4, 5], [7, 6]]
    assert scores[1].tolist() == rrf_close([1 / 62 + 1 / 61, 1 / 61])


def test_rrf_minus_one_keeps_its_place_duplicates_count_once_ties_by_first_appearance():
    scores, ids = reciprocal_rank_fusion([np.array([[-1, 5]])], k=1, c=0)
    assert ids.tolist() == [[5]] and scores[0, 0] == rrf_close(1 / 2)
    scores, ids = reciprocal_rank_fusion([np.array([[9, 9]])], k=1, c=0)
    assert scores[0, 0] == rrf_close(1.0)
    _, ids = reciprocal_rank_fusion([np.array([[7]]), np.array([[4]])], k=2)
    assert ids.tolist() == [[7, 4]]  # equal scores: the earlier ranking's rank-1 id first


def test_rrf_pads_short_rows_and_checks_input():
    scores, ids = reciprocal_rank_fusion([np.array([[2, -1]])], k=3)
    assert ids.tolist() == [[2, -1, -1]] and (scores[0, 1:] == PAD_SCORE).all()
    with pytest.raises(InputError, match="same number of rows"):
        reciprocal_rank_fusion([np.zeros((2, 1), int), np.zeros((3, 1), int)], k=1)
    with pytest.raises(InputError, match="weights"):
        reciprocal_rank_fusion([np.zeros((1, 1), int)], k=1, weights=[1, 1])
    with pytest.raises(InputError, match="integer ids"):
        reciprocal_rank_fusion([np.zeros((1, 1))], k=1)
    with pytest.raises(InputError, match="non-empty list"):
        reciprocal_rank_fusion([], k=1)
