"""``openbook retrieve`` is the retriever alone: it loads the query encoder and the knowledge base, never a
generator, and does not even import the generator's code (the RAG model, the generator adapters, the loader
that assembles them), so its cold start pays for none of it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import openbook.commands.kb as kb_commands
import openbook.models.loading as loading
from openbook import cli
from openbook.commands import options
from openbook.index import KnowledgeBase
from openbook.models import knowledge
from openbook.rag import assemble
from test_kb_store import ENCODER, BowEncoder, corpus, encode

REPO = Path(__file__).resolve().parents[2]
# Modules only a generator needs: none may be imported by `openbook retrieve`.
GENERATOR_MODULES = ("openbook.rag", "openbook.rag.assemble", "openbook.rag.model", "openbook.models.causal",
                     "openbook.models.generators", "openbook.models.hf_rag", "openbook.models.adapters", "peft")


def no_generator(*args, **kwargs):
    raise AssertionError("openbook retrieve loaded a generator")


@pytest.fixture
def generators_refused(monkeypatch):
    """Every way to a generator raises; the encoder loader gives the hashed bag-of-words encoder."""
    for module, name in ((assemble, "load_generator"), (assemble, "load_model"), (assemble, "load_rag"),
                         (assemble, "load_run"), (options, "model_from_args"), (loading, "load_causal_lm"),
                         (loading, "load_seq2seq"), (loading, "load_gguf_cached")):
        monkeypatch.setattr(module, name, no_generator)
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: BowEncoder("fake/bow"))


def retrieve(capsys, *argv) -> dict:
    code = cli.main(["retrieve", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_retrieve_over_a_knowledge_base_loads_no_generator(capsys, tmp_path, generators_refused):
    passages = corpus(12)
    KnowledgeBase.build(passages, encode, ENCODER.info(), tmp_path / "kb", progress=False)
    result = retrieve(capsys, passages[3].text, "--kb", tmp_path / "kb", "--k", "3")
    assert result["k"] == 3 and result["passages"][0]["id"] == passages[3].id


def test_retrieve_over_the_demo_knowledge_base_loads_no_generator(capsys, tmp_path, monkeypatch,
                                                                   generators_refused):
    shipped = tmp_path / "passages.jsonl.gz"  # a small stand-in for the shipped demo corpus
    records = [{"id": f"d:{i}", "title": p.title, "text": p.text} for i, p in enumerate(corpus(8))]
    shipped.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode("utf-8")))
    monkeypatch.setattr(knowledge, "demo_passages_path", lambda: shipped)
    monkeypatch.setattr(knowledge, "cache_dir", lambda: tmp_path / "cache")
    result = retrieve(capsys, records[5]["text"], "--k", "2")
    assert result["passages"][0]["id"] == "d:5" and (tmp_path / "cache" / "kb").is_dir()


def test_retrieve_imports_no_generator_code(tmp_path):
    """In a fresh interpreter (this one has imported everything): the modules `openbook retrieve` loads."""
    KnowledgeBase.build(corpus(6), encode, ENCODER.info(), tmp_path / "kb", progress=False)
    script = textwrap.dedent(f"""
        import json, sys
        import openbook.commands.kb as kb_commands
        from openbook import cli
        from test_kb_store import BowEncoder

        kb_commands.load_encoder = lambda name: BowEncoder("fake/bow")
        code = cli.main(["retrieve", "number3", "--kb", {str(tmp_path / "kb")!r}, "--json"])
        print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}), file=sys.stderr)
    """)
    tests = [str(REPO / "tests" / folder) for folder in ("index", "helpers")]  # test_kb_store and its helpers
    path = os.pathsep.join([str(REPO), *tests, os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stderr.strip().splitlines()[-1])
    assert record["code"] == 0 and json.loads(done.stdout)["passages"]
    loaded = set(record["modules"])
    assert "openbook.commands.retrieve" in loaded and "openbook.index" in loaded  # the walk saw the command run
    assert sorted(loaded & set(GENERATOR_MODULES)) == []
