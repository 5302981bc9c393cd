"""bench/open_domain.py: its steps, resume and table on made-up results (a check of the script, not a figure)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench_scripts import bench_modules


@pytest.fixture(scope="module")
def bench():
    with bench_modules("open_domain") as modules:
        yield modules


def recall_result(name: str, values=(0.2, 0.4, 0.6, 0.8)) -> dict:
    return {"retrievers": {name: {"answer_recall": {str(k): v for k, v in zip((1, 5, 20, 100), values)}}}}


def test_a_finished_step_is_skipped_and_an_unfinished_one_runs(bench, tmp_path):
    calls = []

    def runner(command):
        calls.append(command)
        return recall_result("dense")

    first, ran = bench.run_step(tmp_path, "nq", "recall-dense", ["eval", "retrieval"], 5, runner)
    assert ran and len(calls) == 1 and first["result"] == recall_result("dense")
    again, ran = bench.run_step(tmp_path, "nq", "recall-dense", ["eval", "retrieval"], 5, runner)
    assert not ran and len(calls) == 1 and again == first
    _, ran = bench.run_step(tmp_path, "nq", "recall-dense", ["eval", "retrieval"], None, runner)  # another limit
    assert ran and len(calls) == 2
    assert json.loads(bench.step_path(tmp_path, "nq", "recall-dense").read_text())["limit"] is None


def test_a_failed_step_leaves_no_result(bench, tmp_path):
    def runner(command):
        raise SystemExit("openbook eval: exit status 1")

    with pytest.raises(SystemExit):
        bench.run_step(tmp_path, "nq", "em", ["eval"], None, runner)
    assert not bench.step_path(tmp_path, "nq", "em").exists() and list(tmp_path.rglob("*.json")) == []
    torn = bench.step_path(tmp_path, "nq", "em")
    torn.parent.mkdir(parents=True, exist_ok=True)
    torn.write_text("{\"limit\": nul")  # a torn file is not a finished step
    assert bench.finished(bench.step_path(tmp_path, "nq", "em"), None) is None


def test_qa_steps_reuse_the_model_cards_commands(bench, tmp_path):
    steps = bench.qa_steps("curatedtrec", Path("q.jsonl"), "curatedtrec", Path("d.tsv"), "regex", tmp_path,
                           ["--kb", "KB", "--limit", "5"])
    assert list(steps) == ["recall-dense", "recall-bm25", "recall-hybrid", "em"]
    assert steps["recall-bm25"][:2] == ["eval", "retrieval"] and "regex" in steps["recall-bm25"]
    assert "1,5,20,100" in steps["recall-hybrid"] and steps["em"][-4:] == ["--kb", "KB", "--limit", "5"]
    assert "--anywhere" in steps["recall-dense"] and "--anywhere" not in steps["recall-bm25"]
    em = steps["em"]
    assert em[em.index("--decoding") + 1] == "lazy" and em[em.index("--dtype") + 1] == "float32"


def test_the_table_puts_this_book_beside_the_demo_book_and_the_paper(bench):
    records = {f"recall-{name}": {"result": recall_result(name)} for name in bench.RETRIEVERS}
    records["recall-dense"]["result"]["answer_anywhere"] = 0.9
    records["em"] = {"result": {"metrics": {"regex_match": 0.25}}}
    this = {"curatedtrec": bench.figures_of("curatedtrec", records)}
    assert this["curatedtrec"]["recall@100 hybrid"] == 0.8 and this["curatedtrec"]["exact match"] == 0.25
    assert this["curatedtrec"][bench.ANYWHERE] == 0.9
    demo = {"curatedtrec": {"recall@5 dense": 0.453}}
    rows = bench.table_rows(["curatedtrec", "triviaqa"], this, demo, bench.paper_figures(),
                            {"triviaqa": bench.NO_DATA})
    by = {(r[0], r[1]): r[2:] for r in rows}
    assert by[("curatedtrec", "recall@5 dense")] == ["40.0", "45.3", "not reported"]
    assert by[("curatedtrec", "recall@100 dense")] == ["80.0", bench.NOT_MEASURED, "not reported"]
    assert by[("curatedtrec", "exact match")] == ["25.0", bench.NOT_MEASURED, "52.2"]
    assert by[("curatedtrec", bench.ANYWHERE)] == ["90.0", bench.NOT_MEASURED, "not reported"]
    assert by[("triviaqa", "exact match")] == [bench.NO_DATA, bench.NOT_MEASURED, "56.8"]
    assert by[("triviaqa", "recall@k, every retriever")][0] == bench.NO_DATA and len(by) == 14 + 2
    assert bench.cell({"top1_in_kb": None}, "top1_in_kb") == "n/a"  # a fraction of no claims, not a missing figure
    text = bench.format_table(rows)
    assert len(text.splitlines()) == len(rows) + 1 and "this book" in text.splitlines()[0]


def test_fever_figures_read_an_experiments_headline(bench):
    headline = {"fever3": {"majority": 0.33, "rag": 0.4}, "fever2": {"rag": 0.6},
                "gold_title_overlap": {"claims": 4, "top1": 0.25, "top10": 0.5, "in_kb": 0.5, "claims_in_kb": 2,
                                       "top1_in_kb": 0.5, "top10_in_kb": 1.0}}
    got = bench.figures_of("fever", {"fever": {"result": headline}})
    assert got["3-way accuracy"] == 0.4 and got["2-way accuracy"] == 0.6 and got["gold title top 10, in book"] == 1.0
    assert "3-way accuracy" not in bench.fever_figures(headline, None)  # another run's accuracy is not the default's


def test_the_demo_figures_come_from_the_benchs_own_demo_run_and_the_model_card(bench):
    demo = bench.demo_figures()
    for task in ("nq", "webquestions", "curatedtrec"):  # every retriever and k, as over any other book
        assert all(0.0 <= demo[task][f"recall@{k} {name}"] <= 1.0 for k in bench.KS for name in bench.RETRIEVERS)
        assert 0.0 < demo[task]["exact match"] <= 1.0
    assert 0.0 < demo["fever"]["gold title top 10"] <= 1.0  # the default's FEVER accuracy: when the run has it
    assert demo["triviaqa"] == {} and demo["nq"][bench.ANYWHERE] == 1.0  # the demo book holds NQ's gold passages
    # the run's dense and BM25 recall equal the model card's reports of the same questions and book
    card = json.loads((bench.DOCS / "models" / "default" / "recall-nq-dev.json").read_text(encoding="utf-8"))
    for name in ("dense", "bm25"):
        for k, value in card["retrievers"][name]["answer_recall"].items():
            assert demo["nq"][f"recall@{k} {name}"] == pytest.approx(value, abs=1e-9)


def test_demo_figures_leave_out_a_partial_run(bench, tmp_path):
    run = tmp_path / bench.DEMO_RUN.relative_to(bench.DOCS) / "nq"
    run.mkdir(parents=True)
    record = {"task": "nq", "step": "recall-dense", "result": recall_result("dense")}
    (run / "recall-dense.json").write_text(json.dumps({**record, "limit": None}))
    (run / "recall-bm25.json").write_text(json.dumps({**record, "step": "recall-bm25", "limit": 5,
                                                      "result": recall_result("bm25")}))
    demo = bench.demo_figures(tmp_path)
    assert demo["nq"] == {f"recall@{k} dense": v for k, v in zip(bench.KS, (0.2, 0.4, 0.6, 0.8))}


def test_triviaqa_is_no_data_without_a_file(bench, tmp_path):
    assert bench.triviaqa_file(tmp_path, None) is None
    (tmp_path / "triviaqa-dev.jsonl").write_text("")
    assert bench.triviaqa_file(tmp_path, None) == tmp_path / "triviaqa-dev.jsonl"
    with pytest.raises(argparse.ArgumentTypeError, match="squad"):
        bench.task_list("nq,squad")


def test_every_retrieval_step_runs_before_the_model_steps(bench, tmp_path):
    plan = {task: bench.qa_steps(task, Path("q"), task, Path("d"), "dpr", tmp_path, []) for task in ("nq", "webquestions")}
    plan["fever"] = bench.fever_steps(Path("h"), Path("t"), tmp_path, [])
    order = [(task, step) for task, step, _ in bench.ordered(plan)]
    assert order[:6] == [(t, f"recall-{r}") for t in ("nq", "webquestions") for r in bench.RETRIEVERS]
    assert order[6:] == [("nq", "em"), ("webquestions", "em"), ("fever", "fever")]
    assert [step for _, step, _ in bench.ordered(plan, "model")] == ["em", "em", "fever"]
    assert {step for _, step, _ in bench.ordered(plan, "recall")} == {f"recall-{r}" for r in bench.RETRIEVERS}
    assert bench.questions_of({"result": {"n3": 25}}) == 25 and bench.questions_of({"result": {"n": 5}}) == 5
