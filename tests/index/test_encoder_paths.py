"""An encoder given by a relative path (``--encoder ./enc``) is the same encoder wherever it is named from:
a knowledge base built with it and a run trained on that knowledge base (whose run.json stores absolute
paths) load together, from any working directory."""

from __future__ import annotations

import json

from openbook.cli import main
from openbook.index.kb import MANIFEST_FILE, read_manifest
from openbook.rag.assemble import load_run
from test_closed_book import ANSWERS, QUESTIONS, bart_generator
from test_rag_model import tiny_encoder


def test_a_run_trained_on_a_kb_built_with_a_relative_encoder_path_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for part, folder in ((bart_generator(), tmp_path / "gen"), (tiny_encoder(), tmp_path / "enc")):
        part.model.save_pretrained(folder)
        part.tokenizer.save_pretrained(folder)
    (tmp_path / "passages.jsonl").write_text("\n".join(
        json.dumps({"id": str(i), "title": a, "text": f"{q} {a}"}) for i, (q, a) in enumerate(zip(QUESTIONS, ANSWERS))))
    (tmp_path / "train.jsonl").write_text("\n".join(
        json.dumps({"question": q, "answers": [a]}) for q, a in zip(QUESTIONS, ANSWERS)))
    assert main(["kb", "build", "passages.jsonl", "--out", "kb", "--encoder", "./enc", "--quiet"]) == 0
    assert main(["train", "--train", "train.jsonl", "--kb", "kb", "--generator", "./gen", "--out", "run",
                 "--k", "2", "--max-steps", "1", "--batch-size", "2"]) == 0  # the kb's own encoder, ./enc
    monkeypatch.chdir(tmp_path / "run")  # elsewhere: ./enc would name nothing here
    assert load_run(tmp_path / "run").kb.path == tmp_path / "kb"
    assert read_manifest(tmp_path / "kb")["encoder"]["name"] == str(tmp_path / "enc")  # recorded resolved
    assert json.loads((tmp_path / "run" / "run.json").read_text())["encoder"] == str(tmp_path / "enc")
    capsys.readouterr()
    assert main(["ask", "capital of france", "--run", str(tmp_path / "run"), "--k", "1", "--max-new-tokens", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passages"][0]["title"] == "paris"
    manifest_path = tmp_path / "kb" / MANIFEST_FILE  # a knowledge base built before names were resolved:
    manifest = json.loads(manifest_path.read_text())  # its weights' fingerprint identifies the encoder
    manifest["encoder"]["name"] = "./enc"
    manifest_path.write_text(json.dumps(manifest))
    assert load_run(tmp_path / "run").kb.path == tmp_path / "kb"
