"""Where openbook and transformers' RAG could differ, and which way each goes (docs/transformers.md: "Differences from
transformers' RAG").

* An imported transformers RAG checkpoint sees exactly what transformers feeds it: the question inside
  the context string is the (uncased) question-encoder tokenizer's decoding of it, and fine-tuning targets
  start the decoder with the generator tokenizer's leading ``<s>`` (transformers' ``decoder_input_ids =
  labels``): same context ids as ``RagRetriever.postprocess_docs``, same loss as the transformers model.
* Where transformers departs from the paper, openbook keeps the paper's definition: the RAG-Sequence loss
  keeps the retriever prior for a one-token target, and RAG-Sequence decoding masks padded contexts.

Loss tolerance: a loss is a logsumexp over K documents of sums of T target log-probabilities, each a
log-softmax over V logits that are dot products of length d_model; computed in a different order, its
float32 error is at most ``EPS * scale * T * (d_model + V)`` (worst case), ``scale`` the largest logit.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tokenizers import normalizers
from transformers import RagConfig, RagRetriever, RagSequenceForGeneration, RagTokenForGeneration

from openbook.models.generators import Seq2SeqGenerator
from openbook.models.hf_rag import load_hf_rag
from openbook.rag.assemble import build_knowledge_base, load_rag
from openbook.rag.decoding import beam_config_for, rag_sequence_decode
from openbook.rag.marginal import doc_log_prior, rag_sequence_nll
from test_equivalence_transformers import B, K, contexts, hf_rag, strip
from tiny import PASSAGES, bart_tokenizer, bert_tokenizer, tiny_bart, tiny_dpr

EPS = torch.finfo(torch.float32).eps
D_MODEL = 16
QUESTIONS = ["Who wrote The Sun Rises ?", "Capital of FRANCE"]
ANSWERS = ["ernest hemingway", "paris"]


def uncased_tokenizer():
    """The tiny BERT tokenizer, lowercasing as DPR's uncased one does."""
    tok = bert_tokenizer()
    tok._tokenizer.normalizer = normalizers.Lowercase()
    return tok


def loss_tolerance(logits: torch.Tensor, length: int) -> float:
    return EPS * max(1.0, float(logits.abs().max())) * length * (D_MODEL + logits.shape[-1])


@pytest.fixture(scope="module", params=[RagSequenceForGeneration, RagTokenForGeneration],
                ids=["rag-sequence", "rag-token"])
def checkpoint(request, tmp_path_factory):
    """A tiny transformers RAG model saved as facebook/rag-* are, its knowledge base, and openbook's import."""
    gen_tok, q_tok = bart_tokenizer(), uncased_tokenizer()
    gen, qe = tiny_bart(vocab_size=len(gen_tok), seed=7), tiny_dpr(vocab_size=len(q_tok))
    config = RagConfig.from_question_encoder_generator_configs(qe.config, gen.config, n_docs=K)
    hf = request.param(config=config, question_encoder=qe, generator=gen).eval()
    folder = tmp_path_factory.mktemp("rag") / "ckpt"
    hf.save_pretrained(folder)
    q_tok.save_pretrained(folder / "question_encoder_tokenizer")
    gen_tok.save_pretrained(folder / "generator_tokenizer")
    kb = tmp_path_factory.mktemp("kb") / "kb"
    build_knowledge_base(PASSAGES, load_hf_rag(folder).query_encoder, kb, progress=False)
    rag = load_rag(kb=kb, generator=str(folder), k=K)
    return hf, rag, q_tok, gen_tok


def transformers_contexts(hf, retrieval, q_tok, gen_tok):
    """transformers' RagRetriever.__call__ on openbook's retrieved passages: the question decoded by the
    question-encoder tokenizer, then its own ``postprocess_docs`` (run unbound: it reads only ``config`` and
    ``generator_tokenizer``, and a real RagRetriever needs the ``datasets`` package and an index)."""
    question_ids = q_tok(QUESTIONS, return_tensors="pt", padding=True)["input_ids"]
    strings = q_tok.batch_decode(question_ids, skip_special_tokens=True)
    docs = [{"title": [p.title for p in row], "text": [p.text for p in row]} for row in retrieval.passages]
    owner = SimpleNamespace(config=hf.config, generator_tokenizer=gen_tok)
    return RagRetriever.postprocess_docs(owner, docs, strings, None, K, return_tensors="pt")


def test_imported_checkpoint_gets_transformers_context_strings(checkpoint):
    hf, rag, q_tok, gen_tok = checkpoint
    retrieval = rag.retrieve(QUESTIONS)
    ref_ids, ref_mask = transformers_contexts(hf, retrieval, q_tok, gen_tok)
    ours = rag.generator.contexts(QUESTIONS, retrieval.passages)
    for row in range(len(QUESTIONS) * K):
        assert ours.input_ids[row][ours.attention_mask[row].bool()].tolist() == ref_ids[row][ref_mask[row].bool()].tolist()
    assert "// capital of france" in gen_tok.decode(ours.input_ids[K])  # lowercased, as DPR's tokenizer does


