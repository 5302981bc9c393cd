"""``openbook kb sync``, ``kb list`` and ``kb delete --document`` through ``openbook.cli.main``, with the
encoder loader replaced by a hashed bag of words (no model)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import openbook.commands.kb as kb_commands
from openbook import cli

DIM = 16


class HashedEncoder:
    def info(self) -> dict:
        return {"name": "test/hashed-bow", "dim": DIM}

    def encode_passages(self, passages, batch_size: int = 64) -> np.ndarray:
        vectors = np.zeros((len(passages), DIM), dtype=np.float32)
        for i, passage in enumerate(passages):
            for word in f"{passage.title} {passage.text}".split():
                vectors[i, int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)

    def encode_queries(self, texts, batch_size: int = 64) -> np.ndarray:
        return self.encode_passages([type("Q", (), {"title": "", "text": t}) for t in texts])

    def to(self, device):
        return self


@pytest.fixture
def kb(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: HashedEncoder())
    folder = tmp_path / "notes"
    (folder / "guide").mkdir(parents=True)
    (folder / "intro.md").write_text("# Intro\n\nthe ocean is large", encoding="utf-8")
    (folder / "guide" / "moon.txt").write_text("the moon orbits the earth", encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet")
    assert code == 0, err
    return tmp_path / "kb", folder


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_kb_list_shows_documents_and_their_passages(kb, capsys):
    path, _ = kb
    code, out, err = run(capsys, "kb", "list", path, "--json")
    assert code == 0, err
    assert [(d["document"], d["passages"]) for d in json.loads(out)] == [
        ("guide/moon.txt", ["notes/guide/moon.txt"]), ("intro.md", ["notes/intro.md"])]
    code, out, _ = run(capsys, "kb", "list", path)
    assert code == 0 and "intro.md  (1 passage)\n  notes/intro.md" in out


def test_kb_sync_makes_the_knowledge_base_match_the_folder(kb, capsys, monkeypatch):
    path, folder = kb
    (folder / "intro.md").write_text("# Intro\n\nthe ocean is cold", encoding="utf-8")
    (folder / "guide" / "moon.txt").unlink()
    (folder / "river.txt").write_text("a river flows", encoding="utf-8")
    monkeypatch.chdir(folder.parent)
    code, out, err = run(capsys, "kb", "sync", path, "notes/", "--json", "--quiet")
    assert code == 0, err
    report = json.loads(out)
    assert (report["added"], report["replaced"], report["deleted"], report["version"]) == (
        ["river.txt"], ["intro.md"], ["guide/moon.txt"], 2)
    assert report["num_passages"] == 2
    code, out, err = run(capsys, "kb", "sync", path, folder.resolve(), "--quiet")
    assert code == 0 and "already matches" in out and "no new version" in out, err
    code, out, _ = run(capsys, "kb", "versions", path, "--json")
    assert len(json.loads(out)) == 2


def test_kb_delete_document(kb, capsys):
    path, _ = kb
    code, out, err = run(capsys, "kb", "delete", path, "--document", "guide/moon.txt")
    assert code == 0 and "version 2" in out, err
    code, out, _ = run(capsys, "kb", "list", path, "--json")
    assert [d["document"] for d in json.loads(out)] == ["intro.md"]
    for argv, message in [(("--document", "nope"), "no document 'nope'"), ((), "needs passage IDs or --document"),
                          (("x", "--document", "intro.md"), "not both")]:
        code, out, err = run(capsys, "kb", "delete", path, *argv)
        assert code == 2 and message in err and "Traceback" not in err, (argv, err)


def test_re_adding_a_changed_file_points_to_kb_sync(kb, capsys):
    path, folder = kb
    (folder / "intro.md").write_text("# Intro\n\nthe ocean is cold", encoding="utf-8")
    code, _, err = run(capsys, "kb", "add", path, folder, "--quiet")
    assert code == 2 and "duplicate passage id" in err and "openbook kb sync KB DIR" in err, err
