"""``kb build``'s default index ("auto": Flat for small books, HNSW past FLAT_MAX_COMPONENTS) and ``kb reindex``."""

import json
import subprocess
import sys

import numpy as np
import pytest

import openbook.index.kb.edit as edit
import openbook.index.kb.indexing as indexing
from openbook.errors import InputError
from openbook.index import KnowledgeBase
from openbook.index.kb.indexing import AUTO_LARGE_INDEX, FLAT_MAX_COMPONENTS, check_index_type, resolve_index
from openbook.index.kb.layout import DEFAULT_INDEX
from openbook.presets import AUTO_INDEX
from test_dense_indexes import score_tolerance
from test_index import DIM, PASSAGES, build, encode_passages


def test_auto_is_the_default_and_the_rule_turns_at_the_bound():
    assert DEFAULT_INDEX == AUTO_INDEX == "auto"
    assert FLAT_MAX_COMPONENTS > 0
    rows = FLAT_MAX_COMPONENTS // 384
    assert resolve_index("auto", {}, rows, 384)[0].type_name == "flat"
    kind, params = resolve_index("auto", {}, rows + 1, 384)
    assert kind.type_name == AUTO_LARGE_INDEX == "hnsw"
    assert params == indexing.AUTO_LARGE_PARAMS and params is not indexing.AUTO_LARGE_PARAMS  # a copy
    # a named kind is built as named, at any size, with its own parameters
    assert resolve_index("flat", {}, 10 * rows, 384) == (resolve_index("flat", {}, 1, 1)[0], {})
    assert resolve_index("hnsw", {"M": 8}, 1, 384)[1] == {"M": 8}


def test_check_index_type_names_kinds_and_refuses_parameters_without_one():
    assert check_index_type("auto") == "auto" and check_index_type("flat_ip") == "flat"
    with pytest.raises(InputError, match=r"index parameters \(M\) need an index type"):
        check_index_type("auto", {"M": 16})
    with pytest.raises(InputError, match="unknown index type 'nope'"):
        check_index_type("nope")


def test_a_small_build_without_an_index_type_is_flat(tmp_path):
    kb = build(tmp_path / "kb")
    assert kb.manifest["index"]["type"] == kb.index.type_name == "flat"
    kb.close()


def test_a_build_past_the_bound_is_hnsw_and_searches(tmp_path, monkeypatch):
    monkeypatch.setattr(indexing, "FLAT_MAX_COMPONENTS", (len(PASSAGES) - 1) * DIM)
    monkeypatch.setattr(indexing, "AUTO_LARGE_PARAMS", {"M": 8, "ef_construction": 16, "ef_search": 16})
    kb = build(tmp_path / "kb")
    assert kb.manifest["index"]["type"] == kb.index.type_name == "hnsw"
    assert kb.manifest["index"]["params"]["M"] == 8 and kb.manifest["index"]["params"]["ef_search"] == 16
    _, ids = kb.search(encode_passages(PASSAGES[:1]), 1)
    assert ids[0, 0] == 0
    kb.close()


def test_kb_build_help_and_parameters_without_a_type(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "A", "text": "some words"}) + "\n")
    run = subprocess.run([sys.executable, "-m", "openbook", "kb", "build", str(corpus), "--out", str(tmp_path / "kb"),
                          "--index-param", "M=16"], capture_output=True, text=True)
    assert run.returncode != 0 and "need an index type" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "kb").exists()
    help_text = subprocess.run([sys.executable, "-m", "openbook", "kb", "build", "--help"],
                               capture_output=True, text=True).stdout
    assert "auto (the default)" in " ".join(help_text.split())


SMALL_HNSW = {"M": 8, "ef_construction": 32, "ef_search": 32}


def test_reindex_is_a_new_version_of_the_same_passages(tmp_path):
    kb = build(tmp_path / "kb")
    query = encode_passages(PASSAGES[:2])
    flat_scores, flat_ids = kb.search(query, 3)
    kb.delete(["p:4"])
    version = kb.reindex("hnsw", SMALL_HNSW)
    assert version == 3 == kb.version and kb.index.type_name == kb.manifest["index_type"] == "hnsw"
    assert kb.manifest["index"]["params"]["M"] == 8 and kb.manifest["index"]["file"] == "index.v3.faiss"
    assert kb.versions[-1]["description"] == "reindex: flat index replaced by hnsw"
    assert kb.versions[-1]["added"] == kb.versions[-1]["deleted"] == 0 and len(kb) == len(PASSAGES) - 1
    assert sorted(p.name for p in (tmp_path / "kb").glob("index*.faiss")) == ["index.v3.faiss"]
    scores, ids = kb.search(query, len(kb))
    assert 4 not in ids and set(flat_ids[:, :2].ravel()) <= set(ids.ravel())  # the deleted row stays out
    np.testing.assert_allclose(scores[:, 0], flat_scores[:, 0], **score_tolerance(query, encode_passages(PASSAGES)))
    kb.close()
    old = KnowledgeBase.load(tmp_path / "kb", verify="full", version=1)  # earlier versions through the new index
    assert len(old) == len(PASSAGES) and 4 in old.search(encode_passages(PASSAGES[4:5]), 1)[1]
    old.close()
    again = KnowledgeBase.load(tmp_path / "kb", verify="full")
    assert again.reindex() == 4 and again.index.type_name == "flat"  # auto: flat at this size
    again.close()


def test_a_failed_reindex_changes_nothing(tmp_path, monkeypatch):
    kb = build(tmp_path / "kb")
    before = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    with pytest.raises(InputError, match="need an index type"):
        kb.reindex("auto", {"M": 8})
    with pytest.raises(InputError, match="unknown index type"):
        kb.reindex("nope")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(edit, "_create_index", crash)
    with pytest.raises(KeyboardInterrupt):
        kb.reindex("hnsw", SMALL_HNSW)
    after = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    assert after == before and sorted(p.name for p in (tmp_path / "kb").glob("index*")) == ["index.faiss"]
    kb.close()
    assert KnowledgeBase.load(tmp_path / "kb", verify="full").index.type_name == "flat"


def test_kb_reindex_command(tmp_path):
    kb = build(tmp_path / "kb")
    kb.close()
    command = [sys.executable, "-m", "openbook", "kb", "reindex", str(tmp_path / "kb"), "--quiet", "--index", "hnsw"]
    run = subprocess.run([*command, *(f"--index-param={k}={v}" for k, v in SMALL_HNSW.items())],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"version 2: reindex: flat index replaced by hnsw ({len(PASSAGES)} passages)" in run.stdout
    missing = subprocess.run([*command[:5], str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "nowhere" in missing.stderr
