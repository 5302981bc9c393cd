"""openbook.rag.marginal against brute-force evaluations of the RAG equations (Lewis et al. 2020, 2.1).

The references below deliberately loop over b, k, t (and v) in plain Python floats, in *probability*
space, exactly as the paper writes the models:

    RAG-Sequence  p(y|x) = sum_z p(z|x) prod_t p(y_t|x,z,y_<t)
    RAG-Token     p(y|x) = prod_t sum_z p(z|x) p(y_t|x,z,y_<t)

Every tensor is tiny (B=2..3, K<=3, T<=4, V<=5) so the whole file runs in well under a second.
"""

from __future__ import annotations

import math

import pytest
import torch

from openbook.rag.marginal import (
    doc_log_prior,
    gather_target_logprobs,
    rag_sequence_nll,
    rag_token_marginal,
    rag_token_nll,
    sequence_doc_posterior,
    sequence_logprob_per_doc,
    token_doc_posterior,
)
from tolerance import tolerance

F64 = dict(dtype=torch.float64)
# float64 throughout. Every value derives from make_inputs' log-probabilities (|log p| < 10 for these seeds),
# summed over T <= 4 positions, so terms are below 40 in magnitude; the brute force loops over at most
# K * T * V = 60 of them, through log-softmax -> exp/product -> sum -> log (depth 3). See tests/helpers/tolerance.py.
TOL = tolerance(terms=3 * 4 * 5, depth=3, dtype=torch.float64, scale=40.0)


# --------------------------------------------------------------------------------------------------
# Random inputs and brute-force references
# --------------------------------------------------------------------------------------------------


def make_inputs(B=2, K=3, T=4, V=5, seed=0, lengths=None):
    """Random ``(token_logprobs, doc_logprobs, targets, mask)`` in float64; ``lengths`` pads rows."""
    g = torch.Generator().manual_seed(seed)
    token_logprobs = torch.log_softmax(torch.randn(B, K, T, V, generator=g, **F64) * 1.5, dim=-1)
    doc_logprobs = torch.log_softmax(torch.randn(B, K, generator=g, **F64), dim=-1)
    targets = torch.randint(0, V, (B, T), generator=g)
    if lengths is None:
        lengths = [T] * B
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return token_logprobs, doc_logprobs, targets, mask


def _excluded(exclude_first, b):
    if isinstance(exclude_first, bool):
        return exclude_first
    return bool(exclude_first[b])


def _positions(mask, b, exclude_first=False):
    """Target positions of row b that count: unmasked, and not position 0 when it is excluded."""
    return [t for t in range(mask.shape[1]) if mask[b, t] and not (t == 0 and _excluded(exclude_first, b))]


def bf_seq_prob_per_doc(token_logprobs, targets, mask, exclude_first=False):
    """p(y|x,z) = prod_t p(y_t|x,z,y_<t), a list of lists [b][k]."""
    P = token_logprobs.exp().tolist()
    B, K = token_logprobs.shape[:2]
    out = []
    for b in range(B):
        row = []
        for k in range(K):
            p = 1.0
            for t in _positions(mask, b, exclude_first):
                p *= P[b][k][t][int(targets[b, t])]
            row.append(p)
        out.append(row)
    return out


def bf_rag_sequence_nll(token_logprobs, doc_logprobs, targets, mask, exclude_first=False):
    """-log sum_z p(z|x) prod_t p(y_t|x,z,y_<t)."""
    prior = doc_logprobs.exp().tolist()
    per_doc = bf_seq_prob_per_doc(token_logprobs, targets, mask, exclude_first)
    out = []
    for b in range(len(prior)):
        p = 0.0
        for k in range(len(prior[b])):
            p += prior[b][k] * per_doc[b][k]
        out.append(-math.log(p))
    return torch.tensor(out, **F64)


