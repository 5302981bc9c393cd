"""Retrieval evaluation: has_answer and gold matching, recall@k, question files, retrievers, CLI."""

from __future__ import annotations

import gzip
import json
import types
import unicodedata
import warnings

import numpy as np
import pytest

from openbook import cli
from openbook.corpus import Passage
from openbook.errors import InputError
from openbook.eval import (
    answer_in_passage,
    evaluate_retrieval,
    gold_match,
    knowledge_base_bm25,
    read_nq_open,
    recall_at_k,
    standard_retrievers,
)
from openbook.index.bm25 import BM25Index

# ---------------------------------------------------------------------------------------------------
# answer matching (DPR has_answer)


@pytest.mark.parametrize(
    "text,answers,expected",
    [
        ("The capital of France is PARIS.", ["paris"], True),  # case
        ("Paris is in France", ["Parisian"], False),  # whole tokens only
        ("the Parisian metro", ["Paris"], False),
        ("Ernest Hemingway wrote it", ["ernest hemingway"], True),  # multi-token, contiguous
        ("Hemingway, Ernest wrote it", ["Ernest Hemingway"], False),
        ("released on May 18, 2018.", ["May 18, 2018"], True),  # punctuation is a token of its own
        ("released on May 18, 2018.", ["May 18 2018"], False),
        ("won (Röntgen) in 1901", ["röntgen"], True),  # parentheses split off
        ("won by Röntgen", ["Rontgen"], False),  # DPR keeps accents
        ("nothing here", ["", "   "], False),  # empty answers never match
        ("a b c", ["x", "c"], True),  # any answer
    ],
)
def test_answer_in_passage_dpr(text, answers, expected):
    assert answer_in_passage(text, answers) is expected


def test_composed_and_decomposed_accents_match():
    composed = "Wilhelm Conrad Röntgen"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    assert answer_in_passage(f"awarded to {decomposed}.", [composed])
    assert answer_in_passage(f"awarded to {composed}.", [decomposed])


def test_lenient_mode_ignores_accents_and_punctuation():
    assert answer_in_passage("won by Röntgen", ["Rontgen"], mode="lenient")
    assert answer_in_passage("released on May 18, 2018.", ["May 18 2018"], mode="lenient")
    assert not answer_in_passage("the Parisian metro", ["Paris"], mode="lenient")
    with pytest.raises(InputError, match="match mode"):
        answer_in_passage("x", ["x"], mode="fuzzy")


def test_gold_match_same_title_and_chunk_containment():
    gold = {"title": "Deadpool 2", "text": "Deadpool 2 is scheduled to be released on May 18, 2018.  A sequel is planned."}
    assert gold_match(Passage("nqgold:1", "Deadpool 2", "Deadpool 2 is scheduled to be released on May 18, 2018."), gold)
    assert gold_match(Passage("x", "Deadpool 2", "Deadpool 2 is scheduled to be released on May 18, 2018. A sequel is planned."), gold)  # whitespace
    assert gold_match({"title": "Deadpool 2", "text": "Intro. " + gold["text"] + " More."}, gold)  # longer passage
    assert not gold_match(Passage("x", "Deadpool", "Deadpool 2 is scheduled to be released on May 18, 2018."), gold)
    assert not gold_match(Passage("x", "Deadpool 2", "A different text about the film."), gold)
    assert not gold_match(Passage("x", "Deadpool 2", ""), gold)
    assert not gold_match(Passage("x", "Deadpool 2", "anything"), None)


def test_recall_at_k_hand_computed():
    hits = np.array([[False, True, False], [False, False, False], [True, True, False], [False, False, True]])
    assert recall_at_k(hits, [1, 2, 3, 10]) == {1: 0.25, 2: 0.5, 3: 0.75, 10: 0.75}
    with pytest.raises(InputError):
        recall_at_k(np.zeros((0, 3), bool), [1])


# ---------------------------------------------------------------------------------------------------
# question files


