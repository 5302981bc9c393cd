"""Evaluation end to end on tiny random RAG models: predict, evaluate, reports, label log-likelihoods
(RAG-Sequence = RAG-Token = brute force for one-token labels) and the `openbook eval --task` command."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from openbook import cli
from openbook.commands import options
from openbook.errors import InputError
from openbook.eval import metrics
from openbook.eval.evaluate import evaluate, predict, report_markdown, write_report
from openbook.eval.tasks import Example, get_task
from openbook.models.generators import Seq2SeqGenerator
from openbook.presets import PAPER
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from tiny import PASSAGES, WORDS, _wrap, tiny_bart, tiny_encoder
from tolerance import model_tolerance, probability_sum_bound

LABEL_WORDS = ["true", "false", "unknown", "yes", "no"]

NQ = [
    {"question": "who wrote the sun rises", "answers": ["hemingway", "ernest hemingway"]},
    {"question": "capital of france", "answers": ["paris"]},
    {"question": "largest ocean", "answers": ["pacific"]},
    {"question": "largest mountain", "answers": ["everest"]},
    {"question": "president of peru", "answers": ["president"]},
]
FEVER = [
    {"id": 1, "label": "SUPPORTS", "claim": "paris is the capital of france", "evidence": [[[1, 1, "Paris", 0]]]},
    {"id": 2, "label": "REFUTES", "claim": "everest is the largest ocean", "evidence": [[[2, 2, "Everest", 0]]]},
    {"id": 3, "label": "NOT ENOUGH INFO", "claim": "the king wrote music", "evidence": [[[3, None, None, None]]]},
]


def label_tokenizer() -> PreTrainedTokenizerFast:
    """tests/helpers/tiny.py's BART word tokenizer, plus the one-token label words of FEVER and BoolQ."""
    vocab = {tok: i for i, tok in enumerate(("<s>", "<pad>", "</s>", "<unk>"))}
    for word in WORDS + LABEL_WORDS + ["/", "//", ".", "?", ","]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.add_special_tokens({"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>"})
    fast._tokenizer.post_processor = _wrap("<s>", 0, "</s>", 2)
    return fast


def make_generator(**config) -> Seq2SeqGenerator:
    tok = label_tokenizer()
    return Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3, **config), tok)


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    return build_knowledge_base(PASSAGES, tiny_encoder(), tmp_path_factory.mktemp("kb") / "kb", progress=False)


@pytest.fixture(scope="module")
def generator():
    return make_generator()


def make_rag(kb, generator, model="rag-sequence", k=3) -> RAG:
    return RAG(tiny_encoder(), generator, kb, model=model, k=k).eval()


def write_jsonl(path: Path, records) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def nq_examples(tmp_path) -> list[Example]:
    return get_task("nq").read(write_jsonl(tmp_path / "nq.jsonl", NQ))


# ---------------------------------------------------------------------------------------------------
# predict


@dataclass
class StubPassage:
    title: str
    prob: float


@dataclass
class StubAnswer:
    question: str
    answer: str
    passages: list = field(default_factory=list)


class StubModel:
    """A closed-book-like model: echoes the last word of each input; records every ask call."""

    model_type = "stub"

    def __init__(self):
        self.calls = []

    def ask(self, questions, **options):
        self.calls.append((list(questions), options))
        return [StubAnswer(q, q.split()[-1]) for q in questions]


def test_predict_batches_ask_calls_in_order():
    model = StubModel()
    inputs = [f"question number {i}" for i in range(5)]
    answers = predict(model, inputs, batch_size=2, num_beams=3, max_new_tokens=7, decoding="fast")
    assert [a.answer for a in answers] == [str(i) for i in range(5)]
    assert [len(batch) for batch, _ in model.calls] == [2, 2, 1]
    assert model.calls[0][1] == {"num_beams": 3, "decoding": "fast", "max_new_tokens": 7,  # k=None: the model's
                                 "abstain": PAPER.abstain}  # the paper preset never abstains
    predict(model, inputs[:1], k=4)
    assert model.calls[-1][1]["k"] == 4


@pytest.mark.parametrize("bad, message", [
    ({"inputs": []}, "no inputs"), ({"inputs": ["ok", ""]}, "input 2"), ({"inputs": "one string"}, "not one string"),
    ({"batch_size": 0}, "batch_size"), ({"k": 0}, r"k \(passages per question\) must be"),
])
def test_predict_checks_its_arguments(bad, message):
    kwargs = {"inputs": ["a question"], **bad}
    inputs = kwargs.pop("inputs")
    with pytest.raises(InputError, match=message):
        predict(StubModel(), inputs, **kwargs)


