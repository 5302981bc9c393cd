"""Model folders are data, never code, and loading them is silent.

A folder named by ``--generator``, ``--encoder`` or a run's run.json may carry an ``auto_map`` in its
config pointing at a Python file of its own. openbook passes ``trust_remote_code=False`` everywhere, so
such a folder either loads transformers' built-in class or is refused with a ModelLoadError: it never
prompts (transformers' y/N question went to stdout, and ``echo y |`` ran the code) and never runs it.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from transformers import BartForConditionalGeneration
from transformers.utils import logging as hf_logging

from openbook.errors import ModelLoadError
from openbook.models import load_causal_lm, load_config, load_encoder, load_seq2seq
from tiny import bart_tokenizer, tiny_bart
from tiny_encoders import save_bert

AUTO_MAP = {
    "AutoConfig": "evil.EvilConfig",
    "AutoModel": "evil.EvilModel",
    "AutoModelForSeq2SeqLM": "evil.EvilModel",
    "AutoModelForCausalLM": "evil.EvilModel",
}


def plant_code(folder: Path, marker: Path, model_type: str | None) -> None:
    """Add an ``auto_map`` naming ``evil.py`` (which writes ``marker`` when imported) to ``folder``'s config;
    ``model_type`` replaces the config's own (an unknown one leaves transformers no built-in class)."""
    (folder / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('code from the model folder ran')\n"
        "from transformers import BartConfig, BartForConditionalGeneration\n"
        "class EvilConfig(BartConfig):\n    model_type = 'evil'\n"
        "class EvilModel(BartForConditionalGeneration):\n    config_class = EvilConfig\n"
    )
    for name, key in (("config.json", None), ("tokenizer_config.json", "AutoTokenizer")):
        config = json.loads((folder / name).read_text())
        config["auto_map"] = AUTO_MAP if key is None else {key: ["evil.EvilTokenizer", None]}
        if key is None and model_type is not None:
            config["model_type"] = model_type
        (folder / name).write_text(json.dumps(config))


@pytest.fixture
def no_prompt(monkeypatch):
    """Fail if anything asks a question on the terminal (answering "y" as `echo y |` would)."""
    asked = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": asked.append(prompt) or "y")
    yield asked
    assert asked == [], f"openbook let transformers prompt: {asked[0][:200]!r}"


def bart_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "gen"
    tok = bart_tokenizer()
    tiny_bart(vocab_size=len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("loader", [load_seq2seq, load_causal_lm, load_config, load_encoder])
def test_unknown_model_type_with_code_is_refused_without_running_it(tmp_path, no_prompt, loader):
    folder, marker = bart_folder(tmp_path), tmp_path / "MARKER"
    plant_code(folder, marker, model_type="evilbart")
    with pytest.raises(ModelLoadError, match=str(folder)):
        loader(str(folder))
    assert not marker.exists()


def test_known_model_type_with_code_loads_the_builtin_class(tmp_path, no_prompt):
    folder, marker = bart_folder(tmp_path), tmp_path / "MARKER"
    plant_code(folder, marker, model_type=None)  # still "bart"
    model, tokenizer = load_seq2seq(str(folder))
    assert type(model) is BartForConditionalGeneration and tokenizer is not None
    assert not marker.exists()


def test_encoder_folder_with_code_loads_the_builtin_class(tmp_path, no_prompt):
    folder, marker = save_bert(tmp_path / "enc"), tmp_path / "MARKER"
    plant_code(folder, marker, model_type=None)  # still "bert"
    encoder = load_encoder(str(folder))
    assert type(encoder.model).__name__ == "BertModel"
    assert not marker.exists()


def test_loading_a_model_prints_nothing(tmp_path, capfd):
    """transformers' "Loading weights" bar ignored --quiet; a load is silent, and the bar setting is restored."""
    folder = bart_folder(tmp_path)
    enc = save_bert(tmp_path / "enc")
    capfd.readouterr()
    hf_logging.enable_progress_bar()
    load_seq2seq(str(folder))
    load_encoder(str(enc))
    load_config(str(folder))
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert hf_logging.is_progress_bar_enabled()  # switched off only while openbook loads
