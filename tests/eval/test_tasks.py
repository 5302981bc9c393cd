"""Tasks as plugins: each reader on a tiny fixture written here (and on the real data file when present),
malformed records as errors naming file:line, training targets, and per-example / corpus scoring."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from openbook.errors import InputError
from openbook.eval import metrics
from openbook.eval.tasks import TASKS, ClassificationTask, Example, get_task
from openbook.eval.tasks.jeopardy import split_category
from openbook.eval.tasks.qa import regex_target

DATA = Path("/work/shared/data")


def write_jsonl(path: Path, records, gz: bool = False) -> Path:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------
# registry


def test_registry_holds_every_task_of_the_issue():
    assert {"nq", "webquestions", "curatedtrec", "qa", "abstractive", "jeopardy", "fever3", "fever2", "boolq"} <= set(TASKS)
    for name, task in TASKS.items():
        assert get_task(name) is task and task.name == name
        assert task.default_max_new_tokens >= 1 and task.metrics and task.primary_metric


def test_unknown_task_lists_the_known_names():
    with pytest.raises(InputError, match=r"unknown task 'squad'.*nq, webquestions, curatedtrec"):
        get_task("squad")


def test_cli_task_names_match_the_registry():
    from openbook.commands.eval import TASK_NAMES

    assert list(TASK_NAMES) == list(TASKS)


# ---------------------------------------------------------------------------------------------------
# open-domain QA readers


def test_nq_reader_oracle_and_plain_forms(tmp_path):
    path = write_jsonl(tmp_path / "nq.jsonl.gz", [
        {"question": " who wrote hamlet ", "answers": ["Shakespeare", "William Shakespeare"],
         "ctxs": [{"title": "Hamlet", "text": "Hamlet is a tragedy by Shakespeare."}]},
        "",
        {"question": "capital of france", "answers": ["Paris"]},
    ], gz=True)
    first, second = get_task("nq").read(path)
    assert (first.input, first.target, first.golds) == ("who wrote hamlet", "Shakespeare", ["Shakespeare", "William Shakespeare"])
    assert first.meta["gold"] == {"title": "Hamlet", "text": "Hamlet is a tragedy by Shakespeare."}
    assert first.to_pair() == ("who wrote hamlet", "Shakespeare")
    assert second.golds == ["Paris"] and "gold" not in second.meta and second.meta["line"] == 3
    assert len(get_task("nq").read(path, limit=1)) == 1


def test_qa_reader_reads_question_answers_and_input_target(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [
        {"id": "a", "question": "q1", "answers": ["x", "y"]},
        {"input": "q2", "target": "z"},
        {"input": "q3", "target": ["u", "v"]},
    ])
    examples = get_task("qa").read(path)
    assert [(e.input, e.target, e.golds) for e in examples] == [
        ("q1", "x", ["x", "y"]), ("q2", "z", ["z"]), ("q3", "u", ["u", "v"])
    ]
    assert examples[0].meta["id"] == "a"


def test_webquestions_reader_json_array_jsonl_and_original_form(tmp_path):
    array = tmp_path / "wq.json"
    array.write_text(
        '[\n {"qId": "wq1", "answers": ["Padm\\u00e9 Amidala"], "qText": "who did natalie portman play?"},\n'
        ' {"qId": "wq2", "answers": ["New York City", "NYC"], "qText": "where is the big apple?"}\n]\n',
        encoding="utf-8",
    )
    first, second = get_task("webquestions").read(array)
    assert (first.input, first.target, first.meta["id"], first.meta["line"]) == (
        "who did natalie portman play?", "Padmé Amidala", "wq1", 2)
    assert second.golds == ["New York City", "NYC"] and second.meta["line"] == 3
    assert len(get_task("webquestions").read(array, limit=1)) == 1
    original = write_jsonl(tmp_path / "wq.jsonl", [
        {"url": "http://www.freebase.com/view/en/jamaica", "utterance": "what language do jamaicans speak?",
         "targetValue": '(list (description "Jamaican English") (description "Jamaican Creole English Language"))'},
        {"qText": "q", "answers": ["a"]},
    ])
    ex, plain = get_task("webquestions").read(original)
    assert ex.golds == ["Jamaican English", "Jamaican Creole English Language"] and plain.golds == ["a"]


def test_webquestions_errors_name_the_line_of_the_bad_item(tmp_path):
    bad = tmp_path / "wq.json"
    bad.write_text('[\n {"qText": "q", "answers": ["a"]},\n {"qText": "q2", "answers": []}\n]\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"wq\.json:3: 'answers' must be a non-empty list"):
        get_task("webquestions").read(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('[\n {"qText": "q", "answers": ["a"]},\n {"qText": \n]\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.json:\d+: malformed JSON"):
        get_task("webquestions").read(broken)
    empty = tmp_path / "empty.json"
    empty.write_text("[]\n", encoding="utf-8")
    with pytest.raises(InputError, match="no examples"):
        get_task("webquestions").read(empty)


def test_curatedtrec_reader_regex_answers_and_generated_targets(tmp_path):
    path = tmp_path / "trec.tsv"
    path.write_text(
        "1756\tfactoid\tWhen is Fashion week in NYC?\tSept?(ember)?|Feb(ruary)?\n"
        "1434\tfactoid\tWhere did Lindbergh begin his flight?\tLong Island|New\\s?York\n"
        "\n"
        "462\tfactoid\tWhat is measured in curies?\tradiation|Sievert \\(Sv\\)\\\t1 Sv\n",
        encoding="utf-8",
    )
    first, second, third = get_task("curatedtrec").read(path)
    assert first.golds == ["Sept?(ember)?|Feb(ruary)?"] and first.target == "September"
    assert first.meta == {"id": "1756", "type": "factoid", "line": 1}
    assert second.target == "Long Island"
    assert third.golds == ["radiation|Sievert \\(Sv\\)\\\t1 Sv"] and third.meta["line"] == 4  # a tab inside the regex
    for example in (first, second, third):
        assert re.search(example.golds[0], example.target, re.IGNORECASE)


@pytest.mark.parametrize("pattern, target", [
    ("Sept?(ember)?|Feb(ruary)?", "September"),
    ("New\\s?York", "New York"),
    ("[Tt]he [Bb]eatles", "The Beatles"),
    ("St. Elsewhere", "St. Elsewhere"),
    ("numbers.*nitrogen", "numbers nitrogen"),
    ("(cairn )?terriers?", "cairn terriers"),
    ("^\\s*1,?000\\s*$", "1,000"),
])
def test_regex_target_is_a_string_the_regex_matches(pattern, target):
    assert regex_target(pattern) == target
    assert re.search(pattern, target)


def test_curatedtrec_malformed_lines_name_file_and_line(tmp_path):
    path = tmp_path / "trec.tsv"
    path.write_text("1\tfactoid\tq?\tParis\n2\tfactoid\tq2?\tbad(regex\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"trec\.tsv:2: invalid answer regular expression 'bad\(regex'"):
        get_task("curatedtrec").read(path)
    path.write_text("1\tfactoid\tonly three columns\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"trec\.tsv:1: expected 4 tab-separated columns"):
        get_task("curatedtrec").read(path)


# ---------------------------------------------------------------------------------------------------
# generation readers


def test_abstractive_reader(tmp_path):
    path = write_jsonl(tmp_path / "ms.jsonl", [
        {"input": "what is a gerund", "target": "A gerund is a verb form used as a noun."},
        {"question": "define rag", "answers": ["Retrieval-augmented generation.", "RAG."]},
    ])
    first, second = get_task("abstractive").read(path)
    assert first.golds == ["A gerund is a verb form used as a noun."] and first.target == first.golds[0]
    assert (second.input, second.target, second.golds) == ("define rag", "Retrieval-augmented generation.",
                                                            ["Retrieval-augmented generation.", "RAG."])


def test_jeopardy_reader_generates_the_clue_from_the_answer(tmp_path):
    path = write_jsonl(tmp_path / "j.jsonl.gz", [
        {"context": "WORLD HISTORY: This Portuguese admiral discovered the Amirante Islands",
         "continuation": "Vasco da Gama", "category": "world_history"},
        {"answer": "The World Cup",
         "question": "In 1986 Mexico scored as the first country to host this international sports competition twice"},
        {"input": "Hemingway", "target": "He wrote The Sun Also Rises"},
    ], gz=True)
    first, second, third = get_task("jeopardy").read(path)
    assert (first.input, first.target, first.golds) == (
        "Vasco da Gama", "This Portuguese admiral discovered the Amirante Islands",
        ["This Portuguese admiral discovered the Amirante Islands"])
    assert first.meta["category"] == "WORLD HISTORY"
    assert second.input == "The World Cup" and second.target.startswith("In 1986 Mexico")
    assert (third.input, third.target) == ("Hemingway", "He wrote The Sun Also Rises")


def test_split_category():
    assert split_category("U.S. CITIES: It's the Windy City") == ("U.S. CITIES", "It's the Windy City")
    assert split_category("Note: lower-case prefix is part of the clue") == (None, "Note: lower-case prefix is part of the clue")
    assert split_category("No category here") == (None, "No category here")


# ---------------------------------------------------------------------------------------------------
# classification readers

FEVER = [
    {"id": 1, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO", "claim": "Tilda Swinton is a vegan.",
     "evidence": [[[227768, None, None, None]]]},
    {"id": 2, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "Fox 2000 Pictures released Soul Food.",
     "evidence": [[[1, 2, "Soul_Food_-LRB-film-RRB-", 0]], [[3, 4, "Soul_Food_-LRB-film-RRB-", 0],
                                                            [5, 6, "Fox_2000_Pictures", 1]]]},
    {"id": 3, "verifiable": "VERIFIABLE", "label": "REFUTES", "claim": "Paris is in Peru.",
     "evidence": [[[7, 8, "Paris", 0]]]},
]


def test_fever3_maps_labels_to_one_token_targets(tmp_path):
    path = write_jsonl(tmp_path / "fever.jsonl", FEVER)
    task = get_task("fever3")
    assert isinstance(task, ClassificationTask)
    assert task.labels == ("true", "false", "unknown")
    assert task.label_names == ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
    nei, sup, ref = task.read(path)
    assert (nei.input, nei.target, nei.golds) == ("Tilda Swinton is a vegan.", "unknown", ["NOT ENOUGH INFO"])
    assert (sup.target, sup.golds, sup.meta["id"]) == ("true", ["SUPPORTS"], 2)
    assert sup.meta["evidence_titles"] == ["Soul_Food_-LRB-film-RRB-", "Fox_2000_Pictures"]
    assert (ref.target, ref.golds) == ("false", ["REFUTES"]) and "evidence_titles" not in nei.meta


def test_fever2_drops_not_enough_info(tmp_path):
    path = write_jsonl(tmp_path / "fever.jsonl", FEVER)
    task = get_task("fever2")
    assert task.labels == ("true", "false") and task.label_names == ("SUPPORTS", "REFUTES")
    examples = task.read(path)
    assert [e.golds for e in examples] == [["SUPPORTS"], ["REFUTES"]]
    assert [e.meta["line"] for e in examples] == [2, 3]
    assert len(task.read(path, limit=1)) == 1
    only_nei = write_jsonl(tmp_path / "nei.jsonl", FEVER[:1])
    with pytest.raises(InputError, match="no examples"):
        task.read(only_nei)


def test_fever_reads_claim_pairs_and_custom_label_words(tmp_path):
    from openbook.eval.tasks.fever import FeverTask

    path = write_jsonl(tmp_path / "pairs.jsonl", [{"input": "a claim", "target": "false"},
                                                  {"claim": "b claim", "label": "supports"}])
    a, b = get_task("fever3").read(path)
    assert (a.golds, a.target, b.golds, b.target) == (["REFUTES"], "false", ["SUPPORTS"], "true")
    task = FeverTask(2, labels=("yes", "no"))
    official = write_jsonl(tmp_path / "fever.jsonl", FEVER)
    assert [e.target for e in task.read(official)] == ["yes", "no"]
    with pytest.raises(InputError, match=r"pairs\.jsonl:1: unknown label 'false'.*targets yes, no"):
        task.read(path)
    with pytest.raises(InputError, match="give 2 distinct labels"):
        FeverTask(2, labels=("yes", "yes"))


def test_boolq_reader_question_only_by_default(tmp_path):
    path = write_jsonl(tmp_path / "boolq.jsonl.gz", [
        {"query": "Passage: Ethanol fuel takes energy to make.\nQuestion: does ethanol take more energy than it makes?",
         "choices": ["no", "yes"], "gold": 0},
        {"question": "is the sky blue", "passage": "The sky is blue.", "answer": True, "title": "Sky"},
        {"input": "is paris in france?", "target": "yes"},
    ], gz=True)
    first, second, third = get_task("boolq").read(path)
    assert (first.input, first.target, first.golds) == ("does ethanol take more energy than it makes?", "no", ["no"])
    assert first.meta["passage"] == "Ethanol fuel takes energy to make."
    assert (second.input, second.target, second.meta["title"]) == ("is the sky blue?", "yes", "Sky")
    assert third.golds == ["yes"]
    with_passage = get_task("boolq-passage").read(path)
    assert with_passage[0].input == "Ethanol fuel takes energy to make.\ndoes ethanol take more energy than it makes?"
    assert with_passage[2].input == "is paris in france?"


# ---------------------------------------------------------------------------------------------------
# malformed input: one error naming file and line, for every JSON Lines task

BAD_RECORDS = {
    "nq": ({"question": "q", "answers": ["a"]}, {"question": "q", "answers": "a"}, "'answers' must be"),
    "qa": ({"question": "q", "answers": ["a"]}, {"title": "x"}, "expected {question, answers}"),
    "abstractive": ({"input": "q", "target": "a"}, {"input": "", "target": "a"}, "'input' must be a non-empty string"),
    "jeopardy": ({"context": "C: clue", "continuation": "a"}, {"context": "C: clue"}, "no 'continuation' field"),
    "fever3": (FEVER[1], {"claim": "c", "label": "MAYBE"}, "unknown label 'MAYBE'"),
    "fever2": (FEVER[1], {"id": 4}, "no 'claim'"),
    "boolq": ({"input": "q", "target": "no"}, {"query": "Question: q?", "choices": ["no", "yes"], "gold": 2},
              "'gold' must be an index"),
    "webquestions": ({"qText": "q", "answers": ["a"]}, {"qText": "q"}, "no 'answers'"),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_malformed_records_name_file_and_line(tmp_path, name):
    good, bad, message = BAD_RECORDS[name]
    path = write_jsonl(tmp_path / f"{name}.jsonl", [good, good, bad])
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}:3: .*{re.escape(message)}"):
        get_task(name).read(path)
    broken = write_jsonl(tmp_path / f"{name}-broken.jsonl", [good, "{not json"])
    with pytest.raises(InputError, match=rf"{re.escape(str(broken))}:2: malformed JSON"):
        get_task(name).read(broken)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_missing_and_empty_files_are_clear_errors(tmp_path, name):
    with pytest.raises(InputError, match="no such file"):
        get_task(name).read(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="no examples"):
        get_task(name).read(empty)
    with pytest.raises(InputError, match="limit must be a positive integer"):
        get_task(name).read(empty, limit=0)


# ---------------------------------------------------------------------------------------------------
# the real data files (skipped where absent)

REAL = [
    ("nq", "nq-open-oracle.dev-split.jsonl.gz"),
    ("webquestions", "webquestions.train.json"),
    ("curatedtrec", "curatedtrec.train.tsv"),
    ("jeopardy", "jeopardy.dev-split.jsonl.gz"),
    ("fever3", "fever.paper_dev.dev-split.jsonl.gz"),
    ("fever2", "fever.paper_dev.dev-split.jsonl.gz"),
    ("boolq", "boolq.dev-split.jsonl.gz"),
    ("boolq-passage", "boolq.dev-split.jsonl.gz"),
]


@pytest.mark.parametrize("name, filename", REAL)
def test_reader_on_the_real_data_file(name, filename):
    path = DATA / filename
    if not path.is_file():
        pytest.skip(f"{path} not present")
    task = get_task(name)
    examples = task.read(path, limit=8)
    assert len(examples) == 8
    for example in examples:
        assert isinstance(example, Example) and example.input.strip() and example.target.strip() and example.golds
        if task.labels:
            assert example.target in task.labels and example.golds[0] in task.label_names
    if name == "nq":
        assert examples[0].input == "who got the first nobel prize in physics"
        assert examples[0].golds == ["Wilhelm Conrad Röntgen"]
    if name == "jeopardy":
        assert examples[0].input == "Tower of London" and not examples[0].target.startswith("WORLD HISTORY")
    if name == "fever2":
        assert all(e.golds[0] != "NOT ENOUGH INFO" for e in examples)
    if name == "curatedtrec":
        assert all(re.search(e.golds[0], e.target, re.IGNORECASE) for e in examples)


# ---------------------------------------------------------------------------------------------------
# scoring


def test_open_domain_qa_scores():
    task = get_task("nq")
    example = Example("who wrote hamlet", "Shakespeare", ["William Shakespeare", "Shakespeare"])
    assert task.score("shakespeare.", example) == {"exact_match": 1.0, "f1": 1.0}
    scores = task.score("the playwright Shakespeare", example)
    assert scores["exact_match"] == 0.0 and scores["f1"] == pytest.approx(metrics.token_f1("the playwright Shakespeare", example.golds))
    assert task.score("", example) == {"exact_match": 0.0, "f1": 0.0}


def test_curatedtrec_scores_by_regex_match_anywhere():
    task = get_task("curatedtrec")
    example = Example("When is fashion week?", "September", ["Sept?(ember)?|Feb(ruary)?"])
    assert task.score("in early September", example) == {"regex_match": 1.0}
    assert task.score("in spring", example) == {"regex_match": 0.0}


def test_abstractive_scores_and_corpus_bleu():
    task = get_task("abstractive")
    examples = [Example("q1", "the cat sat on the mat", ["the cat sat on the mat"]),
                Example("q2", "a dog barked", ["a dog barked", "the dog barked loudly"])]
    predictions = ["the cat sat on a mat", "dog"]
    scores = [task.score(p, e) for p, e in zip(predictions, examples)]
    assert scores[0]["rouge_l"] == pytest.approx(metrics.rouge_l(predictions[0], examples[0].golds))
    assert scores[1]["sentence_bleu_1"] == pytest.approx(metrics.sentence_bleu_1("dog", examples[1].golds))
    corpus = task.corpus_metrics(predictions, examples)
    assert corpus == {"bleu_1": pytest.approx(metrics.bleu_1(predictions, [e.golds for e in examples]))}


def test_jeopardy_scores():
    task = get_task("jeopardy")
    example = Example("The World Cup", "In 1986 Mexico became the first country to host this twice",
                      ["In 1986 Mexico became the first country to host this twice"])
    perfect = task.score(example.target, example)
    assert perfect == {"q_bleu_1": pytest.approx(1.0), "rouge_l": pytest.approx(1.0), "sentence_bleu_1": pytest.approx(1.0)}
    partial = task.score("Mexico hosted this sports event", example)
    assert 0.0 < partial["q_bleu_1"] < 1.0
    assert partial["q_bleu_1"] == pytest.approx(metrics.q_bleu_1("Mexico hosted this sports event", example.golds[0]))
    assert set(task.corpus_metrics(["x"], [example])) == {"bleu_1"}


def test_classification_scores_are_label_accuracy():
    task = get_task("fever3")
    example = Example("a claim", "true", ["SUPPORTS"])
    assert task.score("SUPPORTS", example) == {"accuracy": 1.0}
    assert task.score("supports", example) == {"accuracy": 1.0}
    assert task.score("REFUTES", example) == {"accuracy": 0.0}
    boolq = get_task("boolq")
    assert boolq.score("yes", Example("q?", "yes", ["yes"])) == {"accuracy": 1.0}