ORACLE = [
    {"question": "who got the first nobel prize in physics", "answers": ["Wilhelm Conrad Röntgen"],
     "ctxs": [{"title": "Nobel", "text": "The first prize went to Wilhelm Conrad Röntgen.", "isgold": True}],
     "nq_annotated_gold": {}},
    {"question": "capital of france", "answers": ["Paris"],
     "ctxs": [{"title": "X", "text": "not gold", "isgold": False}, {"title": "Paris", "text": "Paris is", "isgold": True}]},
    {"question": "largest ocean", "answers": ["Pacific"], "ctxs": [{"title": "Pacific", "text": "The Pacific"}]},
]


def write_jsonl(path, records, compress=False):
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_read_nq_open_oracle_gz_and_plain(tmp_path):
    records = read_nq_open(write_jsonl(tmp_path / "q.jsonl.gz", ORACLE, compress=True))
    assert [r["gold"]["title"] for r in records] == ["Nobel", "Paris", "Pacific"]
    assert records[0] == {
        "question": ORACLE[0]["question"], "answers": ["Wilhelm Conrad Röntgen"],
        "gold": {"title": "Nobel", "text": "The first prize went to Wilhelm Conrad Röntgen."},
    }
    plain = read_nq_open(write_jsonl(tmp_path / "p.jsonl", [{"question": "q?", "answers": ["a", "b"]}]))
    assert plain == [{"question": "q?", "answers": ["a", "b"], "gold": None}]
    assert len(read_nq_open(tmp_path / "q.jsonl.gz", limit=2)) == 2


