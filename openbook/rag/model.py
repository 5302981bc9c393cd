"""The RAG model: a retriever p_eta(z|x) over a knowledge base and a generator p_theta(y|x,z).

``RAG.retrieve`` asks its retriever (:mod:`openbook.index.retriever`, the one retrieval seam: dense
MIPS with q(x), BM25, hybrid, or any other :class:`~openbook.index.retriever.Retriever`) for the top-k
passages and turns their scores into p(z|x) with :func:`~openbook.index.retriever.retrieval_logprobs`.
For dense retrieval the scores d(z)^T q(x) are recomputed in torch from the stored document vectors, so
p(z|x) is differentiable with respect to the query encoder (the document encoder and the index stay
frozen, paper section 2.4). ``RAG.loss`` is the negative marginal
log-likelihood of RAG-Sequence or RAG-Token; ``RAG.ask`` decodes and returns answers with provenance.
The knowledge base can be swapped in one call (``use_knowledge_base``) without reloading the models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from openbook.errors import InputError, check_k
from openbook.index import KnowledgeBaseLike
from openbook.index.filters import Filter, as_filter
from openbook.index.retriever import RETRIEVERS, Retriever, make_retriever, retrieval_logprobs
from openbook.models.encoders import Encoder, default_score_scale
from openbook.models.generators import Generator, Memory
from openbook.models.pieces import token_pieces
from openbook.presets import INTERACTIVE, MODELS
from openbook.rag.abstain import check_threshold
from openbook.rag.answer import Answer, RetrievedPassage, check_decoding_options, check_questions
from openbook.rag.boundary import answer_texts
from openbook.rag.decoding import beam_config_for, rag_sequence_decode, rag_sequence_decode_lazy, rag_token_decode
from openbook.rag.marginal import (
    rag_sequence_nll,
    rag_token_marginal,
    rag_token_nll,
    sequence_doc_posterior,
    token_doc_posterior,
)

Where = Filter | dict | str | Sequence[str] | None  # a metadata filter, in any form as_filter takes


@dataclass
class Retrieval:
    passages: list[list]  # B lists of K passages
    ids: np.ndarray  # (B, K) row numbers in the knowledge base
    scores: torch.Tensor  # (B, K) inner products, differentiable w.r.t. the query encoder
    doc_logprobs: torch.Tensor  # (B, K) log p(z|x)


class RAG(nn.Module):
    """Retrieval-Augmented Generation with a swappable non-parametric memory.

    Args:
        query_encoder: q(x), trained end to end.
        generator: a :class:`~openbook.models.generators.Generator` (seq2seq or causal LM).
        kb: the knowledge base (document vectors d(z), passages, MIPS index), frozen.
        model: ``"rag-sequence"`` or ``"rag-token"``.
        k: documents retrieved per input (paper: 5 or 10 in training; at most
            :data:`~openbook.errors.MAX_K`, clamped to the knowledge base when retrieving).
        score_scale: multiplies d(z)^T q(x) before the softmax. DPR's unnormalised vectors use 1; with
            L2-normalised encoders (cosine scores in [-1, 1]) p(z|x) is nearly uniform, so the default
            there is 20. ``learn_scale=True`` makes it a trained parameter (stored as a log).
        retriever: ``"dense"`` (MIPS with q(x), the paper's), ``"bm25"`` (the Table-6 ablation),
            ``"hybrid"``, or any :class:`~openbook.index.retriever.Retriever` over ``kb``.
    """

    def __init__(
        self,
        query_encoder: Encoder,
        generator: Generator,
        kb: KnowledgeBaseLike,
        model: str = "rag-sequence",
        k: int = 5,
        score_scale: float | None = None,
        learn_scale: bool = False,
        retriever: str | Retriever = "dense",
    ):
        super().__init__()
        if model not in MODELS:
            raise InputError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
        self.query_encoder = query_encoder
        self.generator = generator
        self.model_type = model
        self.k = check_k(k)
        if score_scale is None:
            score_scale = default_score_scale(query_encoder)
        self.log_scale = nn.Parameter(torch.tensor(math.log(score_scale)), requires_grad=learn_scale)
        self._check_kb(kb)
        self.kb = kb
        if isinstance(retriever, str):
            if retriever not in RETRIEVERS:
                raise InputError(f"retriever must be one of {', '.join(RETRIEVERS)}, not {retriever!r}")
            retriever = make_retriever(retriever, kb, encode=self._encode_questions)
        self.retriever = retriever

    # ------------------------------------------------------------------------------ knowledge base

    def _check_kb(self, kb: KnowledgeBaseLike) -> None:
        dim = self.query_encoder.dim if hasattr(self.query_encoder, "dim") else None
        if isinstance(dim, int) and kb.dim != dim:
            raise InputError(
                f"knowledge base {kb.path} holds {kb.dim}-d vectors but the query encoder "
                f"{getattr(self.query_encoder, 'name', '?')!r} gives {dim}-d vectors"
            )

    def use_knowledge_base(self, kb: KnowledgeBaseLike) -> KnowledgeBaseLike:
        """Hot-swap the non-parametric memory (no model reload); returns the previous one."""
        self._check_kb(kb)
        self.retriever.use_knowledge_base(kb)
        previous, self.kb = self.kb, kb
        return previous

    #: The function :meth:`load` builds with: :func:`openbook.rag.assemble.load_model`, the one loader. It sits
    #: above this module, which never imports it; importing :mod:`openbook.rag` (as ``from openbook.rag.model
    #: import RAG`` does first) hands it in here.
    loader: Callable[..., RAG] | None = None
    #: The abstention threshold calibrated for this model (:mod:`openbook.rag.abstain`): set by
    #: :func:`openbook.rag.assemble.load_run` from the shipped default's run.json; None: never calibrated.
    abstain_threshold: float | None = None
    #: The passage judge whose logits abstention reads (:mod:`openbook.models.judge`), set by :meth:`use_judge`.
    passage_judge = None

    def use_judge(self, judge) -> None:
        """Judge every answer's passages with ``judge`` (None: not at all). It is kept out of the model's
        submodules, so the model's state dict, parameters and checkpoints stay the RAG model's own."""
        self.__dict__["passage_judge"] = judge

    @classmethod
    def load(cls, model: str | None = None, kb=None, generator: str = "default", encoder: str | None = None,
             dtype: str = INTERACTIVE.dtype, **options) -> RAG:
        """A RAG model from names, in eval mode (:func:`openbook.rag.assemble.load_model`). With no names it is
        the shipped fine-tuned default; ``untrained=True`` gives the packaged generator without its adapters,
        ``run=DIR`` a training run; ``dtype`` is the generator's (``"float32"``, ``"bfloat16"``, ``"int8"``, or
        ``"auto"``: bfloat16 where the CPU computes it natively, as ``openbook ask``'s,
        :data:`~openbook.presets.INTERACTIVE`); ``k``, ``retriever`` and the :class:`RAG` options
        (``learn_scale``, ``score_scale``) pass through."""
        if model == "closed-book":
            raise InputError("RAG.load builds a RAG model; the closed-book generator is ClosedBook")
        if cls.loader is None:  # only while openbook.rag itself is being imported
            raise RuntimeError("RAG.load needs openbook.rag.assemble: import openbook.rag first")
        return cls.loader(model=model, kb=kb, generator=generator, encoder=encoder, dtype=dtype, **options)

    @property
    def score_scale(self) -> torch.Tensor:
        return self.log_scale.exp()

    # ------------------------------------------------------------------------------ retrieval

    def _encode_questions(self, questions: list[str]) -> torch.Tensor:
        return self.query_encoder(questions)  # (B, d), with gradients when training

    def retrieve(self, questions: Sequence[str], k: int | None = None, where: Where = None) -> Retrieval:
        """Top-k passages from the retriever, with p(z|x) (differentiable w.r.t. the query encoder for dense).

        ``k`` (default: the model's) is checked here (:func:`openbook.errors.check_k`), where it enters, and
        clamped to the knowledge base by the retriever. ``where`` keeps only the passages whose metadata
        matches (:func:`openbook.index.filters.as_filter`: ``{"source": "a.md", "modified": {"gte":
        "2026-01-01"}}`` or ``["source^=docs/"]``); the top k is then exact among them."""
        questions = check_questions(questions)
        where = as_filter(where)
        k = self.k if k is None else check_k(k)
        hits = self.retriever.retrieve(questions, k, where=where)
        scores = hits.scores
        if not isinstance(scores, torch.Tensor):
            scores = torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32))
        scores = scores.to(self.log_scale.device)  # BM25's host scores join the model on its device
        doc_logprobs = retrieval_logprobs(scores, self.score_scale if self.retriever.scaled else 1.0)
        return Retrieval(hits.passages, hits.ids, scores, doc_logprobs)

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
        rows = torch.arange(B * K, device=targets.device)
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
        num_beams: int = INTERACTIVE.num_beams,
        decoding: str = INTERACTIVE.decoding,
        max_new_tokens: int = INTERACTIVE.max_new_tokens,
        min_new_tokens: int = 0,
        length_penalty: float = 1.0,
        n_best: int = 1,
        early_stopping: bool | str = False,
        on_step=None,
        where: Where = None,
        abstain: bool = INTERACTIVE.abstain,
        abstain_threshold: float | None = None,
    ) -> list[Answer]:
        """Answer each question with provenance: passages, p(z|x), p(z|x,y) and (RAG-Token) per-token
        document posteriors. The defaults are :data:`~openbook.presets.INTERACTIVE`'s, as ``openbook ask``'s
        (greedy, Lazy, short answers); the paper's are :data:`~openbook.presets.PAPER`'s. RAG-Sequence uses
        Thorough, Fast or Lazy decoding (``decoding``; Lazy gives Fast's answer from only the documents that
        decide it, and no posterior for the others). ``num_beams=1``
        is greedy search; ``n_best > 1`` also returns the next-best hypotheses as ``alternatives``;
        ``length_penalty``, ``min_new_tokens`` and ``early_stopping`` mean what they mean in transformers.
        ``on_step(position, tokens (B,))`` sees each token as it is chosen, for RAG-Token greedy search only
        (streaming; RAG-Sequence and beam search know their answers only at the end). ``where`` is a metadata
        filter, as for :meth:`retrieve`.

        ``abstain`` marks the answers whose abstention score is below ``abstain_threshold`` (default: the
        model's calibrated :attr:`abstain_threshold`, None for a model never calibrated, which then never
        abstains) as ``abstained`` (:mod:`openbook.rag.abstain`); every answer carries its score."""
        check_decoding_options(decoding, num_beams, max_new_tokens, min_new_tokens, length_penalty, n_best)
        if abstain_threshold is not None:
            abstain_threshold = check_threshold(abstain_threshold, "abstain_threshold")
        questions = check_questions(questions)
        retrieval = self.retrieve(questions, k, where)
        cfg = beam_config_for(self.generator, num_beams=num_beams, max_length=max_new_tokens + 1,
                              min_length=min_new_tokens + 1 if min_new_tokens else 0,
                              length_penalty=length_penalty, num_return_sequences=n_best,
                              early_stopping=early_stopping)
        prior, memory = retrieval.doc_logprobs, None
        if self.model_type == "rag-sequence" and decoding == "lazy":
            decoded = rag_sequence_decode_lazy(self.generator, self._pair_encoder(questions, retrieval), prior, cfg)
        else:
            memory = self.generator.encode(self.generator.contexts(questions, retrieval.passages))
            if self.model_type == "rag-token":
                decoded = rag_token_decode(self.generator, memory, prior, cfg, on_step=on_step)
            else:
                decoded = rag_sequence_decode(self.generator, memory, prior, cfg, decoding)
        answers = self._answers(questions, retrieval, memory, decoded.tokens[:, 0], max_new_tokens,
                                None if decoded.doc_seq_logprobs is None else decoded.doc_seq_logprobs[:, 0])
        for b, answer in enumerate(answers):
            answer.alternatives = answer_texts(self.generator, decoded.tokens[b, 1:], max_new_tokens)[0]
            if decoded.docs_read is not None:  # Lazy decoding: an unread passage has no posterior
                for passage, was_read in zip(answer.passages, decoded.docs_read[b].tolist()):
                    passage.posterior = passage.posterior if was_read else None
        if self.passage_judge is not None:  # every answer's passages, judged in one call
            read = [(answer, p) for answer in answers for p in answer.passages]
            logits = self.passage_judge.score([a.question for a, _ in read], [(p.title, p.text) for _, p in read],
                                              [a.answer for a, _ in read])  # read only by a judge that reads answers
            for (_, passage), logit in zip(read, logits):
                passage.judge = logit
        threshold = self.abstain_threshold if abstain_threshold is None else abstain_threshold
        for answer in answers:
            answer.decide_abstention(threshold if abstain else None)
        return answers

    def _pair_encoder(self, questions, retrieval):
        """For Lazy decoding: ``encode(pairs)``, the generator's memory of one prompt per (question, passage)."""
        def encode(pairs: list[tuple[int, int]]) -> Memory:
            return self.generator.encode(self.generator.contexts(
                [questions[b] for b, _ in pairs], [[retrieval.passages[b][j]] for b, j in pairs]))
        return encode

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
        device = memory.attention_mask.device
        targets = torch.tensor([prefix + [ids[0]]], dtype=torch.long, device=device).repeat(B * K, 1)
        lp = self.generator.target_logprobs(memory, torch.arange(B * K, device=device), targets)  # (B*K, T, V)
        last = lp[:, -1, :].reshape(B, K, 1, -1)  # the distribution of the label position, per document
        marginal = rag_token_marginal(last, retrieval.doc_logprobs.to(last.dtype))  # (B, 1, V)
        return marginal[:, 0, ids]

    def _answers(self, questions, retrieval: Retrieval, memory, tokens: torch.Tensor, max_new_tokens: int,
                 doc_seq_logprobs: torch.Tensor | None = None) -> list[Answer]:
        """Provenance for the chosen answers: p(z|x,y) and, for RAG-Token, the Figure-2 posteriors.

        RAG-Sequence decoding already scored the answer under every document (``doc_seq_logprobs``,
        log p(y|x,z), -inf where Fast decoding assumed zero), so no extra pass is needed for it. Answers
        that hit ``max_new_tokens`` are cut back to a sensible boundary (:mod:`openbook.rag.boundary`)."""
        B, K = retrieval.doc_logprobs.shape
        pad = self.generator.pad_token_id
        mask = tokens.ne(pad)
        if not bool(mask.any()):
            tokens, mask = tokens[:, :1], torch.ones_like(tokens[:, :1], dtype=torch.bool)
        tok_post = None
        if doc_seq_logprobs is None:
            rows = torch.arange(B * K, device=tokens.device)
            lp = self.generator.target_token_logprobs(memory, rows, tokens.repeat_interleave(K, 0)).view(B, K, -1)
            doc_seq_logprobs = (lp * mask[:, None, :]).sum(-1)
            tok_post = token_doc_posterior(lp[..., None], retrieval.doc_logprobs, torch.zeros_like(tokens))
        seq_post = sequence_doc_posterior(doc_seq_logprobs, retrieval.doc_logprobs)
        # log p(y|x) per token, the answer's length-normalised likelihood (an abstention signal): RAG-Sequence's
        # marginal, for RAG-Token too (an approximation there); Lazy decoding's unread passages add nothing
        marginal = torch.logsumexp(doc_seq_logprobs.float() + retrieval.doc_logprobs.float(), dim=-1)
        per_token = marginal / mask.sum(-1).clamp(min=1)
        texts, truncated = answer_texts(self.generator, tokens, max_new_tokens)
        answers = []
        for b, question in enumerate(questions):
            n = int(mask[b].sum())
            passages = [
                RetrievedPassage(p.id, p.title, p.text, float(retrieval.scores[b, j]),
                                 float(retrieval.doc_logprobs[b, j].exp()), float(seq_post[b, j]),
                                 dict(getattr(p, "meta", None) or {}))
                for j, p in enumerate(retrieval.passages[b])
            ]
            row = [t for t in tokens[b, :n].tolist()]
            answers.append(Answer(
                question, texts[b], self.model_type, passages,
                tokens=self.generator.tokenizer.convert_ids_to_tokens(row) if self.generator.tokenizer else [],
                token_texts=token_pieces(self.generator.tokenizer, row) if self.generator.tokenizer else [],
                token_posteriors=tok_post[b, :n].tolist() if tok_post is not None else None,
                truncated=truncated[b], logprob=float(per_token[b]),
            ))
        return answers

