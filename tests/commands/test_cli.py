"""The ``openbook`` command line, end to end, with a stub RAG model in place of the real one.

The stub stands where ``openbook.commands.options.model_from_args`` would build the model: it records how it was
loaded and every ``ask`` call, and answers deterministically, so these tests check what the CLI does
(parsing, batching, output formats, error handling) without torch, a knowledge base or a generator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from openbook import cli
from openbook.commands import ask as ask_command
from openbook.commands import options
from openbook.errors import InputError, KnowledgeBaseError, ModelLoadError
from tolerance import probability_sum_bound

REPO = Path(__file__).resolve().parents[2]
LONG_TEXT = (
    "The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen, of Germany, "
    "who received 150,782 SEK, which is equal to 7,731,004 SEK in December 2007. "
    "John Bardeen is the only laureate to win the prize twice, in 1956 and 1972."
)


@dataclass
class StubPassage:
    id: object
    title: str
    text: str
    score: float
    prob: float
    posterior: float | None = None


@dataclass
class StubAnswer:
    question: str
    answer: str
    model: str
    passages: list = field(default_factory=list)


class StubRAG:
    """Answers "answer to <question>" over k fake passages; raises InputError for an empty question."""

    def __init__(self, model="rag-sequence", warn=None):
        self.model = model
        self.warn = warn
        self.calls: list[tuple[list[str], dict]] = []

    def to(self, device):  # load_model moves a model to --device, as nn.Module.to does
        return self

    def ask(self, questions, k=5, num_beams=4, decoding="thorough", max_new_tokens=32):
        questions = list(questions)
        self.calls.append((questions, dict(k=k, num_beams=num_beams, decoding=decoding, max_new_tokens=max_new_tokens)))
        for i, q in enumerate(questions, start=1):
            if not q.strip():
                raise InputError(f"question {i} is empty")
        if self.warn:
            warnings.warn(self.warn, stacklevel=2)
        probs = [2.0 ** -(r + 1) for r in range(k)]
        total = sum(probs)
        return [
            StubAnswer(
                question=q,
                answer=f"answer to {q}",
                model=self.model,
                passages=[
                    StubPassage(
                        id=f"doc-{r}",
                        title=f"Title {r}",
                        text=LONG_TEXT if r == 0 else f"Passage {r} about {q}",
                        score=10.0 - r,
                        prob=probs[r] / total,
                    )
                    for r in range(k)
                ],
            )
            for q in questions
        ]


@pytest.fixture
def stub(monkeypatch):
    """Install a StubRAG as what ``options.model_from_args`` returns; ``stub.loads`` records the load arguments."""
    holder = types.SimpleNamespace(rag=None, loads=[], warn=None, load_error=None)

    def fake_load(args):
        holder.loads.append({"model": args.model, "kb": args.kb, "generator": args.generator,
                             "encoder": args.encoder})
        if holder.load_error is not None:
            raise holder.load_error
        holder.rag = StubRAG(model=args.model or "rag-sequence", warn=holder.warn)
        return holder.rag

    monkeypatch.setattr(options, "model_from_args", fake_load)
    return holder


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- text output ---------------------------------------------------------------------------------------


def test_text_output_answer_then_ranked_passages(stub, capsys):
    code, out, err = run(capsys, "ask", "Who got the first Nobel Prize in Physics?")
    assert code == 0, err
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "answer to Who got the first Nobel Prize in Physics?"
    assert "p(z|x)" in out
    # rank, title and p(z|x) as a percentage, for each of the default k=5 passages
    probs = [2.0 ** -(r + 1) for r in range(5)]
    for r in range(5):
        pct = f"{100 * probs[r] / sum(probs):.1f}%"
        assert any(line.lstrip().startswith(f"{r + 1}.") and pct in line and f"Title {r}" in line for line in lines)
    # the long passage is shown as a ~160-character snippet on one line
    snippet_line = next(line for line in lines if "first Nobel Prize in Physics was awarded" in line)
    shown = snippet_line.strip()
    assert shown.endswith("...")
    assert 100 <= len(shown) <= 160
    assert LONG_TEXT not in out


def test_defaults_reach_the_rag_layer(stub, capsys):
    code, _, err = run(capsys, "ask", "q?")
    assert code == 0, err
    assert stub.loads == [dict(model=None, kb=None, generator="default", encoder=None)]
    assert stub.rag.calls == [(["q?"], dict(k=5, num_beams=1, decoding="lazy", max_new_tokens=16))]


def test_options_reach_the_rag_layer(stub, capsys, tmp_path):
    code, _, err = run(
        capsys,
        "ask", "q?",
        "--model", "rag-token", "--k", "3", "--beams", "2", "--kb", str(tmp_path),
        "--generator", "facebook/rag-token-nq", "--encoder", "/models/enc", "--max-new-tokens", "7",
    )  # fmt: skip
    assert code == 0, err
    assert stub.loads == [dict(model="rag-token", kb=str(tmp_path), generator="facebook/rag-token-nq", encoder="/models/enc")]
    assert stub.rag.calls == [(["q?"], dict(k=3, num_beams=2, decoding="lazy", max_new_tokens=7))]


def test_thorough_decoding(stub, capsys):
    code, _, err = run(capsys, "ask", "q?", "--decoding", "thorough")
    assert code == 0, err
    assert stub.rag.calls[0][1]["decoding"] == "thorough"


def test_decoding_with_rag_token_warns_and_is_ignored(stub, capsys):
    code, _, err = run(capsys, "ask", "q?", "--model", "rag-token", "--decoding", "thorough")
    assert code == 0
    assert err.splitlines() == [
        "openbook: warning: --decoding thorough applies to --model rag-sequence only; ignored for rag-token"
    ]
    assert stub.rag.calls[0][1]["decoding"] == "lazy"


def test_snippet_cuts_at_a_word_boundary():
    assert ask_command.snippet("short  text\nhere") == "short text here"
    cut = ask_command.snippet(LONG_TEXT)
    assert len(cut) <= ask_command.SNIPPET_CHARS and cut.endswith("...")
    assert LONG_TEXT.startswith(cut[:-3])
    assert LONG_TEXT[len(cut) - 3] in " ,."  # ended on a word boundary
    assert len(ask_command.snippet("x" * 500)) == ask_command.SNIPPET_CHARS


# -- JSON ---------------------------------------------------------------------------------------------


def test_json_is_one_object_with_the_documented_schema(stub, capsys):
    code, out, err = run(capsys, "ask", "q?", "--json", "--k", "3")
    assert code == 0, err
    record = json.loads(out)  # the whole of stdout is one JSON value
    assert set(record) == {"question", "answer", "model", "truncated", "passages"}
    assert record["question"] == "q?"
    assert record["answer"] == "answer to q?"
    assert record["model"] == "rag-sequence"
    assert len(record["passages"]) == 3
    for rank, passage in enumerate(record["passages"]):
        assert set(passage) == {"id", "title", "text", "score", "prob", "meta"}
        assert passage["id"] == f"doc-{rank}"
        assert passage["title"] == f"Title {rank}"
        assert isinstance(passage["score"], float) and isinstance(passage["prob"], float)
    assert record["passages"][0]["text"] == LONG_TEXT  # full text in JSON, not a snippet
    # the stub's probabilities are Python floats: float64 quotients summed over 3 passages
    assert abs(sum(p["prob"] for p in record["passages"]) - 1.0) <= probability_sum_bound(3, dtype=float)


def test_json_converts_numpy_values(stub, capsys, monkeypatch):
    np = pytest.importorskip("numpy")

    def ask_numpy(self, questions, **options):
        return [StubAnswer(q, "a", "rag-token", [StubPassage(np.int64(7), "T", "x", np.float32(1.5), np.float64(1.0))]) for q in questions]

    monkeypatch.setattr(StubRAG, "ask", ask_numpy)
    code, out, err = run(capsys, "ask", "q?", "--json")
    assert code == 0, err
    assert json.loads(out)["passages"] == [{"id": 7, "title": "T", "text": "x", "score": 1.5, "prob": 1.0, "meta": {}}]


# -- --file --------------------------------------------------------------------------------------------


def write_questions(tmp_path, text):
    path = tmp_path / "questions.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_file_json_lines_in_input_order_in_batches(stub, capsys, tmp_path):
    questions = [f"question number {i}?" for i in range(1, 6)]
    path = write_questions(tmp_path, "\n".join(questions) + "\n")
    code, out, err = run(capsys, "ask", "--file", path, "--json", "--batch-size", "2", "--k", "2")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["question"] for r in records] == questions
    assert [r["answer"] for r in records] == [f"answer to {q}" for q in questions]
    assert len(stub.loads) == 1  # one process, one model
    assert [batch for batch, _ in stub.rag.calls] == [questions[0:2], questions[2:4], questions[4:5]]
    assert all(options["k"] == 2 for _, options in stub.rag.calls)


def test_file_default_batch_size_is_8(stub, capsys, tmp_path):
    questions = [f"q{i}" for i in range(20)]
    path = write_questions(tmp_path, "\n".join(questions))
    code, out, err = run(capsys, "ask", "--file", path, "--json")
    assert code == 0, err
    assert [len(batch) for batch, _ in stub.rag.calls] == [8, 8, 4]
    assert [json.loads(line)["question"] for line in out.splitlines()] == questions


def test_file_skips_blank_lines(stub, capsys, tmp_path):
    path = write_questions(tmp_path, "\n  first?  \n\n   \n\t\nsecond?\r\n\n")
    code, out, err = run(capsys, "ask", "--file", path, "--json")
    assert code == 0, err
    assert stub.rag.calls[0][0] == ["first?", "second?"]
    assert [json.loads(line)["question"] for line in out.splitlines()] == ["first?", "second?"]


def test_file_text_output_names_each_question(stub, capsys, tmp_path):
    path = write_questions(tmp_path, "alpha?\nbeta?\n")
    code, out, err = run(capsys, "ask", "--file", path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Q: alpha?"
    assert lines[1] == "answer to alpha?"
    assert "Q: beta?" in lines and "answer to beta?" in lines
    assert lines.index("Q: beta?") > lines.index("answer to alpha?")


def test_file_from_stdin(stub, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(read=lambda: "one?\n\ntwo?\n"))
    code, out, err = run(capsys, "ask", "--file", "-", "--json")
    assert code == 0, err
    assert [json.loads(line)["question"] for line in out.splitlines()] == ["one?", "two?"]


# -- errors --------------------------------------------------------------------------------------------


def assert_one_line_error(err, message=None):
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("openbook: error: ")
    assert "Traceback" not in err
    if message is not None:
        assert lines[0] == f"openbook: error: {message}"


def test_empty_question_is_a_one_line_error(stub, capsys):
    code, out, err = run(capsys, "ask", "")
    assert code == 2
    assert out == ""
    assert_one_line_error(err, "question 1 is empty")


def test_missing_file_fails_before_loading_models(stub, capsys, tmp_path):
    missing = tmp_path / "nope.txt"
    code, out, err = run(capsys, "ask", "--file", str(missing))
    assert code == 2
    assert out == ""
    assert_one_line_error(err)
    assert str(missing) in err
    assert stub.loads == []


def test_directory_as_file_is_a_one_line_error(stub, capsys, tmp_path):
    code, _, err = run(capsys, "ask", "--file", str(tmp_path))
    assert code == 2
    assert_one_line_error(err)


def test_file_with_only_blank_lines_is_an_error(stub, capsys, tmp_path):
    path = write_questions(tmp_path, "\n  \n\n")
    code, _, err = run(capsys, "ask", "--file", path)
    assert code == 2
    assert_one_line_error(err)
    assert stub.loads == []


def test_error_inside_a_batch_names_the_file_lines(stub, capsys, tmp_path, monkeypatch):
    path = write_questions(tmp_path, "a?\nb?\n\nc?\nd?\n")
    real_ask = StubRAG.ask

    def ask(self, questions, **options):
        if "c?" in questions:
            raise InputError("question 1 is too long")
        return real_ask(self, questions, **options)

    monkeypatch.setattr(StubRAG, "ask", ask)
    code, out, err = run(capsys, "ask", "--file", path, "--json", "--batch-size", "2")
    assert code == 2
    assert [json.loads(line)["question"] for line in out.splitlines()] == ["a?", "b?"]  # first batch done
    assert_one_line_error(err, f"{path}, lines 4-5: question 1 is too long")


@pytest.mark.parametrize("error", [ModelLoadError("cannot load generator 'x/y' offline"), KnowledgeBaseError("no index in kb/\nrebuild it")])
def test_load_errors_are_one_line(stub, capsys, error):
    stub.load_error = error
    code, out, err = run(capsys, "ask", "q?")
    assert code == 2
    assert out == ""
    assert_one_line_error(err, " ".join(str(error).split()))


def test_unexpected_errors_are_not_hidden(stub, capsys, monkeypatch):
    def broken(self, questions, **options):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(StubRAG, "ask", broken)
    with pytest.raises(ZeroDivisionError):
        cli.main(["ask", "q?"])


@pytest.mark.parametrize(
    "argv",
    [
        ["ask"],  # neither QUESTION nor --file
        ["ask", "q?", "--file", "questions.txt"],  # both
        ["ask", "q?", "--k", "0"],
        ["ask", "q?", "--beams", "many"],
        ["ask", "q?", "--model", "rag-banana"],
        ["ask", "q?", "--decoding", "slow"],
        [],  # no command
    ],
)
def test_usage_errors_exit_2(stub, capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert "usage:" in err and "error:" in err
    assert stub.loads == []


def test_neither_or_both_say_so(stub, capsys):
    for argv in (["ask"], ["ask", "q?", "--file", "q.txt"]):
        code, _, err = run(capsys, *argv)
        assert code == 2
        assert "exactly one of QUESTION or --file" in err


# -- warnings ------------------------------------------------------------------------------------------


def test_warnings_are_openbook_warning_lines(stub, capsys):
    stub.warn = "k=50 is more than the 12 passages\nin the knowledge base; using k=12"
    code, out, err = run(capsys, "ask", "q?", "--json")
    assert code == 0
    json.loads(out)  # stdout stays clean JSON
    assert err.splitlines() == ["openbook: warning: k=50 is more than the 12 passages in the knowledge base; using k=12"]


def test_warning_display_is_restored_after_main(stub, capsys):
    before = warnings.showwarning
    run(capsys, "ask", "q?")
    assert warnings.showwarning is before


# -- the real loader and the installed entry points ----------------------------------------------------


def test_model_from_args_passes_the_options_to_the_one_loader(monkeypatch):
    seen = {}

    def fake_build(**kwargs):
        seen.update(kwargs)
        return "loaded"

    monkeypatch.setitem(sys.modules, "openbook.rag.assemble", types.SimpleNamespace(load_model=fake_build))
    monkeypatch.setattr(options, "quiet_libraries", lambda: None)
    args = cli.build_parser().parse_args(["ask", "q?", "--model", "rag-token", "--kb", "kb", "--generator", "g",
                                          "--encoder", "e", "--retriever", "bm25", "--k", "3", "--untrained"])
    assert options.model_from_args(args) == "loaded"
    assert seen == {"model": "rag-token", "kb": "kb", "generator": "g", "encoder": "e", "run": None,
                    "retriever": "bm25", "k": 3, "untrained": True, "dtype": "auto",
                    "device": options.device(args)}  # --device auto, resolved: cuda where there is a GPU


def python(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)


def test_help_is_instant_and_imports_no_ml_libraries():
    probe = (
        "import sys, contextlib, io\n"
        "from openbook.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    codes = [main(['--help']), main(['ask', '--help']), main(['serve', '--help'])]\n"
        "assert codes == [0, 0, 0], codes\n"
        "assert '--decoding' in out.getvalue() and '--max-batch-size' in out.getvalue()\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'faiss', 'numpy', 'openbook.rag', 'fastapi', 'uvicorn')\n"
        "               if m in sys.modules)\n"
        "print(heavy)\n"
    )
    result = python("-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_python_dash_m_openbook():
    result = python("-m", "openbook", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("openbook ")


def test_ask_run_loads_the_trained_model(monkeypatch, capsys):
    """--run DIR goes to load_run with the run directory; --model is passed only when given."""
    calls = []

    def fake_load_run(run, kb=None, **overrides):
        calls.append((run, kb, overrides))
        return StubRAG(model=overrides.get("model", "rag-token"), warn=None)

    import openbook.rag.assemble as assemble

    monkeypatch.setattr(assemble, "load_run", fake_load_run)
    assert cli.main(["ask", "Who wrote it?", "--run", "runs/x", "--dtype", "float32"]) == 0  # a stub has no weights
    assert cli.main(["ask", "Who wrote it?", "--run", "runs/x", "--model", "rag-sequence", "--kb", "kb2",
                     "--dtype", "float32"]) == 0
    given = [(run, kb, {key: value for key, value in overrides.items() if value is not None})
             for run, kb, overrides in calls]
    assert given == [("runs/x", None, {}), ("runs/x", "kb2", {"model": "rag-sequence"})]


def test_commands_keep_torchaos_import_noise_off_the_terminal():
    # transformers imports torchao whenever it is installed (kb build --compile's extra): torchao then logs
    # that its CUDA kernels cannot load here and torch warns about a deprecated registration in it
    pytest.importorskip("torchao")
    script = ("import sys; from openbook.cli import main; code = main(['kb', 'info', '/nonexistent/kb']); "
              "import openbook.models.loading; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr  # only openbook's own error line