def test_predict_equals_ask_on_a_tiny_rag(kb, generator):
    rag = make_rag(kb, generator)
    questions = [r["question"] for r in NQ]
    got = predict(rag, questions, k=2, batch_size=2, num_beams=2, max_new_tokens=4)
    want = rag.ask(questions, k=2, num_beams=2, max_new_tokens=4, decoding=PAPER.decoding)  # predict's decoding
    assert [a.answer for a in got] == [a.answer for a in want]
    assert [[p.id for p in a.passages] for a in got] == [[p.id for p in a.passages] for a in want]


# ---------------------------------------------------------------------------------------------------
# evaluate: generation tasks


def check_report(report, task, examples):
    assert report["task"] == task.name and report["n"] == len(examples)
    assert [row["input"] for row in report["predictions"]] == [e.input for e in examples]
    assert [row["golds"] for row in report["predictions"]] == [e.golds for e in examples]
    for name in task.metrics:
        values = [row["scores"][name] for row in report["predictions"]]
        assert report["metrics"][name] == pytest.approx(math.fsum(values) / len(values))
    for row, example in zip(report["predictions"], examples):
        assert row["scores"] == {k: pytest.approx(v) for k, v in task.score(row["prediction"], example).items()}


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_evaluate_nq_end_to_end_keeps_every_prediction(kb, generator, tmp_path, model):
    rag = make_rag(kb, generator, model)
    examples = nq_examples(tmp_path)
    task = get_task("nq")
    report = evaluate(rag, "nq", examples, k=2, batch_size=2, num_beams=1, max_new_tokens=4)
    check_report(report, task, examples)
    assert report["model"] == model and set(report["metrics"]) == {"exact_match", "f1"}
    assert report["settings"]["k"] == 2 and report["settings"]["max_new_tokens"] == 4
    answers = rag.ask([e.input for e in examples], k=2, num_beams=1, max_new_tokens=4, decoding=PAPER.decoding)
    assert [row["prediction"] for row in report["predictions"]] == [a.answer for a in answers]
    for row, answer in zip(report["predictions"], answers):
        assert [p["title"] for p in row["passages"]] == [p.title for p in answer.passages]
        assert sum(p["prob"] for p in row["passages"]) == pytest.approx(1.0, abs=prob_sum_bound(rag, 2))


def prob_sum_bound(rag, k: int) -> float:
    """p(z|x) = exp(log_softmax(scale * score)) over k passages; unit vectors: |scale * score| <= scale."""
    return probability_sum_bound(k, float(rag.score_scale))


def test_metrics_are_the_mean_of_known_scores():
    """A stub whose answers are known: EM is exactly the fraction answered right."""
    examples = [Example("the capital is paris", "paris", ["paris"]), Example("it is london", "rome", ["rome"]),
                Example("answer hemingway", "Hemingway", ["Hemingway"])]
    report = evaluate(StubModel(), get_task("qa"), examples)
    assert [row["prediction"] for row in report["predictions"]] == ["paris", "london", "hemingway"]
    assert report["metrics"]["exact_match"] == pytest.approx(2 / 3)
    assert report["model"] == "stub" and all(row["passages"] == [] for row in report["predictions"])
    assert report["settings"]["max_new_tokens"] == get_task("qa").default_max_new_tokens


@pytest.mark.parametrize("name", ["jeopardy", "abstractive"])
def test_generation_tasks_add_corpus_bleu(kb, generator, name):
    task = get_task(name)
    examples = [Example("hemingway", "who wrote the sun rises", ["who wrote the sun rises"]),
                Example("paris", "the capital of france", ["the capital of france"])]
    report = evaluate(make_rag(kb, generator, "rag-token"), task, examples, k=2, max_new_tokens=5)
    check_report(report, task, examples)
    predictions = [row["prediction"] for row in report["predictions"]]
    assert report["metrics"]["bleu_1"] == pytest.approx(metrics.bleu_1(predictions, [e.golds for e in examples]))
    assert report["settings"]["max_new_tokens"] == 5


