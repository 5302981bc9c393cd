"""``openbook kb ...`` and ``openbook retrieve`` end to end through ``openbook.cli.main``, with the
encoder loader replaced (a hashed bag-of-words encoder, or the tiny random BERT) so no real model loads."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import openbook.commands.kb as kb_commands
import openbook.commands.retrieve as retrieve_commands
from openbook.index import KnowledgeBase
from openbook.index.kb import partial_dir, read_manifest
from tiny_kb import BowEncoder, Crash, build_kb, data_bytes, retrieve, run, without_times
from tolerance import bound, probability_sum_bound


def softmax_tolerance(logits) -> dict[str, float]:
    """The float32 softmax of openbook.index.retriever.retrieval_logprobs against one computed here: each
    probability's relative rounding is ~k * eps32 * max|logit| (the exp of a log-probability rounded in float32)."""
    return {"rtol": probability_sum_bound(len(logits), float(np.abs(logits).max()), dtype=np.float32), "atol": 0.0}


def test_build_info_and_retrieve(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    summary = build_kb(capsys, corpus_dir, out, "--dtype", "float16", "--batch-size", "2")
    assert f"built knowledge base {out}: 6 passages from 3 source(s)" in summary
    assert "'fake/bow' (mean pooling, normalized, dim 32)" in summary and "6 x 32 float16" in summary
    assert re.search(r"built in: encode [\d.]+ s \([\d.]+ passages/s\), store [\d.]+ s, index [\d.]+ s", summary)
    assert encoders == ["default"]
    kb = KnowledgeBase.load(out)
    assert {p.id for p in kb} == {"paris", "berlin", "moon", "jupiter", "100", "notes/volcano.md"}
    assert kb.lookup("notes/volcano.md")[1].title == "Volcanoes"

    code, text, _ = run(capsys, "kb", "info", out)
    assert code == 0 and "passages: 6 at version 1 of 1" in text and "passages.sqlite" in text
    code, text, _ = run(capsys, "kb", "info", out, "--json")
    info = json.loads(text)
    assert info["num_passages"] == 6 and info["current_version"] == 1 and info["integrity"].startswith("ok")
    assert info["manifest"]["dtype"] == "float16" and info["disk_bytes"]["total"] > 0
    assert info["manifest"]["build"]["seconds"]["encode_rows_timed"] == 6

    result = retrieve(capsys, out, "largest planet of the solar system", "--k", "3")
    assert encoders[-1] == "fake/bow"  # the knowledge base's own encoder by default
    top = result["passages"]
    assert [p["rank"] for p in top] == [1, 2, 3] and top[0]["id"] == "jupiter" and top[0]["title"] == "Jupiter"
    scores = np.array([p["score"] for p in top])
    assert (np.diff(scores) <= bound(terms=32, dtype=np.float32)).all()  # float32 dot products of unit vectors
    expected = np.exp(20 * scores) / np.exp(20 * scores).sum()  # normalised encoder: scale 20
    # p(z|x) is the float32 softmax of these logits (openbook.index.retriever.retrieval_logprobs)
    np.testing.assert_allclose([p["prob"] for p in top], expected, **softmax_tolerance(20 * scores))
    assert result["score_scale"] == 20.0 and result["version"] == 1

    code, text, _ = run(capsys, "retrieve", "capital of germany", "--kb", out, "--k", "2")
    assert code == 0 and "Top 2 passages" in text and "Berlin  [berlin]  score" in text


def test_retrieve_scale_follows_the_encoder(capsys, tmp_path, corpus_dir, monkeypatch):
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: BowEncoder("fake/raw", normalize=False))
    build_kb(capsys, corpus_dir, tmp_path / "kb")
    top = retrieve(capsys, tmp_path / "kb", "capital of france", "--k", "2")
    scores = np.array([p["score"] for p in top["passages"]])
    np.testing.assert_allclose([p["prob"] for p in top["passages"]], np.exp(scores) / np.exp(scores).sum(),
                               **softmax_tolerance(scores))
    assert top["score_scale"] == 1.0


