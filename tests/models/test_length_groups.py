"""Length-grouped encoding: contexts of different lengths run in groups cut to their own longest row.

``length_groups`` is checked against brute force over every split; then, for BART, T5 and a causal LM,
grouped and one-block encoding give the same answer log-probabilities, the same gradients and the same
decoded answers, while the grouped encoder really sees narrower inputs.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from openbook.models.generators import Contexts, Seq2SeqGenerator, length_groups, regroup_rows
from tiny import bart_tokenizer, t5_tokenizer, tiny_bart, tiny_t5
from tolerance import magnitude, model_tolerance


def brute_force_cost(lengths, group_cost):
    order = sorted(lengths)
    n, best = len(order), None
    for cuts in itertools.product([0, 1], repeat=n - 1):
        groups, start = [], 0
        for i, c in enumerate(cuts, 1):
            if c:
                groups.append(order[start:i])
                start = i
        groups.append(order[start:])
        cost = sum(len(g) * max(g) + group_cost for g in groups)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_length_groups_is_the_cheapest_split(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 9))]
    group_cost = rng.choice([0, 16, 64, 1000])
    groups = length_groups(lengths, group_cost)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))  # a partition of the rows
    flat = [lengths[i] for g in groups for i in g]
    assert flat == sorted(flat)  # consecutive runs of the sorted lengths
    cost = sum(len(g) * max(lengths[i] for i in g) + group_cost for g in groups)
    assert cost == brute_force_cost(lengths, group_cost)


def test_length_groups_edge_cases():
    assert length_groups([]) == []
    assert length_groups([5, 5, 5, 5]) == [[0, 1, 2, 3]]  # equal lengths: nothing to gain
    assert length_groups([10, 300, 12], group_cost=10**6) == [[0, 2, 1]]  # splitting never pays
    assert length_groups([10, 300, 12], group_cost=0) == [[0], [2], [1]]


def test_regroup_rows_restores_the_order():
    groups = [[2, 0], [3], [1]]
    parts = [torch.tensor([[2.0], [0.0]]), torch.tensor([[3.0]]), torch.tensor([[1.0]])]
    assert regroup_rows(parts, groups).flatten().tolist() == [0.0, 1.0, 2.0, 3.0]


def assert_grads_close(a: dict, b: dict, config, length: int) -> None:
    """Equal up to float32 rounding, norm-wise: every tensor within the bound of ``model_tolerance`` scaled
    by the largest gradient of the whole model. Back-propagation mixes every signal into every gradient,
    so a tensor's rounding error follows the model's largest back-propagated values, not its own size
    (tiny random T5 has gradients up to ~1e4 next to others of ~1, and key biases whose gradient is zero
    in exact arithmetic). A grouping bug changes the encoder's output and with it the large gradients by
    O(1), far above the bound (about 2e-4 of the largest gradient)."""
    assert a.keys() == b.keys()
    scale = max(magnitude(g) for g in b.values())
    for name, got in a.items():
        torch.testing.assert_close(got, b[name], **model_tolerance(b[name], config, length, scale=scale),
                                   msg=lambda m, name=name: f"{name}: {m}")


def _seq2seq(family):
    return (Seq2SeqGenerator(tiny_bart(init_std=0.05, d_model=32), bart_tokenizer()) if family == "bart"
            else Seq2SeqGenerator(tiny_t5(), t5_tokenizer()))


def _contexts(lengths, width, vocab=100, left=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (len(lengths), width), generator=g)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        if left:
            mask[i, width - n:] = 1
        else:
            mask[i, :n] = 1
    return ids.masked_fill(mask == 0, 1), mask


def _compare(gen, contexts, targets, rows):
    """(log-probs, gradient of their sum w.r.t. every generator weight) with and without grouping."""
    out = []
    for cost in (None, 0):
        gen.length_group_cost = cost
        gen.zero_grad()
        memory = gen.encode(contexts)
        lp = gen.target_token_logprobs(memory, rows, targets)
        lp.sum().backward()
        out.append((lp.detach(), {n: p.grad.clone() for n, p in gen.named_parameters() if p.grad is not None}))
    return out


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_seq2seq_grouped_encoding_equals_one_padded_block(family, monkeypatch):
    gen = _seq2seq(family)
    ids, mask = _contexts([3, 17, 9, 30, 30, 4], 30)
    widths = []
    encoder = gen.model.get_encoder()
    real_forward = encoder.forward
    monkeypatch.setattr(encoder, "forward", lambda input_ids=None, **kw: widths.append(input_ids.shape[1])
                        or real_forward(input_ids=input_ids, **kw))
    contexts = Contexts(ids, mask, 2)
    rows = torch.tensor([0, 1, 2, 3, 4, 5, 1])
    targets = torch.randint(4, 100, (7, 5), generator=torch.Generator().manual_seed(1))
    (plain, plain_grads), (grouped, grouped_grads) = _compare(gen, contexts, targets, rows)
    assert widths[0] == 30 and len(widths) > 2 and max(widths[1:]) == 30 and min(widths[1:]) < 10
    torch.testing.assert_close(grouped, plain, **model_tolerance(plain, gen.model.config, ids.shape[1]))
    assert_grads_close(grouped_grads, plain_grads, gen.model.config, ids.shape[1])


def test_seq2seq_left_padded_contexts_are_not_grouped():
    """Cutting the left pads would shift BART's learned positions, so left-padded rows run as one block."""
    gen = _seq2seq("bart")
    ids, mask = _contexts([3, 17, 9], 20, left=True)
    gen.length_group_cost = 0
    grouped = gen.encode(Contexts(ids, mask, 1)).hidden
    gen.length_group_cost = None
    plain = gen.encode(Contexts(ids, mask, 1)).hidden
    assert torch.equal(grouped, plain)


