"""The hot-swap experiment: office holders per date, changed offices, scoring, and the command."""

from __future__ import annotations

import json

from openbook.experiments.hot_swap import changed_offices, holders_on, names_person, passages_for, question

CSV = """iso3,country,role,person,person_qid,start,end,party,end_cause
PER,Peru,head_of_state,Ollanta Humala,Q1,2011-07-28T00:00:00Z,2016-07-28T00:00:00Z,,
PER,Peru,head_of_state,Pedro Pablo Kuczynski,Q2,2016-07-28T00:00:00Z,2018-03-23T00:00:00Z,,
PER,Peru,head_of_state,Martín Vizcarra,Q3,2018-03-23T00:00:00Z,2020-11-10T00:00:00Z,,
FRA,France,head_of_state,François Hollande,Q4,2012-05-15T00:00:00Z,2017-05-14T00:00:00Z,,
FRA,France,head_of_state,Emmanuel Macron,Q5,2017-05-14T00:00:00Z,,,
DEU,Germany,head_of_government,Angela Merkel,Q6,2005-11-22T00:00:00Z,2021-12-08T00:00:00Z,,
XXX,Nowhere,head_of_state,No Date,Q7,,,,
"""


def rows(tmp_path):
    import csv

    path = tmp_path / "leaders.csv"
    path.write_text(CSV)
    return path, list(csv.DictReader(open(path)))


def test_holders_and_changed_offices(tmp_path):
    _, table = rows(tmp_path)
    old, new = holders_on(table, "2016-12-31"), holders_on(table, "2018-12-31")
    assert {o.country: p for o, p in old.items()} == {"Peru": "Pedro Pablo Kuczynski", "France": "François Hollande",
                                                       "Germany": "Angela Merkel"}
    changed = changed_offices(old, new)
    assert [o.country for o in changed] == ["France", "Peru"]  # Merkel did not change; no-date rows ignored
    assert question(changed[1]) == "Who is the head of state of Peru?"
    assert passages_for(new, "2018")[2].text == "Martín Vizcarra is the head of state of Peru."


def test_names_person_ignores_case_accents_and_punctuation():
    assert names_person("The president is martin vizcarra.", "Martín Vizcarra")
    assert not names_person("Vizcarra", "Martín Vizcarra")
    assert not names_person("Martín Vizcarrao", "Martín Vizcarra")


def test_hot_swap_command_on_tiny_models(tmp_path, monkeypatch, capsys):
    """The command runs end to end; the tiny random generator's accuracies are just numbers in [0, 1]."""
    from test_rag_model import tiny_encoder
    from tiny import bart_tokenizer, tiny_bart

    from openbook.cli import main
    from openbook.models.generators import Seq2SeqGenerator
    import openbook.models as models
    import openbook.rag.assemble as assemble

    path, _ = rows(tmp_path)
    tok = bart_tokenizer()
    monkeypatch.setattr(models, "load_encoder", lambda name: tiny_encoder())
    monkeypatch.setattr(assemble, "load_generator", lambda name: Seq2SeqGenerator(tiny_bart(vocab_size=len(tok)), tok))
    code = main(["experiments", "hot-swap", "--leaders", str(path), "--out", str(tmp_path / "out"), "--k", "2",
                 "--max-new-tokens", "3", "--json"])
    assert code == 0
    acc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(acc) == {"index2016_era2016", "index2016_era2018", "index2018_era2016", "index2018_era2018"}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["offices"] == 2 and len(report["predictions"]) == 2
    assert (tmp_path / "out" / "report.md").is_file()