def bf_rag_token_nll(token_logprobs, doc_logprobs, targets, mask):
    """-log prod_t sum_z p(z|x) p(y_t|x,z,y_<t)."""
    P = token_logprobs.exp().tolist()
    prior = doc_logprobs.exp().tolist()
    B, K = doc_logprobs.shape
    out = []
    for b in range(B):
        p = 1.0
        for t in _positions(mask, b):
            mix = 0.0
            for k in range(K):
                mix += prior[b][k] * P[b][k][t][int(targets[b, t])]
            p *= mix
        out.append(-math.log(p))
    return torch.tensor(out, **F64)


def bf_sequence_smooth(token_logprobs, doc_logprobs, mask):
    """transformers' RAG-Sequence smoothing: -log sum_z p(z|x)^V prod_{t unmasked} prod_v p(v|x,z,y_<t)."""
    P = token_logprobs.exp().tolist()
    prior = doc_logprobs.exp().tolist()
    B, K, _, V = token_logprobs.shape
    out = []
    for b in range(B):
        total = 0.0
        for k in range(K):
            term = prior[b][k] ** V
            for t in _positions(mask, b):
                for v in range(V):
                    term *= P[b][k][t][v]
            total += term
        out.append(-math.log(total))
    return torch.tensor(out, **F64)


def bf_mixture(token_logprobs, doc_logprobs):
    """sum_z p(z|x) p(v|x,z,y_<t) as nested lists [b][t][v] for (B, K, T, V) input."""
    P = token_logprobs.exp().tolist()
    prior = doc_logprobs.exp().tolist()
    B, K, T, V = token_logprobs.shape
    return [
        [[sum(prior[b][k] * P[b][k][t][v] for k in range(K)) for v in range(V)] for t in range(T)]
        for b in range(B)
    ]


def bf_token_smooth(token_logprobs, doc_logprobs, mask):
    """transformers' RAG-Token smoothing: -sum_{t unmasked} sum_v log sum_z p(z|x) p(v|x,z,y_<t)."""
    mix = bf_mixture(token_logprobs, doc_logprobs)
    V = token_logprobs.shape[-1]
    out = []
    for b in range(len(mix)):
        s = 0.0
        for t in _positions(mask, b):
            for v in range(V):
                s += math.log(mix[b][t][v])
        out.append(-s)
    return torch.tensor(out, **F64)


# --------------------------------------------------------------------------------------------------
# doc_log_prior and gathering
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 0.5, torch.tensor(3.0, **F64)])
def test_doc_log_prior_is_log_softmax_of_scaled_scores(scale):
    torch.manual_seed(0)
    scores = torch.randn(3, 4, **F64) * 5
    got = doc_log_prior(scores, scale)
    assert got.dtype == torch.float64  # no silent down-cast of double-precision scores
    s = float(scale)
    tol = tolerance(terms=4, depth=2, dtype=torch.float64, scale=s * float(scores.abs().max()))  # the logits' size
    for b in range(3):
        z = sum(math.exp(s * float(scores[b, j])) for j in range(4))
        for k in range(4):
            want = math.log(math.exp(s * float(scores[b, k])) / z)
            assert float(got[b, k]) == pytest.approx(want, abs=tol["atol"])
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(3, **F64), **tol)


def test_doc_log_prior_upcasts_half_precision():
    scores = torch.randn(2, 3).to(torch.bfloat16)
    got = doc_log_prior(scores)
    assert got.dtype == torch.float32
    want = torch.log_softmax(scores.float(), -1)
    torch.testing.assert_close(got, want, **tolerance(want, terms=3))


def test_gather_target_logprobs_picks_the_target_column():
    lp, _, targets, _ = make_inputs(B=2, K=3, T=4, V=5, seed=1)
    got = gather_target_logprobs(lp, targets)
    assert got.shape == (2, 3, 4)
    for b in range(2):
        for k in range(3):
            for t in range(4):
                assert float(got[b, k, t]) == float(lp[b, k, t, targets[b, t]])


