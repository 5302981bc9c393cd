"""Issue 10 item 5: the FEVER report (label accuracy of RAG, closed-book and the training part's majority
class, 3-way and 2-way; the gold-title overlap of retrieval), the Figure 2 hand-over search, the Jeopardy
metrics and run-kind check of the diversity report, on stubs with known values and on tiny trained runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from openbook.cli import main
from openbook.errors import InputError
from openbook.experiments.fever import accuracy, majority_label, overlap_headline, two_way_accuracy
from openbook.experiments.posterior import Handover, content_tokens, handover, pick_handover
from test_evaluate import FEVER, saved_models  # noqa: F401 - a fixture
from tiny_runs import save_tiny_models, train_run
from tolerance import probability_sum_bound

# ------------------------------------------------------------------------------------------ FEVER metrics


def test_overlap_headline_counts_top_1_top_k_and_the_knowledge_base():
    # the headline's figures come from openbook.eval.metrics.gold_title_overlap (titles by title_key)
    retrieved = [["Paris", "France"], ["Rome", "Savages (2012 film)"], ["Everest", "Nepal"], ["Nobel", "Peru"],
                 ["Paris", "Rome"]]
    gold = [["Paris"], ["Savages_-LRB-2012_film-RRB-"], ["K2"], ["Nobel_Prize", "Alfred_Nobel"], []]
    kb = {"Paris", "France", "Rome", "Savages (2012 film)", "Everest", "Nepal", "Nobel", "Peru", "Alfred Nobel"}
    got = overlap_headline(retrieved, gold, 2, kb)
    # the last claim (no evidence: NOT ENOUGH INFO) is left out; the kb lacks K2 and Nobel_Prize (not Alfred_Nobel)
    assert got["claims"] == 4 and got["claims_in_kb"] == 3
    assert got["top1"] == 1 / 4 and got["top2"] == 2 / 4 and got["in_kb"] == 3 / 4
    assert got["top1_in_kb"] == 1 / 3 and got["top2_in_kb"] == 2 / 3
    assert overlap_headline(retrieved, gold, 1)["top1"] == 1 / 4 and "in_kb" not in overlap_headline(
        retrieved, gold, 1)
    assert overlap_headline([["a"]], [[]], 1)["top1"] is None  # no verifiable claim: JSON null, not NaN
    assert overlap_headline([["a"]], [["b"]], 1, {"a"})["top1_in_kb"] is None
    assert overlap_headline([["a"]], [[]], 1, {"a"})["in_kb"] is None
    # case counts after the first letter, as in Wikipedia titles
    kb = {"savages (2012 film)"}
    assert overlap_headline([["x"]], [["Savages_-LRB-2012_film-RRB-"]], 1, kb)["claims_in_kb"] == 1
    kb = {"Savages (2012 Film)"}
    assert overlap_headline([["x"]], [["Savages_-LRB-2012_film-RRB-"]], 1, kb)["claims_in_kb"] == 0
    with pytest.raises(InputError, match="1 retrievals for 0 claims"):
        overlap_headline([["a"]], [], 1)


def test_majority_and_two_way_accuracy():
    order = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
    assert majority_label(["REFUTES", "SUPPORTS", "REFUTES"], order) == "REFUTES"
    assert majority_label(["REFUTES", "SUPPORTS"], order) == "SUPPORTS"  # a tie: the first in order
    with pytest.raises(ValueError):
        majority_label([], order)
    assert accuracy(["a", "b", "c"], ["a", "x", "c"]) == 2 / 3 and accuracy([], []) is None
    rows = [{"golds": ["SUPPORTS"], "label_logprobs": {"SUPPORTS": -2.0, "REFUTES": -3.0, "NOT ENOUGH INFO": -0.1}},
            {"golds": ["REFUTES"], "label_logprobs": {"SUPPORTS": -1.0, "REFUTES": -3.0, "NOT ENOUGH INFO": -0.1}},
            {"golds": ["NOT ENOUGH INFO"], "label_logprobs": {"SUPPORTS": -1.0, "REFUTES": -3.0,
                                                              "NOT ENOUGH INFO": -0.1}}]
    # the 3-way argmax (NOT ENOUGH INFO) is ignored: the likelier of the two, on the two verifiable claims
    assert two_way_accuracy(rows) == (0.5, 2)


# ------------------------------------------------------------------------------------------ hand-over


def test_handover_is_the_largest_posterior_mass_moved_between_different_argmax_documents():
    posteriors = [[0.9, 0.1, 0.0],  # document 0 leads
                  [0.6, 0.4, 0.0],
                  [0.2, 0.7, 0.1],  # document 1 leads: 0.7 of the mass moved since token 0
                  [0.1, 0.1, 0.8]]
    got = handover(posteriors)
    assert (got.start, got.end, got.source, got.target) == (0, 3, 0, 2)
    assert got.moved == pytest.approx(0.8, abs=probability_sum_bound(3))
    limited = handover(posteriors, tokens=3)  # the last token (EOS) left out
    assert (limited.start, limited.end, limited.source, limited.target) == (0, 2, 0, 1)
    assert limited.moved == pytest.approx(0.7, abs=probability_sum_bound(3))
    assert handover([[0.9, 0.1], [0.6, 0.4], [0.51, 0.49]]) == Handover()  # the argmax never changes
    assert handover([]) == Handover()


def test_pick_handover_chooses_the_generation_with_the_largest_handover():
    def answer(posteriors, eos=True):
        tokens = [f"t{i}" for i in range(len(posteriors) - eos)] + (["</s>"] if eos else [])
        return SimpleNamespace(tokens=tokens, token_posteriors=posteriors)

    flat = answer([[0.5, 0.5], [0.5, 0.5]])
    small = answer([[0.6, 0.4], [0.4, 0.6], [0.5, 0.5]])  # 0.2 moved
    at_eos = answer([[0.9, 0.1], [0.8, 0.2], [0.0, 1.0]])  # only the EOS hands over: not counted
    large = answer([[0.9, 0.1], [0.1, 0.9], [0.5, 0.5]], eos=False)
    assert content_tokens(small, "</s>") == 2 and content_tokens(large, "</s>") == 3
    chosen, found = pick_handover([flat, small, at_eos, large], eos="</s>")
    assert chosen == 3 and found[2] == Handover() and found[0] == Handover()
    assert found[1].moved == pytest.approx(0.2, abs=probability_sum_bound(2))
    assert found[3].moved == pytest.approx(0.8, abs=probability_sum_bound(2))
    assert pick_handover([flat, at_eos], eos="</s>")[0] == -1
    assert pick_handover([], eos="</s>") == (-1, [])


# ------------------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def fever_runs(saved_models, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """A RAG and a closed-book run trained one step on FEVER claims with the tiny label-word generator."""
    gen_dir, enc_dir, kb_dir = saved_models
    root = tmp_path_factory.mktemp("fever")
    train = root / "train.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in FEVER + FEVER[1:2]) + "\n")  # REFUTES is the majority
    heldout = root / "heldout.jsonl"
    heldout.write_text("\n".join(json.dumps(r) for r in FEVER) + "\n")
    runs = {}
    for name, model in (("rag", "rag-sequence"), ("closed-book", "closed-book")):
        runs[name] = root / name
        assert main(["train", "--model", model, "--task", "fever3", "--train", str(train), "--kb", str(kb_dir),
                     "--generator", str(gen_dir), "--encoder", str(enc_dir), "--k", "2", "--max-steps", "1",
                     "--batch-size", "2", "--out", str(runs[name])]) == 0
    return {"train": str(train), "heldout": str(heldout), **{k: str(v) for k, v in runs.items()}}


def test_experiments_fever_reports_accuracies_majority_and_title_overlap(fever_runs, tmp_path, capsys):
    out = tmp_path / "fever"
    capsys.readouterr()
    assert main(["experiments", "fever", "--data", fever_runs["heldout"], "--train", fever_runs["train"],
                 "--rag", fever_runs["rag"], "--closed-book", fever_runs["closed-book"], "--overlap-k", "2",
                 "--out", str(out), "--json"]) == 0
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    report = json.loads((out / "report.json").read_text())
    assert report["headline"] == headline and headline["n3"] == 3 and headline["n2"] == 2
    assert report["models"]["majority"]["fever3"] == "REFUTES"  # from the training part, not the claims scored
    assert headline["fever3"]["majority"] == 1 / 3 and headline["fever2"]["majority"] == 1 / 2
    for name in ("rag", "closed-book"):
        evaluation = json.loads((out / f"eval-{name}.json").read_text())
        assert headline["fever3"][name] == evaluation["metrics"]["accuracy"]
        assert headline["fever2"][name] == two_way_accuracy(evaluation["predictions"])[0]
    # the tiny kb holds the Paris and Everest passages: both verifiable claims have their gold article in it
    overlap = headline["gold_title_overlap"]
    assert overlap["claims"] == 2 and overlap["in_kb"] == 1.0 and set(overlap) >= {"top1", "top2", "top2_in_kb"}
    assert (out / "fever_accuracy.png").is_file() and (out / "gold_title_overlap.png").is_file()
    assert "Gold-title overlap" in (out / "report.md").read_text()


def test_experiments_fever_needs_a_run_of_the_named_kind(fever_runs, tmp_path, capsys):
    code = main(["experiments", "fever", "--data", fever_runs["heldout"], "--train", fever_runs["train"],
                 "--rag", fever_runs["closed-book"], "--out", str(tmp_path / "x")])
    assert code == 2 and "a closed-book run; --rag takes a rag-sequence or rag-token run" in capsys.readouterr().err
    code = main(["experiments", "fever", "--data", fever_runs["heldout"], "--train", fever_runs["train"],
                 "--out", str(tmp_path / "y")])
    assert code == 2 and "give at least one of --rag, --closed-book" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    gen_dir, enc_dir, kb_dir = save_tiny_models(root)
    runs = {model: str(train_run(root, model, model, gen_dir, enc_dir, kb_dir, "--max-steps", "1"))
            for model in ("rag-token", "closed-book")}
    jeopardy = root / "jeopardy.jsonl"
    jeopardy.write_text("\n".join(json.dumps({"answer": a, "question": q}) for a, q in (
        ("paris", "the capital city of france"), ("hemingway", "the american author who wrote the sun rises"),
        ("pacific", "the largest ocean of the world"))) + "\n")
    return {**runs, "jeopardy": str(jeopardy)}


SEARCH = ["--task", "jeopardy", "--limit", "3", "--batch-size", "2", "--k", "3", "--max-new-tokens", "5"]


def test_posterior_search_plots_the_largest_handover(tiny_runs, tmp_path, capsys):
    out = tmp_path / "f2"
    code = main(["experiments", "posterior", "--run", tiny_runs["rag-token"], "--inputs", tiny_runs["jeopardy"],
                 *SEARCH, "--min-moved", "0", "--out", str(out), "--json"])
    report = json.loads((out / "report.json").read_text())
    search = report["search"]
    assert search["inputs"] == 3 and len(search["candidates"]) == 3
    moved = [c["moved"] for c in search["candidates"]]
    assert moved == sorted(moved, reverse=True)  # listed largest first
    if code == 0:  # the chosen generation is the one with the largest hand-over, and it is the one plotted
        chosen = search["candidates"][0]
        assert moved[0] > 0 and report["headline"]["handover"]["moved"] == moved[0]
        assert report["headline"]["question"] == chosen["input"] and (out / "posterior.png").is_file()
        h = report["headline"]["handover"]
        matrix = report["headline"]["posterior"]  # documents x tokens
        column = lambda t: [row[t] for row in matrix]  # noqa: E731
        assert column(h["start"]).index(max(column(h["start"]))) == h["source"] != h["target"]
    else:  # none hands over: a clear error, and the candidates are kept
        assert code == 2 and "hands over" in capsys.readouterr().err and moved[0] == 0


def test_posterior_search_without_a_handover_is_a_clear_error(tiny_runs, tmp_path, capsys):
    out = tmp_path / "f2"  # the untrained tiny model's posterior stays near p(z|x) = 1/3 each
    code = main(["experiments", "posterior", "--run", tiny_runs["rag-token"], "--inputs", tiny_runs["jeopardy"],
                 *SEARCH, "--min-moved", "0.5", "--out", str(out)])
    assert code == 2 and "none of the 3 generations hands over" in capsys.readouterr().err
    search = json.loads((out / "report.json").read_text())["search"]
    assert search["chosen"] == -1 and len(search["candidates"]) == 3 and search["handing_over"] == 0
    code = main(["experiments", "posterior", "--run", tiny_runs["rag-token"], "--inputs", tiny_runs["jeopardy"],
                 "--min-moved", "2", "--out", str(out)])
    assert code == 2 and "expected a number from 0 to 1" in capsys.readouterr().err


def test_posterior_needs_a_question_or_inputs(tiny_runs, tmp_path, capsys):
    code = main(["experiments", "posterior", "--run", tiny_runs["rag-token"], "--out", str(tmp_path / "x")])
    assert code == 2 and "one of the arguments --question --inputs is required" in capsys.readouterr().err


def test_diversity_reports_the_task_metrics_and_checks_run_kinds(tiny_runs, tmp_path, capsys):
    out = tmp_path / "t5"
    capsys.readouterr()
    assert main(["experiments", "diversity", "--task", "jeopardy", "--data", tiny_runs["jeopardy"],
                 "--closed-book", tiny_runs["closed-book"], "--rag-token", tiny_runs["rag-token"],
                 "--max-new-tokens", "4", "--out", str(out), "--json"]) == 0
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for kind in ("closed-book", "rag-token"):  # Table 2's Q-BLEU-1 and BLEU-1 from the same evaluation
        evaluation = json.loads((out / f"eval-{kind}.json").read_text())["metrics"]
        assert headline["metrics"][kind] == {"q_bleu_1": evaluation["q_bleu_1"], "bleu_1": evaluation["bleu_1"]}
    assert "q_bleu_1 (%)" in (out / "report.md").read_text()
    code = main(["experiments", "diversity", "--task", "jeopardy", "--data", tiny_runs["jeopardy"],
                 "--rag-sequence", tiny_runs["rag-token"], "--out", str(tmp_path / "x")])
    assert code == 2 and "a rag-token run; --rag-sequence takes a rag-sequence run" in capsys.readouterr().err