def test_edit_commands_and_versions(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "everest", "title": "Everest", "text": "everest is the highest mountain"}) + "\n",
                    encoding="utf-8")
    code, text, err = run(capsys, "kb", "add", out, more, "--quiet")
    assert code == 0, err
    assert f"version 2: add 1 passage from {more} (7 passages)" in text
    assert retrieve(capsys, out, "highest mountain everest")["passages"][0]["id"] == "everest"

    code, text, _ = run(capsys, "kb", "delete", out, "everest")
    assert code == 0 and "version 3: delete 1 passage: 'everest' (6 passages)" in text
    ids = [p["id"] for p in retrieve(capsys, out, "highest mountain everest", "--k", "6")["passages"]]
    assert "everest" not in ids

    code, text, _ = run(capsys, "kb", "update", out, "--id", "moon", "--text", "the moon is made of cheese")
    assert code == 0 and "version 4: update 1 passage: 'moon'" in text
    top = retrieve(capsys, out, "made of cheese")["passages"][0]
    assert (top["id"], top["title"], top["text"]) == ("moon", "Moon", "the moon is made of cheese")
    updates = tmp_path / "updates.jsonl"
    updates.write_text(json.dumps({"id": "paris", "title": "Paris, France", "text": "paris has the eiffel tower"})
                       + "\n", encoding="utf-8")
    code, text, _ = run(capsys, "kb", "update", out, "--file", updates, "--description", "fix paris")
    assert code == 0 and "version 5: fix paris" in text

    code, text, _ = run(capsys, "kb", "versions", out)
    assert code == 0 and "* " in text.splitlines()[5] and "(* = current version 5)" in text
    code, text, _ = run(capsys, "kb", "use", out, "2")
    assert code == 0 and "now at version 2 of 5 (7 passages)" in text
    assert retrieve(capsys, out, "highest mountain everest")["passages"][0]["id"] == "everest"  # restored
    assert retrieve(capsys, out, "everest", "--version", "3", "--k", "6")["version"] == 3
    code, text, _ = run(capsys, "kb", "versions", out, "--json")
    versions = json.loads(text)
    assert [v["current"] for v in versions] == [False, True, False, False, False]
    code, _, err = run(capsys, "kb", "delete", out, "paris")
    assert code == 2 and "at version 2 but the latest is 5" in err


def test_build_malformed_record_stop_and_skip(capsys, tmp_path, corpus_dir, encoders):
    bad = corpus_dir / "articles.jsonl"
    bad.write_text(bad.read_text() + "{broken\n" + json.dumps({"text": "after the break"}) + "\n")
    out = tmp_path / "kb"
    code, _, err = run(capsys, "kb", "build", bad, "--out", out, "--quiet")
    assert code == 2 and f"{bad}:5: malformed JSON" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not partial_dir(out).exists()
    code, text, err = run(capsys, "kb", "build", bad, "--out", out, "--quiet", "--on-error", "skip")
    assert code == 0 and "5 passages" in text and f"skipped 1 malformed record(s); first: {bad}:5" in text
    assert f"openbook: warning: skipped {bad}:5: malformed JSON" in err
    assert read_manifest(out)["build"]["skipped"] == 1


def test_interrupted_cli_build_resumes(capsys, tmp_path, corpus_dir, monkeypatch):
    calls = []

    class CrashingEncoder(BowEncoder):
        def encode_passages(self, passages, batch_size=64):
            calls.append(len(passages))
            if crash_at and len(calls) == crash_at:
                raise Crash("killed")
            return super().encode_passages(passages)

    crash_at = 2
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: CrashingEncoder())
    out = tmp_path / "kb"
    with pytest.raises(Crash):
        build_kb(capsys, corpus_dir, out, "--batch-size", "2")
    assert not out.exists() and partial_dir(out).is_dir()
    crash_at = 0
    calls.clear()
    build_kb(capsys, corpus_dir, out, "--batch-size", "2")
    assert sum(calls) == 4 and not partial_dir(out).exists()  # 2 of 6 passages were already encoded
    build_kb(capsys, corpus_dir, tmp_path / "clean", "--batch-size", "2")
    assert data_bytes(out) == data_bytes(tmp_path / "clean")
    assert without_times(read_manifest(out)) == without_times(read_manifest(tmp_path / "clean"))