# --------------------------------------------------------------------------------------------------
# RAG-Sequence / RAG-Token likelihoods
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
def test_sequence_logprob_per_doc_matches_brute_force(lengths):
    lp, _, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=2, lengths=lengths)
    got = sequence_logprob_per_doc(lp, targets, mask)
    want = torch.tensor(bf_seq_prob_per_doc(lp, targets, mask), **F64).log()
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
def test_rag_sequence_nll_matches_brute_force(lengths):
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=3, lengths=lengths)
    torch.testing.assert_close(
        rag_sequence_nll(lp, prior, targets, mask), bf_rag_sequence_nll(lp, prior, targets, mask), **TOL
    )


@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
def test_rag_token_nll_matches_brute_force(lengths):
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=4, lengths=lengths)
    torch.testing.assert_close(
        rag_token_nll(lp, prior, targets, mask), bf_rag_token_nll(lp, prior, targets, mask), **TOL
    )


def test_sequence_and_token_differ_for_multi_token_targets():
    # Sanity check that the two references (and implementations) are genuinely different models.
    lp, prior, targets, mask = make_inputs(B=2, K=3, T=4, V=5, seed=5)
    seq = rag_sequence_nll(lp, prior, targets, mask)
    tok = rag_token_nll(lp, prior, targets, mask)
    assert (seq - tok).abs().min() > TOL["atol"]


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("fn", ["sequence", "token"])
def test_padding_contributes_nothing(fn, epsilon):
    """A padded row gives exactly the loss of the unpadded shorter sequence, whatever the padding holds."""
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=6, lengths=[4, 2, 1])
    nll = rag_sequence_nll if fn == "sequence" else rag_token_nll
    padded = nll(lp, prior, targets, mask, epsilon=epsilon)
    # Changing what sits at padded positions (scores and target ids) must not change anything.
    g = torch.Generator().manual_seed(99)
    lp2 = torch.where(mask[:, None, :, None], lp, torch.log_softmax(torch.randn(lp.shape, generator=g, **F64), -1))
    targets2 = torch.where(mask, targets, (targets + 1) % 5)
    torch.testing.assert_close(nll(lp2, prior, targets2, mask, epsilon=epsilon), padded, **TOL)
    for b, n in enumerate([4, 2, 1]):
        short = nll(
            lp[b : b + 1, :, :n], prior[b : b + 1], targets[b : b + 1, :n], mask[b : b + 1, :n], epsilon=epsilon
        )
        torch.testing.assert_close(short, padded[b : b + 1], **TOL)


def test_fully_padded_row_has_zero_loss():
    lp, prior, targets, mask = make_inputs(B=2, K=3, T=3, V=4, seed=7, lengths=[3, 0])
    assert float(rag_sequence_nll(lp, prior, targets, mask)[1]) == pytest.approx(0.0, abs=TOL["atol"])
    assert float(rag_token_nll(lp, prior, targets, mask)[1]) == pytest.approx(0.0, abs=TOL["atol"])


@pytest.mark.parametrize("lengths", [None, [4, 2]])
def test_single_document_both_models_are_plain_nll_and_prior_irrelevant(lengths):
    lp, _, targets, mask = make_inputs(B=2, K=1, T=4, V=5, seed=8, lengths=lengths)
    want = -torch.tensor(bf_seq_prob_per_doc(lp, targets, mask), **F64).log()[:, 0]
    for prior in (torch.zeros(2, 1, **F64), doc_log_prior(torch.tensor([[7.0], [-3.0]], **F64))):
        torch.testing.assert_close(rag_sequence_nll(lp, prior, targets, mask), want, **TOL)
        torch.testing.assert_close(rag_token_nll(lp, prior, targets, mask), want, **TOL)


def test_classification_one_token_targets_sequence_equals_token():
    """T = 1: 'RAG-Sequence and RAG-Token are equivalent' (section 2.1) — exact agreement."""
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=1, V=5, seed=9)
    seq = rag_sequence_nll(lp, prior, targets, mask)
    tok = rag_token_nll(lp, prior, targets, mask)
    torch.testing.assert_close(seq, tok, **TOL)
    torch.testing.assert_close(seq, bf_rag_sequence_nll(lp, prior, targets, mask), **TOL)
    torch.testing.assert_close(tok, bf_rag_token_nll(lp, prior, targets, mask), **TOL)


