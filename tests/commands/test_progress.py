"""Progress bars: ``kb build``, ``kb sync``, ``ask --file`` and ``eval`` draw one on standard error with a known
total (so it shows the time left), none with ``--quiet``, and never anything of it on standard output.

The encoder is the hashed bag-of-words one (fixture ``encoders``); ``ask`` and ``eval`` get a stub model in place
of :func:`openbook.commands.options.model_from_args`. Standard error is not a terminal here: bars are drawn there
all the same (their first and last states at least), as :mod:`openbook.progress` says.
"""

from __future__ import annotations

import json
import types

import pytest

from openbook.commands import options
from tiny_kb import run


def bar_lines(err: str, desc: str) -> list[str]:
    """The states a tqdm bar named ``desc`` drew (tqdm redraws with carriage returns)."""
    return [part.strip() for line in err.splitlines() for part in line.split("\r") if part.strip().startswith(desc)]


def assert_bar(err: str, desc: str, done: int, total: int) -> None:
    states = bar_lines(err, desc)
    assert states, f"no {desc!r} bar on stderr: {err!r}"
    last = states[-1]
    assert "100%|" in last and f"{done}/{total}" in last, last  # a known total: percentage, count and time left
    assert "<" in last and "/s]" in last, last  # [elapsed<remaining, rate/s]


def assert_no_bar(text: str) -> None:
    assert "%|" not in text and "/s]" not in text, text


# -- kb build, kb sync -------------------------------------------------------------------------------------


def test_kb_build_bar_over_the_files_read(capsys, tmp_path, corpus_dir, encoders):
    code, out, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", corpus_dir / "psgs.tsv",
                         corpus_dir / "notes", "--out", tmp_path / "kb", "--json")
    assert code == 0, err
    assert json.loads(out)["num_passages"] == 6  # stdout is the JSON object alone
    assert_no_bar(out)
    assert_bar(err, "reading files", 3, 3)  # two file sources and the one file of notes/
    assert bar_lines(err, "encoding passages")


def test_kb_build_quiet(capsys, tmp_path, corpus_dir, encoders):
    code, out, err = run(capsys, "kb", "build", corpus_dir / "notes", "--out", tmp_path / "kb", "--json", "--quiet")
    assert code == 0, err
    assert json.loads(out)["num_passages"] == 1
    assert_no_bar(err)


def test_kb_build_bar_counts_files_not_read(capsys, tmp_path, encoders):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha text", encoding="utf-8")
    (folder / "b.txt").write_text("beta text", encoding="utf-8")
    (folder / "c.xyz").write_text("not a supported type", encoding="utf-8")
    (folder / "d.txt").write_bytes(b"")  # empty
    code, out, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--json")
    assert code == 0, err
    assert len(json.loads(out)["files_not_read"]) == 2
    assert_bar(err, "reading files", 4, 4)


def test_kb_sync_bar_and_quiet(capsys, tmp_path, encoders):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha text", encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet")
    assert code == 0, err
    (folder / "b.txt").write_text("beta text", encoding="utf-8")
    code, out, err = run(capsys, "kb", "sync", tmp_path / "kb", folder, "--json")
    assert code == 0, err
    assert json.loads(out)["added"] == ["b.txt"]
    assert_bar(err, "reading files", 2, 2)
    (folder / "c.txt").write_text("gamma text", encoding="utf-8")
    code, out, err = run(capsys, "kb", "sync", tmp_path / "kb", folder, "--json", "--quiet")
    assert code == 0, err
    assert json.loads(out)["added"] == ["c.txt"]
    assert_no_bar(err)


# -- ask --file, eval --------------------------------------------------------------------------------------


class StubModel:
    """Answers every question with its first word, over no passages."""

    k = 2

    def to(self, device):
        return self

    def ask(self, questions, **settings):
        return [types.SimpleNamespace(question=q, answer=q.split()[0], model="stub", truncated=False, passages=[])
                for q in questions]


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.setattr(options, "model_from_args", lambda args, **kwargs: StubModel())


def test_ask_file_bar_over_the_questions(capsys, tmp_path, stub):
    questions = tmp_path / "questions.txt"
    questions.write_text("".join(f"question {i}?\n" for i in range(5)), encoding="utf-8")
    code, out, err = run(capsys, "ask", "--file", questions, "--json", "--batch-size", "2")
    assert code == 0, err
    assert [json.loads(line)["answer"] for line in out.splitlines()] == ["question"] * 5
    assert_bar(err, "answering", 5, 5)

    code, out, err = run(capsys, "ask", "--file", questions, "--json", "--quiet")
    assert code == 0 and len(out.splitlines()) == 5
    assert err == ""


def test_eval_bar_over_the_examples(capsys, tmp_path, stub):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"paris {i}?", "answers": ["paris"]}) + "\n" for i in range(3)),
                    encoding="utf-8")
    code, out, err = run(capsys, "eval", "--task", "qa", "--data", data, "--out", tmp_path / "eval", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n"] == 3 and summary["metrics"]["exact_match"] == 1.0
    assert_bar(err, "predicting", 3, 3)

    code, out, err = run(capsys, "eval", "--task", "qa", "--data", data, "--out", tmp_path / "eval", "--json",
                         "--quiet")
    assert code == 0 and json.loads(out)["n"] == 3
    assert_no_bar(err)
