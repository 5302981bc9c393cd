"""The RAG model: a retriever p_eta(z|x) over a knowledge base and a generator p_theta(y|x,z).

``RAG.retrieve`` scores the top-k passages with d(z)^T q(x), recomputed in torch from the stored
document vectors so that p(z|x) is differentiable with respect to the query encoder (the document
encoder and the index stay frozen, paper section 2.4). ``RAG.loss`` is the negative marginal
log-likelihood of RAG-Sequence or RAG-Token; ``RAG.ask`` decodes and returns answers with provenance.
The knowledge base can be swapped in one call (``use_knowledge_base``) without reloading the models.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import nn

from openbook.errors import InputError
from openbook.index import KnowledgeBase
from openbook.models.encoders import Encoder, default_score_scale
from openbook.models.generators import Generator
from openbook.rag.decoding import beam_config_for, rag_sequence_decode, rag_token_decode
from openbook.rag.marginal import (
    rag_sequence_nll,
    rag_token_marginal,
    rag_token_nll,
    sequence_doc_posterior,
    token_doc_posterior,
)

MODELS = ("rag-sequence", "rag-token")
RETRIEVERS = ("dense", "bm25")
DECODINGS = ("thorough", "fast")


@dataclass
class RetrievedPassage:
    id: str
    title: str
    text: str
    score: float  # d(z)^T q(x)
    prob: float  # p_eta(z|x) over the top k
    posterior: float | None = None  # p(z|x,y) given the generated answer


@dataclass
class Answer:
    question: str
    answer: str
    model: str
    passages: list[RetrievedPassage]
    tokens: list[str] = field(default_factory=list)  # the answer's tokens, as generated
    alternatives: list[str] = field(default_factory=list)  # the next-best hypotheses (n-best), best first
    token_posteriors: list[list[float]] | None = None  # RAG-Token: p(z_t|x,y_<=t) per token, per passage

    def to_dict(self, full: bool = False) -> dict:
        out = {
            "question": self.question,
            "answer": self.answer,
            "model": self.model,
            "passages": [
                {k: v for k, v in asdict(p).items() if full or k != "posterior"} for p in self.passages
            ],
        }
        if full:
            out["tokens"], out["token_posteriors"] = self.tokens, self.token_posteriors
        return out


@dataclass
class Retrieval:
    passages: list[list]  # B lists of K passages
    ids: np.ndarray  # (B, K) row numbers in the knowledge base
    scores: torch.Tensor  # (B, K) inner products, differentiable w.r.t. the query encoder
    doc_logprobs: torch.Tensor  # (B, K) log p(z|x)


def check_questions(questions: Sequence[str]) -> list[str]:
    """Questions must be non-empty strings; the error names the first bad one by position."""
    if isinstance(questions, str):
        questions = [questions]
    questions = list(questions)
    if not questions:
        raise InputError("no question given")
    for i, q in enumerate(questions, 1):
        if not isinstance(q, str):
            raise InputError(f"question {i} is not text but {type(q).__name__}")
        if not q.strip():
            raise InputError(f"question {i} is empty" + (" (only whitespace)" if q else ""))
    return [q.strip() for q in questions]


class RAG(nn.Module):
    """Retrieval-Augmented Generation with a swappable non-parametric memory.

    Args:
        query_encoder: q(x), trained end to end.
        generator: a :class:`~openbook.models.generators.Generator` (seq2seq or causal LM).
        kb: the knowledge base (document vectors d(z), passages, MIPS index), frozen.
        model: ``"rag-sequence"`` or ``"rag-token"``.
        k: documents retrieved per input (paper: 5 or 10 in training).
        score_scale: multiplies d(z)^T q(x) before the softmax. DPR's unnormalised vectors use 1; with
            L2-normalised encoders (cosine scores in [-1, 1]) p(z|x) is nearly uniform, so the default
            there is 20. ``learn_scale=True`` makes it a trained parameter (stored as a log).
    """

    def __init__(
        self,
        query_encoder: Encoder,
        generator: Generator,
        kb: KnowledgeBase,
        model: str = "rag-sequence",
        k: int = 5,
        score_scale: float | None = None,
        learn_scale: bool = False,
        retriever: str = "dense",
    ):
        super().__init__()
        if model not in MODELS:
            raise InputError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
        self.query_encoder = query_encoder
        self.generator = generator
        self.model_type = model
        self.k = k
        if score_scale is None:
            score_scale = default_score_scale(query_encoder)
        self.log_scale = nn.Parameter(torch.tensor(math.log(score_scale)), requires_grad=learn_scale)
        if retriever not in RETRIEVERS:
            raise InputError(f"retriever must be one of {', '.join(RETRIEVERS)}, not {retriever!r}")
        self.retriever = retriever
        self._bm25 = None  # (BM25Index, excluded rows), built on first use for the current knowledge base
        self.kb = kb
        self._check_kb(kb)

    # ------------------------------------------------------------------------------ knowledge base

    def _check_kb(self, kb: KnowledgeBase) -> None:
        dim = self.query_encoder.dim if hasattr(self.query_encoder, "dim") else None
        if isinstance(dim, int) and kb.dim != dim:
            raise InputError(
                f"knowledge base {kb.path} holds {kb.dim}-d vectors but the query encoder "
                f"{getattr(self.query_encoder, 'name', '?')!r} gives {dim}-d vectors"
            )

    def use_knowledge_base(self, kb: KnowledgeBase) -> KnowledgeBase:
        """Hot-swap the non-parametric memory (no model reload); returns the previous one."""
        self._check_kb(kb)
        previous, self.kb, self._bm25 = self.kb, kb, None
        return previous

    @property
    def score_scale(self) -> torch.Tensor:
        return self.log_scale.exp()

    # ------------------------------------------------------------------------------ retrieval

    def retrieve(self, questions: Sequence[str], k: int | None = None) -> Retrieval:
        """Top-k passages by MIPS, with scores and p(z|x) differentiable w.r.t. the query encoder."""
        questions = check_questions(questions)
        k = self._check_k(k)
        if self.retriever == "bm25":
            return self._retrieve_bm25(questions, k)
        q = self.query_encoder(questions)  # (B, d)
        _, ids = self.kb.search(q.detach().float().cpu().numpy(), k)
        if (ids < 0).any():  # fewer live passages than k (e.g. after deletions)
            raise InputError(f"the knowledge base {self.kb.path} returned fewer than k={k} passages; lower k")
        doc_vectors = torch.from_numpy(np.ascontiguousarray(self.kb.embeddings[ids])).to(q)  # (B, K, d)
        scores = torch.einsum("bkd,bd->bk", doc_vectors, q)
        doc_logprobs = torch.log_softmax(scores.float() * self.score_scale, dim=-1)
        return Retrieval(self.kb.passages(ids), ids, scores, doc_logprobs)

    def _retrieve_bm25(self, questions: list[str], k: int) -> Retrieval:
        """The paper's BM25 ablation: a fixed BM25 retriever whose scores are the logits of p(z|x)."""
        if self._bm25 is None:
            from openbook.index.bm25 import knowledge_base_bm25

            self._bm25 = knowledge_base_bm25(self.kb, progress=True)
        index, exclude = self._bm25
        scores_np, ids = index.search(questions, k, exclude=exclude)
        if (ids < 0).any():
            raise InputError(f"BM25 found fewer than k={k} passages in {self.kb.path}; lower k")
        scores = torch.from_numpy(np.ascontiguousarray(scores_np)).float()
        return Retrieval(self.kb.passages(ids), ids, scores, torch.log_softmax(scores, dim=-1))

    def _check_k(self, k: int | None) -> int:
        k = self.k if k is None else k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        if k > len(self.kb):
            warnings.warn(f"k={k} is larger than the knowledge base ({len(self.kb)} passages); using k={len(self.kb)}")
            k = len(self.kb)
        return k

    # ------------------------------------------------------------------------------ training

    def loss(
        self, questions: Sequence[str], answers: Sequence[str], k: int | None = None, epsilon: float = 0.0,
        max_target_length: int | None = 64,
    ) -> torch.Tensor:
        """Mean negative marginal log-likelihood of the answers (paper eqs. 1-2), per question."""
        questions = check_questions(questions)
        if len(answers) != len(questions):
            raise InputError(f"{len(questions)} questions but {len(answers)} answers")
        retrieval = self.retrieve(questions, k)
        B, K = retrieval.doc_logprobs.shape
        memory = self.generator.encode(self.generator.contexts(questions, retrieval.passages))
        targets, mask = self.generator.encode_targets(list(answers), max_target_length)
        rows = torch.arange(B * K)
        lp = self.generator.target_logprobs(memory, rows, targets.repeat_interleave(K, 0), training=True)
        lp = lp.view(B, K, targets.shape[1], -1)
        nll = rag_sequence_nll if self.model_type == "rag-sequence" else rag_token_nll
        return nll(lp, retrieval.doc_logprobs, targets, mask, epsilon=epsilon).mean()

    # ------------------------------------------------------------------------------ decoding

    @torch.no_grad()
    def ask(
        self,
        questions: Sequence[str],
        k: int | None = None,
        num_beams: int = 4,
        decoding: str = "thorough",
        max_new_tokens: int = 32,
        min_new_tokens: int = 0,
        length_penalty: float = 1.0,
        n_best: int = 1,
        early_stopping: bool | str = False,
    ) -> list[Answer]:
        """Answer each question with provenance: passages, p(z|x), p(z|x,y) and (RAG-Token) per-token
        document posteriors. RAG-Sequence uses Thorough or Fast decoding (``decoding``). ``num_beams=1``
        is greedy search; ``n_best > 1`` also returns the next-best hypotheses as ``alternatives``;
        ``length_penalty``, ``min_new_tokens`` and ``early_stopping`` mean what they mean in transformers."""
        if decoding not in DECODINGS:
            raise InputError(f"decoding must be one of {', '.join(DECODINGS)}, not {decoding!r}")
        if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
            raise InputError(f"num_beams must be a positive integer, got {num_beams!r}")
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        questions = check_questions(questions)
        retrieval = self.retrieve(questions, k)
        B, K = retrieval.doc_logprobs.shape
        memory = self.generator.encode(self.generator.contexts(questions, retrieval.passages))
        if not 1 <= n_best <= num_beams:
            raise InputError(f"n_best must be between 1 and the number of beams ({num_beams}), got {n_best}")
        cfg = beam_config_for(self.generator, num_beams=num_beams, max_length=max_new_tokens + 1,
                              min_length=min_new_tokens + 1 if min_new_tokens else 0,
                              length_penalty=length_penalty, num_return_sequences=n_best,
                              early_stopping=early_stopping)
        prior = retrieval.doc_logprobs
        if self.model_type == "rag-token":
            decoded = rag_token_decode(self.generator, memory, prior, cfg)
        else:
            decoded = rag_sequence_decode(self.generator, memory, prior, cfg, decoding)
        answers = self._answers(questions, retrieval, memory, decoded.tokens[:, 0],
                                None if decoded.doc_seq_logprobs is None else decoded.doc_seq_logprobs[:, 0])
        for b, answer in enumerate(answers):
            answer.alternatives = self.generator.decode_tokens(decoded.tokens[b, 1:])
        return answers

    def label_logprobs(self, questions: Sequence[str], labels: Sequence[str], k: int | None = None) -> torch.Tensor:
        """log p(y|x) of each one-token label y under the RAG marginal -> ``(B, L)`` (classification).

        For a one-token target RAG-Sequence and RAG-Token agree (paper eqs. 1-2 with one factor):
        log sum_z p(z|x) p(y_1 = label | x, z), computed from one teacher-forced generator pass per
        (input, document) with :func:`~openbook.rag.marginal.rag_token_marginal`. Only the label token
        is scored, not the EOS after it. A forced first token of the generator (BART's forced BOS) is
        fed before the label, as decoding does. Each label must be a single token of the generator's
        tokenizer (as an answer, :meth:`Generator.encode_targets`), distinct from the other labels and
        not the unknown token; otherwise :class:`~openbook.errors.InputError`. Differentiable (no
        ``no_grad``), so it can also serve as a classification loss.
        """
        questions = check_questions(questions)
        if isinstance(labels, str) or not labels:
            raise InputError(f"labels must be a non-empty list of strings, got {labels!r}")
        tokenizer = self.generator.tokenizer
        unk = getattr(tokenizer, "unk_token_id", None)
        ids: list[int] = []
        for label in labels:
            if not isinstance(label, str) or not label.strip():
                raise InputError(f"a label must be a non-empty string, got {label!r}")
            targets, mask = self.generator.encode_targets([label])
            row = targets[0, : int(mask[0].sum()) - 1].tolist()  # without the EOS
            if len(row) != 1:
                pieces = tokenizer.convert_ids_to_tokens(row) if tokenizer is not None else row
                raise InputError(
                    f"label {label!r} is {len(row)} tokens {pieces} for the generator's tokenizer; classification "
                    "labels must be single tokens (choose other label words)"
                )
            if unk is not None and row[0] == unk:
                raise InputError(f"label {label!r} is the unknown token for the generator's tokenizer; choose another word")
            if row[0] in ids:
                other = labels[ids.index(row[0])]
                raise InputError(f"labels {other!r} and {label!r} are the same token for the generator's tokenizer")
            ids.append(row[0])
        retrieval = self.retrieve(questions, k)
        B, K = retrieval.doc_logprobs.shape
        memory = self.generator.encode(self.generator.contexts(questions, retrieval.passages))
        prefix = [] if self.generator.forced_bos_token_id is None else [int(self.generator.forced_bos_token_id)]
        targets = torch.tensor([prefix + [ids[0]]], dtype=torch.long).repeat(B * K, 1)
        lp = self.generator.target_logprobs(memory, torch.arange(B * K), targets)  # (B*K, T, V)
        last = lp[:, -1, :].reshape(B, K, 1, -1)  # the distribution of the label position, per document
        marginal = rag_token_marginal(last, retrieval.doc_logprobs.to(last.dtype))  # (B, 1, V)
        return marginal[:, 0, ids]

    def _answers(self, questions, retrieval: Retrieval, memory, tokens: torch.Tensor,
                 doc_seq_logprobs: torch.Tensor | None = None) -> list[Answer]:
        """Provenance for the chosen answers: p(z|x,y) and, for RAG-Token, the Figure-2 posteriors.

        RAG-Sequence decoding already scored the answer under every document (``doc_seq_logprobs``,
        log p(y|x,z), -inf where Fast decoding assumed zero), so no extra pass is needed for it."""
        B, K = retrieval.doc_logprobs.shape
        pad = self.generator.pad_token_id
        mask = tokens.ne(pad)
        if not bool(mask.any()):
            tokens, mask = tokens[:, :1], torch.ones_like(tokens[:, :1], dtype=torch.bool)
        tok_post = None
        if doc_seq_logprobs is None:
            rows = torch.arange(B * K)
            lp = self.generator.target_token_logprobs(memory, rows, tokens.repeat_interleave(K, 0)).view(B, K, -1)
            doc_seq_logprobs = (lp * mask[:, None, :]).sum(-1)
            tok_post = token_doc_posterior(lp[..., None], retrieval.doc_logprobs, torch.zeros_like(tokens))
        seq_post = sequence_doc_posterior(doc_seq_logprobs, retrieval.doc_logprobs)
        texts = self.generator.decode_tokens(tokens)
        answers = []
        for b, question in enumerate(questions):
            n = int(mask[b].sum())
            passages = [
                RetrievedPassage(p.id, p.title, p.text, float(retrieval.scores[b, j]),
                                 float(retrieval.doc_logprobs[b, j].exp()), float(seq_post[b, j]))
                for j, p in enumerate(retrieval.passages[b])
            ]
            row = [t for t in tokens[b, :n].tolist()]
            answers.append(Answer(
                question, texts[b], self.model_type, passages,
                tokens=self.generator.tokenizer.convert_ids_to_tokens(row) if self.generator.tokenizer else [],
                token_posteriors=tok_post[b, :n].tolist() if tok_post is not None else None,
            ))
        return answers


def _load(cls, model: str | None = None, kb=None, generator: str = "default", encoder: str = "default", **kw):
    """``RAG.load``: build a model from names (see :func:`openbook.rag.assemble.load_rag`)."""
    from openbook.rag.assemble import load_rag

    return load_rag(model=model, kb=kb, generator=generator, encoder=encoder, **kw)


RAG.load = classmethod(_load)