def test_classification_padded_batch_sequence_equals_token():
    """One real label token per row, padded to T = 3 (plus an all-padding row): still identical."""
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=3, V=5, seed=10, lengths=[1, 1, 0])
    seq = rag_sequence_nll(lp, prior, targets, mask)
    tok = rag_token_nll(lp, prior, targets, mask)
    torch.testing.assert_close(seq, tok, **TOL)
    torch.testing.assert_close(seq, bf_rag_token_nll(lp, prior, targets, mask), **TOL)
    torch.testing.assert_close(seq[:2], rag_sequence_nll(lp[:2, :, :1], prior[:2], targets[:2, :1], mask[:2, :1]), **TOL)


# --------------------------------------------------------------------------------------------------
# exclude_first
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exclude_first", [False, True, torch.tensor([True, False, True]), torch.tensor([False, False, False])]
)
def test_exclude_first_drops_position_zero_from_rag_sequence(exclude_first):
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=11, lengths=[4, 3, 2])
    got = rag_sequence_nll(lp, prior, targets, mask, exclude_first=exclude_first)
    torch.testing.assert_close(got, bf_rag_sequence_nll(lp, prior, targets, mask, exclude_first), **TOL)
    per_doc = sequence_logprob_per_doc(lp, targets, mask, exclude_first)
    want = torch.tensor(bf_seq_prob_per_doc(lp, targets, mask, exclude_first), **F64).log()
    torch.testing.assert_close(per_doc, want, **TOL)
    # Equivalent to scoring the sequence without its first token, row by row.
    for b in range(3):
        if _excluded(exclude_first, b):
            dropped = rag_sequence_nll(lp[b : b + 1, :, 1:], prior[b : b + 1], targets[b : b + 1, 1:], mask[b : b + 1, 1:])
            torch.testing.assert_close(got[b : b + 1], dropped, **TOL)


def test_exclude_first_true_differs_from_false():
    lp, prior, targets, mask = make_inputs(B=2, K=3, T=4, V=5, seed=12)
    a = rag_sequence_nll(lp, prior, targets, mask, exclude_first=False)
    b = rag_sequence_nll(lp, prior, targets, mask, exclude_first=True)
    assert (a - b).abs().min() > TOL["atol"]


# --------------------------------------------------------------------------------------------------
# Label smoothing (transformers' definition)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
@pytest.mark.parametrize("epsilon", [0.1, 0.5])
def test_rag_sequence_label_smoothing_matches_brute_force(epsilon, lengths):
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=13, lengths=lengths)
    V = lp.shape[-1]
    nll = bf_rag_sequence_nll(lp, prior, targets, mask)
    want = (1 - epsilon) * nll + (epsilon / V) * bf_sequence_smooth(lp, prior, mask)
    torch.testing.assert_close(rag_sequence_nll(lp, prior, targets, mask, epsilon=epsilon), want, **TOL)


@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
@pytest.mark.parametrize("epsilon", [0.1, 0.5])
def test_rag_token_label_smoothing_matches_brute_force(epsilon, lengths):
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=14, lengths=lengths)
    V = lp.shape[-1]
    nll = bf_rag_token_nll(lp, prior, targets, mask)
    want = (1 - epsilon) * nll + (epsilon / V) * bf_token_smooth(lp, prior, mask)
    torch.testing.assert_close(rag_token_nll(lp, prior, targets, mask, epsilon=epsilon), want, **TOL)


def test_rag_token_smoothing_branch_agrees_with_plain_branch_in_the_limit():
    # The epsilon > 0 branch materialises the marginal; its nll part must equal the epsilon == 0 branch.
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=15, lengths=[4, 2, 1])
    tiny = 1e-300  # takes the smoothing branch; its own contribution is far below float64 rounding
    torch.testing.assert_close(
        rag_token_nll(lp, prior, targets, mask, epsilon=tiny), rag_token_nll(lp, prior, targets, mask), **TOL
    )


# --------------------------------------------------------------------------------------------------
# RAG-Token marginal transition
# --------------------------------------------------------------------------------------------------


