"""Greedy RAG-Sequence rows stopped once they cannot change Fast decoding's answer (``_Pruner``).

A scripted generator (its next-token logits a fixed random function of the row's document and the position)
answers at many lengths, so that finished answers often lead every running row. Fast and Lazy decoding with
the early stops return what they return without them: the same answer tokens, log p(y|x) and per-document
log p(y|x,z); and the stops do happen, and save steps.
"""

from __future__ import annotations

import pytest
import torch

from openbook.models.generators import Memory
from openbook.rag import decoding
from openbook.rag.decoding import beam_config_for, rag_sequence_decode, rag_sequence_decode_lazy

V, EOS, PAD, START = 8, 1, 0, 2


class ScriptedGenerator:
    """Logits of row (input b, document k) at step t: ``table[b, k, t]``: the same whichever rows run with it."""

    eos_token_id, pad_token_id, start_token_id = EOS, PAD, START
    forced_bos_token_id = forced_eos_token_id = bos_token_id = None

    def __init__(self, table: torch.Tensor):
        self.table, self.steps = table, 0

    def memory(self, pairs: list[tuple[int, int]]) -> Memory:
        return Memory(None, torch.ones(len(pairs), 1), {"pairs": torch.tensor(pairs)})

    def begin(self, memory: Memory, rows: torch.Tensor):
        generator, pairs = self, memory.extra["pairs"][rows]

        class State:
            position = 0

            def step(self, tokens):
                generator.steps += len(self.pairs)  # row-steps: what a real generator pays for
                logits = generator.table[self.pairs[:, 0], self.pairs[:, 1], self.position]
                self.position += 1
                return logits

            def select(self, index):
                self.pairs = self.pairs[index]

        state = State()
        state.pairs = pairs
        return state


def _case(seed: int, B: int = 6, K: int = 5, L: int = 8):
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(B, K, L, V, generator=gen) * 3
    table[..., EOS] += torch.rand(B, K, 1, generator=gen) * 6 - 2  # some rows end early, some late or never
    table[..., PAD] = -1e4
    sharpness = torch.rand(B, 1, generator=gen) * 4
    prior = torch.log_softmax(torch.randn(B, K, generator=gen) * sharpness, -1)
    return ScriptedGenerator(table), prior


@pytest.fixture
def unpruned(monkeypatch):
    """Run a function with the early stops switched off."""

    def run(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(decoding, "_fast_pruner", lambda *a: None)
            return fn(*args)

    return run


def _fast(generator, prior, cfg):
    B, K = prior.shape
    memory = generator.memory([(b, k) for b in range(B) for k in range(K)])
    return rag_sequence_decode(generator, memory, prior, cfg, "fast")


def _lazy(generator, prior, cfg):
    return rag_sequence_decode_lazy(generator, generator.memory, prior, cfg)


def _same(a, b):
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.scores, b.scores)
    assert torch.equal(a.doc_seq_logprobs, b.doc_seq_logprobs)


@pytest.mark.parametrize("decode", [_fast, _lazy])
def test_early_stops_change_no_answer_and_save_steps(decode, unpruned):
    saved = cases = 0
    for seed in range(40):
        generator, prior = _case(seed)
        cfg = beam_config_for(generator, num_beams=1, max_length=8)
        pruned = decode(generator, prior, cfg)
        steps = generator.steps
        generator.steps = 0
        full = unpruned(decode, generator, prior, cfg)
        _same(pruned, full)
        assert steps <= generator.steps
        saved += generator.steps - steps
        cases += steps < generator.steps
    assert cases >= 5 and saved > 0  # the stops do happen


def test_a_finished_answer_stops_the_running_rows_only_once_it_leads_their_mass():
    # two documents: row 0 ends at once with p(EOS) ~ 1; row 1 keeps writing token 3 with p ~ 1/2 a step
    table = torch.full((1, 2, 8, V), -1e4)
    table[0, 0, :, EOS] = 0.0
    table[0, 1, :, 3] = table[0, 1, :, 4] = 0.0
    for p0, stops_after in ((0.6, 1), (0.3, 2)):  # 0.6 > 0.4 * 1/2 at once; 0.3 > 0.7 * 1/4 after two tokens
        generator = ScriptedGenerator(table)
        prior = torch.tensor([[p0, 1 - p0]]).log()
        cfg = beam_config_for(generator, num_beams=1, max_length=8)
        decoded = _fast(generator, prior, cfg)
        assert decoded.tokens[0, 0, 0].item() == EOS
        assert generator.steps == 1 + stops_after  # row 0's one step, and row 1's until it stops


def test_no_early_stop_with_beams_or_several_answers():
    rows, prior, complete = torch.zeros(2, dtype=torch.long), torch.tensor([0.5, 0.5]).log(), torch.ones(1).bool()
    generator = ScriptedGenerator(torch.zeros(1, 2, 8, V))
    for beams, answers, prunes in ((1, 1, True), (2, 1, False), (1, 2, False)):
        cfg = beam_config_for(generator, max_length=8, num_beams=beams, num_return_sequences=answers)
        assert (decoding._fast_pruner(cfg, rows, prior, complete) is not None) is prunes
