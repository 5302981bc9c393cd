"""bench/abstention_signals.py: its candidate features and probe on made-up data and a tiny random generator (a
check of the script, not a figure)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bench_scripts import bench_modules
from tiny_causal import make_generator

# (score, p(z|x), title, text, judge logit), best score not first, to check the features pick by score
PASSAGES = [(0.5, 0.25, "Rome", "the poet was born in rome", -1.0),
            (0.7, 0.25, "Paris", "paris is the capital of france .", 2.0),
            (0.2, 0.25, "Berlin", "berlin is the capital city of germany", 0.5),
            (0.1, 0.25, "Play", "a short play", -3.0)]


@pytest.fixture(scope="module")
def bench():
    with bench_modules("abstention_signals") as module:
        yield module


def test_passage_features(bench):
    f = bench.passage_features("what is the capital of france ?", "paris", PASSAGES)
    assert f["gap"] == pytest.approx(0.2)
    assert f["entropy"] == pytest.approx(math.log(4))  # p(z|x) uniform over four
    assert f["judge_top"] == 2.0  # the logit of the best-scored passage, not of the first
    assert f["judge_lse"] == pytest.approx(math.log(sum(math.exp(p[4]) for p in PASSAGES)))
    assert f["holding"] == 1.0 and f["in_title"] == 1.0 and f["in_question"] == 0.0
    repeated = bench.passage_features("what is the capital of france ?", "the capital", PASSAGES)
    assert repeated["in_question"] == 1.0 and repeated["holding"] == 2.0 and repeated["in_title"] == 0.0


def test_top100_features(bench):
    f = bench.top100_features([3.0, 1.0, 1.0, 1.0])
    assert f["lead"] == 2.0 and f["spread"] == pytest.approx(np.std([3.0, 1, 1, 1]))
    assert f["z_score"] == pytest.approx((3.0 - 1.5) / np.std([3.0, 1, 1, 1]))


def test_the_probe_finds_the_separating_direction_and_scores_out_of_fold(bench):
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60), np.zeros(60)]
    x = rng.normal(size=(120, 8))
    x[:, 3] += 3 * y  # only the fourth coordinate tells the classes apart
    w, mean, std = bench.ridge_direction(x, y)
    assert int(np.argmax(np.abs(w))) == 3 and w[3] > 0
    dev = np.arange(120) < 100
    keys = [f"q{i % 50}" for i in range(120)]  # two rows a question, kept in one fold
    logits = bench.probe_logits(x, y, dev, keys)
    assert bench.auc(list(logits[y == 1]), list(logits[y == 0])) > 0.95
    # a development row's logit comes from probes that never saw it: its own label does not move it
    flipped = y.copy()
    flipped[0] = 0
    again = bench.probe_logits(x, flipped, dev, keys)
    assert again[0] == pytest.approx(logits[0]) and not np.allclose(again[dev], logits[dev])
    # the rows past the development set are scored by the probe fitted on all of it
    w, mean, std = bench.ridge_direction(x[dev], y[dev])
    assert np.allclose(logits[~dev], ((x[~dev] - mean) / std) @ w)


def test_the_generator_pass_scores_the_answer_under_the_top_and_an_empty_passage(bench):
    """Batched and left-padded, each answer's log-likelihood per token equals the generator's own scoring of it
    after its prompt alone, and the hidden state is the one at the answer's last token."""
    gen = make_generator(chat=True)
    items = [{"question": "what is the capital of france ?", "answer": "paris", "passages": PASSAGES},
             {"question": "who wrote the play ?", "answer": "the poet was born", "passages": PASSAGES[2:]}]
    lps, hidden = bench.generator_pass(SimpleNamespace(generator=gen), items, layer=1, batch_size=2)
    from openbook.corpus.passages import Passage

    for i, item in enumerate(items):
        top = max(item["passages"], key=lambda p: p[0])
        targets, _ = gen.encode_targets([item["answer"]])
        for j, passage in enumerate([Passage(id="", title=top[2], text=top[3]), Passage(id="", title="", text="")]):
            with torch.inference_mode():
                memory = gen.encode(gen.contexts([item["question"]], [[passage]]))
                expected = gen.target_token_logprobs(memory, torch.arange(1), targets)[0].sum() / targets.shape[1]
            # float32 sums of a few log-probabilities of magnitude log(vocabulary) ~ 4.5
            assert lps[i, j] == pytest.approx(float(expected), abs=1e-4)
        contexts = gen.contexts([item["question"]], [[Passage(id="", title=top[2], text=top[3])]])
        ids = torch.cat([contexts.input_ids[0][contexts.attention_mask[0].bool()], targets[0]])[None]
        with torch.inference_mode():
            states = gen.model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        assert np.allclose(hidden[i], states[0, -2].numpy(), atol=1e-5)


def test_the_generator_pass_is_kept_and_read_back(bench, tmp_path, monkeypatch):
    calls = []

    def fake(rag, items, layer):
        calls.append(layer)
        return np.full((len(items), 2), -1.5), np.ones((len(items), 4), dtype=np.float32) * layer

    monkeypatch.setattr(bench, "generator_pass", fake)
    rag = SimpleNamespace(generator=SimpleNamespace(model=SimpleNamespace(dtype=torch.float32)))
    items = [{"question": "q", "answer": "a", "passages": PASSAGES}]
    first = bench.cached_generator_pass(rag, items, 3, tmp_path)
    again = bench.cached_generator_pass(rag, items, 3, tmp_path)
    assert calls == [3] and all(np.array_equal(x, y) for x, y in zip(first, again))
    bench.cached_generator_pass(rag, items, 4, tmp_path)  # another layer is another reading
    bench.cached_generator_pass(rag, [{**items[0], "answer": "b"}], 3, tmp_path)  # and another answer
    assert calls == [3, 4, 3] and not list(tmp_path.glob("*.tmp.npz"))


def test_the_calibrated_test_figures_use_the_development_threshold(bench):
    """At the threshold keeping ``keep`` of the development right answers, the share of the test's right answers
    over it and of each kind of unanswerable below it (one feature alone: no fit)."""
    def item(split, kind, score, n):
        return {"question": f"{split}-{kind}-{n}", "split": split, "kind": kind, "f": {"top_score": score}}

    items = ([item("dev", "right", v, i) for i, v in enumerate(range(1, 11))]  # 1..10: keep 0.75 -> threshold 3
             + [item("dev", "absent", v, i) for i, v in enumerate((0, 1, 2, 5))]
             + [item("dev", "deleted", v, i) for i, v in enumerate((0, 4))]
             + [item("test", "right", v, i) for i, v in enumerate((2, 3, 4, 9))]
             + [item("test", "absent", v, i) for i, v in enumerate((1, 2, 3, 8, 0))]
             + [item("test", "deleted", v, i) for i, v in enumerate((2.5, 7))])
    got = bench.evaluate(items, ["top_score"], keep=0.75, rounds=2, seed=0)["top_score"]["test_calibrated"]
    assert got == {"answered": 0.75, "absent": 0.6, "deleted": 0.5}