def test_rag_token_marginal_4d_is_the_normalised_mixture():
    lp, prior, _, _ = make_inputs(B=2, K=3, T=4, V=5, seed=16)
    got = rag_token_marginal(lp, prior)
    assert got.shape == (2, 4, 5)
    torch.testing.assert_close(torch.logsumexp(got, -1), torch.zeros(2, 4, **F64), **TOL)
    torch.testing.assert_close(got.exp(), torch.tensor(bf_mixture(lp, prior), **F64), **TOL)


def test_rag_token_marginal_3d_is_the_normalised_mixture():
    lp, prior, _, _ = make_inputs(B=2, K=3, T=1, V=5, seed=17)
    lp3 = lp[:, :, 0, :]  # (B, K, V): a single decoding step
    got = rag_token_marginal(lp3, prior)
    assert got.shape == (2, 5)
    torch.testing.assert_close(torch.logsumexp(got, -1), torch.zeros(2, **F64), **TOL)
    torch.testing.assert_close(got.exp(), torch.tensor(bf_mixture(lp, prior), **F64)[:, 0], **TOL)


# --------------------------------------------------------------------------------------------------
# Document posteriors
# --------------------------------------------------------------------------------------------------


def test_token_doc_posterior_matches_brute_force():
    lp, prior, targets, _ = make_inputs(B=2, K=3, T=4, V=5, seed=18)
    got = token_doc_posterior(lp, prior, targets)
    assert got.shape == (2, 4, 3)
    P, pz = lp.exp().tolist(), prior.exp().tolist()
    for b in range(2):
        for t in range(4):
            y = int(targets[b, t])
            joint = [pz[b][k] * P[b][k][t][y] for k in range(3)]
            for k in range(3):
                assert float(got[b, t, k]) == pytest.approx(joint[k] / sum(joint), abs=TOL["atol"])
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 4, **F64), **TOL)


@pytest.mark.parametrize("exclude_first", [False, True])
def test_sequence_doc_posterior_matches_brute_force(exclude_first):
    lp, prior, targets, mask = make_inputs(B=3, K=3, T=4, V=5, seed=19, lengths=[4, 2, 1])
    got = sequence_doc_posterior(sequence_logprob_per_doc(lp, targets, mask, exclude_first), prior)
    per_doc = bf_seq_prob_per_doc(lp, targets, mask, exclude_first)
    pz = prior.exp().tolist()
    for b in range(3):
        joint = [pz[b][k] * per_doc[b][k] for k in range(3)]
        for k in range(3):
            assert float(got[b, k]) == pytest.approx(joint[k] / sum(joint), abs=TOL["atol"])
    torch.testing.assert_close(got.sum(-1), torch.ones(3, **F64), **TOL)


def test_posteriors_agree_for_one_token_targets():
    lp, prior, targets, mask = make_inputs(B=2, K=3, T=1, V=5, seed=20)
    tok = token_doc_posterior(lp, prior, targets)[:, 0]
    seq = sequence_doc_posterior(sequence_logprob_per_doc(lp, targets, mask), prior)
    torch.testing.assert_close(tok, seq, **TOL)


# --------------------------------------------------------------------------------------------------
# Gradients: the retriever learns from the answer through doc_log_prior
# --------------------------------------------------------------------------------------------------


