"""LoRA fine-tuning (openbook.models.adapters): adapters are the only trained weights, checkpoints keep only
them, runs load back (merged) as the model that was trained, and the shipped default run is what the
default loader uses unless asked for the untrained generator."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from openbook.errors import InputError
from openbook.models.adapters import LoraSettings, add_lora, has_lora, lora_tensor_names, merge_lora_tensors
from openbook.models.weights import load_weights, save_weights
from openbook.rag.closed_book import ClosedBook
from openbook.train import TrainConfig, train
from tiny_causal import make_generator
from tiny_runs import ANSWERS, QUESTIONS, bart_generator, close_to, save_tiny_models, train_run


def lora_closed_book(r: int = 4) -> ClosedBook:
    model = ClosedBook(make_generator())
    add_lora(model.generator.model, LoraSettings(r=r, alpha=2 * r, dropout=0.0))
    return model


def test_adapters_are_the_only_trainable_weights_and_start_as_the_base_model():
    base = ClosedBook(make_generator())
    with torch.no_grad():
        before = float(base.loss(QUESTIONS, ANSWERS))
    add_lora(base.generator.model, LoraSettings(r=4, alpha=8, dropout=0.0))
    trainable = [name for name, p in base.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    # every linear layer of the blocks has an adapter; the output layer does not
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                     "down_proj"}
    with torch.no_grad():  # B starts at zero: the adapted model is the base model exactly
        assert float(base.loss(QUESTIONS, ANSWERS)) == before
    with pytest.raises(InputError, match="already has LoRA"):
        add_lora(base.generator.model, LoraSettings())


def test_training_changes_only_the_adapters_and_the_checkpoint_keeps_only_them(tmp_path):
    model = lora_closed_book()
    base = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    with torch.no_grad():
        before = float(model.loss(QUESTIONS, ANSWERS))
    cfg = TrainConfig(max_steps=3, batch_size=2, lr_generator=3e-2)
    state = train(model, list(zip(QUESTIONS, ANSWERS)), cfg, tmp_path / "run", progress=False)
    model.eval()
    with torch.no_grad():
        after = float(model.loss(QUESTIONS, ANSWERS))
    assert state.step == 3 and after < before, (before, after)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in base.items())  # the base model is untouched
    saved = load_file(tmp_path / "run" / "checkpoint" / "model.safetensors")
    assert set(saved) == lora_tensor_names(model)


def test_resume_continues_a_lora_run_to_the_same_weights(tmp_path):
    examples = list(zip(QUESTIONS, ANSWERS)) * 2
    cfg = TrainConfig(max_steps=4, batch_size=2, lr_generator=1e-2, checkpoint_every=2)
    whole = lora_closed_book()
    train(whole, examples, cfg, tmp_path / "whole", progress=False)
    part = lora_closed_book()
    train(part, examples, cfg, tmp_path / "part", progress=False, stop_after=2)
    resumed = lora_closed_book()
    train(resumed, examples, cfg, tmp_path / "part", progress=False, resume=True)
    for name in lora_tensor_names(whole):
        assert torch.equal(whole.state_dict()[name], resumed.state_dict()[name]), name


def test_partial_weights_must_hold_the_adapters_and_fit_the_model(tmp_path):
    model = lora_closed_book()
    names = lora_tensor_names(model)
    path = tmp_path / "adapters.safetensors"
    save_weights(model, path, only=names)
    load_weights(model, path, required=names)
    save_weights(model, path, only=set(sorted(names)[1:]))
    with pytest.raises(InputError, match="missing"):
        load_weights(model, path, required=names)
    other = lora_closed_book(r=2)  # the same names, other shapes
    save_weights(other, path, only=names)
    with pytest.raises(InputError, match="has shape"):
        load_weights(model, path, required=names)
    with pytest.raises(InputError, match="unexpected"):
        load_weights(ClosedBook(make_generator()), path, required=set())


def test_folding_the_adapters_into_plain_weights_keeps_the_outputs():
    adapted = lora_closed_book()
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # a trained-looking adapter (B is zero at the start)
        before = float(adapted.loss(QUESTIONS, ANSWERS))
    plain = ClosedBook(make_generator())  # the same base weights (seeded), no peft layers
    adapters = {k: v for k, v in adapted.state_dict().items() if "lora_" in k}
    rest = merge_lora_tensors(plain, {**adapters, "other": torch.zeros(1)}, LoraSettings(r=4, alpha=8),
                              prefix="generator.model.")
    assert set(rest) == {"other"} and not has_lora(plain)
    with torch.no_grad():
        assert float(plain.loss(QUESTIONS, ANSWERS)) == close_to(before, plain.generator)
    with pytest.raises(InputError, match="do not fit"):  # an adapter missing
        merge_lora_tensors(ClosedBook(make_generator()), dict(list(adapters.items())[2:]), LoraSettings(r=4, alpha=8),
                           prefix="generator.model.")


def test_a_lora_run_loads_back_as_the_trained_model(tmp_path):
    from openbook.rag.assemble import load_rag, load_run

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    run = train_run(tmp_path, "run", "rag-sequence", gen_dir, enc_dir, kb_dir, "--lora", "4", "--freeze-retriever")
    spec = json.loads((run / "run.json").read_text())
    assert spec["lora"] == {"r": 4, "alpha": 8, "dropout": 0.05, "target_modules": "all-linear"}
    saved = load_file(run / "checkpoint" / "model.safetensors")
    assert saved and all("lora_" in name or name == "log_scale" for name in saved)
    loaded = load_run(run)
    assert not has_lora(loaded.generator)  # folded into plain weights
    # the model as it was trained: peft's adapter layers over the untrained generator, the checkpoint loaded
    trained = load_rag(model="rag-sequence", kb=str(kb_dir), generator=str(gen_dir), encoder=str(enc_dir), k=2).eval()
    add_lora(trained.generator.model, LoraSettings.from_dict(spec["lora"]))
    load_weights(trained, run / "checkpoint" / "model.safetensors", required=lora_tensor_names(trained))
    trained.eval()
    untrained = ClosedBook(bart_generator())
    with torch.no_grad():
        loss = float(loaded.loss(QUESTIONS, ANSWERS))
        assert loss == close_to(float(trained.loss(QUESTIONS, ANSWERS)), trained.generator)
        assert loss != close_to(float(untrained.loss(QUESTIONS, ANSWERS)), untrained.generator)


@pytest.mark.parametrize("kwargs, shipped", [
    ({}, True),
    ({"model": "rag-token", "k": 3}, True),
    ({"untrained": True}, False),
    ({"model": "closed-book"}, False),
    ({"encoder": "other-encoder"}, False),
    ({"generator": "other-generator"}, False),
    ({"learn_scale": True}, False),
])
def test_the_default_model_is_the_shipped_run_unless_asked_otherwise(monkeypatch, tmp_path, kwargs, shipped):
    from openbook.rag import assemble

    calls = []
    monkeypatch.setattr(assemble, "default_run_path", lambda: tmp_path)
    monkeypatch.setattr(assemble, "load_run", lambda run, **kw: calls.append(("run", run, kw)) or torch.nn.Linear(1, 1))
    monkeypatch.setattr(assemble, "load_rag", lambda **kw: calls.append(("rag", kw)) or torch.nn.Linear(1, 1))
    monkeypatch.setattr(assemble, "load_generator", lambda name: calls.append(("generator", name)) or make_generator())
    assemble.load_model(**kwargs)
    assert (calls[0][0] == "run" and calls[0][1] == tmp_path) == shipped, calls
    if shipped:
        assert calls[0][2]["model"] == kwargs.get("model") and calls[0][2]["k"] == kwargs.get("k")


def test_without_a_shipped_run_the_default_is_the_untrained_generator(monkeypatch):
    from openbook.rag import assemble

    monkeypatch.setattr(assemble, "default_run_path", lambda: None)
    monkeypatch.setattr(assemble, "load_rag", lambda **kw: torch.nn.Linear(1, 1))
    assert isinstance(assemble.load_model(), torch.nn.Linear)
