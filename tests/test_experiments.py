"""`openbook experiments closed-book-vs-rag | ablation | k-sweep | posterior | diversity` end to end on tiny
runs trained with `openbook train` (1 step each): report files, the plot, and the --json headline line."""

from __future__ import annotations

import json

import pytest

from openbook.cli import main
from test_closed_book import save_tiny_models, train_run
from tolerance import probability_sum_bound

DEV = [("capital of france", ["paris"]), ("who wrote the sun rises", ["hemingway", "ernest hemingway"]),
       ("largest ocean", ["pacific"]), ("largest mountain", ["everest"]), ("the president of peru", ["peru"])]
JEOPARDY = [("paris", "the capital city of france"), ("hemingway", "the american author who wrote the sun rises"),
            ("pacific", "the largest ocean of the world")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny trained runs of every kind (1 optimiser step each) and the dev files."""
    root = tmp_path_factory.mktemp("runs")
    gen_dir, enc_dir, kb_dir = save_tiny_models(root)
    kinds = [("closed-book", "closed-book", ()), ("rag-sequence", "rag-sequence", ()), ("rag-token", "rag-token", ()),
             ("bm25", "rag-sequence", ("--retriever", "bm25")), ("frozen", "rag-token", ("--freeze-retriever",))]
    made = {name: train_run(root, name, model, gen_dir, enc_dir, kb_dir, "--max-steps", "1", *extra)
            for name, model, extra in kinds}
    dev = root / "dev.jsonl"
    dev.write_text("\n".join(json.dumps({"question": q, "answers": a}) for q, a in DEV) + "\n")
    jeopardy = root / "jeopardy.jsonl"
    jeopardy.write_text("\n".join(json.dumps({"answer": a, "question": q}) for a, q in JEOPARDY) + "\n")
    return {**{k: str(v) for k, v in made.items()}, "dev": str(dev), "jeopardy": str(jeopardy), "kb": str(kb_dir)}


def run_experiment(capsys, out, *argv) -> dict:
    """Run the command with --json; check the report files; return the headline (the last stdout line)."""
    capsys.readouterr()
    assert main(["experiments", *argv, "--out", str(out), "--json"]) == 0
    stdout = capsys.readouterr().out.strip().splitlines()
    assert stdout[0].startswith("| ") and stdout[1].startswith("|---")  # the table is printed
    report = json.loads((out / "report.json").read_text())
    assert report["headline"] == json.loads(stdout[-1])
    md = (out / "report.md").read_text()
    assert stdout[0] in md and ".png)" in md
    pngs = list(out.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    return report


def test_closed_book_vs_rag(runs, tmp_path, capsys):
    out = tmp_path / "t1"
    report = run_experiment(capsys, out, "closed-book-vs-rag", "--data", runs["dev"], "--limit", "4",
                            "--closed-book", runs["closed-book"], "--rag-sequence", runs["rag-sequence"],
                            "--rag-token", runs["rag-token"], "--max-new-tokens", "3", "--batch-size", "3")
    headline = report["headline"]
    assert headline["n"] == 4 and set(headline["exact_match"]) == {"closed-book", "rag-sequence", "rag-token"}
    assert all(0.0 <= v <= 1.0 for v in headline["exact_match"].values())
    assert (out / "exact_match.png").is_file()
    for kind in ("closed-book", "rag-sequence", "rag-token"):  # every prediction, from the shared evaluation
        evaluation = json.loads((out / f"eval-{kind}.json").read_text())
        assert evaluation["n"] == 4 and evaluation["model"] == kind
        assert all(row["passages"] == [] for row in evaluation["predictions"]) == (kind == "closed-book")


def test_ablation(runs, tmp_path, capsys):
    out = tmp_path / "t6"
    report = run_experiment(capsys, out, "ablation", "--data", runs["dev"], "--bm25", runs["bm25"],
                            "--frozen", runs["frozen"], "--learned", runs["rag-sequence"], "--max-new-tokens", "3",
                            "--decoding", "fast")
    headline = report["headline"]
    assert set(headline) == {"bm25", "frozen", "learned", "n"} and headline["n"] == len(DEV)
    for name in ("bm25", "frozen", "learned"):
        assert set(headline[name]) == {"exact_match", "answer_recall@5"}
    assert report["runs"]["bm25"]["retriever"] == "bm25" and report["runs"]["learned"]["retriever"] == "dense"
    # 5 of the 6 tiny passages hold every answer: BM25 finds them
    assert headline["bm25"]["answer_recall@5"] == 1.0
    assert (out / "ablation.png").is_file()
    assert json.loads((out / "eval-learned.json").read_text())["settings"]["decoding"] == "fast"


def test_k_sweep(runs, tmp_path, capsys):
    out = tmp_path / "f3"
    report = run_experiment(capsys, out, "k-sweep", "--data", runs["dev"], "--run", runs["rag-sequence"],
                            "--run", runs["rag-token"], "--ks", "3,1,2", "--max-new-tokens", "2")
    headline = report["headline"]
    assert headline["ks"] == [1, 2, 3] and set(headline["runs"]) == {"1:rag-sequence", "2:rag-token"}
    for row in headline["runs"].values():
        recall = [row["answer_recall"][k] for k in ("1", "2", "3")]
        assert recall == sorted(recall)  # recall@k never falls as k grows
    assert len(report["table"]["rows"]) == 6 and (out / "k_sweep.png").is_file()
    evaluation = json.loads((out / "eval-1-rag-sequence-k2.json").read_text())
    assert evaluation["settings"]["k"] == 2 and all(len(r["passages"]) == 2 for r in evaluation["predictions"])


def test_posterior(runs, tmp_path, capsys):
    out = tmp_path / "f2"
    report = run_experiment(capsys, out, "posterior", "--run", runs["rag-sequence"], "--question",
                            "who wrote the sun rises", "--k", "3", "--max-new-tokens", "4")
    headline = report["headline"]
    assert set(headline) == {"question", "answer", "tokens", "documents", "posterior"}
    matrix = headline["posterior"]
    assert len(matrix) == 3 == len(headline["documents"]) and all(len(r) == len(headline["tokens"]) for r in matrix)
    for t in range(len(headline["tokens"])):  # a distribution over the documents at every token
        assert sum(row[t] for row in matrix) == pytest.approx(1.0, abs=probability_sum_bound(3))  # a float32 softmax
    assert report["answer"]["model"] == "rag-token" and (out / "posterior.png").is_file()


def test_diversity(runs, tmp_path, capsys):
    out = tmp_path / "t5"
    report = run_experiment(capsys, out, "diversity", "--data", runs["jeopardy"], "--task", "jeopardy",
                            "--closed-book", runs["closed-book"], "--rag-token", runs["rag-token"],
                            "--max-new-tokens", "6")
    ratios = report["headline"]["distinct_trigram_ratio"]
    assert set(ratios) == {"gold", "closed-book", "rag-token"}
    assert ratios["gold"] == 1.0  # the three clues share no trigram
    assert report["models"]["rag-token"]["trigrams"] >= 0 and (out / "diversity.png").is_file()


def test_experiment_usage_errors(runs, tmp_path, capsys):
    code = main(["experiments", "closed-book-vs-rag", "--data", runs["dev"], "--out", str(tmp_path / "x")])
    assert code == 2 and "give at least one of" in capsys.readouterr().err
    code = main(["experiments", "ablation", "--data", runs["dev"], "--learned", str(tmp_path / "missing"),
                 "--out", str(tmp_path / "y")])
    assert code == 2 and "not a run directory" in capsys.readouterr().err
