"""build_kb: a knowledge base in one Python call, from a folder or from a list of texts or dicts."""

from __future__ import annotations

import pytest

from openbook.errors import InputError
from openbook.index import KnowledgeBase
from openbook.rag import build_kb
from tiny_kb import BowEncoder


def passages(kb: KnowledgeBase) -> list[tuple[str, str, str]]:
    return [(kb[i].id, kb[i].title, kb[i].text) for i in range(len(kb))]


def test_texts_and_dicts_become_passages_of_at_most_max_words(tmp_path):
    long = " ".join(f"w{i}" for i in range(12))
    kb = build_kb(["Paris is the capital of France.", {"title": "Moon", "text": long, "id": "moon"}],
                  tmp_path / "kb", encoder=BowEncoder(), max_words=8, progress=False)
    assert passages(kb) == [("text-0", "", "Paris is the capital of France."),
                            ("moon#0", "Moon", " ".join(f"w{i}" for i in range(8))),
                            ("moon#1", "Moon", " ".join(f"w{i}" for i in range(8, 12)))]
    assert KnowledgeBase.load(tmp_path / "kb").version == 1  # on disk, loadable as RAG.load(kb=...) loads it
    kb.close()


def test_a_folder_is_read_as_kb_build_reads_it(tmp_path):
    folder = tmp_path / "docs"
    (folder / "guide").mkdir(parents=True)
    (folder / "guide" / "moon.txt").write_text("The Moon orbits the Earth.\n", encoding="utf-8")
    (folder / "intro.md").write_text("# Intro\n\nParis is the capital of France.\n", encoding="utf-8")
    kb = build_kb(folder, tmp_path / "kb", encoder=BowEncoder(), progress=False)
    texts = sorted(text for _, _, text in passages(kb))
    assert len(kb) == 2 and any("Moon orbits" in t for t in texts) and any("capital of France" in t for t in texts)
    assert sorted(d["document"] for d in kb.documents()) == ["guide/moon.txt", "intro.md"]
    kb.close()


@pytest.mark.parametrize("source,message", [
    ([], "no texts given"),
    (["fine", 3], "item 1 of the texts is a int"),
])
def test_bad_texts_are_one_line_errors(tmp_path, source, message):
    with pytest.raises(InputError, match=message):
        build_kb(source, tmp_path / "kb", encoder=BowEncoder(), progress=False)
    assert not (tmp_path / "kb").exists()


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(InputError, match="nowhere"):
        build_kb(tmp_path / "nowhere", tmp_path / "kb", encoder=BowEncoder(), progress=False)