def test_cli_errors_are_one_line(capsys, tmp_path, corpus_dir, encoders):
    code, _, err = run(capsys, "kb", "info", tmp_path / "nowhere")
    assert code == 2 and "does not exist; build one with `openbook kb build SOURCE --out DIR`" in err
    code, _, err = run(capsys, "kb", "build", tmp_path / "missing.jsonl", "--out", tmp_path / "kb")
    assert code == 2 and "no such file or directory" in err and encoders == []  # before loading a model
    code, _, err = run(capsys, "kb", "build", corpus_dir, "--out", tmp_path / "kb", "--index", "annoy")
    assert code == 2 and "unknown index type 'annoy'" in err
    code, _, err = run(capsys, "kb", "build", corpus_dir, "--out", tmp_path / "kb", "--index-param", "M")
    assert code == 2 and "KEY=VALUE" in err
    build_kb(capsys, corpus_dir, tmp_path / "kb")
    code, _, err = run(capsys, "retrieve", "capital", "--kb", tmp_path / "kb", "--encoder", "other/encoder")
    assert code == 2 and "'fake/bow'" in err and "'other/encoder'" in err
    code, _, err = run(capsys, "kb", "update", tmp_path / "kb", "--id", "paris")
    assert code == 2 and "--id and --text go together" in err
    code, _, err = run(capsys, "kb", "delete", tmp_path / "kb", "nope")
    assert code == 2 and "has no passage 'nope'" in err
    code, _, err = run(capsys, "retrieve", "   ", "--kb", tmp_path / "kb")
    assert code == 2 and "question is empty" in err


def test_retrieve_defaults_to_the_demo_knowledge_base(capsys, tmp_path, corpus_dir, encoders, monkeypatch):
    build_kb(capsys, corpus_dir, tmp_path / "demo")
    used = []

    def fake_demo(encoder):
        used.append(encoder.name)
        return KnowledgeBase.load(tmp_path / "demo")

    monkeypatch.setattr(retrieve_commands, "_demo_knowledge_base", fake_demo)
    code, out, err = run(capsys, "retrieve", "largest ocean", "--json", "--k", "1")
    assert code == 0, err
    assert used == ["fake/bow"] and json.loads(out)["passages"][0]["id"] == "100"


def test_build_with_the_tiny_encoder_and_hnsw(capsys, tmp_path, corpus_dir, monkeypatch):
    from tiny import tiny_encoder

    encoder = tiny_encoder()
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: encoder)
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out, "--index", "hnsw", "--index-param", "M=8", "--index-param", "ef_search=16")
    manifest = read_manifest(out)
    assert manifest["encoder"]["name"] == "tiny-bert-0" and manifest["index"]["type"] == "hnsw"
    assert manifest["index"]["params"]["M"] == 8 and manifest["index"]["params"]["ef_search"] == 16
    result = retrieve(capsys, out, "capital of france", "--k", "6")
    total = sum(p["prob"] for p in result["passages"])
    assert len(result["passages"]) == 6 and total == pytest.approx(1.0, abs=probability_sum_bound(6, 20.0, dtype=np.float32))
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "x", "text": "the king wrote music"}) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "kb", "add", out, more, "--quiet")
    assert code == 0, err
    assert "x" in [p["id"] for p in retrieve(capsys, out, "music", "--k", "7")["passages"]]


