"""int8 inference (``--dtype int8``, ``load_model(dtype="int8")``): PyTorch's dynamic quantisation of the
generator's linear layers (all but the output head), after loading and after a LoRA run's adapters are
merged; retrieval stays float32 and bit-identical; log-probabilities and marginals are float32 and within
int8's rounding of float32's; ``auto`` never picks it (it is lossy on real models: precision's docstring)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from openbook.errors import InputError
from openbook.models import precision
from openbook.rag import RAG
from openbook.rag.assemble import load_model
from test_dtype import QUESTIONS, kb, target_scores  # noqa: F401  (kb is a fixture)
from tiny_causal import make_generator
from tiny_runs import bart_generator, save_tiny_models, train_run
from tolerance import int8_bound, magnitude

pytestmark = pytest.mark.skipif(not precision.int8_engine(), reason="PyTorch has no x86 quantised engine here")


def linear_kinds(model: nn.Module) -> dict[str, type]:
    return {name: type(m) for name, m in model.named_modules() if isinstance(m, nn.Linear) or "quantized" in type(m).__module__}


@pytest.mark.parametrize("make", [bart_generator, make_generator], ids=["seq2seq", "causal"])
def test_int8_quantises_every_linear_layer_but_the_head_and_stays_close_to_float32(kb, make):  # noqa: F811
    encoder, knowledge = kb
    fp32 = RAG(encoder, make(), knowledge, k=2).eval()
    q8 = RAG(encoder, copy.deepcopy(fp32.generator), knowledge, k=2).eval()
    precision.quantize_int8(q8.generator.model)

    head = q8.generator.model.get_output_embeddings()
    kinds = linear_kinds(q8.generator.model)
    assert type(head) is nn.Linear and head.weight.dtype == torch.float32
    quantised = {n for n, t in kinds.items() if t is torch.ao.nn.quantized.dynamic.Linear}
    plain = {n for n, t in kinds.items() if t is nn.Linear}
    assert quantised and all(q8.generator.model.get_submodule(n) is head for n in plain)
    assert len(quantised) + len(plain) == len(linear_kinds(fp32.generator.model))

    with torch.no_grad():
        r32, r8 = fp32.retrieve(QUESTIONS), q8.retrieve(QUESTIONS)
        assert torch.equal(r32.doc_logprobs, r8.doc_logprobs)  # q(x) and the index are untouched
        (lp32, loss32, length), (lp8, loss8, _) = target_scores(fp32, r32), target_scores(q8, r8)
        per_token = int8_bound(fp32.generator.model.config, scale=magnitude(lp32))
        assert 0 < (lp8 - lp32).abs().max() <= per_token  # quantised (not a no-op), within int8's rounding
        assert loss8.dtype == torch.float32
        assert abs(float(loss8) - float(loss32)) <= length * per_token
        for a8, a32 in zip(q8.ask(QUESTIONS, num_beams=2, max_new_tokens=4),
                           fp32.ask(QUESTIONS, num_beams=2, max_new_tokens=4)):
            assert [(p.id, p.prob) for p in a8.passages] == [(p.id, p.prob) for p in a32.passages]


def test_load_model_quantises_the_generator_only_after_merging_a_runs_adapters(tmp_path, capsys):
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    names = dict(generator=str(gen_dir), encoder=str(enc_dir), kb=str(kb_dir))
    q8 = load_model(**names, dtype="int8")
    assert any(t is torch.ao.nn.quantized.dynamic.Linear for t in linear_kinds(q8.generator.model).values())
    assert not any("quantized" in type(m).__module__ for m in q8.query_encoder.modules())
    assert {p.dtype for p in q8.parameters()} == {torch.float32}
    closed = load_model(model="closed-book", generator=str(gen_dir), dtype="int8")
    assert closed.ask(QUESTIONS, num_beams=1, max_new_tokens=3)[0].answer is not None

    run = train_run(tmp_path, "lora", "rag-sequence", gen_dir, enc_dir, kb_dir, "--lora", "2")
    fp32, int8 = load_model(run=str(run)), load_model(run=str(run), dtype="int8")
    assert not any("lora_" in name for name, _ in int8.named_parameters())
    merged = {n: m for n, m in fp32.generator.model.named_modules() if type(m) is nn.Linear}
    for name, module in int8.generator.model.named_modules():  # the merged float32 weights, quantised once
        if type(module) is torch.ao.nn.quantized.dynamic.Linear:
            weight = module.weight()
            expected = torch.quantize_per_channel(merged[name].weight, weight.q_per_channel_scales(),
                                                  weight.q_per_channel_zero_points(), 0, torch.qint8)
            assert torch.equal(weight.int_repr(), expected.int_repr())
    assert len(int8.ask(QUESTIONS, num_beams=1, max_new_tokens=3)) == 2


@pytest.mark.parametrize("native,engine,device,resolved", [
    (True, True, "cpu", "bfloat16"), (False, True, "cpu", "float32"), (False, False, "cpu", "float32"),
    (False, True, "cuda", "float32"),
])
def test_auto_never_picks_int8(monkeypatch, native, engine, device, resolved):
    monkeypatch.setattr(precision, "bf16_hardware", lambda: native)
    monkeypatch.setattr(precision, "int8_engine", lambda: engine)
    assert precision.resolve_dtype("auto", device) == resolved
    assert precision.resolve_dtype("float32", device) == "float32"
    if engine and device == "cpu":
        assert precision.resolve_dtype("int8", device) == "int8"  # only when asked for


@pytest.mark.parametrize("device,engine", [("cuda", True), ("cpu", False)])
def test_int8_where_it_cannot_run_is_a_one_line_error(monkeypatch, device, engine):
    monkeypatch.setattr(precision, "int8_engine", lambda: engine)
    with pytest.raises(InputError, match="dtype int8 .* runs on x86 CPUs only") as error:
        precision.resolve_dtype("int8", device)
    assert "\n" not in str(error.value)


def test_int8_encoding_uses_a_quantised_copy_that_follows_the_weights_and_is_never_saved():
    from tiny import PASSAGES, tiny_encoder

    encoder = tiny_encoder()
    state = set(encoder.state_dict())
    fp32 = encoder.encode_passages(PASSAGES, batch_size=2, dtype="float32")
    int8 = encoder.encode_passages(PASSAGES, batch_size=2, dtype="int8")
    assert set(encoder.state_dict()) == state  # the copy is not a submodule
    assert not any("quantized" in type(m).__module__ for m in encoder.modules())
    # unit vectors: each coordinate is a sum over the stacked layers, each off by ~3 * 2**-8 of its terms'
    # scale (int8_bound), and normalisation keeps that scale at most 1
    bound = int8_bound(encoder.model.config, scale=1.0)
    assert 0 < np.abs(int8 - fp32).max() <= bound
    assert np.abs(encoder.encode_passages(PASSAGES, batch_size=2, dtype="int8") - int8).max() == 0  # cached copy
    with torch.no_grad():  # an optimiser step on q(x) changes the weights in place: the copy is rebuilt
        next(encoder.model.parameters()).mul_(2.0)
    changed_fp32 = encoder.encode_passages(PASSAGES, batch_size=2, dtype="float32")
    changed_int8 = encoder.encode_passages(PASSAGES, batch_size=2, dtype="int8")
    assert np.abs(changed_int8 - int8).max() > bound
    assert np.abs(changed_int8 - changed_fp32).max() <= bound