def test_evaluate_rejects_bad_input(kb, generator):
    with pytest.raises(InputError, match="no examples"):
        evaluate(StubModel(), "nq", [])
    with pytest.raises(InputError, match="unknown task"):
        evaluate(StubModel(), "squad", [Example("q", "a", ["a"])])
    with pytest.raises(InputError, match="cannot score labels"):
        evaluate(StubModel(), "fever2", [Example("a claim", "true", ["SUPPORTS"])])


# ---------------------------------------------------------------------------------------------------
# label log-likelihoods and classification


def brute_force_label_logprobs(rag: RAG, question: str, labels: list[str], k: int) -> list[float]:
    """log sum_z p(z|x) p(label | x, z), one (question, passage) generator pass at a time."""
    retrieval = rag.retrieve([question], k)
    gen = rag.generator
    bos = [] if gen.forced_bos_token_id is None else [gen.forced_bos_token_id]
    out = []
    for label in labels:
        (label_id,) = gen.tokenizer(label, add_special_tokens=False)["input_ids"]
        total = 0.0
        for j, passage in enumerate(retrieval.passages[0]):
            memory = gen.encode(gen.contexts([question], [[passage]]))
            targets = torch.tensor([bos + [label_id]])
            lp = gen.target_logprobs(memory, torch.tensor([0]), targets)[0, -1, label_id]
            total += math.exp(float(retrieval.doc_logprobs[0, j]) + float(lp))
        out.append(math.log(total))
    return out


@pytest.mark.parametrize("forced_bos", [False, True])
def test_label_logprobs_agree_for_both_models_and_with_brute_force(kb, forced_bos):
    generator = make_generator()
    if forced_bos:  # as BART-large's generation config does: BOS is forced as the first answer token
        generator.forced_bos_token_id = generator.bos_token_id
        assert generator.forced_bos_token_id is not None
    labels = ["true", "false", "unknown"]
    questions = ["paris is the capital of france", "everest is the largest ocean", "the king wrote music"]
    with torch.no_grad():
        seq = make_rag(kb, generator, "rag-sequence").label_logprobs(questions, labels, k=3)
        tok = make_rag(kb, generator, "rag-token").label_logprobs(questions, labels, k=3)
        assert seq.shape == (3, 3)
        config = generator.model.config
        torch.testing.assert_close(seq, tok, **model_tolerance(tok, config, 64))
        rag = make_rag(kb, generator)
        for b, question in enumerate(questions):
            want = torch.tensor(brute_force_label_logprobs(rag, question, labels, 3), dtype=torch.float32)
            torch.testing.assert_close(seq[b], want, **model_tolerance(want, config, 64))
        # the same as RAG-Sequence's marginal likelihood of a one-token target (no EOS)
        from openbook.rag.marginal import rag_sequence_nll

        retrieval = rag.retrieve(questions[:1], 3)
        memory = generator.encode(generator.contexts(questions[:1], retrieval.passages))
        bos = [] if generator.forced_bos_token_id is None else [generator.forced_bos_token_id]
        label_id = generator.tokenizer("false", add_special_tokens=False)["input_ids"][0]
        targets = torch.tensor([bos + [label_id]])
        lp = generator.target_logprobs(memory, torch.arange(3), targets.repeat(3, 1)).view(1, 3, len(bos) + 1, -1)
        mask = torch.tensor([[False] * len(bos) + [True]])
        nll = rag_sequence_nll(lp, retrieval.doc_logprobs, targets, mask)
        torch.testing.assert_close(-nll[0], seq[0, 1], **model_tolerance(seq[0, 1], config, 64))


def test_label_logprobs_is_differentiable(kb, generator):
    rag = make_rag(kb, generator)
    rag.label_logprobs(["paris is in france"], ["yes", "no"])[0, 0].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in rag.generator.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in rag.query_encoder.parameters())
    rag.zero_grad()


