"""Batched beam search over any next-token distribution.

One implementation serves RAG-Token (the marginalised transition of section 2.5) and RAG-Sequence
(the generator's own transition, one beam search per (input, document) row). It follows the semantics
of transformers' vectorised beam search (``GenerationMixin._beam_search``): ``2 * num_beams`` candidates
per step, finished hypotheses scored ``sum_logprob / generated_length ** length_penalty``, the same early
stopping heuristic, and the logits processors transformers derives from a generation config
(min length, forced BOS, forced EOS). Given the same log-probabilities it returns the same tokens.

Differences that make it faster, not different: the first step runs on one beam per input (all beams are
identical before the first token) and its cache is expanded afterwards with ``select``; later reorders
call ``reorder``, which the generator adapters implement by moving only the prefix-dependent cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

NEG = -1.0e9


@dataclass
class BeamConfig:
    """Decoding options (transformers' names and meanings). ``max_length`` counts the start token."""

    num_beams: int = 4
    max_length: int = 21
    min_length: int = 0
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None

    def __post_init__(self) -> None:
        # Plain Python numbers from here on: numpy scalars given by a caller (np.int64 beams, an np.float32
        # length penalty) would otherwise turn tensor arithmetic in the search into numpy's.
        for name in ("num_beams", "max_length", "min_length", "num_return_sequences"):
            setattr(self, name, int(getattr(self, name)))
        self.length_penalty = float(self.length_penalty)

    def fill_value(self) -> int:
        """The id that pads finished sequences (transformers: pad if truthy, else EOS)."""
        if self.eos_token_id is None:
            return -1
        return self.pad_token_id if self.pad_token_id else self.eos_token_id


@dataclass
class BeamOutput:
    sequences: torch.Tensor  # (B, R, L): start token, generated tokens, fill
    scores: torch.Tensor  # (B, R): length-normalised beam scores
    lengths: torch.Tensor  # (B, R): generated tokens (including EOS)
    raw_logprobs: torch.Tensor  # (B, R): sum of unprocessed log-probs of the generated tokens


def process_logprobs(log_probs: torch.Tensor, cur_len: int, cfg: BeamConfig) -> torch.Tensor:
    """Apply min-length, forced-BOS and forced-EOS constraints in place (transformers' order)."""
    if cfg.eos_token_id is not None and cur_len < cfg.min_length:
        log_probs[:, cfg.eos_token_id] = -float("inf")
    if cfg.forced_bos_token_id is not None and cur_len == 1:
        log_probs[:] = -float("inf")
        log_probs[:, cfg.forced_bos_token_id] = 0.0
    if cfg.forced_eos_token_id is not None and cur_len == cfg.max_length - 1:
        log_probs[:] = -float("inf")
        log_probs[:, cfg.forced_eos_token_id] = 0.0
    return log_probs


def _unforced(raw: torch.Tensor, cur_len: int, cfg: BeamConfig) -> torch.Tensor:
    """The model's log-probabilities as ``raw_logprobs`` counts them: a forced BOS is not the model's
    choice and is not scored (0), as Thorough rescoring excludes it (transformers' ``exclude_bos_score``).
    A forced EOS keeps its log-probability, which rescoring also counts."""
    if cur_len == 1 and cfg.forced_bos_token_id is not None:
        return torch.zeros_like(raw)
    return raw


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(tensor, index, dim=1)


def beam_search(
    step: Callable[[torch.Tensor], torch.Tensor],
    select: Callable[[torch.Tensor], None],
    reorder: Callable[[torch.Tensor], None],
    batch_size: int,
    start_token_id: int,
    cfg: BeamConfig,
    device: torch.device | str,
) -> BeamOutput:
    """Beam search for ``batch_size`` independent inputs.

    ``step(tokens)`` feeds the last token of every live row and returns next-token logits; on the first
    call there is one row per input, afterwards ``batch_size * num_beams`` rows (input-major).
    ``select(index)`` is called once after the first step to expand rows to beams; ``reorder(index)``
    after every later step with the parent row of each new beam. Every tensor of the search is made on
    ``device``, the device ``step`` returns its logits on (the model's: there is no default).
    """
    nb, B = cfg.num_beams, batch_size
    keep = max(2, 1 + (cfg.eos_token_id is not None)) * nb
    top_mask = torch.arange(keep, device=device) < nb
    L = cfg.max_length
    running = torch.full((B, nb, L), cfg.fill_value(), dtype=torch.long, device=device)
    running[:, :, 0] = start_token_id
    finished = running.clone()
    running_scores = torch.zeros((B, nb), device=device)
    running_scores[:, 1:] = NEG
    running_raw = torch.zeros((B, nb), device=device)
    finished_scores = torch.full((B, nb), NEG, device=device)
    finished_raw = torch.zeros((B, nb), device=device)
    finished_len = torch.zeros((B, nb), dtype=torch.long, device=device)
    is_finished = torch.zeros((B, nb), dtype=torch.bool, device=device)
    improvable = torch.ones((B, 1), dtype=torch.bool, device=device)
    batch_index = torch.arange(B, device=device)[:, None]

    cur_len = 1
    tokens = torch.full((B,), start_token_id, dtype=torch.long, device=device)
    while True:
        logits = step(tokens)
        raw = torch.log_softmax(logits.float(), dim=-1)
        log_probs = process_logprobs(raw.clone(), cur_len, cfg)
        raw = _unforced(raw, cur_len, cfg)
        V = log_probs.shape[-1]
        if cur_len == 1:  # one row per input: every beam shares it
            log_probs = log_probs[:, None, :].expand(B, nb, V)
            raw = raw[:, None, :].expand(B, nb, V)
        else:
            log_probs = log_probs.view(B, nb, V)
            raw = raw.view(B, nb, V)
        total = (log_probs + running_scores[:, :, None]).reshape(B, -1)
        top_lp, top_idx = torch.topk(total, k=keep)
        parent, token = top_idx // V, top_idx % V
        cand_seq = _gather(running, parent)
        cand_seq[:, :, cur_len] = token
        cand_raw = _gather(running_raw, parent) + raw.reshape(B, -1).gather(1, top_idx)
        hits = torch.zeros_like(top_lp, dtype=torch.bool) | (cur_len + 1 >= L)
        if cfg.eos_token_id is not None:
            hits = hits | (token == cfg.eos_token_id)

        # live beams for the next step: the best candidates that did not just finish
        live_lp = top_lp + hits.to(torch.float32) * NEG
        next_idx = torch.topk(live_lp, k=nb)[1]
        running = _gather(cand_seq, next_idx)
        running_scores = _gather(live_lp, next_idx)
        running_raw = _gather(cand_raw, next_idx)
        parents = _gather(parent, next_idx)

        # finished hypotheses: merge the new ones into the kept best num_beams
        just_done = hits & top_mask[None, :]
        done_lp = top_lp / ((cur_len + 1 - 1) ** cfg.length_penalty)
        full = torch.all(is_finished, dim=-1, keepdim=True) & (cfg.early_stopping is True)
        done_lp = done_lp + full.to(torch.float32) * NEG
        done_lp = done_lp + (~improvable).to(torch.float32) * NEG
        done_lp = done_lp + (~just_done) * NEG
        merged_idx = torch.topk(torch.cat([finished_scores, done_lp], 1), k=nb)[1]
        finished = _gather(torch.cat([finished, cand_seq], 1), merged_idx)
        finished_scores = _gather(torch.cat([finished_scores, done_lp], 1), merged_idx)
        finished_raw = _gather(torch.cat([finished_raw, cand_raw], 1), merged_idx)
        cand_len = torch.full_like(token, cur_len)
        finished_len = _gather(torch.cat([finished_len, cand_len], 1), merged_idx)
        is_finished = _gather(torch.cat([is_finished, just_done], 1), merged_idx)

        cur_len += 1
        improvable = _early_stop_unsatisfied(improvable, running_scores, finished_scores, is_finished,
                                             cur_len, cfg)
        go_on = bool(improvable.any()) and not (bool(is_finished.all()) and cfg.early_stopping is True)
        go_on = go_on and not bool(hits.all())
        if not go_on:
            break
        if cur_len == 2:  # rows were one per input and every beam's parent is that row: expand to beams
            select(batch_index.expand(B, nb).reshape(-1))
        else:
            reorder((parents + batch_index * nb).reshape(-1))
        tokens = running[:, :, cur_len - 1].reshape(-1)

    R = cfg.num_return_sequences
    width = 1 + int(finished_len[:, :R].max())
    return BeamOutput(finished[:, :R, :width], finished_scores[:, :R], finished_len[:, :R], finished_raw[:, :R])


def _early_stop_unsatisfied(improvable, running_scores, finished_scores, is_finished, cur_len, cfg):
    """transformers' heuristic: can a running beam still beat the worst finished one?"""
    if cfg.early_stopping == "never" and cfg.length_penalty > 0.0:
        best_len = cfg.max_length - 1
    else:
        best_len = cur_len - 1
    best_running = running_scores[:, :1] / (best_len**cfg.length_penalty)
    worst_done = torch.where(is_finished, torch.min(finished_scores, dim=1, keepdim=True)[0], NEG)
    return improvable & torch.any(best_running > worst_done, dim=-1, keepdim=True)


def greedy_search(
    step: Callable[[torch.Tensor], torch.Tensor],
    batch_size: int,
    start_token_id: int,
    cfg: BeamConfig,
    device: torch.device | str,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
    select: Callable[[torch.Tensor], None] | None = None,
    prune: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> BeamOutput:
    """Greedy decoding (argmax of the processed distribution), stopping each row at EOS.

    ``on_step(position, tokens)``, if given, sees each step's chosen tokens ``(batch_size,)`` as they are
    chosen (``position`` 0 is the first generated token; finished rows show the pad): for streaming.

    ``select(index)``, if given, keeps only the rows ``index`` of the decoding state, in that order (what
    :func:`beam_search`'s ``select`` does): after a step at which a row finished, greedy search calls it
    with the rows still running, and ``step`` then receives (and must return logits for) those rows alone,
    so a finished answer stops costing compute. Without it every row is stepped until the last one ends
    (finished rows are fed the pad). Either way each row's tokens and scores are its own.

    ``prune(sequences, done, raw_logprobs)``, if given, is asked after each step (with every row's tokens so
    far, ``(batch_size, length)``, whether it ended, and its ``raw_logprobs`` so far) which running rows may stop
    now, a ``(batch_size,)`` bool: those rows end there, their tokens and scores those of an unfinished prefix
    (the caller that pruned them must not take them for answers).

    Scored as :func:`beam_search` scores one beam: ``scores`` sums the *processed* log-probabilities
    (a forced BOS or EOS counts log 1 = 0, as in transformers) over ``generated_length ** length_penalty``;
    ``raw_logprobs`` sums the model's own, without a forced BOS (see :func:`_unforced`). Tensors are made
    on ``device``, the device of ``step``'s logits (no default), as in :func:`beam_search`.
    """
    L = cfg.max_length
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else cfg.fill_value()
    seqs = torch.full((batch_size, L), pad, dtype=torch.long, device=device)
    seqs[:, 0] = start_token_id
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
    raw_total = torch.zeros(batch_size, device=device)
    processed_total = torch.zeros(batch_size, device=device)
    rows = torch.arange(batch_size, device=device)  # the batch rows that ``step`` computes, in its order
    tokens = seqs[:, 0]
    for cur_len in range(1, L):
        raw = torch.log_softmax(step(tokens).float(), dim=-1)
        lp = process_logprobs(raw.clone(), cur_len, cfg)
        finished = done[rows]
        nxt = torch.where(finished, torch.full_like(rows, pad), lp.argmax(-1))
        index = nxt.clamp(min=0)[:, None]
        raw_total[rows] += torch.where(finished, 0.0, _unforced(raw, cur_len, cfg).gather(1, index).squeeze(1))
        processed_total[rows] += torch.where(finished, 0.0, lp.gather(1, index).squeeze(1))
        seqs[rows, cur_len] = nxt
        if on_step is not None:
            on_step(cur_len - 1, seqs[:, cur_len])
        lengths[rows] += (~finished).long()
        if cfg.eos_token_id is not None:
            done[rows] = finished | (nxt == cfg.eos_token_id)
        if prune is not None and cur_len < L - 1:
            done |= prune(seqs[:, : cur_len + 1], done, raw_total) & ~done
        if bool(done.all()):
            break
        running = ~done[rows]
        if select is not None and not bool(running.all()):
            keep = running.nonzero().squeeze(1)
            select(keep)
            rows, nxt = rows[keep], nxt[keep]
        tokens = nxt
    width = 1 + int(lengths.max())
    scores = processed_total / lengths.clamp(min=1).float() ** cfg.length_penalty
    return BeamOutput(seqs[:, None, :width], scores[:, None], lengths[:, None], raw_total[:, None])
