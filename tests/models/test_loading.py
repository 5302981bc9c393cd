"""Tests of openbook.models.loading: names, offline errors, the GGUF conversion cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration, LlamaConfig, LlamaForCausalLM

from openbook.errors import InputError, ModelLoadError
from openbook.models import (
    cache_dir,
    load_causal_lm,
    load_config,
    load_encoder,
    load_seq2seq,
    loading,
    offline_default_names,
)
from tiny_encoders import bert_tokenizer, save_bert

MISSING = "nonexistent-org/nonexistent-model"


def assert_offline_message(error: pytest.ExceptionInfo, name: str = MISSING) -> None:
    message = str(error.value)
    assert repr(name) in message and "offline" in message
    assert loading.ENCODER_PACKAGE in message and loading.GENERATOR_PACKAGE in message
    assert "local model folder" in message


@pytest.mark.parametrize("loader", [load_encoder, load_causal_lm, load_seq2seq, load_config])
def test_unknown_hub_name_offline_is_a_quick_clear_error(monkeypatch, loader):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelLoadError) as error:
        loader(MISSING)
    assert time.monotonic() - start < 10
    assert_offline_message(error)


def test_unreachable_hub_is_a_clear_error_without_retries(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(loading, "_hub_reachable", lambda: False)
    with pytest.raises(ModelLoadError, match="cannot be reached") as error:
        load_encoder(MISSING)
    assert_offline_message(error)


def test_missing_local_folder_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_encoder(str(tmp_path / "no" / "such" / "model"))


def test_offline_names_and_cache_dir(monkeypatch, tmp_path):
    assert offline_default_names() == {"encoder": "minilm", "generator": "smollm2"}
    monkeypatch.setenv("OPENBOOK_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("OPENBOOK_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "openbook"
    assert (loading.packaged_minilm_path() / "config.json").is_file()
    assert loading.packaged_smollm2_gguf().suffix == ".gguf"


def test_folder_without_a_model_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="could not load model folder"):
        load_causal_lm(str(tmp_path))


def test_local_encoder_folder_loads_with_its_path_as_name(tmp_path):
    folder = save_bert(tmp_path / "bert")
    encoder = load_encoder(str(folder), pooling="mean")
    assert encoder.name == str(folder) and encoder.pooling == "mean"
    with pytest.raises(InputError, match="pooling"):  # openbook's own errors are not reworded
        load_encoder(str(folder), pooling="max")


def test_local_seq2seq_folder_loads_in_float32(tmp_path):
    tokenizer = bert_tokenizer(tmp_path)
    config = BartConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)
    BartForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, loaded_tokenizer = load_seq2seq(str(tmp_path))
    assert isinstance(model, BartForConditionalGeneration) and len(loaded_tokenizer) == len(tokenizer)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


# --------------------------------------------------------------------------------------- GGUF cache


def tiny_llama_and_tokenizer(folder: Path):
    torch.manual_seed(0)
    tokenizer = bert_tokenizer(folder)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return LlamaForCausalLM(config), tokenizer


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A stand-in .gguf file whose 'conversion' returns a tiny Llama, counting the conversions."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    calls = []

    def fake_load_gguf(path):
        calls.append(path)
        return tiny_llama_and_tokenizer(tmp_path / "tok")

    monkeypatch.setattr(loading, "load_gguf", fake_load_gguf)
    return gguf, calls


def test_gguf_is_converted_once_then_loaded_from_the_cache(tmp_path, fake_gguf):
    gguf, calls = fake_gguf
    target = tmp_path / "cache" / "tiny"
    first_model, _ = loading.load_gguf_cached(gguf, target)
    assert len(calls) == 1 and (target / "model.safetensors").is_file() and (target / loading.CACHE_MARKER).is_file()
    model, tokenizer = loading.load_gguf_cached(gguf, target)
    assert len(calls) == 1, "the second load must read the converted copy"
    assert tokenizer.chat_template == "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    for (name, expected), loaded in zip(first_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(expected, loaded), name
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")], "no temporary folders left"


def test_changed_gguf_file_rebuilds_the_cache(tmp_path, fake_gguf):
    gguf, calls = fake_gguf
    target = tmp_path / "cache" / "tiny"
    loading.load_gguf_cached(gguf, target)
    gguf.write_bytes(b"GGUF version 2")
    loading.load_gguf_cached(gguf, target)
    assert len(calls) == 2 and sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_interrupted_conversion_leaves_no_cache(tmp_path, fake_gguf, monkeypatch):
    gguf, calls = fake_gguf
    target = tmp_path / "cache" / "tiny"

    def interrupted(model, tokenizer, folder, source):
        model.save_pretrained(folder)
        raise KeyboardInterrupt

    monkeypatch.setattr(loading, "_save_converted", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loading.load_gguf_cached(gguf, target)
    assert list(target.parent.iterdir()) == [] and loading._read_marker(target) is None


@pytest.mark.slow
def test_packaged_smollm2_cache_generates_like_the_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBOOK_CACHE", str(tmp_path))
    gguf_model, gguf_tokenizer = load_causal_lm("smollm2")
    cached_model, cached_tokenizer = load_causal_lm("smollm2")
    assert (tmp_path / "models" / loading.SMOLLM2_CACHE_NAME / "model.safetensors").is_file()
    parameters = list(cached_model.parameters())
    assert all(isinstance(p, torch.nn.Parameter) and p.dtype == torch.float32 and p.requires_grad for p in parameters)
    assert cached_tokenizer.chat_template == gguf_tokenizer.chat_template and cached_tokenizer.chat_template
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    outputs = []
    for model, tokenizer in ((gguf_model, gguf_tokenizer), (cached_model, cached_tokenizer)):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        outputs.append(model.generate(**ids, max_new_tokens=8, do_sample=False)[0].tolist())
    assert outputs[0] == outputs[1]
