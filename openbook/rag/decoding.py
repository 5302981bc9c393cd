"""Decoding for RAG-Token and RAG-Sequence (Lewis et al. 2020, section 2.5), batched over inputs and docs.

* RAG-Token: a standard beam search (or greedy search) whose transition is the marginal
  p'(y_i|x, y_<i) = sum_z p(z|x) p(y_i|x, z, y_<i).
* RAG-Sequence: one beam search per (input, document) row, scored by the generator alone; the union of
  hypotheses Y is then scored either **Thorough**-ly (an extra teacher-forced pass of every hypothesis
  under every document, reusing the encoder outputs / prompt prefills) or **Fast** (p(y|x,z) = 0 where
  y was not in document z's beam, so no extra pass). **Lazy** decoding (:func:`rag_sequence_decode_lazy`)
  returns Fast decoding's answer while reading documents in order of p(z|x) only until no unread one can
  change it. Greedy Fast and Lazy decoding stop a document's answer as soon as it cannot change theirs
  (:class:`_Pruner`).

All functions take a generator's :class:`~openbook.models.generators.Memory` for ``B*K`` rows
(input-major) and ``doc_logprobs (B, K)``; none loops over the batch in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from openbook.models.generators import Generator, Memory
from openbook.rag.beam import BeamConfig, BeamOutput, beam_search, greedy_search
from openbook.rag.marginal import rag_token_marginal

__all__ = ["Decoded", "beam_config_for", "rag_sequence_decode", "rag_sequence_decode_lazy", "rag_token_decode"]


@dataclass
class Decoded:
    """Best hypotheses per input: ``tokens (B, R, T)`` answer tokens (start token removed, padded),
    ``scores (B, R)`` (log p(y|x) for RAG-Sequence, the beam score for RAG-Token) and, for RAG-Sequence,
    ``doc_seq_logprobs (B, R, K)`` = log p(y|x,z) per document (-inf where Fast decoding assumed zero) and,
    for Lazy decoding, ``docs_read (B, K)``: the documents it read (the others have no p(y|x,z))."""

    tokens: torch.Tensor
    scores: torch.Tensor
    doc_seq_logprobs: torch.Tensor | None = None
    docs_read: torch.Tensor | None = None


def beam_config_for(generator: Generator, **overrides) -> BeamConfig:
    """A :class:`BeamConfig` with the generator's special tokens and generation-config constraints."""
    cfg = BeamConfig(
        eos_token_id=generator.eos_token_id,
        pad_token_id=generator.pad_token_id,
        forced_bos_token_id=generator.forced_bos_token_id,
        forced_eos_token_id=generator.forced_eos_token_id,
    )
    return replace(cfg, **overrides)


def _doc_rows(index: torch.Tensor, n_docs: int) -> torch.Tensor:
    """Parent row ``i`` of an (input, beam) layout -> its ``n_docs`` generator rows ``i*K .. i*K+K-1``."""
    return (index[:, None] * n_docs + torch.arange(n_docs, device=index.device)).reshape(-1)


def rag_token_decode(generator: Generator, memory: Memory, doc_logprobs: torch.Tensor, cfg: BeamConfig,
                     on_step=None) -> Decoded:
    """RAG-Token decoding: beam search (``num_beams > 1``) or greedy search on the marginal transition.

    Greedy search calls ``on_step(position, tokens (B,))`` with each step's tokens as it chooses them (the
    marginal transition gives one token per step); beam search knows its answer only at the end."""
    B, K = doc_logprobs.shape
    state = generator.begin(memory, torch.arange(B * K, device=doc_logprobs.device))
    running = doc_logprobs  # p(z|x) of the inputs greedy search still decodes (all of them for beam search)

    def step(tokens: torch.Tensor) -> torch.Tensor:
        b = running.shape[0]
        n = tokens.shape[0] // b
        logits = state.step(tokens.repeat_interleave(K))  # rows (b, beam, k)
        logprobs = torch.log_softmax(logits, dim=-1).view(b, n, K, -1).transpose(1, 2)  # (b, K, n, V)
        return rag_token_marginal(logprobs, running).reshape(b * n, -1)

    def keep_inputs(index: torch.Tensor) -> None:  # greedy search drops the inputs whose answers ended
        nonlocal running
        state.select(_doc_rows(index, K))
        running = running.index_select(0, index)

    if cfg.num_beams == 1:
        out = greedy_search(step, B, generator.start_token_id, cfg, doc_logprobs.device, on_step=on_step,
                            select=keep_inputs)
    else:
        out = beam_search(
            step,
            lambda idx: state.select(_doc_rows(idx, K)),
            lambda idx: state.reorder(_doc_rows(idx, K)),
            B,
            generator.start_token_id,
            cfg,
            doc_logprobs.device,
        )
    return Decoded(out.sequences[:, :, 1:], out.scores)


