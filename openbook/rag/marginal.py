"""The marginalisation math of RAG (Lewis et al. 2020, section 2.1), as pure tensor functions.

Shapes used throughout:

* ``B`` inputs, ``K`` retrieved documents per input, ``T`` target positions, ``V`` vocabulary.
* ``token_logprobs``: ``(B, K, T, V)`` — log p_theta(y_t = v | x, z_k, y_<t), already log-softmaxed.
* ``doc_logprobs``: ``(B, K)`` — log p_eta(z_k | x), i.e. ``log_softmax(doc_scores)`` over the top K.
* ``targets``: ``(B, T)`` token ids; ``mask``: ``(B, T)`` bool, False at padding.

RAG-Sequence (eq. 1):  p(y|x) = sum_z p(z|x) prod_t p(y_t|x,z,y_<t)
RAG-Token   (eq. 2):  p(y|x) = prod_t sum_z p(z|x) p(y_t|x,z,y_<t)

Label smoothing follows transformers' RAG (``epsilon / V`` times the sum of all log-probabilities,
marginalised the same way as the likelihood), so that losses agree with ``RagSequenceForGeneration`` /
``RagTokenForGeneration`` to floating-point precision.
"""

from __future__ import annotations

import torch

__all__ = [
    "doc_log_prior",
    "gather_target_logprobs",
    "rag_sequence_nll",
    "rag_token_marginal",
    "rag_token_nll",
    "sequence_doc_posterior",
    "sequence_logprob_per_doc",
    "token_doc_posterior",
]


def doc_log_prior(doc_scores: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
    """log p_eta(z|x): a softmax over the top-K retrieval scores ``(B, K)``, optionally scaled.

    Half-precision (or integer) scores are computed in float32; float64 scores stay float64.
    """
    dtype = torch.promote_types(doc_scores.dtype, torch.float32)
    return torch.log_softmax(doc_scores.to(dtype) * scale, dim=-1)


def gather_target_logprobs(token_logprobs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Pick log p(y_t) out of ``(B, K, T, V)`` log-probabilities for ``targets (B, T)`` -> ``(B, K, T)``."""
    index = targets[:, None, :, None].expand(-1, token_logprobs.shape[1], -1, 1)
    return token_logprobs.gather(-1, index).squeeze(-1)


def sequence_logprob_per_doc(
    token_logprobs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    exclude_first: bool | torch.Tensor = False,
) -> torch.Tensor:
    """log p_theta(y | x, z) for every document: ``(B, K)``.

    ``exclude_first`` drops the first target position from the sum (transformers' ``exclude_bos_score``,
    used when rescoring hypotheses whose first token is a forced BOS); it may be a ``(B,)`` bool tensor.
    """
    ll = gather_target_logprobs(token_logprobs, targets) * mask[:, None, :]
    return ll.sum(-1) - _first_position(ll, exclude_first)


def _first_position(per_position: torch.Tensor, exclude_first: bool | torch.Tensor) -> torch.Tensor:
    """The value at position 0 of ``(B, K, T)`` where the first token is excluded, else 0 -> ``(B, K)``."""
    if isinstance(exclude_first, bool):
        return per_position[..., 0] if exclude_first else torch.zeros_like(per_position[..., 0])
    return per_position[..., 0] * exclude_first.to(per_position.dtype)[:, None]


def _smoothing_term(token_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over the vocabulary of the log-probabilities at every unmasked position -> ``(B, K, T)``."""
    return token_logprobs.sum(-1) * mask[:, None, :]


def rag_sequence_nll(
    token_logprobs: torch.Tensor,
    doc_logprobs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.0,
    exclude_first: bool | torch.Tensor = False,
) -> torch.Tensor:
    """Negative marginal log-likelihood of RAG-Sequence, per input ``(B,)``.

    -log sum_z exp(log p(z|x) + sum_t log p(y_t|x,z,y_<t)); with ``epsilon > 0`` mixed with the smoothing
    objective the way transformers does (the prior is added once per document to both terms).

    Deliberately not transformers': its ``RagSequenceForGeneration.get_nll`` adds log p(z|x) at the second
    target position, so for a target with one scored token (the second position is padding, or absent) the
    prior is dropped and the loss is -log sum_z p(y|x,z). The paper's eq. 1 keeps p(z|x) for every target
    length, and so does this function (tests/rag/test_transformers_differences.py).
    """
    seq_ll = sequence_logprob_per_doc(token_logprobs, targets, mask, exclude_first) + doc_logprobs
    nll = -torch.logsumexp(seq_ll, dim=1)
    if epsilon == 0.0:
        return nll
    vocab = token_logprobs.shape[-1]
    smooth = _smoothing_term(token_logprobs, mask).sum(-1) + vocab * doc_logprobs
    smooth_loss = -torch.logsumexp(smooth, dim=1)
    return (1.0 - epsilon) * nll + (epsilon / vocab) * smooth_loss


def rag_token_marginal(token_logprobs: torch.Tensor, doc_logprobs: torch.Tensor) -> torch.Tensor:
    """RAG-Token's marginal next-token distribution (the transition p'_theta of section 2.5).

    ``token_logprobs (B, K, ..., V)``, ``doc_logprobs (B, K)`` -> ``(B, ..., V)``:
    log sum_z p(z|x) p(y|x,z,y_<t).
    """
    prior = doc_logprobs.reshape(doc_logprobs.shape + (1,) * (token_logprobs.dim() - 2))
    return torch.logsumexp(token_logprobs + prior, dim=1)


def rag_token_nll(
    token_logprobs: torch.Tensor,
    doc_logprobs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.0,
) -> torch.Tensor:
    """Negative marginal log-likelihood of RAG-Token, per input ``(B,)``: -sum_t log sum_z p(z|x) p(y_t|..)."""
    if epsilon == 0.0:
        # Only the target column is needed: avoid materialising the (B, T, V) marginal.
        target_ll = gather_target_logprobs(token_logprobs, targets) + doc_logprobs[:, :, None]
        return -(torch.logsumexp(target_ll, dim=1) * mask).sum(-1)
    marginal = rag_token_marginal(token_logprobs, doc_logprobs)  # (B, T, V)
    ll = marginal.gather(-1, targets[..., None]).squeeze(-1)
    nll = -(ll * mask).sum(-1)
    smooth_loss = -(marginal.sum(-1) * mask).sum(-1)
    vocab = token_logprobs.shape[-1]
    return (1.0 - epsilon) * nll + (epsilon / vocab) * smooth_loss


def token_doc_posterior(
    token_logprobs: torch.Tensor, doc_logprobs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """The per-token document posterior of the paper's Figure 2, ``(B, T, K)``.

    p(z_t = k | x, y_t, y_<t) ∝ p(z_k|x) p(y_t | x, z_k, y_<t) — in RAG-Token each position draws its
    own document from the prior, so the posterior at position t conditions on y_t and the prefix.
    """
    joint = gather_target_logprobs(token_logprobs, targets) + doc_logprobs[:, :, None]  # (B, K, T)
    return torch.softmax(joint, dim=1).transpose(1, 2)


def sequence_doc_posterior(seq_logprob_per_doc: torch.Tensor, doc_logprobs: torch.Tensor) -> torch.Tensor:
    """p(z | x, y) ∝ p(z|x) p(y|x,z) for a whole answer, ``(B, K)`` (RAG-Sequence provenance)."""
    return torch.softmax(seq_logprob_per_doc + doc_logprobs, dim=1)