@pytest.mark.parametrize("labels, message", [
    (["true", "paris france"], r"label 'paris france' is 2 tokens"),
    (["true", "llama"], r"label 'llama' is the unknown token"),
    (["yes", "yes"], r"labels 'yes' and 'yes' are the same token"),
    ("yes", "non-empty list"),
    (["yes", ""], "non-empty string"),
])
def test_labels_must_be_distinct_single_tokens(kb, generator, labels, message):
    with pytest.raises(InputError, match=message):
        make_rag(kb, generator).label_logprobs(["a question"], labels)


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_evaluate_fever_classifies_by_label_likelihood(kb, generator, tmp_path, model):
    rag = make_rag(kb, generator, model)
    task = get_task("fever3")
    examples = task.read(write_jsonl(tmp_path / "fever.jsonl", FEVER))
    report = evaluate(rag, task, examples, k=2, batch_size=2)
    check_report(report, task, examples)
    assert report["settings"]["mode"] == "classification" and report["settings"]["labels"] == ["true", "false", "unknown"]
    with torch.no_grad():
        logprobs = rag.label_logprobs([e.input for e in examples], list(task.labels), k=2)
    for b, row in enumerate(report["predictions"]):
        assert list(row["label_probs"]) == list(task.label_names)
        assert sum(row["label_probs"].values()) == pytest.approx(1.0, abs=probability_sum_bound(3, logprobs[b].abs().max()))
        assert row["prediction"] == task.label_names[int(logprobs[b].argmax())]
        lp_tol = model_tolerance(logprobs[b], rag.generator.model.config, 64)["atol"]
        assert [row["label_logprobs"][n] for n in task.label_names] == pytest.approx(logprobs[b].tolist(), abs=lp_tol)
        assert len(row["passages"]) == 2 and sum(p["prob"] for p in row["passages"]) == pytest.approx(1.0, abs=prob_sum_bound(rag, 2))
    accuracy = metrics.label_accuracy([r["prediction"] for r in report["predictions"]], [e.golds[0] for e in examples])
    assert report["metrics"] == {"accuracy": pytest.approx(accuracy)}


def test_evaluate_boolq_and_fever2(kb, generator, tmp_path):
    rag = make_rag(kb, generator)
    boolq = get_task("boolq").read(write_jsonl(tmp_path / "boolq.jsonl", [
        {"query": "Passage: paris is the capital of france\nQuestion: is paris the capital of france?",
         "choices": ["no", "yes"], "gold": 1},
        {"question": "is everest an ocean", "passage": "everest is a mountain", "answer": False},
    ]))
    report = evaluate(rag, "boolq", boolq, k=2)
    assert report["n"] == 2 and set(report["predictions"][0]["label_probs"]) == {"no", "yes"}
    fever2 = get_task("fever2").read(write_jsonl(tmp_path / "fever.jsonl", FEVER))
    report = evaluate(rag, "fever2", fever2, k=2)
    assert report["n"] == 2 and all(row["prediction"] in ("SUPPORTS", "REFUTES") for row in report["predictions"])


def test_classification_with_multi_token_labels_is_a_clear_error(kb):
    from openbook.eval.tasks.fever import FeverTask

    rag = make_rag(kb, make_generator())
    task = FeverTask(2, labels=("true", "paris france"))
    with pytest.raises(InputError, match="single tokens"):
        evaluate(rag, task, [Example("a claim", "true", ["SUPPORTS"])])


# ---------------------------------------------------------------------------------------------------
# reports


def test_write_report_json_and_markdown_keep_every_prediction(tmp_path):
    examples = [Example(f"question {i} | with a pipe\nand a newline", "a", ["a", "b|c"]) for i in range(30)]
    report = evaluate(StubModel(), "qa", examples)
    json_path, md_path = write_report(report, tmp_path / "out" / "deep", name="nq-dev")
    assert (json_path.name, md_path.name) == ("nq-dev.json", "nq-dev.md")
    assert json.loads(json_path.read_text(encoding="utf-8")) == report
    markdown = md_path.read_text(encoding="utf-8")
    assert markdown == report_markdown(report)
    assert "| exact_match |" in markdown and "## Predictions" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert len(rows) == 30
    assert "question 7 \\| with a pipe and a newline" in markdown
    assert sorted(p.name for p in json_path.parent.iterdir()) == ["nq-dev.json", "nq-dev.md"]  # no temporary files
    write_report(report, tmp_path / "out" / "deep", name="nq-dev")  # overwriting is fine
    with pytest.raises(InputError, match="not a directory"):
        write_report(report, json_path)
    with pytest.raises(InputError, match="plain file name"):
        write_report(report, tmp_path, name="a/b")


def test_markdown_of_a_classification_report_shows_label_probabilities(kb, generator, tmp_path):
    examples = get_task("fever3").read(write_jsonl(tmp_path / "fever.jsonl", FEVER))
    report = evaluate(make_rag(kb, generator), "fever3", examples, k=2)
    markdown = report_markdown(report)
    assert "label probabilities" in markdown and "SUPPORTS 0." in markdown
    assert markdown.count("\n| ") >= 2 + len(examples)


