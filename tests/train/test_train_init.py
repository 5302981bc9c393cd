"""`openbook train --init RUN`: a new run that starts from another run's trained weights, and its errors."""

from __future__ import annotations

import argparse
import json

import pytest

from openbook.cli import main
from openbook.models.weights import read_tensors
from tiny_runs import save_tiny_models, train_run


def _weights(run) -> dict:
    return read_tensors(run / "checkpoint" / "model.safetensors")


def test_a_run_starts_from_the_weights_of_the_run_it_names(tmp_path, capsys):
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    first = train_run(tmp_path, "first", "rag-sequence", gen_dir, enc_dir, kb_dir,
                      "--lora", "4", "--learn-scale", "--freeze-retriever", "--max-context-length", "40")
    trained = _weights(first)
    assert any(name.endswith("lora_B.default.weight") and value.abs().max() > 0 for name, value in trained.items())
    # a learning rate of zero: the new run's checkpoint holds exactly the weights it started from
    second = train_run(tmp_path, "second", "rag-token", gen_dir, enc_dir, kb_dir, "--init", str(first),
                       "--freeze-retriever", "--lr-generator", "0", "--max-steps", "1")
    again = _weights(second)
    assert set(again) == set(trained)
    assert all(again[name].equal(value) for name, value in trained.items())
    spec = json.loads((second / "run.json").read_text())
    assert spec["init"] == str(first.resolve()) and spec["lora"]["r"] == 4 and spec["max_context_length"] == 40
    # without --init the same command starts from fresh adapters (B = 0)
    fresh = _weights(train_run(tmp_path, "fresh", "rag-token", gen_dir, enc_dir, kb_dir, "--lora", "4",
                               "--freeze-retriever", "--lr-generator", "0", "--max-steps", "1"))
    assert all(value.abs().max() == 0 for name, value in fresh.items() if name.endswith("lora_B.default.weight"))


def test_init_errors_are_one_line_and_come_before_the_models_load(tmp_path, capsys, monkeypatch):
    from openbook.commands import options

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    first = train_run(tmp_path, "first", "rag-sequence", gen_dir, enc_dir, kb_dir, "--lora", "4", "--freeze-retriever")
    full = train_run(tmp_path, "full", "rag-sequence", gen_dir, enc_dir, kb_dir, "--freeze-retriever")
    capsys.readouterr()
    monkeypatch.setattr(options, "model_from_args", lambda *a, **k: pytest.fail("a model was loaded"))
    data = tmp_path / "train.jsonl"
    base = ["train", "--train", str(data), "--kb", str(kb_dir), "--out", str(tmp_path / "new"), "--max-steps", "1"]
    cases = [
        (["--init", str(tmp_path / "nowhere")], "no run.json"),
        (["--init", "default"], "ships no default model"),  # an installation without it (tests hide it)
        (["--init", str(first), "--lora", "8"], "rank 4"),
        (["--init", str(full), "--lora", "4"], "no LoRA adapters"),
        (["--init", str(first), "--generator", str(enc_dir)], "was trained with generator"),
        (["--init", str(first), "--model", "closed-book"], "cannot start from it"),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.shipped_default
def test_init_default_takes_the_shipped_models_settings():
    from openbook.commands.train_init import init_run
    from openbook.data import default_run_path

    shipped = json.loads((default_run_path() / "run.json").read_text())
    args = argparse.Namespace(init="default", model="rag-sequence", generator="default", encoder=None,
                              max_context_length=None)
    (folder, spec), lora = init_run(args, None)
    assert folder == default_run_path() and spec["lora"] == shipped["lora"]
    assert (lora.r, lora.alpha, lora.dropout) == (shipped["lora"]["r"], shipped["lora"]["alpha"], shipped["lora"]["dropout"])
    assert args.generator == "default" and args.encoder is None
    assert args.max_context_length == shipped["max_context_length"]
