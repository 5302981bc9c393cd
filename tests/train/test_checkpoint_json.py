"""``openbook train --resume`` over a crafted checkpoint: JSON values of the wrong type or range in
``rng.json`` or ``state.json`` give one error line naming the file, not a traceback from deep in
``random`` or the training loop."""

from __future__ import annotations

import json

import pytest

from openbook.cli import main
from test_closed_book import save_tiny_models, train_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A one-step run with its checkpoint, and the command that resumes it."""
    root = tmp_path_factory.mktemp("checkpoint-json")
    gen_dir, enc_dir, kb_dir = save_tiny_models(root)
    out = train_run(root, "run", "rag-sequence", gen_dir, enc_dir, kb_dir)
    args = ["train", "--train", str(root / "train.jsonl"), "--kb", str(kb_dir), "--out", str(out), "--generator",
            str(gen_dir), "--encoder", str(enc_dir), "--k", "2", "--max-steps", "3", "--batch-size", "2", "--resume"]
    return out / "checkpoint", args


def rng_words(data: dict, value) -> dict:
    data["python"]["state"][5] = value
    return data


CRAFTED = [
    ("rng.json", lambda data: rng_words(data, 2**70), "rng.json holds a damaged random state"),
    ("rng.json", lambda data: rng_words(data, -1), "rng.json holds a damaged random state"),
    ("rng.json", lambda data: {**data, "python": {**data["python"], "state": data["python"]["state"][:10]}},
     "rng.json holds a damaged random state"),
    ("rng.json", lambda data: {**data, "python": {**data["python"], "gauss_next": "x"}},
     "rng.json holds a damaged random state"),
    ("state.json", lambda data: {**data, "state": {**data["state"], "step": "x"}}, "step must be a whole number"),
    ("state.json", lambda data: {**data, "state": {**data["state"], "position": -3}}, "position must be a whole"),
    ("state.json", lambda data: {**data, "state": {**data["state"], "epoch": 2**70 + 0.5}}, "epoch must be a whole"),
    ("state.json", lambda data: {**data, "state": {**data["state"], "history": {}}}, "history must be a list"),
    ("state.json", lambda data: {**data, "state": [1, 2]}, "state.json holds a damaged training state"),
]


@pytest.mark.parametrize("name, craft, problem", CRAFTED)
def test_crafted_checkpoint_json_is_a_one_line_error_on_resume(run, capsys, name, craft, problem):
    checkpoint, args = run
    path = checkpoint / name
    original = path.read_text()
    path.write_text(json.dumps(craft(json.loads(original))))
    try:
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("openbook: error:") and "\n" not in err and "Traceback" not in err, err
        assert problem in err and name in err
    finally:
        path.write_text(original)
