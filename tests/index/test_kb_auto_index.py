"""``kb build``'s default index ("auto"): Flat for small books, HNSW past FLAT_MAX_COMPONENTS, chosen at indexing."""

import json
import subprocess
import sys

import pytest

import openbook.index.kb.indexing as indexing
from openbook.errors import InputError
from openbook.index.kb.indexing import AUTO_LARGE_INDEX, FLAT_MAX_COMPONENTS, check_index_type, resolve_index
from openbook.index.kb.layout import DEFAULT_INDEX
from openbook.presets import AUTO_INDEX
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
