"""Command-line arguments checked where they enter: text a tokenizer cannot take (an argument that is not
valid UTF-8, which Python hands over as lone surrogates) and numbers that are not finite give one error
line naming the argument and exit 2, before any model loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openbook import cli
from openbook.errors import InputError
from openbook.index.kb import parse_index_params

REPO = Path(__file__).resolve().parents[2]


def openbook_bytes(*argv: bytes) -> subprocess.CompletedProcess:
    """``python -m openbook`` with raw bytes as its arguments (as a shell passes a Latin-1 file name)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), LC_ALL="C.UTF-8")
    return subprocess.run([sys.executable, "-m", "openbook", *argv], capture_output=True, env=env, cwd=REPO,
                          timeout=120)


@pytest.mark.parametrize("argv, named", [
    ((b"ask", b"caf\xe9?"), "argument QUESTION"),
    ((b"retrieve", b"\xff"), "argument QUESTION"),
    ((b"kb", b"delete", b"kb", b"p1", b"p\xff"), "argument ID"),
    ((b"kb", b"update", b"kb", b"--id", b"p1", b"--text", b"caf\xe9"), "argument --text"),
    ((b"kb", b"update", b"kb", b"--id=\xfe", b"--text", b"new"), "argument --id"),
    ((b"ask", b"--file", b"questions-\xff.txt"), "argument --file"),
])
def test_an_argument_that_is_not_utf8_is_one_error_line(argv, named):
    done = openbook_bytes(*argv)
    err = done.stderr.decode("utf-8", "backslashreplace")
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("openbook: error: ") and named in err and "not valid UTF-8" in err


def test_a_lone_surrogate_given_from_python_is_refused_before_any_model_loads(monkeypatch, capsys):
    from openbook.commands import options

    def no_model(args):
        raise AssertionError("the model must not load for a bad argument")

    monkeypatch.setattr(options, "model_from_args", no_model)
    assert cli.main(["ask", "Who wrote \udfff?"]) == 2
    assert cli.main(["kb", "update", "kb", "--id", "p1", "--title", "\ud800", "--text", "x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "argument QUESTION" in err[0] and "U+DFFF" in err[0] and "argument --title" in err[1]


@pytest.mark.parametrize("argv", [
    ["ask", "q?", "--length-penalty", "nan"],
    ["train", "--train", "t.jsonl", "--out", "run", "--lr-generator", "inf"],
    ["train", "--train", "t.jsonl", "--out", "run", "--lr-query-encoder", "nan"],
    ["train", "--train", "t.jsonl", "--out", "run", "--lr-generator=-1e-5"],
    ["train", "--train", "t.jsonl", "--out", "run", "--label-smoothing", "nan"],
    ["train", "--train", "t.jsonl", "--out", "run", "--lora", "4", "--lora-dropout=-inf"],
    ["experiments", "k-sweep", "--data", "d.jsonl", "--out", "o", "--score-scale", "nan"],
    ["experiments", "posterior", "--run", "r", "--question", "q", "--min-moved", "inf"],
])
def test_non_finite_numbers_are_refused(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "error: argument --" in err and ("finite" in err or "at least 0" in err or "from 0 to 1" in err), err


def test_non_finite_index_parameters_are_refused():
    assert parse_index_params(["efSearch=64", "scale=0.5"]) == {"efSearch": 64, "scale": 0.5}
    for value in ("nan", "inf", "-Infinity"):
        with pytest.raises(InputError, match="index parameter efSearch must be a finite number"):
            parse_index_params([f"efSearch={value}"])
