"""Sharded knowledge bases (issue 12 item 3): ``openbook kb shard``, the exact merge of the shards' top k
(in this process and on Ray actors), the one loader behind every ``--kb``, edits and versions per shard,
the atomic swap across shards, and one-line errors."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from openbook.corpus import Passage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import KnowledgeBase, ShardedKnowledgeBase, is_sharded, load_knowledge_base
from openbook.index.sharded import read_shards_manifest, shard_knowledge_base
from ray_fixture import ray_local  # noqa: F401
from tiny_kb import DIM, ENCODER, build, build_kb, corpus, retrieve, run
from tolerance import dot_tolerance

N = 61  # passages: not a multiple of 2 or 3, so shards differ in size


def random_vectors(passages, seed: int = 0) -> dict[str, np.ndarray]:
    """Random (tie-free) float32 document vectors by passage id."""
    rng = np.random.default_rng(seed)
    return {p.id: v for p, v in zip(passages, rng.standard_normal((len(passages), DIM)).astype(np.float32))}


def random_kb(path, index_type: str = "flat", **options) -> KnowledgeBase:
    passages = corpus(N)
    vectors = random_vectors(passages)
    return build(path, passages, encode=lambda batch: np.stack([vectors[p.id] for p in batch]),
                 index_type=index_type, **options)


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> KnowledgeBase:
    return random_kb(tmp_path_factory.mktemp("flat") / "kb")


def queries(count: int = 40, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)


def assert_same_topk(kb, sharded, ks=(1, 3, 10, 33, N)) -> None:
    q = queries()
    for k in ks:
        scores, ids = kb.search(q, k)
        got_scores, got_ids = sharded.search(q, k)
        np.testing.assert_array_equal(got_ids, ids)
        # Each shard's flat index computes the same dot products (possibly in another BLAS blocking).
        np.testing.assert_allclose(got_scores, scores, **dot_tolerance(q, kb.embeddings))


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_flat_shards_give_the_unsharded_top_k_in_process(flat, tmp_path, num_shards):
    out = shard_knowledge_base(flat.path, num_shards, tmp_path / "sharded")
    manifest = read_shards_manifest(out)
    assert is_sharded(out) and not is_sharded(flat.path)
    assert manifest["num_shards"] == num_shards and manifest["shards"] == [f"shard-{i:03d}" for i in range(num_shards)]
    assert manifest["num_rows"] == N and manifest["dim"] == DIM and manifest["index_type"] == "flat"
    assert manifest["versions"][0]["shards"] == [1] * num_shards and manifest["encoder"] == ENCODER.info()
    assert [KnowledgeBase.load(out / s).num_rows for s in manifest["shards"]] == [
        len(range(i, N, num_shards)) for i in range(num_shards)]  # round-robin
    sharded = load_knowledge_base(out)
    assert isinstance(sharded, ShardedKnowledgeBase) and len(sharded) == N and sharded.dim == DIM
    assert_same_topk(flat, sharded)
    _, ids = flat.search(queries(3), 7)
    assert sharded.passages(ids) == flat.passages(ids)
    np.testing.assert_array_equal(sharded.embeddings[ids], flat.embeddings[ids])
    assert sharded.lookup("doc:17") == flat.lookup("doc:17") and sharded[5] == flat[5]
    assert sorted(p.id for p in sharded) == sorted(p.id for p in flat)
    with pytest.warns(UserWarning, match="has only 61"):
        assert sharded.search(queries(2), 100)[1].shape == (2, N)
    sharded.close()


def test_flat_shards_on_ray_actors_give_the_unsharded_top_k(flat, tmp_path, ray_local):  # noqa: F811
    out = shard_knowledge_base(flat.path, 3, tmp_path / "sharded")
    sharded = ShardedKnowledgeBase.load(out, ray_address="local")
    try:
        assert len(sharded) == N
        assert_same_topk(flat, sharded, ks=(1, 10, N))
        _, ids = flat.search(queries(2), 5)
        assert sharded.passages(ids) == flat.passages(ids)
        np.testing.assert_array_equal(sharded.embeddings[ids], flat.embeddings[ids])
    finally:
        sharded.close()


def test_hnsw_merge_is_exact_over_the_shards_candidates(tmp_path):
    kb = random_kb(tmp_path / "kb", index_type="hnsw", index_params={"M": 4, "ef_search": 4})
    out = shard_knowledge_base(kb.path, 3, tmp_path / "sharded")
    sharded = load_knowledge_base(out)
    q, k = queries(), 10
    candidates_scores, candidates_ids = [], []
    for shard, name in enumerate(read_shards_manifest(out)["shards"]):
        scores, rows = KnowledgeBase.load(out / name).search(q, k)
        candidates_scores.append(scores)
        candidates_ids.append(rows * 3 + shard)
    scores, ids = np.concatenate(candidates_scores, 1), np.concatenate(candidates_ids, 1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    got_scores, got_ids = sharded.search(q, k)
    np.testing.assert_array_equal(got_scores, np.take_along_axis(scores, order, 1))
    np.testing.assert_array_equal(np.sort(got_ids, 1), np.sort(np.take_along_axis(ids, order, 1), 1))


def test_merge_breaks_ties_by_row_and_lists_them_as_faiss_does():
    from openbook.index.sharded import merge_topk

    # shard 0 holds global rows 0, 2, 4; shard 1 rows 1, 3, 5; all four tie at 1.0
    parts = [(0, np.array([[2.0, 1.0, 1.0]]), np.array([[2, 0, 1]])), (1, np.array([[1.0, 1.0, 0.5]]), np.array([[0, 1, 2]]))]
    scores, rows = merge_topk(parts, 2, 4)
    assert rows.tolist() == [[4, 2, 1, 0]] and scores.tolist() == [[2.0, 1.0, 1.0, 1.0]]


# -- the one loader: commands and the model accept a sharded --kb ------------------------------------------


@pytest.mark.parametrize("num_shards", [2, 3])
def test_retrieve_command_over_shards_equals_unsharded(capsys, tmp_path, corpus_dir, encoders, num_shards):  # noqa: F811
    build_kb(capsys, corpus_dir, tmp_path / "kb")
    code, out, err = run(capsys, "kb", "shard", tmp_path / "kb", "--shards", num_shards, "--out", tmp_path / "s")
    assert code == 0 and f"6 passages of {tmp_path / 'kb'} in {num_shards} shards" in out, err
    for question in ("largest planet of the solar system", "capital of germany", "volcano lava ash"):
        whole = retrieve(capsys, tmp_path / "kb", question, "--k", "4")
        split = retrieve(capsys, tmp_path / "s", question, "--k", "4")
        assert split["kb"] == str(tmp_path / "s") and len(split["passages"]) == 4
        # compare the ranks above the 4th score: equal scores (a hashed bag of words ties) may be cut anyhow
        cut = whole["passages"][-1]["score"]
        above = [p for p in whole["passages"] if p["score"] > cut]
        assert above and split["passages"][:len(above)] == above
    code, _, err = run(capsys, "retrieve", "capital", "--kb", tmp_path / "s", "--retriever", "bm25")
    assert code == 2 and "needs an unsharded knowledge base" in err


def test_rag_over_shards_answers_as_over_the_whole(tmp_path, monkeypatch):
    import openbook.rag.assemble as assemble
    from openbook.models.generators import Seq2SeqGenerator
    from tiny import bart_tokenizer, tiny_bart, tiny_encoder

    encoder = tiny_encoder()
    tok = bart_tokenizer()
    generator = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)
    monkeypatch.setattr(assemble, "load_generator", lambda name: generator)
    kb = assemble.build_knowledge_base(corpus(9), encoder, tmp_path / "kb", progress=False)
    shard_knowledge_base(kb.path, 2, tmp_path / "s")
    questions = ["paris france capital", "moon orbit earth number3"]
    answers = []
    for path in (tmp_path / "kb", tmp_path / "s"):
        rag = assemble.load_rag(kb=str(path), encoder=encoder, k=3)  # the one loader opens either
        retrieval = rag.retrieve(questions, k=3)
        asked = rag.ask(questions, k=3, num_beams=1, max_new_tokens=3)
        answers.append(([[p.id for p in ps] for ps in retrieval.passages], retrieval.scores.detach().numpy(),
                        [(a.answer, a.alternatives) for a in asked]))
    (ids, scores, texts), (sharded_ids, sharded_scores, sharded_texts) = answers
    assert sharded_ids == ids and sharded_texts == texts
    np.testing.assert_allclose(sharded_scores, scores, **dot_tolerance(np.ones((1, 16)), np.ones((1, 16))))
    assert isinstance(rag.kb, ShardedKnowledgeBase) and assemble.encoder_name(None, tmp_path / "s") == encoder.name


# -- edits and versions per shard; the atomic swap -------------------------------------------------------


def bow_kb(tmp_path, num_shards: int = 2) -> ShardedKnowledgeBase:
    build(tmp_path / "kb", corpus(12))
    return load_knowledge_base(shard_knowledge_base(tmp_path / "kb", num_shards, tmp_path / "s"))


def test_edits_go_to_one_shard_and_versions_are_recorded(tmp_path):
    kb = bow_kb(tmp_path, 3)  # 12 passages: 4 per shard
    new = [Passage("new:1", "Volcano", "a volcano erupts lava"), Passage("new:2", "Sea", "the sea is salty")]
    assert kb.add(new, ENCODER.encode_passages) == 2
    manifest = read_shards_manifest(kb.path)
    assert manifest["versions"][-1]["shards"] == [2, 1, 1] and manifest["shard_rows"] == [6, 4, 4]
    assert kb.add([Passage("new:3", "Ash", "volcanic ash")], ENCODER.encode_passages) == 3
    assert read_shards_manifest(kb.path)["versions"][-1]["shards"] == [2, 2, 1]  # the smallest shard
    assert len(kb) == 15 and kb.lookup("new:3")[1].text == "volcanic ash"
    with pytest.raises(InputError, match="duplicate passage id 'doc:4'"):
        kb.add([Passage("doc:4", "x", "y")], ENCODER.encode_passages)
    # doc:1 is on shard 1, doc:2 on shard 2: one sharded version, one new version on each
    assert kb.delete(["doc:1", "doc:2"]) == 4
    assert read_shards_manifest(kb.path)["versions"][-1]["shards"] == [2, 3, 2]
    assert kb.lookup("doc:1") is None and len(kb) == 13
    assert kb.update([{"id": "doc:0", "text": "cobalt chromium nickel"}], ENCODER.encode_passages) == 5
    _, rows = kb.search(ENCODER.encode_queries(["cobalt chromium nickel"]), 1)
    assert kb.passages(rows[0])[0].id == "doc:0" and read_shards_manifest(kb.path)["versions"][-1]["shards"] == [3, 3, 2]
    with pytest.raises(InputError, match="has no passage 'nope'; nothing was changed"):
        kb.delete(["nope", "doc:3"])
    assert kb.version == 5 and kb.lookup("doc:3") is not None
    kb.use_version(3)  # back to before the deletion, on every shard at once
    assert kb.version == 3 and kb.shard_versions == (2, 2, 1) and kb.lookup("doc:1") is not None and len(kb) == 15
    reopened = load_knowledge_base(kb.path)
    assert reopened.version == 3 and len(reopened) == 15
    with pytest.raises(KnowledgeBaseError, match="edits apply to the latest version"):
        kb.delete(["doc:5"])
    assert load_knowledge_base(kb.path, version=5).lookup("doc:1") is None


def test_a_view_at_another_version_shares_the_shards_and_opens_only_what_changed(tmp_path):
    """What a server does at an edit (openbook.serve.routes): the new version is a view over the same shard
    servers (on Ray: the same actors); closing the old view releases only the shard versions it alone showed, and
    closing the last view closes the shards."""
    from openbook.index.sharded import edits_for

    kb = bow_kb(tmp_path, 3)  # version 1: every shard at its version 1
    servers = [handle.server for handle in kb._handles]
    version = edits_for(kb.path).add(kb.path, [Passage("new:1", "Volcano", "a volcano erupts lava")],
                                     ENCODER.encode_passages)
    view = kb.at_version(version)
    assert view._handles is kb._handles and view.shard_versions == (2, 1, 1)
    assert [s.open_versions() for s in servers] == [[1, 2], [1], [1]]  # only the edited shard opened a version
    assert view.lookup("new:1") is not None and kb.lookup("new:1") is None  # each view shows its own version
    kb.close()
    assert [s.open_versions() for s in servers] == [[2], [1], [1]]
    _, rows = view.search(ENCODER.encode_queries(["a volcano erupts lava"]), 1)
    assert view.passages(rows[0])[0].id == "new:1"
    older = view.at_version(1)  # a swap back to version 1 opens shard 0's version 1 again
    assert [s.open_versions() for s in servers] == [[1, 2], [1], [1]] and older.lookup("new:1") is None
    view.close()
    older.close()  # the last view of the process that started the shards closes them
    assert [s.open_versions() for s in servers] == [[], [], []]
    with pytest.raises(KnowledgeBaseError, match="is closed"):
        older.at_version()
    older.close()  # twice: nothing more


def test_swap_is_atomic_across_shards(tmp_path):
    kb = bow_kb(tmp_path, 2)
    kb.delete(["doc:0", "doc:1"])  # one passage on each shard
    reader = load_knowledge_base(kb.path)  # at version 2
    handles = reader._handles
    original = handles[0].submit

    def swap_midway(method, *args):  # shard 0 answers, then the reader is swapped to version 1
        result = original(method, *args)
        if method == "search":
            reader.reload(version=1)
        return result

    handles[0].submit = swap_midway
    _, rows = reader.search(ENCODER.encode_queries(["paris"]), len(reader))
    ids = {p.id for p in reader.passages(rows[0])}
    assert rows.shape[1] == 10 and not {"doc:0", "doc:1"} & ids  # the whole search read version 2
    handles[0].submit = original
    assert reader.version == 1 and len(reader) == 12

    # threads searching while the main thread swaps: each result is wholly one version
    seen, stop = [], threading.Event()

    def search_forever():
        while not stop.is_set():
            _, found = reader.search(ENCODER.encode_queries(["paris"]), 10)
            seen.append(frozenset({"doc:0", "doc:1"} & {p.id for p in reader.passages(found[0])}))

    threads = [threading.Thread(target=search_forever) for _ in range(2)]
    for thread in threads:
        thread.start()
    for i in range(40):
        reader.reload(version=1 + i % 2)
    stop.set()
    for thread in threads:
        thread.join()
    assert seen and all(len(s) != 1 for s in seen)  # both deleted passages or neither, never one


# -- bad input: one-line errors ------------------------------------------------------------------------


def test_shard_errors_are_one_line(capsys, tmp_path, corpus_dir, encoders):  # noqa: F811
    build_kb(capsys, corpus_dir, tmp_path / "kb")

    def error(*argv) -> str:
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.startswith("openbook: error: ") or "error: argument" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 3  # argparse adds its usage lines
        return err

    assert "--shards" in error("kb", "shard", tmp_path / "kb", "--shards", "0", "--out", tmp_path / "s")
    assert "more than the 6 passages" in error("kb", "shard", tmp_path / "kb", "--shards", "7", "--out", tmp_path / "s")
    (tmp_path / "taken").mkdir()
    assert "already exists" in error("kb", "shard", tmp_path / "kb", "--shards", "2", "--out", tmp_path / "taken")
    assert not (tmp_path / "s").exists()
    with pytest.raises(InputError, match="positive integer"):
        shard_knowledge_base(tmp_path / "kb", 0, tmp_path / "s")
    code, _, _ = run(capsys, "kb", "shard", tmp_path / "kb", "--shards", "2", "--out", tmp_path / "s")
    assert code == 0
    assert "already a sharded" in error("kb", "shard", tmp_path / "s", "--shards", "2", "--out", tmp_path / "t")
    manifest = json.loads((tmp_path / "s" / "shards.json").read_text())
    (tmp_path / "s" / "shards.json").write_text(json.dumps({**manifest, "shards": ["shard-000", "../kb"]}))
    assert "not a folder directly inside" in error("retrieve", "capital", "--kb", tmp_path / "s")
    (tmp_path / "s" / "shards.json").write_text(json.dumps(manifest))
    (tmp_path / "s" / "shard-001" / "index.faiss").unlink()
    assert "index.faiss" in error("retrieve", "capital", "--kb", tmp_path / "s")
    import shutil

    shutil.rmtree(tmp_path / "s" / "shard-001")
    assert "shard shard-001 of sharded knowledge base" in error("retrieve", "capital", "--kb", tmp_path / "s")


def test_kb_edit_commands_work_on_a_sharded_knowledge_base(capsys, tmp_path, corpus_dir, encoders):  # noqa: F811
    build_kb(capsys, corpus_dir, tmp_path / "kb")
    assert run(capsys, "kb", "shard", tmp_path / "kb", "--shards", "2", "--out", tmp_path / "s")[0] == 0
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "sun", "title": "Sun", "text": "the sun is a star"}) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "kb", "add", tmp_path / "s", new, "--quiet")
    assert code == 0 and "version 2" in out and "(7 passages)" in out, err
    code, out, err = run(capsys, "kb", "delete", tmp_path / "s", "paris", "moon")
    assert code == 0 and "version 3" in out and "(5 passages)" in out, err
    code, out, err = run(capsys, "kb", "update", tmp_path / "s", "--id", "berlin", "--text", "berlin lies on the spree")
    assert code == 0 and "version 4" in out, err
    versions = json.loads(run(capsys, "kb", "versions", tmp_path / "s", "--json")[1])
    assert [v["version"] for v in versions] == [1, 2, 3, 4] and versions[-1]["current"]
    assert all(len(v["shards"]) == 2 for v in versions)
    assert run(capsys, "kb", "use", tmp_path / "s", "2")[0] == 0
    ids = {p["id"] for p in retrieve(capsys, tmp_path / "s", "capital", "--k", "7")["passages"]}
    assert {"paris", "moon", "sun"} <= ids
    assert "berlin lies on the spree" not in {p["text"] for p in retrieve(capsys, tmp_path / "s", "spree")["passages"]}


def test_single_and_sharded_knowledge_bases_share_one_interface(flat, tmp_path):
    """Both kinds are a KnowledgeBaseLike (the protocol the retrievers, the model and the loader take), with
    every member of it; a path is not one."""
    from openbook.index import KnowledgeBaseLike
    from openbook.rag import assemble

    members = [name for name in vars(KnowledgeBaseLike) if not name.startswith("_") or name in
               ("__len__", "__getitem__", "__iter__")]
    assert {"search", "passages", "embeddings", "at_version", "__len__"} <= set(members)
    for cls in (KnowledgeBase, ShardedKnowledgeBase):
        assert [name for name in members if not hasattr(cls, name)] == [], cls
    sharded = load_knowledge_base(shard_knowledge_base(flat.path, 2, tmp_path / "sharded"))
    try:
        assert isinstance(flat, KnowledgeBaseLike) and isinstance(sharded, KnowledgeBaseLike)
        assert not isinstance(flat.path, KnowledgeBaseLike) and not isinstance(str(flat.path), KnowledgeBaseLike)
        assert not hasattr(assemble, "LOADED")  # the one interface, not a tuple of classes
        assert assemble.encoder_name(None, sharded) == assemble.encoder_name(None, flat) == ENCODER.name
    finally:
        sharded.close()
