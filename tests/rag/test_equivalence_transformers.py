"""openbook's RAG equals transformers' RAG on identical weights, contexts and document scores.

* the training loss (RAG-Sequence and RAG-Token, with and without label smoothing) agrees up to float32
  rounding (``tests/helpers/tolerance.py``: the network's reductions times its depth, ~2e-4 relative at most);
* RAG-Token beam search and greedy search return the tokens of ``RagTokenForGeneration.generate``;
* RAG-Sequence Thorough decoding returns the tokens of ``RagSequenceForGeneration.generate``;
* a transformers RAG model saved with ``save_pretrained`` (the layout of ``facebook/rag-*``) imports.

Note on RAG-Sequence contexts: transformers 5.x ``RagSequenceForGeneration.generate`` runs its
per-document beam search with ``attention_mask=None`` and, for encoder-decoder models, no longer infers a
mask from padding, so its encoder attends to pad tokens of shorter contexts. openbook masks padding.
The RAG-Sequence generation comparisons therefore use contexts of equal length (no padding), where the
two are the same computation; the loss and RAG-Token comparisons use padded contexts.
"""

from __future__ import annotations

import pytest
import torch
from transformers import RagConfig, RagSequenceForGeneration, RagTokenForGeneration

from openbook.models.generators import Contexts, Seq2SeqGenerator
from openbook.models.hf_rag import load_hf_rag
from openbook.rag.decoding import beam_config_for, rag_sequence_decode, rag_token_decode
from openbook.rag.marginal import doc_log_prior, rag_sequence_nll, rag_token_nll
from tiny import bart_tokenizer, bert_tokenizer, tiny_bart, tiny_dpr, tiny_t5
from tolerance import model_tolerance

B, K, L, V = 4, 3, 12, 128


def contexts(seed: int, padded: bool, pad: int = 1, vocab: int = V) -> Contexts:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (B * K, L), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        for i in range(B * K):
            n = int(torch.randint(5, L + 1, (1,), generator=g))
            ids[i, n:], mask[i, n:] = pad, 0
    return Contexts(ids, mask, K)


def hf_rag(cls, generator, label_smoothing=0.0):
    qe = tiny_dpr()
    config = RagConfig.from_question_encoder_generator_configs(
        qe.config, generator.config, n_docs=K, label_smoothing=label_smoothing
    )
    return cls(config=config, question_encoder=qe, generator=generator).eval()


