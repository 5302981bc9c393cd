"""bench/index_scale.py on a knowledge base's real vectors: a tiny book with a hashed bag-of-words encoder and a
handful of questions (a check of the script, not a figure)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bench_scripts import bench_modules
from openbook.index import KnowledgeBase
from tiny_kb import ENCODER, WORDS, build_corpus_book

QUESTIONS = ["capital of france", "paris king", "moon orbit earth", "largest planet jupiter", "river lake ocean",
             "music and poem", "war and peace", "sun star light", "water carbon sugar"]


@pytest.fixture(scope="module")
def bench():
    with bench_modules("index_scale", "_index_vectors") as modules:
        yield modules


@pytest.fixture
def book(tmp_path, capsys, encoders):
    """A 300-passage knowledge base built by `openbook kb build` with its defaults (float16 vectors)."""
    kb = build_corpus_book(capsys, tmp_path, 300, "--dtype", "float16")
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": q}) + "\n" for q in QUESTIONS), encoding="utf-8")
    return kb, questions


def test_the_json_line_has_the_figures_on_real_vectors(bench, book, capsys):
    index_scale, _ = bench
    kb, questions = book
    assert index_scale.main(["--kb", str(kb), "--questions", str(questions), "--kinds", "flat,hnsw", "--no-sweep",
                             "--latency-queries", "3"]) == 0
    out = capsys.readouterr().out
    line = json.loads(out.strip().splitlines()[-1])
    assert line["data"] == "knowledge base" and line["kb"] == str(kb) and line["encoder"] == "fake/bow"
    assert (line["n"], line["dim"], line["embeddings_dtype"], line["normalised"]) == (300, 32, "float16", True)
    assert line["queries"] + line["tuning_queries"] == len(QUESTIONS) and line["tuning_queries"] == len(QUESTIONS) // 3
    assert line["flat_recall_at_10"] == 1.0
    assert 0.0 <= line["hnsw_recall_at_10"] <= 1.0 and line["hnsw_tuned_on_separate_queries"]["knob"] == "ef_search"
    for key in ("flat_latency_b1_ms", "hnsw_latency_b64_ms", "hnsw_bytes_per_vector", "hnsw_paper_scale_disk_gb"):
        assert line[key] > 0
    # the kind `openbook kb build` chose for this book without --index, with its measured figures beside it
    assert line["kb_build_default_index"] == KnowledgeBase.load(kb).index.type_name == "flat"
    assert line["kb_build_default_recall_at_10"] == 1.0 and line["kb_build_default_latency_b1_ms"] > 0
    assert "openbook kb build's default index for 300 passages: flat" in out


def test_the_vectors_are_the_books_and_the_queries_its_encoders(bench, book):
    _, vectors = bench
    kb, questions = book
    got = vectors.from_kb(kb, questions, Path("unused"), queries=100, tuning=100, seed=3)
    stored = KnowledgeBase.load(kb).embeddings
    assert got.data.dtype == np.float32 and np.array_equal(got.data, np.asarray(stored, dtype=np.float32))
    evaluation, tuning = vectors.seeded_split(QUESTIONS, 100, 100, 3)
    np.testing.assert_array_equal(got.queries, ENCODER.encode_queries(evaluation))
    np.testing.assert_array_equal(got.tuning_queries, ENCODER.encode_queries(tuning))


def test_tuning_and_evaluation_questions_are_disjoint(bench):
    _, vectors = bench
    questions = [f"{word} {i}" for i, word in enumerate(WORDS)] + ["paris 0"]  # one asked twice
    evaluation, tuning = vectors.seeded_split(questions, 5, 4, seed=1)
    assert (evaluation, tuning) == vectors.seeded_split(questions, 5, 4, seed=1)
    assert len(tuning) == 4 and len(evaluation) == 5 and not set(evaluation) & set(tuning)
    with pytest.raises(ValueError, match="at least 2 distinct questions"):
        vectors.seeded_split(["same", "same"], 5, 4, seed=1)


def test_nq_evaluation_is_the_held_out_fifth(bench, tmp_path):
    _, vectors = bench
    rows = [{"question": f"question {i}", "answers": ["x"]} for i in range(20)]
    with gzip.open(tmp_path / vectors.NQ_FILE, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    evaluation, tuning = vectors.nq_sets(tmp_path, queries=10, tuning=6, seed=0)
    assert evaluation == [f"question {i}" for i in (0, 5, 10, 15)]
    assert len(tuning) == 6 and not set(tuning) & set(evaluation)


def test_a_bad_question_file_is_one_line_naming_it(bench, book, capsys):
    index_scale, _ = bench
    kb, questions = book
    questions.write_text('{"question": "capital of france"}\n{"text": "no question"}\n', encoding="utf-8")
    assert index_scale.main(["--kb", str(kb), "--questions", str(questions)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"index_scale.py: error: {questions}:2: no non-empty string field 'question'"
    assert index_scale.main(["--kb", str(kb.parent / "missing")]) == 2
    assert "missing does not exist" in capsys.readouterr().err
    assert index_scale.main(["--kb", str(kb), "--data-dir", str(kb.parent)]) == 2
    assert "nq-open-oracle.dev-split.jsonl.gz does not exist: give --data-dir" in capsys.readouterr().err
