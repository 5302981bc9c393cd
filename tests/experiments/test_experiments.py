"""`openbook experiments closed-book-vs-rag | ablation | k-sweep | posterior | diversity` end to end on tiny
runs trained with `openbook train` (1 step each): report files, the plot, and the --json headline line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from openbook.cli import main
from openbook.eval.metrics import mcnemar, paired_bootstrap
from tiny_runs import save_tiny_models, train_run
from tolerance import bound, probability_sum_bound

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


def question_scores(out: Path, label: str, metric: str = "exact_match") -> list[float]:
    return [row["scores"][metric] for row in json.loads((out / f"eval-{label}.json").read_text())["predictions"]]


def check_tests_markdown(out: Path, tests: list[dict]) -> None:
    """The report's table of paired tests and its sentence on what is significant at 0.05."""
    md = (out / "report.md").read_text()
    assert "## Paired significance tests" in md and "significant at 0.05" in md
    assert sum(line.startswith("| ") for line in md.split("## Paired significance tests")[1].splitlines()) == \
        len(tests) + 1
    significant = [t for t in tests if t["significant"]]
    assert ("Significant: none." in md) == (not significant)
    for t in tests:
        assert t["significant"] == (t["p_bootstrap"] < 0.05 and (t["p_mcnemar"] is None or t["p_mcnemar"] < 0.05))
        assert t["ci95"][0] <= t["ci95"][1] and 0.0 <= t["p_bootstrap"] <= 1.0


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
    # each RAG model against closed-book, paired on the per-question scores the evaluations kept
    assert [(t["a"], t["b"], t["metric"]) for t in report["tests"]] == [
        ("rag-sequence", "closed-book", "exact_match"), ("rag-token", "closed-book", "exact_match")]
    closed = question_scores(out, "closed-book")
    for test in report["tests"]:
        ours = question_scores(out, test["a"])
        boot = paired_bootstrap(ours, closed)
        assert (test["diff"], test["ci95"], test["p_bootstrap"]) == (boot.diff, list(boot.ci95), boot.p_value)
        assert test["p_mcnemar"] == mcnemar(ours, closed).p_value and test["n"] == 4
        assert test["diff"] == pytest.approx(headline["exact_match"][test["a"]] - headline["exact_match"]["closed-book"],
                                             abs=bound(terms=4, dtype="float64"))
    check_tests_markdown(out, report["tests"])


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
    # each run trained with its own retriever, and the report says so
    assert {n: r["trained_with"] for n, r in report["runs"].items()} == {n: n for n in ("bm25", "frozen", "learned")}
    assert [row[3] for row in report["table"]["rows"]] == ["trained with it"] * 3
    # every pair of systems on both metrics, from the per-question scores
    assert [(t["a"], t["b"], t["metric"]) for t in report["tests"]] == [
        (a, b, m) for a, b in (("frozen", "bm25"), ("learned", "bm25"), ("learned", "frozen"))
        for m in ("exact_match", "answer_recall@5")]
    for test in report["tests"]:
        if test["metric"] == "exact_match":
            a, b = question_scores(out, test["a"]), question_scores(out, test["b"])
            assert test["p_mcnemar"] == mcnemar(a, b).p_value and test["p_bootstrap"] == paired_bootstrap(a, b).p_value
        else:  # recall@5 per question: the headline's mean
            assert test["a_mean"] == headline[test["a"]]["answer_recall@5"]
    check_tests_markdown(out, report["tests"])


@pytest.fixture
def shipped(runs, monkeypatch):
    """'default' stands for the tiny frozen-retriever run, as for the shipped default trained frozen."""
    import openbook.data
    import openbook.rag.assemble

    for module in (openbook.data, openbook.rag.assemble):
        monkeypatch.setattr(module, "default_run_path", lambda: Path(runs["frozen"]))
    return runs["frozen"]


def test_ablation_decodes_one_trained_model_with_each_retriever(runs, shipped, tmp_path, capsys):
    out = tmp_path / "t6-one"
    report = run_experiment(capsys, out, "ablation", "--data", runs["dev"], "--bm25", "default", "--frozen", "default",
                            "--learned", shipped, "--model", "rag-token", "--max-new-tokens", "3", "--limit", "3")
    details = report["runs"]
    assert {n: (r["retriever"], r["trained_with"]) for n, r in details.items()} == {
        "bm25": ("bm25", "frozen"), "frozen": ("dense", "frozen"), "learned": ("dense", "frozen")}
    assert [row[3] for row in report["table"]["rows"]] == [
        "decoded only (trained frozen)", "trained with it", "decoded only (trained frozen)"]
    assert all(d["model"] == "rag-token" for d in details.values())  # 'default' as --model, the run as its own
    frozen, learned = [t for t in report["tests"] if (t["a"], t["b"]) == ("learned", "frozen")]
    assert frozen["diff"] == learned["diff"] == 0.0 and frozen["p_bootstrap"] == frozen["p_mcnemar"] == 1.0
    assert report["headline"]["n"] == 3


