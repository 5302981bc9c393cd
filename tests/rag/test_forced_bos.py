"""Exact on BART's own decoding constraints: a generation config that forces BOS (facebook/bart-large
forces ``<s>`` = 0) and/or EOS at the maximum length, loaded through openbook's own loader, decodes as
transformers' ``generate`` does: the plain generator, RAG-Token (``RagTokenForGeneration``) and
RAG-Sequence Thorough (``RagSequenceForGeneration``) for 1, 2 and 4 beams, n-best included, and the
scores count a forced token as transformers does (log 1 = 0), in greedy and beam search alike.

Tolerances: a score is a sum of at most ``T = MAX_LENGTH - 1`` token log-probabilities, each a
log-softmax over ``V`` logits that are dot products of length ``d_model``. Computed in a different order
(one cached step at a time against a full pass) each logit may differ by ``EPS * |logit| * d_model`` and
each log-softmax by ``EPS * |logit| * V`` (worst-case bounds), so a score by ``EPS * scale * T * (d_model
+ V)`` with ``scale`` the largest logit magnitude.
"""

from __future__ import annotations

import pytest
import torch
from transformers import RagSequenceForGeneration, RagTokenForGeneration

from openbook.models.generators import Contexts
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base, load_generator
from openbook.rag.decoding import (
    _fast_doc_logprobs,
    _first_occurrence,
    _per_doc_beams,
    _thorough_doc_logprobs,
    beam_config_for,
    rag_sequence_decode,
    rag_token_decode,
)
from openbook.rag.marginal import doc_log_prior
from test_equivalence_transformers import B, K, contexts, hf_rag, strip
from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder

EPS = torch.finfo(torch.float32).eps
MAX_LENGTH = 12
D_MODEL = 16
V = 128
#: transformers' generation-config settings under test: bart-large's (BOS and EOS), and each alone
FORCING = {"bos": (0, None), "bos+eos": (0, 2), "eos": (None, 2)}


def score_tolerance(logits_scale: float) -> float:
    return EPS * max(1.0, logits_scale) * (MAX_LENGTH - 1) * (D_MODEL + V)


@pytest.fixture(scope="module", params=sorted(FORCING))
def forced(request, tmp_path_factory):
    """A tiny BART whose generation config forces BOS and/or EOS, saved and loaded by openbook's loader."""
    bos, eos = FORCING[request.param]
    model = tiny_bart(seed=4, forced_eos_token_id=None)
    model.generation_config.forced_bos_token_id = bos
    model.generation_config.forced_eos_token_id = eos
    folder = tmp_path_factory.mktemp(f"bart-{request.param}")
    model.save_pretrained(folder)
    bart_tokenizer().save_pretrained(folder)
    generator = load_generator(str(folder))
    assert (generator.forced_bos_token_id, generator.forced_eos_token_id) == (bos, eos)
    return generator


def hf_forcing(generator) -> dict:
    """The generator's forcing, passed to transformers' RAG ``generate`` (its RagConfig does not carry it)."""
    kw = {"forced_bos_token_id": generator.forced_bos_token_id, "forced_eos_token_id": generator.forced_eos_token_id}
    return {k: v for k, v in kw.items() if v is not None}


@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_plain_generator_matches_generate(forced, num_beams):
    """One context (K = 1, so the RAG-Token transition is the generator's own) = ``model.generate``."""
    ctx = contexts(50, padded=True, pad=forced.pad_token_id)
    one = Contexts(ctx.input_ids[::K], ctx.attention_mask[::K], 1)
    ref = forced.model.generate(one.input_ids, attention_mask=one.attention_mask, num_beams=num_beams,
                                num_return_sequences=num_beams, max_length=MAX_LENGTH, output_scores=True,
                                output_logits=True, return_dict_in_generate=True)
    cfg = beam_config_for(forced, num_beams=num_beams, max_length=MAX_LENGTH, num_return_sequences=num_beams)
    got = rag_token_decode(forced, forced.encode(one), torch.zeros(B, 1), cfg)
    pad = forced.pad_token_id
    assert strip(got.tokens.reshape(B * num_beams, -1).tolist(), pad) == strip(ref.sequences[:, 1:].tolist(), pad)
    if forced.forced_bos_token_id is not None:
        assert (got.tokens[:, :, 0] == forced.forced_bos_token_id).all()
    scale = max(float(step.abs().max()) for step in ref.logits)
    if num_beams > 1:
        expected = ref.sequences_scores
    else:  # greedy: transformers' processed scores, renormalised, at the chosen tokens (forced ones count 0)
        chosen = ref.sequences[:, 1:]
        steps = torch.stack([torch.log_softmax(s, -1) for s in ref.scores], 1).gather(-1, chosen[..., None])[..., 0]
        steps = steps.masked_fill(chosen.eq(pad), 0.0)
        expected = steps.sum(-1) / chosen.ne(pad).sum(-1)
    torch.testing.assert_close(got.scores.reshape(-1), expected, atol=score_tolerance(scale), rtol=0)