def test_imported_checkpoint_gets_transformers_loss(checkpoint):
    """Targets as transformers' RAG fine-tuning makes them: the generator tokenizer's ``<s> answer </s>``,
    passed as ``labels`` (so ``decoder_input_ids = labels``)."""
    hf, rag, q_tok, gen_tok = checkpoint
    retrieval = rag.retrieve(QUESTIONS)
    ids, mask = transformers_contexts(hf, retrieval, q_tok, gen_tok)
    labels = gen_tok(ANSWERS, return_tensors="pt", padding=True)["input_ids"]
    assert (labels[:, 0] == gen_tok.bos_token_id).all()
    with torch.no_grad():
        out = hf(context_input_ids=ids, context_attention_mask=mask, doc_scores=retrieval.scores.detach(),
                 labels=labels, n_docs=K)
        ours = rag.loss(QUESTIONS, ANSWERS)
    torch.testing.assert_close(ours, out.loss.mean(), rtol=0, atol=loss_tolerance(out.logits, labels.shape[1]))


def test_rag_sequence_loss_keeps_the_prior_for_a_one_token_target():
    """transformers adds log p(z|x) at the second target position only, so a one-token target loses it;
    the paper's eq. 1 (and openbook) keep it: -log sum_z p(z|x) p(y_1|x,z)."""
    gen = tiny_bart(seed=8)
    ours = Seq2SeqGenerator(gen, tokenizer=None)
    ctx = contexts(90, padded=False)
    scores = torch.randn(B, K, generator=torch.Generator().manual_seed(9)) * 3
    token = torch.randint(4, 128, (B, 1), generator=torch.Generator().manual_seed(10))
    labels = torch.cat([torch.full((B, 1), ours.start_token_id), token], 1)
    with torch.no_grad():
        ref = hf_rag(RagSequenceForGeneration, gen)(context_input_ids=ctx.input_ids, n_docs=K, labels=labels,
                                                    context_attention_mask=ctx.attention_mask, doc_scores=scores)
        lp = ours.target_logprobs(ours.encode(ctx), torch.arange(B * K), token.repeat_interleave(K, 0))
    lp = lp.view(B, K, 1, -1)
    mine = rag_sequence_nll(lp, doc_log_prior(scores), token, torch.ones_like(token, dtype=torch.bool))
    ll = lp[..., 0, :].gather(-1, token[:, None, :].expand(B, K, 1))[..., 0]  # log p(y_1|x,z), (B, K)
    tol = loss_tolerance(ref.logits, 1)
    torch.testing.assert_close(mine, -torch.logsumexp(ll + doc_log_prior(scores), 1), rtol=0, atol=tol)  # eq. 1
    torch.testing.assert_close(ref.loss, -torch.logsumexp(ll, 1), rtol=0, atol=tol)  # transformers: no prior
    assert ((mine - ref.loss).abs() > 100 * tol).any()


def test_rag_sequence_masks_padding_transformers_does_not(monkeypatch):
    """transformers' RagSequenceForGeneration.generate runs its per-document beams with attention_mask=None,
    so padded contexts are attended to. With the mask passed through, its output is openbook's."""
    gen = tiny_bart(seed=5)
    ours = Seq2SeqGenerator(gen, tokenizer=None)
    hf = hf_rag(RagSequenceForGeneration, gen)
    ctx = contexts(91, padded=True, pad=ours.pad_token_id)
    scores = torch.randn(B, K, generator=torch.Generator().manual_seed(11)) * 2
    kwargs = {"context_input_ids": ctx.input_ids, "context_attention_mask": ctx.attention_mask,
              "doc_scores": scores, "n_docs": K, "num_beams": 2, "max_length": 10}
    cfg = beam_config_for(ours, num_beams=2, max_length=10)
    got = rag_sequence_decode(ours, ours.encode(ctx), doc_log_prior(scores), cfg, "thorough")
    got = strip(got.tokens[:, 0].tolist(), ours.pad_token_id)

    # the per-document beams transformers runs: without a mask its scores depend on the pads
    rows = ctx.input_ids[:K]
    unmasked = gen.generate(rows, num_beams=2, max_length=10, output_scores=True, return_dict_in_generate=True)
    masked = gen.generate(rows, attention_mask=ctx.attention_mask[:K], num_beams=2, max_length=10,
                          output_scores=True, return_dict_in_generate=True)
    assert not torch.allclose(unmasked.sequences_scores, masked.sequences_scores)

    original = gen.generate

    def generate_with_mask(input_ids, **kw):  # what transformers would do if it passed the context mask
        return original(input_ids, **{**kw, "attention_mask": input_ids.ne(ours.pad_token_id).long()})

    monkeypatch.setattr(gen, "generate", generate_with_mask)
    fixed = strip(hf.generate(**kwargs)[:, 1:].tolist(), ours.pad_token_id)
    assert got == fixed