def test_causal_grouped_prefill_equals_one_padded_block():
    from tiny_causal import PASSAGES, QUESTIONS, P, make_generator

    gen = make_generator(chat=True)
    gen.model.train()  # gradients as in training
    passages = [docs + [P("Long", " ".join(["filler"] * 40))] for docs in PASSAGES]  # very different lengths
    contexts = gen.contexts(QUESTIONS, passages)
    lengths = contexts.attention_mask.sum(-1)
    assert lengths.max() - lengths.min() > 30 and len(length_groups(lengths.tolist(), 0)) > 2
    targets, _ = gen.encode_targets(["paris", "the poet", "rome", "berlin", "a play", "two"])
    rows = torch.arange(6)
    (plain, plain_grads), (grouped, grouped_grads) = _compare(gen, contexts, targets, rows)
    width = contexts.input_ids.shape[1]
    torch.testing.assert_close(grouped, plain, **model_tolerance(plain, gen.model.config, width))
    assert_grads_close(grouped_grads, plain_grads, gen.model.config, width)
    # and step-wise decoding from the grouped cache gives the teacher-forced distributions
    gen.model.eval()
    with torch.no_grad():
        for cost in (None, 0):
            gen.length_group_cost = cost
            memory = gen.encode(contexts)
            state = gen.begin(memory, rows)
            first = state.step(torch.full((6,), gen.start_token_id))
            second = state.step(targets[:, 0])
            if cost is None:
                reference = (first, second)
        for got, want in zip((first, second), reference):
            torch.testing.assert_close(got, want, **model_tolerance(want, gen.model.config, width))


def test_sliding_window_models_prefill_in_one_block():
    """A sliding-window cache keeps more than keys and values, so such models are never grouped."""
    from transformers import MistralConfig, MistralForCausalLM

    from openbook.models.causal import CausalLMGenerator
    from tiny_causal import PASSAGES, QUESTIONS, make_generator, make_tokenizer

    assert make_generator()._plain_cache
    tok = make_tokenizer(True)
    config = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8, pad_token_id=0)
    gen = CausalLMGenerator(MistralForCausalLM(config).eval(), tok)
    assert gen._plain_cache is False
    gen.length_group_cost = 0
    calls = []
    real_forward = gen._forward
    gen._forward = lambda *a, **kw: calls.append(1) or real_forward(*a, **kw)
    gen.encode(gen.contexts(QUESTIONS, PASSAGES))
    assert len(calls) == 1