@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_rag_token_matches_transformers(forced, num_beams):
    hf = hf_rag(RagTokenForGeneration, forced.model)
    for seed in range(2):
        ctx = contexts(60 + seed, padded=True, pad=forced.pad_token_id)
        scores = torch.randn(B, K, generator=torch.Generator().manual_seed(seed)) * 2
        ref = hf.generate(context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask,
                          doc_scores=scores, n_docs=K, num_beams=num_beams, num_return_sequences=num_beams,
                          max_length=MAX_LENGTH, **hf_forcing(forced))
        cfg = beam_config_for(forced, num_beams=num_beams, max_length=MAX_LENGTH, num_return_sequences=num_beams)
        got = rag_token_decode(forced, forced.encode(ctx), doc_log_prior(scores), cfg)
        pad = forced.pad_token_id
        assert strip(got.tokens.reshape(B * num_beams, -1).tolist(), pad) == strip(ref[:, 1:].tolist(), pad)


@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_rag_sequence_thorough_matches_transformers(forced, num_beams):
    """Unpadded contexts: transformers' RAG-Sequence ``generate`` passes no attention mask (see
    :func:`test_rag_sequence_masks_padding_transformers_does_not` for padded ones)."""
    hf = hf_rag(RagSequenceForGeneration, forced.model)
    n_best = min(2, num_beams)
    for seed in range(2):
        ctx = contexts(70 + seed, padded=False)
        scores = torch.randn(B, K, generator=torch.Generator().manual_seed(seed)) * 2
        ref = hf.generate(context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask,
                          doc_scores=scores, n_docs=K, num_beams=num_beams, num_return_sequences=n_best,
                          max_length=MAX_LENGTH)
        cfg = beam_config_for(forced, num_beams=num_beams, max_length=MAX_LENGTH, num_return_sequences=n_best)
        got = rag_sequence_decode(forced, forced.encode(ctx), doc_log_prior(scores), cfg, "thorough")
        pad = forced.pad_token_id
        assert strip(got.tokens.reshape(B * n_best, -1).tolist(), pad) == strip(ref[:, 1:].tolist(), pad)


@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_fast_agrees_with_thorough_inside_the_beams(forced, num_beams):
    """Fast decoding takes log p(y|x,z) from document z's own beam (paper, section 2.5): wherever y was in
    that beam, it equals Thorough's rescored value, so a forced BOS is excluded from both (greedy too)."""
    ctx = contexts(80, padded=True, pad=forced.pad_token_id)
    memory = forced.encode(ctx)
    cfg = beam_config_for(forced, num_beams=num_beams, max_length=MAX_LENGTH)
    beams = _per_doc_beams(forced, memory, B * K, cfg)
    cands = beams.sequences.reshape(B, K * num_beams, -1)
    same, keep = _first_occurrence(cands)
    fast = _fast_doc_logprobs(beams.raw_logprobs.reshape(B, K * num_beams), same, K, num_beams)
    thorough = _thorough_doc_logprobs(forced, memory, cands[:, :, 1:], keep)
    inside = torch.isfinite(fast) & keep[..., None]
    assert inside.any(-1)[keep].all()  # every kept hypothesis came from some document's beam
    tol = score_tolerance(logit_scale(forced, memory, cands[:, :, 1:]))
    torch.testing.assert_close(fast[inside], thorough[inside], rtol=0, atol=tol)
    # end to end: Fast's score of its best answer never exceeds Thorough's best (it drops terms)
    prior = doc_log_prior(torch.randn(B, K, generator=torch.Generator().manual_seed(3)))
    fast_out = rag_sequence_decode(forced, memory, prior, cfg, "fast")
    thorough_out = rag_sequence_decode(forced, memory, prior, cfg, "thorough")
    assert (fast_out.scores[:, 0] <= thorough_out.scores[:, 0] + tol).all()


def logit_scale(generator, memory, targets: torch.Tensor) -> float:
    """The largest logit magnitude of teacher-forcing ``targets (B, C, T)`` against every document."""
    C, T = targets.shape[1:]
    rows = (torch.arange(B)[:, None, None] * K + torch.arange(K)[None, None, :]).expand(B, C, K).reshape(-1)
    flat = targets[:, :, None, :].expand(B, C, K, T).reshape(-1, T)
    with torch.no_grad():
        return float(generator.target_logits(memory, rows, flat).abs().max())


@pytest.mark.parametrize("model,decoding", [("rag-token", "thorough"), ("rag-sequence", "thorough"),
                                            ("rag-sequence", "fast")])
def test_ask_decodes_with_forced_tokens_for_every_beam_count(forced, model, decoding, tmp_path):
    """The user-level path that crashed (IndexError for beams >= 2 when BOS is forced)."""
    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    rag = RAG(encoder, forced, kb, model=model, k=2)
    for num_beams in (1, 2, 4):
        answers = rag.ask(["capital of france", "who wrote the sun rises"], num_beams=num_beams,
                          n_best=min(2, num_beams), decoding=decoding, max_new_tokens=4)
        assert len(answers) == 2 and all(len(a.passages) == 2 for a in answers)
        if forced.forced_bos_token_id is not None:
            assert all(a.tokens[0] == "<s>" for a in answers)