# Lazy decoding (and a pruned greedy row) stops only when the best answer leads by this fraction of its
# probability more than the unread documents (the running rows) could add: far above float32 rounding, so the
# stop never turns on a rounding error.
LAZY_MARGIN = 1e-4


class _Pruner:
    """Greedy RAG-Sequence rows that can no longer change Fast decoding's best answer, stopped early.

    Rows ``(input, document)``: ``row_input (n,)``, ``row_logprobs (n,)`` = log p(z|x); ``complete (B,)`` says
    whose every document is among the rows. Under Fast decoding an answer y scores
    ``sum over the documents whose greedy answer is y of p(z|x) p(y|x,z)``. A finished answer's score is final
    (a running row has not ended where it ended, so it cannot write the same answer), and every answer still to
    come from the running rows scores at most ``U = sum over them of p(z|x) p(prefix|x,z)``, as a prefix is at
    least as likely as any of its continuations. Once the best finished answer ``M`` passes ``U`` (by
    :data:`LAZY_MARGIN` of ``M``), the input's running rows stop: they could not win. ``stopped (n,)`` records
    them; their prefixes are no answers (:func:`_drop_pruned`)."""

    def __init__(self, row_input: torch.Tensor, row_logprobs: torch.Tensor, complete: torch.Tensor):
        self.row_input, self.prior, self.complete = row_input, row_logprobs.double().exp(), complete
        self.stopped = torch.zeros_like(row_input, dtype=torch.bool)

    def __call__(self, seqs: torch.Tensor, done: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        ended = done & ~self.stopped
        if not bool(ended.any()):  # no answer finished yet: nothing can lead (most steps of a short answer's start)
            return torch.zeros_like(done)
        mass = self.prior * raw.double().exp()
        same = (seqs[:, None, :] == seqs[None, :, :]).all(-1) & (self.row_input[:, None] == self.row_input[None, :])
        answer_mass = (same & ended[None, :]).double() @ (mass * ended)  # each row's answer, summed over documents
        n_inputs = self.complete.shape[0]
        best = torch.zeros(n_inputs, dtype=torch.float64, device=seqs.device).scatter_reduce(
            0, self.row_input, answer_mass.masked_fill(~ended, 0.0), "amax")
        running = torch.zeros_like(best).index_add(0, self.row_input, mass.masked_fill(done, 0.0))
        lost = (best - running > LAZY_MARGIN * best) & self.complete
        stop = ~done & lost[self.row_input]
        self.stopped |= stop
        return stop


def _fast_pruner(cfg: BeamConfig, row_input: torch.Tensor, row_logprobs: torch.Tensor, complete: torch.Tensor):
    """A :class:`_Pruner` where it is exact and of use: greedy search (one beam) returning one answer."""
    if cfg.num_beams != 1 or cfg.num_return_sequences != 1:
        return None
    return _Pruner(row_input, row_logprobs, complete)


def _drop_pruned(keep: torch.Tensor, pruner: _Pruner | None) -> torch.Tensor:
    """``keep (B, C)`` without the candidates of stopped rows (one candidate per row: one beam)."""
    return keep if pruner is None else keep & ~pruner.stopped.view(keep.shape)


def _per_doc_beams(generator: Generator, memory: Memory, n_rows: int, cfg: BeamConfig, pruner=None) -> BeamOutput:
    """An independent beam search on each (input, document) row, returning all its beams.

    The rows attend to their context through its attention mask. Deliberately not transformers':
    ``RagSequenceForGeneration.generate`` runs these beams with ``attention_mask=None``, so a padded context
    is attended to with its pads (it pads every context to ``max_combined_length``); the paper's
    p(y|x,z) is of the context itself (tests/rag/test_transformers_differences.py).
    """
    device = memory.attention_mask.device  # the generator's: its contexts were encoded there
    state = generator.begin(memory, torch.arange(n_rows, device=device))
    doc_cfg = replace(cfg, num_return_sequences=cfg.num_beams)
    if cfg.num_beams == 1:
        return greedy_search(state.step, n_rows, generator.start_token_id, doc_cfg, device, select=state.select,
                             prune=pruner)
    return beam_search(state.step, state.select, state.reorder, n_rows, generator.start_token_id, doc_cfg, device)


def _first_occurrence(cands: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cands (B, C, L)`` -> (``same (B, C, C)`` equality matrix, ``keep (B, C)``: not a repeat)."""
    same = (cands[:, :, None, :] == cands[:, None, :, :]).all(-1)
    earlier = torch.ones_like(same[0]).tril(-1).bool()
    return same, ~(same & earlier).any(-1)


def rag_sequence_decode(
    generator: Generator,
    memory: Memory,
    doc_logprobs: torch.Tensor,
    cfg: BeamConfig,
    decoding: str = "thorough",
) -> Decoded:
    """RAG-Sequence decoding: per-document beams, then Thorough or Fast marginal scoring."""
    if decoding not in ("thorough", "fast"):
        raise ValueError(f"decoding must be 'thorough' or 'fast', not {decoding!r}")
    B, K = doc_logprobs.shape
    nb = cfg.num_beams
    pruner = None
    if decoding == "fast":
        rows = torch.arange(B, device=doc_logprobs.device).repeat_interleave(K)
        pruner = _fast_pruner(cfg, rows, doc_logprobs.reshape(-1), torch.ones(B, dtype=torch.bool, device=rows.device))
    beams = _per_doc_beams(generator, memory, B * K, replace(cfg, num_return_sequences=nb), pruner)
    cands = beams.sequences.reshape(B, K * nb, -1)  # candidate c = k * nb + j comes from document k
    same, keep = _first_occurrence(cands)
    keep = _drop_pruned(keep, pruner)
    if decoding == "thorough":
        doc_ll = _thorough_doc_logprobs(generator, memory, cands[:, :, 1:], keep)
    else:
        doc_ll = _fast_doc_logprobs(beams.raw_logprobs.reshape(B, K * nb), same, K, nb)
    return _best(cands, keep, doc_ll, doc_logprobs, cfg, generator.pad_token_id)


def _marginal(keep, doc_ll, doc_logprobs) -> torch.Tensor:
    """``(B, C)`` log p(y|x) = logsumexp_z(log p(y|x,z) + log p(z|x)) of each candidate, -inf for repeats."""
    return torch.logsumexp(doc_ll + doc_logprobs[:, None, :], dim=-1).masked_fill(~keep, -float("inf"))


def _best(cands, keep, doc_ll, doc_logprobs, cfg: BeamConfig, pad: int, docs_read=None) -> Decoded:
    """The ``num_return_sequences`` best candidates by log p(y|x) (:func:`_marginal`)."""
    B, C = keep.shape
    targets = cands[:, :, 1:]
    scores = _marginal(keep, doc_ll, doc_logprobs)
    R = min(cfg.num_return_sequences, C)
    best = scores.topk(R, dim=1).indices  # (B, R)
    def pick(t):
        return torch.take_along_dim(t, best.view(B, R, *([1] * (t.dim() - 2))), dim=1)
    tokens = pick(targets)
    width = max(1, int((tokens != pad).sum(-1).max()))
    return Decoded(tokens[..., :width], pick(scores[..., None])[..., 0], pick(doc_ll), docs_read)


def _settled(keep, doc_ll, doc_logprobs, read) -> torch.Tensor:
    """``(B,)``: whether no unread document can change the best candidate of an input (Fast decoding).

    An unread document z adds p(z|x) p(y|x,z) <= p(z|x) to at most the candidates of its own beam, so with
    the unread mass ``U = sum p(z|x)`` the best candidate's probability ``s1`` is final as the argmax once
    ``s1 > s2 + U`` (``s2``: the runner-up, 0 if none; a new candidate gets at most ``U``)."""
    probs = _marginal(keep, doc_ll, doc_logprobs).double().exp()
    top = probs.topk(min(2, probs.shape[1]), dim=1).values
    s1 = top[:, 0]
    s2 = top[:, 1] if top.shape[1] > 1 else torch.zeros_like(s1)
    unread = doc_logprobs.double().exp().masked_fill(read, 0.0).sum(-1)
    return (s1 - s2 - unread) > LAZY_MARGIN * s1


def _first_reads(doc_logprobs: torch.Tensor) -> torch.Tensor:
    """``(B, K)`` bool: the fewest best documents of each input whose p(z|x) sums past 1/2.

    An answer read from documents of mass ``m`` has probability at most ``m``, and the unread ones may add
    ``1 - m`` to another: no fewer documents can settle it (:func:`_settled`)."""
    probs = doc_logprobs.double().exp()
    order = probs.argsort(dim=-1, descending=True, stable=True)
    before = probs.gather(-1, order).cumsum(-1) - probs.gather(-1, order)  # mass of the better documents
    first = torch.zeros_like(probs, dtype=torch.bool)
    return first.scatter(-1, order, before <= 0.5)


# The most documents Lazy decoding reads in its first stage before it reads them all at once instead.
LAZY_MAX_FIRST_READS = 1


def _first_stage(doc_logprobs: torch.Tensor) -> torch.Tensor:
    """``(B, K)`` bool: what Lazy decoding reads first: :func:`_first_reads` for an input whose best document
    holds more than half of p(z|x), every document for the others.

    Two or more documents settle the answer only if the generator's answer has a probability near 1 under each
    of them (the read mass barely passes the unread), which a flat p(z|x) over a large book rarely allows; an
    unsettled first stage then costs a second prefill and decoding pass on top of Fast decoding's one. So an
    input without a document past half the mass is read as Fast decoding reads it, in one stage."""
    first = _first_reads(doc_logprobs)
    return first | (first.sum(-1, keepdim=True) > LAZY_MAX_FIRST_READS)


def rag_sequence_decode_lazy(generator: Generator, encode, doc_logprobs: torch.Tensor, cfg: BeamConfig) -> Decoded:
    """Fast decoding's best answer, reading documents in order of p(z|x) only until it is settled.

    ``encode(pairs)`` returns the generator's :class:`Memory` of one row per ``(input, document)`` pair of
    the list ``pairs``, in its order. The first stage reads an input's best document if its p(z|x) passes 1/2
    (a trained retriever's peaked p(z|x)) and every document otherwise (:func:`_first_stage`), the second the
    rest of the inputs that :func:`_settled` does not settle: two prefills and decoding passes at most. The
    chosen answer is the one Fast decoding over all K documents chooses (for ``num_return_sequences == 1``;
    more return sequences read every document); ``scores`` and ``doc_seq_logprobs`` count the documents read
    (``docs_read``), -inf for the others."""
    B, K = doc_logprobs.shape
    nb = cfg.num_beams
    device = doc_logprobs.device
    seqs = torch.full((B, K, nb, 1), -1, dtype=torch.long, device=device)  # -1: equals no generated answer
    raw = torch.full((B, K, nb), -float("inf"), device=device)
    read = torch.zeros((B, K), dtype=torch.bool, device=device)
    todo = torch.ones(B, dtype=torch.bool, device=device)
    stopped = torch.zeros((B, K), dtype=torch.bool, device=device)
    for stage in (_first_stage(doc_logprobs), torch.ones_like(read)):
        this = stage & ~read & todo[:, None]
        b_idx, k_idx = this.nonzero(as_tuple=True)
        if b_idx.numel() == 0:
            continue
        memory = encode(list(zip(b_idx.tolist(), k_idx.tolist())))
        # early stops only where this pass reads all of an input's documents (nothing read before or after)
        pruner = _fast_pruner(cfg, b_idx, doc_logprobs[b_idx, k_idx], this.all(-1))
        beams = _per_doc_beams(generator, memory, b_idx.numel(), replace(cfg, num_return_sequences=nb), pruner)
        if pruner is not None:
            stopped[b_idx, k_idx] = pruner.stopped
        width = max(seqs.shape[-1], beams.sequences.shape[-1])
        seqs = _pad_to(seqs, width, generator.pad_token_id)
        seqs[b_idx, k_idx] = _pad_to(beams.sequences, width, generator.pad_token_id)
        raw[b_idx, k_idx] = beams.raw_logprobs.to(raw.dtype)
        read[b_idx, k_idx] = True
        cands = seqs.view(B, K * nb, -1)
        same, keep = _first_occurrence(cands)
        keep = keep & ~stopped.view(B, K * nb) if nb == 1 else keep
        doc_ll = _fast_doc_logprobs(raw.view(B, K * nb), same, K, nb)
        if cfg.num_return_sequences == 1:
            todo &= ~_settled(keep, doc_ll, doc_logprobs, read)
    return _best(cands, keep, doc_ll, doc_logprobs, cfg, generator.pad_token_id, read)


def _pad_to(t: torch.Tensor, width: int, value: int) -> torch.Tensor:
    """``t`` with its last dimension padded on the right with ``value`` to ``width``."""
    return torch.nn.functional.pad(t, (0, width - t.shape[-1]), value=value)


def _thorough_doc_logprobs(generator: Generator, memory: Memory, targets: torch.Tensor, keep: torch.Tensor):
    """log p(y|x,z) of every kept hypothesis under every document -> ``(B, C, K)`` (-inf for repeats).

    Pads are masked as transformers masks them (``target == pad``); the first token's score is excluded
    for an input when all its hypotheses start with BOS (transformers' ``exclude_bos_score``).
    """
    B, C, T = targets.shape
    K = memory.attention_mask.shape[0] // B
    b_idx, c_idx = keep.nonzero(as_tuple=True)  # packed kept hypotheses
    n = b_idx.shape[0]
    rows = (b_idx[:, None] * K + torch.arange(K, device=keep.device)).reshape(-1)  # (n*K,)
    flat_targets = targets[b_idx, c_idx].repeat_interleave(K, dim=0)
    mask = flat_targets.ne(generator.pad_token_id)
    positions = torch.arange(1, T + 1, device=targets.device)
    lengths = (mask * positions).amax(-1) if T else mask.sum(-1)  # up to the last scored token
    generator.prepare_rescoring(memory)
    try:
        token_lp = generator.target_token_logprobs(memory, rows, flat_targets, lengths)  # (n*K, T)
    finally:
        generator.end_rescoring(memory)
    token_lp = token_lp * mask
    if generator.bos_token_id is not None:
        starts_bos = targets[..., 0].eq(generator.bos_token_id) | ~keep
        exclude = starts_bos.all(1)[b_idx].repeat_interleave(K)  # per input, as transformers does
        token_lp[:, 0] = token_lp[:, 0] * ~exclude
    doc_ll = torch.full((B, C, K), -float("inf"), device=token_lp.device)
    doc_ll[b_idx, c_idx] = token_lp.sum(-1).view(n, K)
    return doc_ll


def _fast_doc_logprobs(raw: torch.Tensor, same: torch.Tensor, K: int, nb: int) -> torch.Tensor:
    """Fast decoding: log p(y|x,z) from document z's own beam if y is in it, else log 0 -> ``(B, C, K)``."""
    B, C = raw.shape
    in_beam = same.view(B, C, K, nb)  # does hypothesis c equal beam j of document k?
    ll = raw.view(B, 1, K, nb).expand(B, C, K, nb).masked_fill(~in_beam, -float("inf"))
    return ll.max(-1).values
