"""The hot-swap experiment: office holders per date, changed offices, scoring, and the command."""

from __future__ import annotations

import json

from openbook.experiments.hot_swap import changed_offices, holders_on, names_person, passages_for, question

CSV = """iso3,country,role,person,person_qid,start,end,party,end_cause
PER,Peru,head_of_state,Ollanta Humala,Q1,2011-07-28T00:00:00Z,2016-07-28T00:00:00Z,,
PER,Peru,head_of_state,Pedro Pablo Kuczynski,Q2,2016-07-28T00:00:00Z,2018-03-23T00:00:00Z,,
PER,Peru,head_of_state,Martín Vizcarra,Q3,2018-03-23T00:00:00Z,2020-11-10T00:00:00Z,,
FRA,França,head_of_state,François Hollande,Q4,2012-05-15T00:00:00Z,2017-05-14T00:00:00Z,,
FRA,França,head_of_state,Emmanuel Macron,Q5,2017-05-14T00:00:00Z,,,
DEU,Alemanha,head_of_government,Angela Merkel,Q6,2005-11-22T00:00:00Z,2021-12-08T00:00:00Z,,
XXX,Nenhures,head_of_state,No Date,Q7,,,,
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
    assert question(changed[0]) == "Who is the head of state of France?"  # English, from the ISO code FRA
    assert passages_for(new, "2018")[2].text == "Martín Vizcarra is the head of state of Peru."


def test_names_person_ignores_case_accents_and_punctuation():
    assert names_person("The president is martin vizcarra.", "Martín Vizcarra")
    assert not names_person("Vizcarra", "Martín Vizcarra")
    assert not names_person("Martín Vizcarrao", "Martín Vizcarra")


def test_hot_swap_command_on_tiny_models(tmp_path, monkeypatch, capsys):
    """The command runs end to end; the tiny random generator's accuracies are just numbers in [0, 1]."""
    import openbook.models as models
    import openbook.rag.assemble as assemble
    from openbook.cli import main
    from openbook.models.generators import Seq2SeqGenerator
    from tiny import bart_tokenizer, tiny_bart, tiny_encoder

    path, _ = rows(tmp_path)
    tok = bart_tokenizer()
    monkeypatch.setattr(models, "load_encoder", lambda name: tiny_encoder())
    monkeypatch.setattr(assemble, "load_generator", lambda name: Seq2SeqGenerator(tiny_bart(vocab_size=len(tok)), tok))
    code = main(["experiments", "hot-swap", "--leaders", str(path), "--out", str(tmp_path / "out"), "--k", "2",
                 "--max-new-tokens", "3", "--json", "--untrained"])
    assert code == 0
    acc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(acc) == {"index2016_era2016", "index2016_era2018", "index2018_era2016", "index2018_era2018"}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["offices"] == 2 and len(report["predictions"]) == 2
    assert "![hot_swap.png](hot_swap.png)" in (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / "hot_swap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hot_swap_with_a_trained_run(tmp_path, monkeypatch, capsys):
    """--run swaps the era indexes under a trained model (the paper's NQ RAG model): its checkpoint
    weights answer, its kind is the default, and the indexes are written with the untrained document
    encoder d(z), not with the trained query encoder."""
    import numpy as np
    import torch
    from safetensors.torch import load_file

    import openbook.rag.assemble as assemble
    from openbook.cli import main
    from openbook.index import KnowledgeBase
    from openbook.models import load_encoder
    from tiny_runs import save_tiny_models, train_run
    from tolerance import model_tolerance

    path, _ = rows(tmp_path)
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    run = train_run(tmp_path, "run", "rag-token", gen_dir, enc_dir, kb_dir, "--max-steps", "3")
    loaded = []
    real_load_run = assemble.load_run
    monkeypatch.setattr(assemble, "load_run", lambda *a, **kw: loaded.append(real_load_run(*a, **kw)) or loaded[-1])
    out = tmp_path / "out"
    assert main(["experiments", "hot-swap", "--leaders", str(path), "--out", str(out), "--run", str(run),
                 "--k", "2", "--max-new-tokens", "3", "--json"]) == 0
    acc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(acc) == {"index2016_era2016", "index2016_era2018", "index2018_era2016", "index2018_era2018"}
    report = json.loads((out / "report.json").read_text())
    assert report["model"] == "rag-token" and report["run"] == str(run)
    (rag,) = loaded
    trained = load_file(run / "checkpoint" / "model.safetensors")  # tied weights stored once
    assert all(torch.equal(rag.state_dict()[k], v) for k, v in trained.items())
    untrained = load_encoder(str(enc_dir))
    assert any(not torch.equal(v, untrained.state_dict()[k]) for k, v in rag.query_encoder.state_dict().items())
    kb = KnowledgeBase.load(out / "kb-2018")
    passages = kb.passages(np.arange(len(kb)))
    want = untrained.encode_passages(passages)  # the knowledge base was encoded by the same encoder, in batches
    np.testing.assert_allclose(kb.embeddings[: len(passages)], want, **model_tolerance(want, untrained.model.config, 64))
    assert "run " + str(run) in (out / "report.md").read_text()


def test_hot_swap_run_and_model_names_exclude_each_other(tmp_path, capsys):
    from openbook.cli import main

    path, _ = rows(tmp_path)
    code = main(["experiments", "hot-swap", "--leaders", str(path), "--out", str(tmp_path / "o"), "--run",
                 str(tmp_path), "--generator", "gpt2"])
    assert code == 2 and "exclude each other" in capsys.readouterr().err
