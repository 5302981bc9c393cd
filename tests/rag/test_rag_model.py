"""The RAG model end to end on tiny random models: retrieval, loss, decoding, provenance, bad input."""

from __future__ import annotations

import warnings

import pytest
import torch

from openbook.corpus import Passage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import KnowledgeBase
from openbook.models.generators import Seq2SeqGenerator
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from tiny import PASSAGES, bart_tokenizer, bert_tokenizer, tiny_bart, tiny_encoder
from tolerance import bound, magnitude, model_tolerance, probability_sum_bound, tolerance


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, tmp_path_factory.mktemp("kb") / "kb", progress=False)
    tok = bart_tokenizer()
    generator = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)
    return encoder, kb, generator


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_loss_trains_query_encoder_and_generator_but_not_documents(parts, model):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, model=model, k=3)
    before = kb.embeddings.copy()
    loss = rag.loss(["who wrote the sun rises", "capital of france"], ["hemingway", "paris"])
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in rag.query_encoder.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in rag.generator.parameters())
    assert (kb.embeddings == before).all()
    rag.zero_grad()


def test_retrieve_scores_are_inner_products_and_prior_is_scaled_softmax(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=4, score_scale=20.0)
    r = rag.retrieve(["capital of france"])
    q = encoder.encode_queries(["capital of france"])[0]
    expected = torch.from_numpy(kb.embeddings[r.ids[0]] @ q).float()
    # q(x) from two runs of the query encoder, dotted with unit vectors: |terms| <= |d(z)| |q(x)| = 1
    torch.testing.assert_close(r.scores[0], expected, **model_tolerance(expected, encoder.model.config, 16, scale=1.0))
    # MIPS order (the index ranked its own dot products of the same unit vectors)
    assert (r.scores[0, :-1] >= r.scores[0, 1:] - bound(terms=q.shape[-1], dtype=torch.float32)).all()
    want = torch.log_softmax(20 * r.scores.float(), -1)
    torch.testing.assert_close(r.doc_logprobs, want, **tolerance(want, terms=4, scale=20.0))
    assert r.scores.requires_grad


@pytest.mark.parametrize("model,decoding", [("rag-sequence", "thorough"), ("rag-sequence", "fast"),
                                            ("rag-token", "thorough")])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_ask_returns_answers_with_provenance(parts, model, decoding, num_beams):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, model=model, k=3)
    answers = rag.ask(["who wrote the sun rises", "capital of france", "largest ocean"], num_beams=num_beams,
                      decoding=decoding, max_new_tokens=5)
    assert len(answers) == 3
    for a in answers:
        assert a.model == model and isinstance(a.answer, str)
        assert len(a.passages) == 3 and {p.id for p in a.passages} <= {p.id for p in PASSAGES}
        # p(z|x) = exp(log_softmax(scale * d(z)^T q(x))), unit vectors: |logits| <= scale
        assert sum(p.prob for p in a.passages) == pytest.approx(1.0, abs=probability_sum_bound(3, rag.score_scale))
        # p(z|x,y) is a softmax
        assert sum(p.posterior for p in a.passages) == pytest.approx(1.0, abs=probability_sum_bound(3))
        d = a.to_dict()
        assert set(d) == {"question", "answer", "model", "truncated", "abstained", "abstain_score", "abstain_threshold",
                          "passages"}
        assert set(d["passages"][0]) == {"id", "title", "text", "score", "prob", "meta", "judge"}
        if model == "rag-token":
            assert len(a.token_posteriors) == len(a.tokens)
            one = pytest.approx(1.0, abs=probability_sum_bound(3))  # a softmax over the k passages
            assert all(sum(row) == one for row in a.token_posteriors)
        else:
            assert a.token_posteriors is None


def test_batched_answers_equal_one_by_one(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, model="rag-sequence", k=3)
    qs = ["who wrote the sun rises", "capital of france", "the first nobel prize"]
    batched = [a.answer for a in rag.ask(qs, num_beams=2, max_new_tokens=4)]
    single = [rag.ask([q], num_beams=2, max_new_tokens=4)[0].answer for q in qs]
    assert batched == single


def test_hot_swap_changes_the_memory_without_reloading_models(parts, tmp_path):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=2)
    other = build_knowledge_base([Passage("new", "New", "a brand new fact about music"),
                                  Passage("new2", "Newer", "another fact")], encoder, tmp_path / "kb2",
                                 progress=False)
    gen_before = rag.generator
    previous = rag.use_knowledge_base(other)
    assert previous is kb and rag.generator is gen_before
    assert {p.id for p in rag.ask(["music"], max_new_tokens=2)[0].passages} == {"new", "new2"}


@pytest.mark.parametrize("bad", ["", "   ", "\n"])
def test_empty_question_is_a_clear_error(parts, bad):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb)
    with pytest.raises(InputError, match="question 2 is empty"):
        rag.ask(["fine question", bad])


def test_k_larger_than_corpus_is_clamped_with_a_warning(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb)
    with pytest.warns(UserWarning, match="k=50"):
        answers = rag.ask(["capital of france"], k=50, max_new_tokens=2, num_beams=1)
    assert len(answers[0].passages) == len(PASSAGES)