def test_ablation_refuses_a_closed_book_run(runs, tmp_path, capsys):
    code = main(["experiments", "ablation", "--data", runs["dev"], "--bm25", runs["closed-book"],
                 "--out", str(tmp_path / "x")])
    assert code != 0 and "closed-book run" in capsys.readouterr().err


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
    # the spread of p(z|x) at each k, from the evaluation's passages
    for label, row in headline["runs"].items():
        assert row["prior_entropy"]["1"] == 0.0 and row["prior_max"]["1"] == 1.0  # one passage: one-hot
        evaluation = json.loads((out / f"eval-{label.replace(':', '-')}-k3.json").read_text())
        probs = [[p["prob"] for p in r["passages"]] for r in evaluation["predictions"]]
        entropy = sum(-sum(p * math.log(p) for p in ps) for ps in probs) / len(probs)
        assert row["prior_entropy"]["3"] == pytest.approx(entropy, abs=bound(terms=3 * len(DEV), dtype="float64",
                                                                              scale=math.log(3)))
        assert row["prior_max"]["3"] == pytest.approx(sum(map(max, probs)) / len(probs),
                                                      abs=bound(terms=len(DEV), dtype="float64"))
        assert 1 / 3 <= row["prior_max"]["3"] + probability_sum_bound(3) and set(row) >= {
            "exact_match_where_answer_retrieved", "answer_recall"}
    # each k against the next smaller one and against k = 1, for each run, on both metrics
    pairs = [(f"{run} k={k}", f"{run} k={small}", m) for run in ("1:rag-sequence", "2:rag-token")
             for k, small in ((2, 1), (3, 2), (3, 1)) for m in ("exact_match", "answer_recall@k")]
    assert [(t["a"], t["b"], t["metric"]) for t in report["tests"]] == pairs
    assert all(t["b_only"] == 0 for t in report["tests"] if t["metric"] == "answer_recall@k")  # recall never falls
    check_tests_markdown(out, report["tests"])


def test_k_sweep_score_scale_flattens_the_prior(runs, tmp_path, capsys):
    sweeps = {}
    for name, extra in (("own", ()), ("flat", ("--score-scale", "0.001"))):
        out = tmp_path / name
        report = run_experiment(capsys, out, "k-sweep", "--data", runs["dev"], "--run", runs["rag-sequence"],
                                "--ks", "1,3", "--max-new-tokens", "2", *extra)
        sweeps[name] = report["headline"]["runs"]["rag-sequence"]
    own, flat = sweeps["own"], sweeps["flat"]
    # stored as a float32 log: exp(log) carries the log's rounding, relative to |log 0.001|
    assert flat["score_scale"] == pytest.approx(0.001, rel=bound(terms=2, dtype="float32", scale=math.log(1000)))
    assert own["score_scale"] != flat["score_scale"]
    # a smaller scale is a higher softmax temperature: p(z|x) closer to uniform over the top 3
    uniform = math.log(3) + bound(terms=3, dtype="float32", scale=math.log(3))
    assert own["prior_entropy"]["3"] < flat["prior_entropy"]["3"] <= uniform
    assert flat["prior_max"]["3"] < own["prior_max"]["3"]
    assert own["answer_recall"] == flat["answer_recall"]  # the ranking does not change
    assert "(set for this sweep)" in (tmp_path / "flat" / "report.md").read_text()


def test_k_sweep_runs_the_shipped_default_without_run(runs, shipped, tmp_path, capsys):
    out = tmp_path / "f3-default"
    report = run_experiment(capsys, out, "k-sweep", "--data", runs["dev"], "--ks", "1,2", "--limit", "2",
                            "--max-new-tokens", "2")
    assert set(report["headline"]["runs"]) == {"rag-sequence"}  # --model's kind, on the shipped run's weights
    assert report["headline"]["runs"]["rag-sequence"]["run"] == "default"
    evaluation = json.loads((out / "eval-rag-sequence-k2.json").read_text())
    assert Path(evaluation["settings"]["knowledge_base"]).resolve() == Path(runs["kb"]).resolve()  # the run's own


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
    code = main(["experiments", "k-sweep", "--data", runs["dev"], "--run", runs["rag-sequence"], "--score-scale",
                 "-1", "--out", str(tmp_path / "z")])
    assert code != 0 and "score scale must be a positive number" in capsys.readouterr().err
    code = main(["experiments", "closed-book-vs-rag", "--data", runs["dev"], "--out", str(tmp_path / "x")])
    assert code == 2 and "give at least one of" in capsys.readouterr().err
    code = main(["experiments", "ablation", "--data", runs["dev"], "--learned", str(tmp_path / "missing"),
                 "--out", str(tmp_path / "y")])
    assert code == 2 and "not a run directory" in capsys.readouterr().err


def test_trained_with_reads_the_run_record(tmp_path, monkeypatch):
    import openbook.data
    from openbook.errors import InputError
    from openbook.experiments.ablation import trained_with, training_note

    def run(name: str, **spec) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({"generator": "g", "encoder": "e", **spec}))
        return str(tmp_path / name)

    assert trained_with(run("frozen", model="rag-token", freeze_retriever=True)) == "frozen"
    assert trained_with(run("learned", model="rag-sequence", freeze_retriever=False)) == "learned"
    assert trained_with(run("hybrid", model="rag-sequence", retriever="hybrid", freeze_retriever=True)) == "hybrid"
    assert trained_with(run("old", model="rag-sequence")) == "dense"  # before run.json recorded freezing
    monkeypatch.setattr(openbook.data, "default_run_path", lambda: None)
    assert trained_with("default") == "untrained"  # no shipped default: the untrained generator
    assert training_note("bm25", "untrained") == "untrained generator"
    assert training_note("bm25", "frozen") == "decoded only (trained frozen)"
    with pytest.raises(InputError, match="closed-book run"):
        trained_with(run("cb", model="closed-book"))