@pytest.mark.parametrize("retriever", ["bm25", "hybrid"])
def test_retrieve_with_bm25_and_hybrid(capsys, tmp_path, corpus_dir, encoders, retriever):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    result = retrieve(capsys, out, "capital of germany", "--k", "3", "--retriever", retriever)
    assert result["retriever"] == retriever and result["score_scale"] == 1.0  # the scores are the logits
    assert result["passages"][0]["id"].startswith("berlin") and len(result["passages"]) == 3
    assert abs(sum(p["prob"] for p in result["passages"]) - 1) < 3 * 4 * 1.2e-7  # float32 softmax of 3 values


def test_retrieve_k_is_bounded_and_clamped(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    code, stdout, err = run(capsys, "retrieve", "ocean", "--kb", out, "--k", "100000")
    assert code == 2 and stdout == "" and err.endswith(
        "openbook retrieve: error: argument --k: k (passages per question) must be a whole number from 1 to 100, "
        "got 100000\n")
    code, stdout, err = run(capsys, "retrieve", "ocean", "--kb", out, "--k", "100", "--json")
    assert code == 0 and len(json.loads(stdout)["passages"]) < 100 and "using k=" in err


def test_build_with_int8_encoding_stays_within_int8_rounding_of_float32(capsys, tmp_path, corpus_dir, monkeypatch):
    from openbook.models.precision import int8_engine
    from tiny import tiny_encoder
    from tolerance import int8_bound

    if not int8_engine():
        pytest.skip("PyTorch has no x86 quantised engine here")
    encoder = tiny_encoder()
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: encoder)
    build_kb(capsys, corpus_dir, tmp_path / "fp32")
    build_kb(capsys, corpus_dir, tmp_path / "int8", "--encode-dtype", "int8")
    fp32, int8 = (KnowledgeBase.load(tmp_path / name) for name in ("fp32", "int8"))
    ids = [[p.id for p in kb.store.get(range(kb.num_rows))] for kb in (fp32, int8)]
    assert ids[0] == ids[1] and len(ids[0]) == fp32.num_rows > 0
    difference = np.abs(np.asarray(int8.embeddings) - np.asarray(fp32.embeddings)).max()
    assert 0 < difference <= int8_bound(encoder.model.config, scale=1.0)  # unit vectors: see test_int8


def test_build_with_compiled_int8_encoding_stays_within_int8_rounding_of_float32(capsys, tmp_path, corpus_dir,
                                                                                monkeypatch):
    import shutil

    from tiny import tiny_encoder
    from tolerance import int8_bound

    pytest.importorskip("torchao")
    if not (shutil.which("g++") or shutil.which("clang++")):
        pytest.skip("no C++ compiler (g++ or clang++): TorchInductor cannot compile here")
    encoder = tiny_encoder()
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: encoder)
    build_kb(capsys, corpus_dir, tmp_path / "fp32")
    build_kb(capsys, corpus_dir, tmp_path / "int8c", "--encode-dtype", "int8", "--compile")
    assert ("compiled", "int8") in encoder.__dict__["_model_copies"]  # the build went through the compiled copy
    fp32, int8 = (KnowledgeBase.load(tmp_path / name) for name in ("fp32", "int8c"))
    ids = [[p.id for p in kb.store.get(range(kb.num_rows))] for kb in (fp32, int8)]
    assert ids[0] == ids[1] and len(ids[0]) == fp32.num_rows > 0
    difference = np.abs(np.asarray(int8.embeddings) - np.asarray(fp32.embeddings)).max()
    assert 0 < difference <= int8_bound(encoder.model.config, scale=1.0)


def test_build_with_compile_but_no_cxx_compiler_fails_before_the_encoder_loads(capsys, tmp_path, corpus_dir,
                                                                               monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: pytest.fail("the encoder was loaded"))
    code, stdout, err = run(capsys, "kb", "build", corpus_dir / "psgs.tsv", "--out", tmp_path / "kb", "--compile",
                            "--encode-dtype", "int8", "--quiet")
    assert code == 2 and stdout == "" and not (tmp_path / "kb").exists()
    assert err.startswith("openbook: error: compiling the encoder (--compile) needs a C++ compiler") and err.count("\n") == 1