def test_long_question_is_truncated_with_a_warning(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb)
    long = " ".join(["capital"] * 2000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rag.ask([long], max_new_tokens=2, num_beams=1)
    assert any("truncat" in str(w.message).lower() for w in caught)


def test_knowledge_base_built_with_another_encoder_is_refused(parts, tmp_path):
    encoder, kb, generator = parts
    with pytest.raises(KnowledgeBaseError) as err:
        KnowledgeBase.load(kb.path, expected_encoder=tiny_encoder(seed=1).info())
    assert "tiny-bert-0" in str(err.value) and "tiny-bert-1" in str(err.value)


def test_missing_knowledge_base_is_a_clear_error(tmp_path):
    with pytest.raises(KnowledgeBaseError, match="does-not-exist"):
        KnowledgeBase.load(tmp_path / "does-not-exist")


def test_load_rag_from_a_saved_transformers_checkpoint(tmp_path):
    """A save_pretrained RagTokenForGeneration directory (the layout of facebook/rag-token-nq, with its
    tokenizer subfolders) becomes an openbook RAG-Token model with the checkpoint's DPR query encoder."""
    from transformers import RagConfig, RagTokenForGeneration

    from openbook.models.hf_rag import load_hf_rag
    from openbook.rag.assemble import load_rag
    from tiny import tiny_dpr

    gen_tok, q_tok = bart_tokenizer(), bert_tokenizer()
    gen, qe = tiny_bart(vocab_size=len(gen_tok), seed=7), tiny_dpr(vocab_size=len(q_tok))
    config = RagConfig.from_question_encoder_generator_configs(qe.config, gen.config, n_docs=2)
    ckpt = tmp_path / "rag-token-tiny"
    RagTokenForGeneration(config=config, question_encoder=qe, generator=gen).save_pretrained(ckpt)
    q_tok.save_pretrained(ckpt / "question_encoder_tokenizer")
    gen_tok.save_pretrained(ckpt / "generator_tokenizer")
    encoder = load_hf_rag(ckpt).query_encoder
    build_knowledge_base(PASSAGES, encoder, tmp_path / "kb", progress=False)
    rag = load_rag(kb=tmp_path / "kb", generator=str(ckpt), k=2)
    assert rag.model_type == "rag-token" and rag.query_encoder.pooling == "pooler"
    answer = rag.ask(["capital of france"], max_new_tokens=3, num_beams=2)[0]
    assert len(answer.passages) == 2 and answer.token_posteriors is not None


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_n_best_returns_distinct_alternatives(parts, model):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, model=model, k=3)
    answer = rag.ask(["who wrote the sun rises"], num_beams=4, n_best=3, max_new_tokens=4)[0]
    assert len(answer.alternatives) == 2
    with pytest.raises(InputError, match="n_best"):
        rag.ask(["who wrote the sun rises"], num_beams=2, n_best=3)


def test_bm25_retriever_uses_bm25_scores_as_logits(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=2, retriever="bm25")
    r = rag.retrieve(["ernest hemingway wrote"])
    assert r.passages[0][0].id == "p1" and not r.scores.requires_grad
    want = torch.log_softmax(r.scores, -1)
    torch.testing.assert_close(r.doc_logprobs, want, **tolerance(want, terms=2, scale=magnitude(r.scores)))
    assert len(rag.ask(["ernest hemingway wrote"], max_new_tokens=2)[0].passages) == 2
    with pytest.raises(InputError, match="retriever"):
        RAG(encoder, generator, kb, retriever="tfidf")


def test_target_token_logprobs_with_lengths_equals_full_pass_in_small_chunks():
    """Length-sorted chunks cut to their longest row give the full pass's values on every needed position."""
    from openbook.models.generators import Contexts

    gen = Seq2SeqGenerator(tiny_bart(), bart_tokenizer())
    torch.manual_seed(0)
    ids = torch.randint(4, 100, (3, 7))
    memory = gen.encode(Contexts(ids, torch.ones_like(ids), 1))
    rows = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    targets = torch.randint(4, 100, (7, 6))
    lengths = torch.tensor([6, 1, 3, 0, 2, 6, 4])
    full = gen.target_token_logprobs(memory, rows, targets)
    # max_elements of two rows of six positions forces several chunks of different widths
    cut = gen.target_token_logprobs(memory, rows, targets, lengths, max_elements=2 * 6 * gen.vocab_size)
    needed = torch.arange(6)[None, :] < lengths[:, None]
    torch.testing.assert_close(cut[needed], full[needed], **model_tolerance(full[needed], gen.model.config, 7))
    assert (cut[~needed] == 0).all()


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_rescoring_reuses_the_start_step_and_cross_attention_exactly(family):
    """Thorough decoding's rescoring path (first step and cross-attention keys/values computed once per
    memory row) gives the same log-probabilities as independent teacher-forced passes."""
    from openbook.models.generators import Contexts
    from tiny import t5_tokenizer, tiny_t5

    gen = (Seq2SeqGenerator(tiny_bart(), bart_tokenizer()) if family == "bart"
           else Seq2SeqGenerator(tiny_t5(), t5_tokenizer()))
    torch.manual_seed(1)
    ids = torch.randint(4, 100, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    memory = gen.encode(Contexts(ids, mask, 1))
    rows = torch.tensor([2, 0, 1, 1, 0])
    for width in (1, 5):
        targets = torch.randint(4, 100, (5, width))
        with torch.no_grad():
            full = gen.target_token_logprobs(memory, rows, targets)
            gen.prepare_rescoring(memory)
            assert "rescoring" in memory.extra
            reused = gen.target_token_logprobs(memory, rows, targets)
            gen.end_rescoring(memory)
        assert "rescoring" not in memory.extra
        torch.testing.assert_close(reused, full, **model_tolerance(full, gen.model.config, 9))
