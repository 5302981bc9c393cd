"""`openbook kb build --ray`: a pool of Ray actors (2 local workers, kept for the whole build) writes the knowledge base the local
build writes, an interrupted Ray build resumes, rows come back in input order, and the bfloat16 encoding
path stays close to float32. Tiny random encoder; the shared local Ray of ray_fixture."""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest

from openbook import cli
from openbook.commands.kb_encode import load_encode_passages
from openbook.corpus import Passage
from openbook.index import KnowledgeBase
from openbook.index.kb import MANIFEST_FILE, partial_dir
from openbook.models import load_encoder
from ray_fixture import ray_local  # noqa: F401
from tiny_encoders import WORDS, save_sentence_transformers
from tiny_kb import without_times
from tolerance import eps, model_tolerance

BATCH = 12


def corpus(n: int = 24) -> list[Passage]:
    """Passages of random lengths in no length order (so sorting by length permutes them)."""
    rng = np.random.default_rng(0)
    return [Passage(f"p{i}", f"title {WORDS[i % len(WORDS)]}", " ".join(rng.choice(WORDS, size=int(rng.integers(2, 14)))))
            for i in range(n)]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return str(save_sentence_transformers(tmp_path_factory.mktemp("st"), max_seq_length=16))


@pytest.fixture(scope="module")
def local_kb(encoder_dir, tmp_path_factory):
    encoder = load_encoder(encoder_dir)
    kb = KnowledgeBase.build(corpus(), load_encode_passages(encoder_dir), encoder.info(),
                             tmp_path_factory.mktemp("local") / "kb", batch_size=BATCH, progress=False)
    yield kb, encoder
    kb.close()


def ray_encode(encoder_dir: str, workers: int = 2):
    from openbook.index.kb.ray_encode import RayEncodePassages

    return RayEncodePassages(functools.partial(load_encode_passages, encoder_dir), workers=workers)


def manifest_without_times(path) -> dict:
    manifest = without_times(json.loads((path / MANIFEST_FILE).read_text()))
    manifest["files"].pop("embeddings.npy")  # its checksum; the vectors are compared to float tolerance
    manifest["files"].pop("index.faiss", None)
    return manifest


def assert_same_kb(kb: KnowledgeBase, expected: KnowledgeBase, encoder) -> None:
    n = len(expected)
    assert len(kb) == n
    assert [p.id for p in kb.passages(range(n))] == [p.id for p in expected.passages(range(n))]
    assert kb.passages(range(n)) == expected.passages(range(n))
    reference = np.asarray(expected.embeddings)
    tolerance = model_tolerance(reference, encoder.model.config, length=encoder.max_length)
    np.testing.assert_allclose(np.asarray(kb.embeddings), reference, **tolerance)
    assert manifest_without_times(kb.path) == manifest_without_times(expected.path)
    assert type(kb.index) is type(expected.index) and kb.index.ntotal == expected.index.ntotal == n
    # the index scores every passage as the local build's does (compared row by row: near-ties of a
    # tiny random encoder may swap places within the tolerance)
    queries = reference[:5]
    np.testing.assert_allclose(all_scores(kb, queries), all_scores(expected, queries), **tolerance)
    np.testing.assert_allclose(all_scores(kb, queries), queries @ np.asarray(kb.embeddings).T, **tolerance)


def all_scores(kb: KnowledgeBase, queries: np.ndarray) -> np.ndarray:
    """The index's score of every row for each query, in row order."""
    scores, rows = kb.index.search(queries, kb.index.ntotal)
    out = np.full(scores.shape, np.nan, dtype=np.float32)
    np.put_along_axis(out, rows, scores, axis=1)
    return out


def test_ray_build_with_two_workers_equals_local_build(ray_local, local_kb, encoder_dir, tmp_path):  # noqa: F811
    expected, encoder = local_kb
    with ray_encode(encoder_dir) as encode:
        assert encode.workers == 2 and not encode.started  # the session's Ray, left running
        kb = KnowledgeBase.build(corpus(), encode, encoder.info(), tmp_path / "kb", batch_size=BATCH, progress=False)
    assert_same_kb(kb, expected, encoder)
    kb.close()