def bf_rag_sequence_nll_autograd(token_logprobs, scores, scale, targets, mask):
    """The paper's equation in probabilities, built from scalar torch ops so autograd can follow it."""
    B, K = scores.shape
    P = token_logprobs.exp()
    losses = []
    for b in range(B):
        z = sum(torch.exp(scale * scores[b, j]) for j in range(K))
        p = 0.0
        for k in range(K):
            lik = 1.0
            for t in _positions(mask, b):
                lik = lik * P[b, k, t, targets[b, t]]
            p = p + torch.exp(scale * scores[b, k]) / z * lik
        losses.append(-torch.log(p))
    return torch.stack(losses)


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_rag_sequence_gradient_reaches_doc_scores_and_matches_brute_force(scale):
    lp, _, targets, mask = make_inputs(B=2, K=3, T=4, V=5, seed=21, lengths=[4, 3])
    torch.manual_seed(21)
    scores = torch.randn(2, 3, **F64, requires_grad=True)
    lp = lp.clone().requires_grad_(True)
    loss = rag_sequence_nll(lp, doc_log_prior(scores, scale), targets, mask).sum()
    g_scores, g_lp = torch.autograd.grad(loss, (scores, lp))

    scores_bf = scores.detach().clone().requires_grad_(True)
    lp_bf = lp.detach().clone().requires_grad_(True)
    loss_bf = bf_rag_sequence_nll_autograd(lp_bf, scores_bf, scale, targets, mask).sum()
    g_scores_bf, g_lp_bf = torch.autograd.grad(loss_bf, (scores_bf, lp_bf))

    torch.testing.assert_close(loss.detach(), loss_bf.detach(), **TOL)
    torch.testing.assert_close(g_scores, g_scores_bf, **TOL)
    torch.testing.assert_close(g_lp, g_lp_bf, **TOL)
    # d loss / d score_k = scale * (prior_k - posterior_k): prior minus the answer-conditioned posterior.
    with torch.no_grad():
        prior = doc_log_prior(scores, scale)
        post = sequence_doc_posterior(sequence_logprob_per_doc(lp, targets, mask), prior)
    torch.testing.assert_close(g_scores, scale * (prior.exp() - post), **TOL)
    # Padding gets no gradient.
    assert (g_lp[0, :, 4:] == 0).all() and (g_lp[1, :, 3:] == 0).all()


def test_raising_the_score_of_the_helpful_document_lowers_the_loss():
    """Document 0 makes the answer far more likely than document 1: its score gradient is negative."""
    V, T = 4, 3
    targets = torch.tensor([[1, 2, 3]])
    mask = torch.ones(1, T, dtype=torch.bool)
    good = torch.full((T, V), 0.1, **F64)
    good[torch.arange(T), targets[0]] = 0.7
    bad = torch.full((T, V), 0.3, **F64)
    bad[torch.arange(T), targets[0]] = 0.1
    lp = torch.stack([good, bad])[None].log()  # (1, 2, T, V), rows sum to 1
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(1, 2, T, **F64))

    scores = torch.zeros(1, 2, **F64, requires_grad=True)
    loss = rag_sequence_nll(lp, doc_log_prior(scores), targets, mask).sum()
    (g,) = torch.autograd.grad(loss, scores)
    assert g[0, 0] < 0 < g[0, 1]
    # A small gradient step on the retriever alone reduces the loss.
    with torch.no_grad():
        stepped = rag_sequence_nll(lp, doc_log_prior(scores - 0.5 * g), targets, mask).sum()
    assert stepped < loss
    # Same sign for RAG-Token.
    scores_t = torch.zeros(1, 2, **F64, requires_grad=True)
    (g_t,) = torch.autograd.grad(rag_token_nll(lp, doc_log_prior(scores_t), targets, mask).sum(), scores_t)
    assert g_t[0, 0] < 0 < g_t[0, 1]


def test_rag_token_gradient_matches_brute_force():
    lp, _, targets, mask = make_inputs(B=2, K=3, T=3, V=4, seed=22, lengths=[3, 2])
    torch.manual_seed(22)
    scores = torch.randn(2, 3, **F64, requires_grad=True)
    (g,) = torch.autograd.grad(rag_token_nll(lp, doc_log_prior(scores), targets, mask).sum(), scores)

    s_bf = scores.detach().clone().requires_grad_(True)
    P = lp.exp()
    total = 0.0
    for b in range(2):
        z = sum(torch.exp(s_bf[b, j]) for j in range(3))
        for t in _positions(mask, b):
            mix = sum(torch.exp(s_bf[b, k]) / z * P[b, k, t, targets[b, t]] for k in range(3))
            total = total - torch.log(mix)
    (g_bf,) = torch.autograd.grad(total, s_bf)
    torch.testing.assert_close(g, g_bf, **TOL)
