"""bfloat16 inference (``--dtype``, ``load_model(dtype=)``): only the generator is cast, after loading
(and after a LoRA run's adapters are merged); retrieval stays float32 and bit-identical; log-probabilities
and the marginals over documents are computed in float32; scores stay within bfloat16's rounding of
float32's."""

from __future__ import annotations

import copy

import pytest
import torch

from openbook.errors import InputError
from openbook.models import precision
from openbook.rag import RAG
from openbook.rag.assemble import load_model
from tiny import PASSAGES, tiny_encoder
from tiny_causal import make_generator
from tiny_runs import bart_generator, save_tiny_models, train_run
from tolerance import bfloat16_bound, magnitude, probability_sum_bound

QUESTIONS = ["who wrote the sun rises", "capital of france"]
ANSWERS = ["ernest hemingway", "paris"]


def target_scores(rag, retrieval) -> tuple[torch.Tensor, torch.Tensor, int]:
    """log p(y_i|x,z,y_<i) over the vocabulary for ANSWERS under each (question, passage) row of ``retrieval``,
    checked to be float32 distributions; the RAG loss; the answers' padded length in tokens."""
    gen = rag.generator
    memory = gen.encode(gen.contexts(QUESTIONS, retrieval.passages))
    targets, _ = gen.encode_targets(ANSWERS)
    lp = gen.target_logprobs(memory, torch.arange(len(QUESTIONS) * 2), targets.repeat_interleave(2, 0))
    # log-softmax ran in float32: each row normalises to float32 precision, whatever the weights' type
    assert lp.dtype == torch.float32
    assert lp.logsumexp(-1).abs().max() <= probability_sum_bound(lp.shape[-1], logits=magnitude(lp))
    return lp, rag.loss(QUESTIONS, ANSWERS), targets.shape[1]


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    from openbook.rag.assemble import build_knowledge_base

    encoder = tiny_encoder()
    return encoder, build_knowledge_base(PASSAGES, encoder, tmp_path_factory.mktemp("kb") / "kb", progress=False)


def generator_dtypes(model) -> set[torch.dtype]:
    return {p.dtype for p in model.generator.model.parameters()} | {b.dtype for b in model.generator.model.buffers()
                                                                       if b.is_floating_point()}


@pytest.mark.parametrize("make", [bart_generator, make_generator], ids=["seq2seq", "causal"])
def test_bfloat16_scores_are_float32_computations_close_to_float32(kb, make):
    encoder, knowledge = kb
    fp32 = RAG(encoder, make(), knowledge, k=2).eval()
    bf16 = RAG(encoder, copy.deepcopy(fp32.generator), knowledge, k=2).eval()
    bf16.generator.model.to(torch.bfloat16)
    assert generator_dtypes(bf16) == {torch.bfloat16}

    with torch.no_grad():
        r32, r16 = fp32.retrieve(QUESTIONS), bf16.retrieve(QUESTIONS)
        assert torch.equal(r32.doc_logprobs, r16.doc_logprobs)  # q(x) and the index are untouched

        (lp32, loss32, length), (lp16, loss16, _) = target_scores(fp32, r32), target_scores(bf16, r16)
        config = fp32.generator.model.config
        per_token = bfloat16_bound(config, scale=magnitude(lp32))
        assert (lp16 - lp32).abs().max() <= per_token
        # the loss sums at most T token log-probabilities per document, then marginalises in float32
        assert loss16.dtype == torch.float32
        assert abs(float(loss16) - float(loss32)) <= length * per_token

        for a16, a32 in zip(bf16.ask(QUESTIONS, num_beams=2, max_new_tokens=4),
                            fp32.ask(QUESTIONS, num_beams=2, max_new_tokens=4)):
            assert [p.id for p in a16.passages] == [p.id for p in a32.passages]
            assert [p.prob for p in a16.passages] == [p.prob for p in a32.passages]


def test_load_model_casts_the_generator_only(tmp_path):
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    names = dict(generator=str(gen_dir), encoder=str(enc_dir), kb=str(kb_dir))
    fp32 = load_model(**names)
    assert generator_dtypes(fp32) == {torch.float32}
    assert {p.dtype for p in fp32.parameters()} == {torch.float32}
    bf16 = load_model(**names, dtype="bfloat16")
    assert generator_dtypes(bf16) == {torch.bfloat16}
    assert {p.dtype for p in bf16.query_encoder.parameters()} == {torch.float32}
    assert bf16.score_scale.dtype == torch.float32
    closed = load_model(model="closed-book", generator=str(gen_dir), dtype="bfloat16")
    assert generator_dtypes(closed) == {torch.bfloat16}
    assert closed.ask(QUESTIONS, num_beams=1, max_new_tokens=3)[0].answer is not None
    with pytest.raises(InputError, match="dtype must be one of auto, float32, bfloat16"):
        load_model(**names, dtype="float16")


def test_a_lora_run_is_cast_after_its_adapters_are_merged(tmp_path, capsys):
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    run = train_run(tmp_path, "lora", "rag-sequence", gen_dir, enc_dir, kb_dir, "--lora", "2")
    fp32, bf16 = load_model(run=str(run)), load_model(run=str(run), dtype="bfloat16")
    assert generator_dtypes(bf16) == {torch.bfloat16}
    assert not any("lora_" in name for name, _ in bf16.named_parameters())  # folded in float32, then cast
    merged32 = dict(fp32.generator.model.named_parameters())
    for name, weight in bf16.generator.model.named_parameters():  # the merged weights, rounded once
        assert torch.equal(weight, merged32[name].to(torch.bfloat16))
    assert len(bf16.ask(QUESTIONS, num_beams=1, max_new_tokens=3)) == 2


@pytest.mark.parametrize("native,resolved", [(True, "bfloat16"), (False, "float32")])
def test_auto_is_bfloat16_only_on_native_hardware(monkeypatch, native, resolved):
    monkeypatch.setattr(precision, "bf16_hardware", lambda: native)
    assert precision.resolve_dtype("auto") == resolved
    assert precision.resolve_dtype("float32") == "float32"
    assert precision.resolve_dtype("bfloat16") == "bfloat16"