# ---------------------------------------------------------------------------------------------------
# the command line


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """A tiny generator (with the label words) and encoder saved as folders, and a knowledge base the CLI
    can load with that encoder."""
    from openbook.models import load_encoder

    root = tmp_path_factory.mktemp("models")
    gen_dir, enc_dir = root / "gen", root / "enc"
    generator = make_generator()
    generator.model.save_pretrained(gen_dir)
    generator.tokenizer.save_pretrained(gen_dir)
    encoder = tiny_encoder()
    encoder.model.save_pretrained(enc_dir)
    encoder.tokenizer.save_pretrained(enc_dir)
    kb_dir = root / "kb"
    build_knowledge_base(PASSAGES, load_encoder(str(enc_dir)), kb_dir, progress=False)
    return gen_dir, enc_dir, kb_dir


def test_cli_eval_task_nq_end_to_end(saved_models, tmp_path, capsys):
    gen_dir, enc_dir, kb_dir = saved_models
    data = write_jsonl(tmp_path / "nq.jsonl", NQ)
    out = tmp_path / "reports"
    args = ["eval", "--task", "nq", "--data", str(data), "--kb", str(kb_dir), "--generator", str(gen_dir),
            "--encoder", str(enc_dir), "--out", str(out), "--k", "2", "--beams", "1", "--max-new-tokens", "4",
            "--batch-size", "2"]
    assert cli.main(args + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["task"] == "nq" and summary["n"] == len(NQ) and summary["model"] == "rag-sequence"
    assert set(summary["metrics"]) == {"exact_match", "f1"}
    assert summary["settings"]["data"] == str(data) and summary["settings"]["generator"] == str(gen_dir)
    assert summary["settings"]["dtype"] == "float32"  # eval's default: the paper's precision
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert summary["report"] == {"json": str(out / "report.json"), "markdown": str(out / "report.md")}
    assert [row["input"] for row in report["predictions"]] == [r["question"] for r in NQ]
    assert report["metrics"] == summary["metrics"]
    assert all(len(row["passages"]) == 2 for row in report["predictions"])
    assert (out / "report.md").read_text(encoding="utf-8").count("who wrote the sun rises") == 1

    assert cli.main(args + ["--limit", "2", "--model", "rag-token"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("nq: 2 examples, model rag-token") and "exact_match" in table
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["n"] == 2


def test_cli_eval_task_fever_classification(saved_models, tmp_path, capsys):
    gen_dir, enc_dir, kb_dir = saved_models
    data = write_jsonl(tmp_path / "fever.jsonl", FEVER)
    out = tmp_path / "fever-out"
    args = ["eval", "--task", "fever3", "--data", str(data), "--kb", str(kb_dir), "--generator", str(gen_dir),
            "--encoder", str(enc_dir), "--out", str(out), "--k", "2", "--json"]
    assert cli.main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["metrics"]) == {"accuracy"} and summary["n"] == 3
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert all(set(row["label_probs"]) == {"SUPPORTS", "REFUTES", "NOT ENOUGH INFO"} for row in report["predictions"])


def test_cli_eval_task_errors_are_one_line_and_early(tmp_path, capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("the model must not be loaded before the data is read")

    monkeypatch.setattr(options, "model_from_args", no_model)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answers": ["a"]}\n{"question": "q"}\n', encoding="utf-8")
    assert cli.main(["eval", "--task", "nq", "--data", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: 'answers' must be" in err and err.count("\n") == 1
    assert cli.main(["eval", "--task", "nq", "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["eval", "--task", "squad", "--data", str(bad)]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert cli.main(["eval", "--task", "nq"]) == 2
    assert "needs --data" in capsys.readouterr().err
    good = write_jsonl(tmp_path / "good.jsonl", NQ[:1])
    assert cli.main(["eval", "--task", "nq", "--data", str(good), "--out", str(good)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert cli.main(["eval"]) == 2
    assert "give --task" in capsys.readouterr().err


def test_cli_eval_task_uses_the_stub_loader_and_default_out_dir(tmp_path, capsys, monkeypatch):
    loaded = []

    def stub_loader(args):
        loaded.append((args.model, args.kb, args.generator, args.encoder))
        return StubModel()

    monkeypatch.setattr(options, "model_from_args", stub_loader)
    monkeypatch.chdir(tmp_path)
    data = write_jsonl(tmp_path / "qa.jsonl", [{"input": "say paris", "target": "paris"}])
    assert cli.main(["eval", "--task", "qa", "--data", str(data), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["metrics"]["exact_match"] == 1.0
    assert loaded == [(None, None, "default", None)]
    assert (tmp_path / "eval-qa" / "report.json").is_file() and (tmp_path / "eval-qa" / "report.md").is_file()


def test_cli_eval_retrieval_still_works(saved_models, tmp_path, capsys):
    _, enc_dir, kb_dir = saved_models
    questions = write_jsonl(tmp_path / "q.jsonl", NQ[:3])
    args = ["eval", "retrieval", "--questions", str(questions), "--kb", str(kb_dir), "--encoder", str(enc_dir),
            "--k", "1,6", "--retrievers", "dense,bm25", "--json"]
    assert cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_questions"] == 3 and set(result["retrievers"]) == {"dense", "bm25"}
    assert all(row["answer_recall"]["6"] == 1.0 for row in result["retrievers"].values())
    assert cli.main(["eval", "retrieval", "--questions", str(questions), "--task", "nq"]) == 2


# ---------------------------------------------------------------------------------------------------
# the closed-book baseline (openbook.rag.closed_book) through the same evaluation


def closed_book(generator):
    module = pytest.importorskip("openbook.rag.closed_book")
    return module.ClosedBook(generator).eval()


def test_evaluate_a_closed_book_model(generator, tmp_path):
    model = closed_book(generator)
    examples = nq_examples(tmp_path)
    report = evaluate(model, "nq", examples, max_new_tokens=4, batch_size=2)
    check_report(report, get_task("nq"), examples)
    assert report["model"] == "closed-book" and report["settings"]["k"] is None
    assert all(row["passages"] == [] for row in report["predictions"])
    fever = get_task("fever3").read(write_jsonl(tmp_path / "fever.jsonl", FEVER))
    report = evaluate(model, "fever3", fever)
    with torch.no_grad():
        logprobs = model.label_logprobs([e.input for e in fever], ["true", "false", "unknown"])
    assert [row["prediction"] for row in report["predictions"]] == [
        ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")[int(i)] for i in logprobs.argmax(-1)
    ]


def test_cli_eval_closed_book(saved_models, tmp_path, capsys):
    pytest.importorskip("openbook.rag.closed_book")
    gen_dir, _, _ = saved_models
    data = write_jsonl(tmp_path / "nq.jsonl", NQ[:2])
    args = ["eval", "--task", "nq", "--data", str(data), "--model", "closed-book", "--generator", str(gen_dir),
            "--out", str(tmp_path / "cb"), "--beams", "1", "--max-new-tokens", "3", "--json"]
    assert cli.main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == "closed-book" and summary["n"] == 2


def test_cli_eval_a_trained_run(saved_models, tmp_path, capsys):
    """`openbook train --out RUN` then `openbook eval --task nq --run RUN`: the trained weights are evaluated."""
    from openbook.rag import assemble

    if not hasattr(assemble, "load_run"):
        pytest.skip("openbook.rag.assemble.load_run is not available")
    gen_dir, enc_dir, kb_dir = saved_models
    train_data = write_jsonl(tmp_path / "train.jsonl", [{"input": r["question"], "target": r["answers"][0]} for r in NQ])
    run = tmp_path / "run"
    assert cli.main(["train", "--train", str(train_data), "--kb", str(kb_dir), "--out", str(run), "--generator",
                     str(gen_dir), "--encoder", str(enc_dir), "--k", "2", "--max-steps", "1", "--batch-size", "2",
                     "--lr-generator", "0.01"]) == 0
    capsys.readouterr()
    data = write_jsonl(tmp_path / "nq.jsonl", NQ)
    args = ["eval", "--task", "nq", "--data", str(data), "--run", str(run), "--out", str(tmp_path / "out"),
            "--k", "2", "--beams", "1", "--max-new-tokens", "3", "--json"]
    assert cli.main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["settings"]["run"] == str(run) and summary["model"] == "rag-sequence" and summary["n"] == len(NQ)
    trained = assemble.load_run(run)
    want = trained.ask([r["question"] for r in NQ], k=2, num_beams=1, max_new_tokens=3, decoding=PAPER.decoding)
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert [row["prediction"] for row in report["predictions"]] == [a.answer for a in want]
    assert cli.main(args + ["--model", "rag-token"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "rag-token"
