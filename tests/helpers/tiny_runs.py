"""Tiny saved models and `openbook train` runs on them: what the tests of commands that load models by path use."""

from __future__ import annotations

import json

import pytest

from openbook.models.generators import Seq2SeqGenerator
from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder
from tolerance import model_tolerance

QUESTIONS = ["capital of france", "who wrote the sun rises"]
ANSWERS = ["paris", "ernest hemingway"]


def bart_generator(seed: int = 11) -> Seq2SeqGenerator:
    tok = bart_tokenizer()
    return Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=seed, init_std=0.05, d_model=32), tok)


def close_to(value: float, gen) -> object:
    """``value`` up to float32 rounding of ``gen``'s network over these short questions (tests/helpers/tolerance.py)."""
    return pytest.approx(value, abs=model_tolerance(value, gen.model.config, 32)["atol"])


def save_tiny_models(tmp_path):
    """A tiny generator and encoder as local folders (what `openbook train` loads by path), and a kb."""
    from openbook.models import load_encoder
    from openbook.rag.assemble import build_knowledge_base

    gen_dir, enc_dir, kb_dir = tmp_path / "gen", tmp_path / "enc", tmp_path / "kb"
    for part, folder in ((bart_generator(), gen_dir), (tiny_encoder(), enc_dir)):
        part.model.save_pretrained(folder)
        part.tokenizer.save_pretrained(folder)
    build_knowledge_base(PASSAGES, load_encoder(str(enc_dir)), kb_dir, progress=False)
    return gen_dir, enc_dir, kb_dir


def train_run(tmp_path, name, model, gen_dir, enc_dir, kb_dir, *extra, capsys=None):
    from openbook.cli import main

    data = tmp_path / "train.jsonl"
    if not data.exists():
        data.write_text("\n".join(json.dumps({"question": q, "answers": [a]}) for q, a in zip(QUESTIONS, ANSWERS)))
    out = tmp_path / name
    args = ["train", "--model", model, "--train", str(data), "--kb", str(kb_dir), "--out", str(out),
            "--generator", str(gen_dir), "--encoder", str(enc_dir), "--k", "2", "--max-steps", "2",
            "--batch-size", "2", "--lr-generator", "1e-2", "--lr-query-encoder", "1e-2", *extra]
    assert main(args) == 0
    return out
