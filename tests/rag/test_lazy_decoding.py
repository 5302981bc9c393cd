"""Lazy decoding (RAG-Sequence): Fast decoding's answer, reading documents in order of p(z|x) only until no
unread document can change it.

* The stopping rule (``_settled``) on synthetic inputs: whenever it says settled, every way the unread
  documents could answer (any candidate, any p(y|x,z) <= 1) leaves the best answer where it is; and it does
  say settled often enough for this to be tested.
* A tiny causal generator over random priors of many sharpnesses: the answer equals Fast decoding's over all
  documents in every case, some cases stop after the top document and some read them all; with every
  document read the scores and per-document log-likelihoods are Fast decoding's too.
* ``RAG.ask(decoding="lazy")``: Fast's answers, no posterior for a passage it did not read.
"""

from __future__ import annotations

import torch

from openbook.rag.decoding import (
    _fast_doc_logprobs,
    _first_occurrence,
    _first_reads,
    _first_stage,
    _settled,
    beam_config_for,
    rag_sequence_decode,
    rag_sequence_decode_lazy,
)


def _synthetic(gen: torch.Generator, B: int, K: int, n_answers: int):
    """Each document's one greedy answer (a token id) and its log p(y|x,z), and log p(z|x) sorted best first."""
    answers = torch.randint(0, n_answers, (B, K), generator=gen)
    ll = -torch.rand(B, K, generator=gen) * torch.rand(B, 1, generator=gen) * 4  # log p(y|x,z) in [-4, 0]
    sharp = torch.rand(B, 1, generator=gen) * 12
    prior = torch.log_softmax(torch.randn(B, K, generator=gen) * sharp, -1).sort(-1, descending=True).values
    return answers, ll, prior


def _scores(answers, ll, prior, read):
    """What ``rag_sequence_decode_lazy`` computes from the documents in ``read``: candidates, keep, doc_ll."""
    B, K = answers.shape
    cands = torch.where(read, answers + 10, torch.full_like(answers, -1))[:, :, None, None]  # (B, K, nb=1, L=1)
    cands = torch.cat([torch.full_like(cands, 1), cands], -1).view(B, K, 2)  # a start token, then the answer
    raw = ll.masked_fill(~read, -float("inf"))
    same, keep = _first_occurrence(cands)
    return cands, keep, _fast_doc_logprobs(raw, same, K, 1)


def _best_answer(answers, ll, prior, read):
    cands, keep, doc_ll = _scores(answers, ll, prior, read)
    scores = torch.logsumexp(doc_ll + prior[:, None, :], -1).masked_fill(~keep, -float("inf"))
    return torch.take_along_dim(cands[:, :, 1], scores.argmax(1, keepdim=True), 1)[:, 0]


def test_a_settled_answer_survives_every_completion_of_the_unread_documents():
    gen = torch.Generator().manual_seed(0)
    B, K = 4000, 5
    answers, ll, prior = _synthetic(gen, B, K, n_answers=3)
    settled_any = 0
    for m in range(1, K):
        read = torch.zeros(B, K, dtype=torch.bool)
        read[:, :m] = True
        settled = _settled(*_scores(answers, ll, prior, read)[1:], prior, read)
        settled_any += int(settled.sum())
        chosen = _best_answer(answers, ll, prior, read)
        for trial in range(20):  # the unread documents answer anything, with any likelihood up to 1
            other, other_ll, _ = _synthetic(torch.Generator().manual_seed(100 * m + trial), B, K, n_answers=4)
            if trial % 2:
                other_ll = torch.zeros_like(other_ll)  # the adversary's strongest case: p(y|x,z) = 1
            full_answers = torch.where(read, answers, other)
            full_ll = torch.where(read, ll, other_ll)
            everything = torch.ones(B, K, dtype=torch.bool)
            final = _best_answer(full_answers, full_ll, prior, everything)
            assert torch.equal(final[settled], chosen[settled])
    assert 0.2 * B < settled_any < (K - 1) * B - 0.2 * B  # both outcomes happen often


def test_settled_needs_the_lead_to_exceed_the_unread_mass():
    # read doc 0 (p = 0.7) answering "a" with p(y|x,z) = 0.9; the unread docs hold 0.3 of p(z|x)
    prior = torch.tensor([[0.7, 0.2, 0.1]]).log()
    read = torch.tensor([[True, False, False]])
    for likelihood, expected in ((0.9, True), (0.42, False)):  # 0.63 > 0.3 settles; 0.294 < 0.3 does not
        answers = torch.tensor([[0, 1, 2]])
        ll = torch.tensor([[likelihood, 1.0, 1.0]]).log()
        assert bool(_settled(*_scores(answers, ll, prior, read)[1:], prior, read)[0]) is expected


def _tiny_case(seed: int, sharpness: float, B: int = 3, K: int = 4):
    from tiny_causal import P, make_generator

    torch.manual_seed(seed)
    generator = make_generator()
    words = ["paris is the capital", "berlin river flows", "a short play", "the poet was born in rome",
             "capital city of germany", "rome and paris"]
    questions = ["what is the capital ?", "who wrote the play ?", "where does the river flow ?"][:B]
    passages = [[P(f"t{b}{k}", words[(b + 2 * k) % len(words)]) for k in range(K)] for b in range(B)]
    gen = torch.Generator().manual_seed(seed)
    prior = torch.log_softmax(torch.randn(B, K, generator=gen) * sharpness, -1).sort(-1, descending=True).values
    return generator, questions, passages, prior


