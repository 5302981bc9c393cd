"""``openbook retrieve/ask --where``: the exact top k among the passages whose metadata matches, each passage
with its metadata in --json; malformed filters and filters nothing matches are one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import openbook.commands.kb as kb_commands
from openbook import cli
from openbook.commands import options
from openbook.corpus import Passage
from openbook.index import KnowledgeBase
from openbook.index.filters import parse_where
from tiny_kb import BowEncoder, build, corpus

N = 40


def with_meta(i: int, p: Passage) -> Passage:
    return Passage(p.id, p.title, p.text, {"source": f"{'handbook' if i % 2 else 'blog'}/{i % 5}.md", "page": i % 6,
                                           "modified": f"2026-{1 + i % 12:02d}-01T00:00:00Z"})


@pytest.fixture
def kb_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: BowEncoder("fake/bow"))
    kb = build(tmp_path / "kb", [with_meta(i, p) for i, p in enumerate(corpus(N))])
    kb.close()
    return tmp_path / "kb"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_retrieve_where_is_the_top_k_of_the_matching_passages(capsys, kb_dir):
    question = "paris france capital moon"
    where = ["source^=handbook/", "modified>=2026-03-01", "page<=4"]
    code, out, err = run(capsys, "retrieve", question, "--kb", kb_dir, "--k", 4, "--json",
                         *[f"--where={w}" for w in where])
    assert code == 0, err
    record = json.loads(out)
    assert record["where"] == "source^=handbook/ AND modified>=2026-03-01 AND page<=4"
    kb = KnowledgeBase.load(kb_dir)
    matching = [(row, p) for row, p in kb.live_rows() if parse_where(where).matches(p.meta)]
    rows = np.array([row for row, _ in matching])
    scores = np.asarray(kb.embeddings[rows], dtype=np.float64) @ BowEncoder().encode_queries([question])[0]
    # brute force: the k best scores among the matching passages (equal scores may come in either order)
    np.testing.assert_allclose([p["score"] for p in record["passages"]], np.sort(scores)[::-1][:4], atol=1e-6)
    for passage in record["passages"]:
        assert parse_where(where).matches(passage["meta"]) and passage["meta"] == kb.passages([passage["row"]])[0].meta
    kb.close()


def test_retrieve_without_where_still_shows_metadata(capsys, kb_dir):
    code, out, err = run(capsys, "retrieve", "paris", "--kb", kb_dir, "--k", 2, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["where"] is None and all(set(p["meta"]) == {"source", "page", "modified"} for p in record["passages"])


def test_fewer_matches_than_k_returns_the_matches_with_a_note(capsys, kb_dir):
    code, out, err = run(capsys, "retrieve", "paris", "--kb", kb_dir, "--k", 10, "--where", "source=blog/0.md")
    assert code == 0, err
    assert "Top 4 passages matching source=blog/0.md" in out  # rows 0, 10, 20, 30
    assert "using k=4" in err


@pytest.mark.parametrize("where, message", [
    ("page>3", "--where 'page>3': unknown operator '>3'; use =, ^=, >= or <="),
    ("source", "--where 'source': expected FIELD=VALUE, FIELD^=PREFIX, FIELD>=X or FIELD<=X"),
    ("source=nowhere.md", "matches the filter source=nowhere.md"),
])
def test_bad_or_empty_filters_are_one_line_errors(capsys, kb_dir, where, message):
    code, out, err = run(capsys, "retrieve", "paris", "--kb", kb_dir, "--where", where)
    assert code == 2 and out == ""
    assert err.startswith("openbook: error: ") and err.endswith(message + "\n") and err.count("\n") == 1, err


def test_ask_where_with_a_tiny_rag(capsys, tmp_path, monkeypatch):
    from openbook.models.generators import Seq2SeqGenerator
    from openbook.models.knowledge import build_knowledge_base
    from openbook.rag import RAG
    from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder

    encoder = tiny_encoder()
    given = [Passage(p.id, p.title, p.text, {"source": f"part{i % 2}.md", "page": i}) for i, p in enumerate(PASSAGES)]
    kb = build_knowledge_base(given, encoder, tmp_path / "kb", progress=False)
    tok = bart_tokenizer()
    rag = RAG(encoder, Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok), kb, k=2).eval()
    monkeypatch.setattr(options, "model_from_args", lambda args: rag)
    code, out, err = run(capsys, "ask", "capital of france", "--json", "--max-new-tokens", 3, "--where", "source=part1.md")
    assert code == 0, err
    record = json.loads(out)
    assert [p["meta"]["source"] for p in record["passages"]] == ["part1.md", "part1.md"]
    expected = rag.retrieve(["capital of france"], 2, where={"source": "part1.md"})
    assert [p["id"] for p in record["passages"]] == [p.id for p in expected.passages[0]]
    code, out, err = run(capsys, "ask", "capital of france", "--where", "page>=9")
    assert code == 2 and "no passage of knowledge base" in err and "matches the filter page>=9" in err
    code, out, err = run(capsys, "ask", "capital of france", "--where", "page<>1")
    assert code == 2 and err.startswith("openbook: error: --where 'page<>1': unknown operator '<>'")


def test_kb_add_and_update_keep_meta_fields_that_where_filters_on(capsys, tmp_path, kb_dir):
    """``--meta-fields`` on ``kb add`` (new passages) and ``kb update --file`` (fields set, the rest kept):
    stored, and ``--where`` finds exactly those passages afterwards."""
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"id": "new:1", "title": "New", "text": "paris moon", "lang": "de"}) + "\n")
    code, _, err = run(capsys, "kb", "add", kb_dir, extra, "--quiet", "--meta-fields", "lang")
    assert code == 0, err
    updates = tmp_path / "updates.jsonl"
    updates.write_text("".join(json.dumps(record) + "\n" for record in [
        {"id": "doc:3", "text": "paris france capital", "lang": "de"},
        {"id": "doc:4", "text": "paris france river"},  # no lang: its metadata stays as it was
    ]))
    code, _, err = run(capsys, "kb", "update", kb_dir, "--file", updates, "--meta-fields", "lang")
    assert code == 0, err
    code, out, err = run(capsys, "retrieve", "paris", "--kb", kb_dir, "--k", 5, "--json", "--where", "lang=de")
    assert code == 0, err
    found = {p["id"]: p["meta"] for p in json.loads(out)["passages"]}
    assert found == {"new:1": {**found["new:1"], "lang": "de", "source": "extra.jsonl"},
                     "doc:3": {**with_meta(3, corpus(N)[3]).meta, "lang": "de"}}
    kb = KnowledgeBase.load(kb_dir)
    assert kb.lookup("doc:4")[1].meta == with_meta(4, corpus(N)[4]).meta and kb.lookup("doc:4")[1].text.endswith("river")
    kb.close()


@pytest.mark.parametrize("argv, message", [
    (["--id", "doc:3", "--text", "x", "--meta-fields", "lang"], "--meta-fields names fields of the records of --file"),
    (["--file", "{updates}", "--meta-fields", "source"], "metadata field 'source' is set by openbook itself"),
    (["--file", "{updates}", "--meta-fields", "lang"], "updates.jsonl:1: metadata field 'lang' must be text, a number"),
])
def test_kb_update_meta_fields_errors_name_the_problem(capsys, tmp_path, kb_dir, argv, message):
    updates = tmp_path / "updates.jsonl"
    updates.write_text(json.dumps({"id": "doc:3", "text": "x", "lang": ["de"]}) + "\n")
    code, out, err = run(capsys, "kb", "update", kb_dir, *[a.format(updates=updates) for a in argv])
    assert code == 2 and message in err.splitlines()[-1] and "Traceback" not in err, err  # usage errors: argparse's
    kb = KnowledgeBase.load(kb_dir)
    assert kb.lookup("doc:3")[1].meta == with_meta(3, corpus(N)[3]).meta  # nothing changed
    kb.close()