def test_ray_encode_returns_rows_in_input_order(ray_local, local_kb, encoder_dir):  # noqa: F811
    passages = corpus()
    lengths = [len(p.title) + len(p.text) for p in passages]
    assert lengths != sorted(lengths, reverse=True)  # the pool's length sort really reorders them
    _, encoder = local_kb
    expected = encoder.encode_passages(passages, sort=False)
    with ray_encode(encoder_dir) as encode:
        got = encode(passages)
    np.testing.assert_allclose(got, expected, **model_tolerance(expected, encoder.model.config, length=16))


def test_the_actors_load_their_encoder_once_and_serve_every_batch(ray_local, encoder_dir):  # noqa: F811
    # a build's later batches reuse the first one's actors and encoders (with --compile, their compiled copies)
    def actor_state(actors):
        return ray_local.get([a.__ray_call__.remote(lambda actor: (os.getpid(), id(actor.encode))) for a in actors])

    passages = corpus()
    with ray_encode(encoder_dir) as encode:
        first = encode(passages)
        actors = list(encode._actors)
        before = actor_state(actors)
        for _ in range(2):
            np.testing.assert_array_equal(encode(passages), first)  # the same encoders, the same chunks
        assert encode._actors == actors and actor_state(actors) == before and len(set(before)) == 2
    assert encode._actors is None  # closed: the actors are stopped


class Interrupted(Exception):
    pass


class StopAfter:
    """Encode ``batches`` batches, then fail as a killed build would."""

    def __init__(self, encode, batches: int):
        self.encode, self.batches, self.calls = encode, batches, 0

    def __call__(self, batch):
        if self.calls == self.batches:
            raise Interrupted
        self.calls += 1
        return self.encode(batch)


def test_interrupted_ray_build_resumes(ray_local, local_kb, encoder_dir, tmp_path):  # noqa: F811
    expected, encoder = local_kb
    out = tmp_path / "kb"
    with ray_encode(encoder_dir) as encode, pytest.raises(Interrupted):
        KnowledgeBase.build(corpus(), StopAfter(encode, 1), encoder.info(), out,
                            batch_size=BATCH, progress=False, resume=True)
    assert partial_dir(out).is_dir() and not out.exists()
    with ray_encode(encoder_dir) as encode:
        resumed = StopAfter(encode, 99)
        kb = KnowledgeBase.build(corpus(), resumed, encoder.info(), out, batch_size=BATCH, progress=False,
                                 resume=True)
    assert resumed.calls == 1  # only the batch not encoded before the interruption
    assert not partial_dir(out).exists()
    assert_same_kb(kb, expected, encoder)
    kb.close()


def test_bfloat16_passage_encoding_is_close_to_float32(local_kb):
    """bfloat16 rounds each layer's output to ~eps_bf16 relative: the unit vectors move by at most
    ~depth * eps_bf16 (2 reductions per layer, plus pooling); a wrong mask or pooling moves them by O(1)."""
    _, encoder = local_kb
    passages = corpus()
    fp32 = encoder.encode_passages(passages, dtype="float32")
    bf16 = encoder.encode_passages(passages, dtype="bfloat16")
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, fp32)  # really computed in bfloat16
    depth = 2 * encoder.model.config.num_hidden_layers + 1
    distance = np.linalg.norm(bf16 - fp32, axis=1) / np.linalg.norm(fp32, axis=1)
    assert distance.max() <= depth * eps("bfloat16")


def test_cli_build_with_ray_matches_local_build(ray_local, encoder_dir, tmp_path, capsys):  # noqa: F811
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"title": p.title, "text": p.text}) + "\n" for p in corpus()), encoding="utf-8")
    built = {}
    for name, extra in (("local", []), ("ray", ["--ray", "--ray-workers", "2"])):
        argv = ["kb", "build", source, "--out", tmp_path / name, "--encoder", encoder_dir, "--batch-size", BATCH,
                "--quiet", *extra]
        assert cli.main([str(a) for a in argv]) == 0, capsys.readouterr().err
        built[name] = KnowledgeBase.load(tmp_path / name)
    assert_same_kb(built["ray"], built["local"], load_encoder(encoder_dir))
    for kb in built.values():
        kb.close()
