"""Decoding for RAG-Token and RAG-Sequence (Lewis et al. 2020, section 2.5), batched over inputs and docs.

* RAG-Token: a standard beam search (or greedy search) whose transition is the marginal
  p'(y_i|x, y_<i) = sum_z p(z|x) p(y_i|x, z, y_<i).
* RAG-Sequence: one beam search per (input, document) row, scored by the generator alone; the union of
  hypotheses Y is then scored either **Thorough**-ly (an extra teacher-forced pass of every hypothesis
  under every document, reusing the encoder outputs / prompt prefills) or **Fast** (p(y|x,z) = 0 where
  y was not in document z's beam, so no extra pass).

All functions take a generator's :class:`~openbook.models.generators.Memory` for ``B*K`` rows
(input-major) and ``doc_logprobs (B, K)``; none loops over the batch in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from openbook.models.generators import Generator, Memory
from openbook.rag.beam import BeamConfig, BeamOutput, beam_search, greedy_search
from openbook.rag.marginal import rag_token_marginal

__all__ = ["Decoded", "beam_config_for", "rag_sequence_decode", "rag_token_decode"]


@dataclass
class Decoded:
    """Best hypotheses per input: ``tokens (B, R, T)`` answer tokens (start token removed, padded),
    ``scores (B, R)`` (log p(y|x) for RAG-Sequence, the beam score for RAG-Token) and, for RAG-Sequence,
    ``doc_seq_logprobs (B, R, K)`` = log p(y|x,z) per document (-inf where Fast decoding assumed zero)."""

    tokens: torch.Tensor
    scores: torch.Tensor
    doc_seq_logprobs: torch.Tensor | None = None


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


def _per_doc_beams(generator: Generator, memory: Memory, n_rows: int, cfg: BeamConfig) -> BeamOutput:
    """An independent beam search on each (input, document) row, returning all its beams.

    The rows attend to their context through its attention mask. Deliberately not transformers':
    ``RagSequenceForGeneration.generate`` runs these beams with ``attention_mask=None``, so a padded context
    is attended to with its pads (it pads every context to ``max_combined_length``); the paper's
    p(y|x,z) is of the context itself (tests/test_transformers_differences.py).
    """
    device = memory.attention_mask.device  # the generator's: its contexts were encoded there
    state = generator.begin(memory, torch.arange(n_rows, device=device))
    doc_cfg = replace(cfg, num_return_sequences=cfg.num_beams)
    if cfg.num_beams == 1:
        return greedy_search(state.step, n_rows, generator.start_token_id, doc_cfg, device, select=state.select)
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
    beams = _per_doc_beams(generator, memory, B * K, replace(cfg, num_return_sequences=nb))
    cands = beams.sequences.reshape(B, K * nb, -1)  # candidate c = k * nb + j comes from document k
    same, keep = _first_occurrence(cands)
    targets = cands[:, :, 1:]
    if decoding == "thorough":
        doc_ll = _thorough_doc_logprobs(generator, memory, targets, keep)
    else:
        doc_ll = _fast_doc_logprobs(beams.raw_logprobs.reshape(B, K * nb), same, K, nb)
    scores = torch.logsumexp(doc_ll + doc_logprobs[:, None, :], dim=-1)  # (B, C): log p(y|x)
    scores = scores.masked_fill(~keep, -float("inf"))
    R = min(cfg.num_return_sequences, K * nb)
    best = scores.topk(R, dim=1).indices  # (B, R)
    def pick(t):
        return torch.take_along_dim(t, best.view(B, R, *([1] * (t.dim() - 2))), dim=1)
    tokens = pick(targets)
    width = max(1, int((tokens != generator.pad_token_id).sum(-1).max()))
    return Decoded(tokens[..., :width], pick(scores[..., None])[..., 0], pick(doc_ll))


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