def labels_for(seed: int, start: int, pad: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(4, V, (B, 7), generator=g)
    labels[:, 0] = start
    labels[1, 5:] = pad  # a padded target
    return labels


def our_loss(generator: Seq2SeqGenerator, ctx: Contexts, scores, labels, model: str, eps: float):
    memory = generator.encode(ctx)
    targets = labels[:, 1:]
    lp = generator.target_logprobs(memory, torch.arange(B * K), targets.repeat_interleave(K, 0))
    lp = lp.view(B, K, targets.shape[1], -1)
    mask = targets.ne(generator.pad_token_id)
    fn = rag_sequence_nll if model == "seq" else rag_token_nll
    return fn(lp, doc_log_prior(scores), targets, mask, epsilon=eps)


@pytest.mark.parametrize("model", ["seq", "tok"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("family", ["bart", "t5"])
def test_training_loss_matches(model, eps, family):
    gen = tiny_bart() if family == "bart" else tiny_t5()
    ours = Seq2SeqGenerator(gen, tokenizer=None)
    ctx = contexts(1, padded=True, pad=ours.pad_token_id)
    scores = torch.randn(B, K, generator=torch.Generator().manual_seed(2))
    labels = labels_for(3, ours.start_token_id, ours.pad_token_id)
    cls = RagSequenceForGeneration if model == "seq" else RagTokenForGeneration
    ref = hf_rag(cls, gen, eps)(
        context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask, doc_scores=scores,
        labels=labels, n_docs=K,
    ).loss
    mine = our_loss(ours, ctx, scores, labels, model, eps)
    torch.testing.assert_close(mine, ref, **model_tolerance(ref, gen.config, L))


def strip(rows: list[list[int]], pad: int) -> list[list[int]]:
    out = []
    for row in rows:
        while row and row[-1] == pad:
            row = row[:-1]
        out.append(row)
    return out


@pytest.mark.parametrize("num_beams", [1, 2, 4])
@pytest.mark.parametrize("family", ["bart", "t5"])
def test_rag_token_decoding_matches(num_beams, family):
    gen = tiny_bart(seed=4) if family == "bart" else tiny_t5(seed=4)
    ours = Seq2SeqGenerator(gen, tokenizer=None)
    for seed in range(3):
        ctx = contexts(10 + seed, padded=True, pad=ours.pad_token_id)
        scores = torch.randn(B, K, generator=torch.Generator().manual_seed(seed)) * 2
        ref = hf_rag(RagTokenForGeneration, gen).generate(
            context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask, doc_scores=scores,
            n_docs=K, num_beams=num_beams, max_length=12,
        )
        got = rag_token_decode(ours, ours.encode(ctx), doc_log_prior(scores),
                               beam_config_for(ours, num_beams=num_beams, max_length=12))
        pad = ours.pad_token_id
        assert strip(got.tokens[:, 0].tolist(), pad) == strip(ref[:, 1:].tolist(), pad)


@pytest.mark.parametrize("num_beams", [2, 4])
@pytest.mark.parametrize("family", ["bart", "t5"])
def test_rag_sequence_thorough_matches(num_beams, family):
    gen = tiny_bart(seed=5) if family == "bart" else tiny_t5(seed=5)
    ours = Seq2SeqGenerator(gen, tokenizer=None)
    hf = hf_rag(RagSequenceForGeneration, gen)
    for seed in range(3):
        ctx = contexts(20 + seed, padded=False)
        scores = torch.randn(B, K, generator=torch.Generator().manual_seed(seed)) * 2
        ref = hf.generate(context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask,
                          doc_scores=scores, n_docs=K, num_beams=num_beams, max_length=12)
        got = rag_sequence_decode(ours, ours.encode(ctx), doc_log_prior(scores),
                                  beam_config_for(ours, num_beams=num_beams, max_length=12), "thorough")
        pad = ours.pad_token_id
        assert strip(got.tokens[:, 0].tolist(), pad) == strip(ref[:, 1:].tolist(), pad)


def test_fast_decoding_is_thorough_restricted_to_beams():
    """Fast decoding only drops the documents whose beam missed a hypothesis (paper, section 2.5)."""
    gen = tiny_bart(seed=6)
    ours = Seq2SeqGenerator(gen, tokenizer=None)
    ctx = contexts(30, padded=True)
    memory = ours.encode(ctx)
    prior = doc_log_prior(torch.randn(B, K))
    cfg = beam_config_for(ours, num_beams=3, max_length=10, num_return_sequences=2)
    fast = rag_sequence_decode(ours, memory, prior, cfg, "fast")
    thorough = rag_sequence_decode(ours, memory, prior, cfg, "thorough")
    finite = torch.isfinite(fast.doc_seq_logprobs)
    assert finite.any(dim=-1).all()  # every hypothesis came from at least one beam
    slack = model_tolerance(thorough.scores[torch.isfinite(thorough.scores)], gen.config, L)["atol"]
    assert (fast.scores <= thorough.scores.max(dim=1, keepdim=True).values + slack).all()


@pytest.mark.parametrize("cls", [RagSequenceForGeneration, RagTokenForGeneration])
def test_saved_transformers_checkpoint_imports(tmp_path, cls):
    gen = tiny_bart(seed=7)
    hf = hf_rag(cls, gen)
    hf.save_pretrained(tmp_path)
    imported = load_hf_rag(tmp_path, question_tokenizer=bert_tokenizer(), generator_tokenizer=bart_tokenizer())
    assert imported.model_type == ("rag-token" if cls is RagTokenForGeneration else "rag-sequence")
    assert imported.n_docs == K
    ours = imported.generator
    ctx = contexts(40, padded=cls is RagTokenForGeneration, pad=ours.pad_token_id)
    # the question encoder is DPR's: pooler output, compared with transformers' own call
    q = bert_tokenizer()(["who wrote the sun rises", "capital of france"], return_tensors="pt", padding=True)
    with torch.no_grad():
        mine_q = imported.query_encoder(["who wrote the sun rises", "capital of france"])
        ref_q = hf.question_encoder(q["input_ids"], attention_mask=q["attention_mask"])[0]
    torch.testing.assert_close(mine_q, ref_q, **model_tolerance(ref_q, hf.question_encoder.config, q["input_ids"].shape[1]))
    scores = torch.randn(B, K, generator=torch.Generator().manual_seed(8))
    labels = labels_for(9, ours.start_token_id, ours.pad_token_id)
    ref_loss = hf(context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask,
                  doc_scores=scores, labels=labels, n_docs=K).loss
    model = "tok" if cls is RagTokenForGeneration else "seq"
    mine = our_loss(ours, ctx, scores, labels, model, 0.0)
    torch.testing.assert_close(mine, ref_loss, **model_tolerance(ref_loss, gen.config, L))
    ref = hf.generate(context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask,
                      doc_scores=scores, n_docs=K, num_beams=3, max_length=10)
    cfg = beam_config_for(ours, num_beams=3, max_length=10)
    decode = rag_token_decode if model == "tok" else rag_sequence_decode
    got = decode(ours, ours.encode(ctx), doc_log_prior(scores), cfg)
    assert strip(got.tokens[:, 0].tolist(), 1) == strip(ref[:, 1:].tolist(), 1)