def _lazy(generator, questions, passages, prior, cfg):
    calls = []

    def encode(pairs):
        calls.append(pairs)
        return generator.encode(generator.contexts([questions[b] for b, _ in pairs],
                                                   [[passages[b][j]] for b, j in pairs]))

    return rag_sequence_decode_lazy(generator, encode, prior, cfg), calls


def test_lazy_answers_equal_fast_decoding_over_every_document():
    early = full_reads = 0
    for seed in range(6):
        for sharpness in (0.0, 3.0, 30.0, 300.0):
            generator, questions, passages, prior = _tiny_case(seed, sharpness)
            for beams in (1, 2):
                cfg = beam_config_for(generator, num_beams=beams, max_length=6)
                memory = generator.encode(generator.contexts(questions, passages))
                fast = rag_sequence_decode(generator, memory, prior, cfg, "fast")
                lazy, calls = _lazy(generator, questions, passages, prior, cfg)
                first = _first_stage(prior)
                assert calls[0] == [tuple(p) for p in first.nonzero().tolist()]  # each input's best documents first
                assert torch.equal(lazy.tokens, fast.tokens), (seed, sharpness, beams)
                reads = lazy.docs_read.sum(-1)
                stopped = (lazy.docs_read == first).all(-1)
                assert bool((stopped | lazy.docs_read.all(-1)).all())  # after the first stage, or all read
                early += int((stopped & (reads < prior.shape[1])).sum())
                everything = reads == prior.shape[1]
                full_reads += int(everything.sum())
                # every document read: the same sums of the same per-document log-likelihoods as Fast's, to
                # within float32 rounding of a logsumexp over K terms of magnitude <= ~20
                tol = 4 * 20 * torch.finfo(torch.float32).eps * prior.shape[1]
                assert torch.allclose(lazy.scores[everything], fast.scores[everything], atol=tol, rtol=0)
                finite = torch.isfinite(fast.doc_seq_logprobs[everything])
                assert torch.equal(finite, torch.isfinite(lazy.doc_seq_logprobs[everything]))
                assert torch.allclose(lazy.doc_seq_logprobs[everything][finite],
                                      fast.doc_seq_logprobs[everything][finite], atol=tol, rtol=0)
    assert early > 0 and full_reads > 0  # both paths exercised


def test_more_than_one_returned_sequence_reads_every_document():
    generator, questions, passages, prior = _tiny_case(0, 300.0)
    cfg = beam_config_for(generator, num_beams=2, max_length=6, num_return_sequences=2)
    memory = generator.encode(generator.contexts(questions, passages))
    fast = rag_sequence_decode(generator, memory, prior, cfg, "fast")
    lazy, calls = _lazy(generator, questions, passages, prior, cfg)
    assert bool(lazy.docs_read.all()) and len(calls) == 2
    assert torch.equal(lazy.tokens, fast.tokens)


def test_rag_ask_lazy_gives_fast_answers_and_no_posterior_for_unread_passages(tmp_path):
    from openbook.rag import RAG
    from openbook.rag.assemble import build_knowledge_base
    from tiny import PASSAGES, tiny_encoder
    from tiny_causal import make_generator

    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    questions = ["what is the capital of france ?", "who wrote the play ?", "capital"]
    for scale, reads in ((1e4, 1), (1e-3, 3)):  # a one-hot p(z|x) settles on the top passage; a flat one never
        rag = RAG(encoder, make_generator(), kb, model="rag-sequence", k=3, score_scale=scale).eval()
        fast = rag.ask(questions, num_beams=1, decoding="fast", max_new_tokens=6)
        lazy = rag.ask(questions, num_beams=1, decoding="lazy", max_new_tokens=6)
        for f, lz in zip(fast, lazy):
            assert (lz.answer, lz.tokens) == (f.answer, f.tokens)
            assert [p.id for p in lz.passages] == [p.id for p in f.passages]
            assert sum(p.posterior is not None for p in lz.passages) == reads
            assert all(p.posterior is not None for p in lz.passages[:reads])


def test_the_first_stage_reads_the_fewest_best_documents_past_half_the_mass():
    prior = torch.tensor([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.2, 0.2, 0.6], [0.25, 0.25, 0.5]]).log()
    # one document of 0.6 can settle; 0.4 cannot, 0.4 + 0.3 can; 0.25 + 0.5 = 0.75 can, 0.5 alone cannot
    assert _first_reads(prior).tolist() == [[False, True, False], [True, False, True], [False, False, True],
                                            [True, False, True]]


def test_the_first_stage_reads_one_document_past_half_the_mass_or_all_of_them():
    prior = torch.tensor([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.2, 0.2, 0.6], [0.25, 0.25, 0.5]]).log()
    # two documents settle only with an answer near-certain under both: read everything at once, as Fast does
    assert _first_stage(prior).tolist() == [[False, True, False], [True, True, True], [False, False, True],
                                            [True, True, True]]
