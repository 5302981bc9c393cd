"""``kb build --out`` where a build cannot publish: a symbolic link (dangling or not) or a path through a
file or a dangling link is one error line, before anything is written (no ``.partial`` folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

import test_kb_cli
from openbook.errors import InputError
from test_kb_cli import run
from test_kb_safety import one_error_line
from test_kb_store import build, corpus

encoders = test_kb_cli.encoders  # fixtures: the encoder loader replaced, a small corpus
corpus_dir = test_kb_cli.corpus_dir


def make_target(root: Path, kind: str) -> tuple[str, str]:
    """``--out`` of ``kind`` under ``root`` and what the error says about it."""
    (root / "real").mkdir()
    (root / "a-file").write_text("x")
    (root / "dangling").symlink_to(root / "missing")
    (root / "to-real").symlink_to(root / "real")
    return {
        "dangling link": ("dangling", "symbolic link to a missing target"),
        "link to a folder": ("to-real", "symbolic link to an existing folder"),
        "inside a dangling link": ("dangling/kb", "dangling is not a directory (a dangling symbolic link)"),
        "inside a file": ("a-file/kb", "a-file is not a directory"),
    }[kind]


KINDS = ["dangling link", "link to a folder", "inside a dangling link", "inside a file"]


@pytest.mark.parametrize("kind", KINDS)
def test_build_out_that_cannot_take_a_folder_is_one_error_line(capsys, tmp_path, corpus_dir, encoders,
                                                                monkeypatch, kind):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    target, problem = make_target(work, kind)
    before = sorted(p.name for p in work.iterdir())
    code, _, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", "--out", target, "--quiet")
    assert code == 2 and problem in one_error_line(err)
    assert sorted(p.name for p in work.iterdir()) == before  # no <DIR>.partial, no temporary folder
    assert list((work / "real").iterdir()) == []
    with pytest.raises(InputError, match="cannot build a knowledge base"):  # the Python API refuses as well
        build(work / target, corpus(4))
    assert sorted(p.name for p in work.iterdir()) == before