def test_read_nq_open_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "answers": ["a"]}) + "\n\n{oops\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:3: malformed JSON"):
        read_nq_open(path)
    write_jsonl(path, [{"question": "q", "answers": ["a"]}, {"question": "q2", "answers": "a"}])
    with pytest.raises(InputError, match=r"bad\.jsonl:2: 'answers' must be"):
        read_nq_open(path)
    write_jsonl(path, [{"answers": ["a"]}])
    with pytest.raises(InputError, match=r"bad\.jsonl:1: 'question'"):
        read_nq_open(path)
    path.write_text("")
    with pytest.raises(InputError, match="no questions"):
        read_nq_open(path)
    with pytest.raises(InputError, match="no such file"):
        read_nq_open(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------------------------------------
# evaluate_retrieval with fixed retrievers


def test_evaluate_retrieval_reports_answer_and_gold_recall():
    questions = [
        {"question": "q1", "answers": ["paris"], "gold": {"title": "Paris", "text": "Paris is the capital"}},
        {"question": "q2", "answers": ["ocean"], "gold": None},
    ]
    paris = Passage("a", "Paris", "Paris is the capital")
    other = Passage("b", "Other", "the ocean is large")
    calls = []

    def passages(qs, k):
        calls.append((list(qs), k))
        return [[other, paris], [paris, other]][: len(qs)] if qs == ["q1", "q2"] else [[other, paris]] * len(qs)

    fixed = FixedRetriever(passages)
    report = evaluate_retrieval(questions, {"fixed": fixed}, ks=[2, 1])
    assert calls == [(["q1", "q2"], 2)]
    assert report["num_questions"] == 2 and report["num_with_gold"] == 1 and report["ks"] == [1, 2]
    row = report["retrievers"]["fixed"]
    assert row["answer_recall"] == {1: 0.0, 2: 1.0}  # q1: paris at rank 2; q2: ocean at rank 2
    assert row["gold_recall"] == {1: 0.0, 2: 1.0}
    report = evaluate_retrieval(questions, {"fixed": fixed}, ks=[1], batch_size=1)
    assert calls[-2:] == [(["q1"], 1), (["q2"], 1)]
    with pytest.raises(InputError, match="returned 1 results for 2"):
        evaluate_retrieval(questions, {"bad": FixedRetriever(lambda qs, k: [[]])}, ks=[1])


class FixedRetriever:
    """A retriever (the ``retrieve(questions, k) -> hits`` seam) whose passages come from ``passages``."""

    num_passages = 1000

    def __init__(self, passages):
        self.passages = passages

    def retrieve(self, questions, k):
        return types.SimpleNamespace(passages=self.passages(questions, k))


# ---------------------------------------------------------------------------------------------------
# retrievers over a tiny knowledge base, and the CLI

PASSAGES = [
    Passage("p0", "Paris", "paris is the capital of france"),
    Passage("p1", "Hemingway", "ernest hemingway wrote the sun also rises"),
    Passage("p2", "Nobel", "the first nobel prize in physics went to rontgen"),
    Passage("p3", "Everest", "everest is the largest mountain"),
    Passage("p4", "Pacific", "the pacific is the largest ocean"),
    Passage("p5", "Peru", "lima is the capital of peru"),
]
QUESTIONS = [
    {"question": "what is the capital of france", "answers": ["Paris"],
     "ctxs": [{"title": "Paris", "text": "paris is the capital of france"}]},
    {"question": "who wrote the sun also rises", "answers": ["Ernest Hemingway"],
     "ctxs": [{"title": "Hemingway", "text": "ernest hemingway wrote the sun also rises. more text"}]},
    {"question": "largest ocean", "answers": ["pacific"]},
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from openbook.models import load_encoder
    from openbook.rag.assemble import build_knowledge_base
    from tiny_encoders import save_sentence_transformers

    root = tmp_path_factory.mktemp("eval")
    encoder_dir = save_sentence_transformers(root / "encoder")
    encoder = load_encoder(str(encoder_dir))
    kb = build_knowledge_base(PASSAGES, encoder, root / "kb", progress=False)
    return encoder_dir, encoder, kb


def test_standard_retrievers_return_passages_and_cache_bm25(tiny, monkeypatch):
    _, encoder, kb = tiny
    retrievers = standard_retrievers(encoder, kb)
    assert list(retrievers) == ["dense", "bm25", "hybrid"]
    for name, retriever in retrievers.items():
        results = retriever.retrieve(["capital of france", "largest ocean"], 3).passages
        assert len(results) == 2 and all(len(r) == 3 for r in results), name
        assert all(isinstance(p, Passage) for r in results for p in r)
    assert [p.id for p in retrievers["bm25"].retrieve(["capital of france"], 1).passages[0]] == ["p0"]
    assert (kb.path / "bm25" / "openbook-bm25.json").is_file()

    def no_build(*args, **kwargs):
        raise AssertionError("the cached BM25 index should have been used")

    monkeypatch.setattr(BM25Index, "build", no_build)
    index, exclude = knowledge_base_bm25(kb)
    assert len(index) == len(PASSAGES) and exclude is None


def test_stale_or_unwritable_bm25_cache_is_rebuilt_in_memory(tiny, monkeypatch):
    _, _, kb = tiny
    BM25Index.build(PASSAGES[:2], source={"other": True}).save(kb.path / "bm25")  # stale cache

    def refuse(self, directory):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(BM25Index, "save", refuse)
    with pytest.warns(UserWarning, match="keeping it in memory"):
        index, _ = knowledge_base_bm25(kb)
    assert len(index) == len(PASSAGES)
    monkeypatch.undo()
    knowledge_base_bm25(kb)  # writes a fresh cache
    assert len(BM25Index.load(kb.path / "bm25")) == len(PASSAGES)


def test_bm25_skips_deleted_and_replaced_rows_of_a_versioned_kb(tiny, tmp_path):
    from openbook.rag.assemble import build_knowledge_base

    _, encoder, _ = tiny
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    kb.delete(["p0"])
    kb.update([{"id": "p5", "title": "Peru", "text": "lima is the capital city of peru and of llamas"}],
              lambda batch: encoder.encode_passages(batch))
    assert len(kb) == 5 and kb.embeddings.shape[0] == 7
    index, exclude = knowledge_base_bm25(kb)
    assert len(index) == 7 and exclude.tolist() == [0, 5]  # p0 deleted; p5's old row replaced by row 6
    retrievers = standard_retrievers(encoder, kb)
    for name, retriever in retrievers.items():
        (top,) = retriever.retrieve(["capital of france llamas"], 5).passages
        assert len(top) == 5 and "p0" not in [p.id for p in top], name
        assert all("llamas" in p.text for p in top if p.id == "p5"), name
    assert retrievers["bm25"].retrieve(["llamas"], 1).passages[0][0].text.endswith("llamas")


def test_bm25_recall_on_the_tiny_kb(tiny):
    _, encoder, kb = tiny
    questions = read_nq_open_records(QUESTIONS)
    report = evaluate_retrieval(questions, standard_retrievers(encoder, kb, ["bm25"]), ks=[1, 6])
    bm25 = report["retrievers"]["bm25"]
    assert bm25["answer_recall"] == {1: 1.0, 6: 1.0}
    assert bm25["gold_recall"] == {1: 1.0, 6: 1.0} and report["num_with_gold"] == 2


def read_nq_open_records(raw):
    from openbook.eval.datasets import qa_record

    return [qa_record(r) for r in raw]


def test_cli_eval_retrieval_json_and_table(tiny, tmp_path, capsys):
    encoder_dir, _, kb = tiny
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    args = ["eval", "retrieval", "--kb", str(kb.path), "--questions", str(questions), "--encoder", str(encoder_dir)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no k-larger-than-kb warning
        assert cli.main(args + ["--json", "--k", "1,2,100"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_questions"] == 3 and result["num_with_gold"] == 2 and result["num_passages"] == 6
    assert result["ks"] == [1, 2, 100] and set(result["retrievers"]) == {"dense", "bm25", "hybrid"}
    for row in result["retrievers"].values():
        assert row["answer_recall"]["100"] == 1.0 and row["gold_recall"]["100"] == 1.0
        assert all(0.0 <= v <= 1.0 for v in row["answer_recall"].values())
    assert result["retrievers"]["bm25"]["answer_recall"]["1"] == 1.0

    assert cli.main(args + ["--limit", "2", "--retrievers", "bm25"]) == 0
    table = capsys.readouterr().out
    assert "2 questions (2 with a gold passage)" in table
    assert "answer recall@k (%)" in table and "gold recall@k (%)" in table
    assert any(line.startswith("bm25 ") and "100.0" in line for line in table.splitlines())


def test_cli_eval_retrieval_anywhere_is_the_share_answered_by_any_passage(tiny, tmp_path, capsys):
    encoder_dir, _, kb = tiny
    rows = QUESTIONS + [{"question": "who is the king of mars", "answers": ["Zorg"]}]  # in no passage
    questions = write_jsonl(tmp_path / "q.jsonl", rows)
    args = ["eval", "retrieval", "--kb", str(kb.path), "--questions", str(questions), "--encoder", str(encoder_dir),
            "--retrievers", "bm25", "--quiet"]
    assert cli.main(args + ["--json", "--anywhere"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["answer_anywhere"] == 0.75 and result["answer_anywhere_seconds"] >= 0
    assert cli.main(args + ["--anywhere"]) == 0
    assert "answer in any passage of the knowledge base: 75.0%" in capsys.readouterr().out
    assert cli.main(args + ["--json"]) == 0
    assert "answer_anywhere" not in json.loads(capsys.readouterr().out)  # one pass over the book: asked for


def test_cli_eval_errors_are_one_line_and_early(tmp_path, capsys):
    assert cli.main(["eval", "retrieval", "--questions", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and err.count("\n") == 1
    assert cli.main(["eval"]) == 2  # a task is required
    assert cli.main(["eval", "retrieval", "--questions", "q", "--k", "0"]) == 2
    assert cli.main(["eval", "retrieval", "--questions", "q", "--retrievers", "tfidf"]) == 2


def test_regex_answers_match_anywhere_in_the_passage():
    """CuratedTrec's answers are patterns: --match regex finds them anywhere in a passage, case ignored."""
    from openbook.errors import InputError
    from openbook.eval.retrieval import answer_in_passage

    assert answer_in_passage("It was founded in Sept. 1902 by ...", [r"Sept?(ember)?\.?\s+1902"], mode="regex")
    assert answer_in_passage("NEW YORK city", [r"New\s?York"], mode="regex")
    assert not answer_in_passage("Newark", [r"New\s?York"], mode="regex")
    assert not answer_in_passage("It was founded in Sept. 1902", [r"Sept?(ember)?\.?\s+1902"], mode="dpr")
    with pytest.raises(InputError, match="not a regular expression"):
        answer_in_passage("text", ["(unclosed"], mode="regex")
