"""One home for choices and defaults (openbook/presets.py): no entry point keeps its own copy.

The choice lists are written once: no other module of the package spells one out as a literal (tuple, list,
set or ``Literal[...]``), and the web page holds none (it reads them from ``/openapi.json``). Each entry point
defaults to its preset: ``RAG.ask``, ``RAG.load``'s dtype, ``ClosedBook.ask``, ``openbook ask``/``serve`` and
``POST /v1/ask`` to INTERACTIVE; ``openbook eval``, ``evaluate()``, ``predict()`` and the experiments to PAPER.
The slow test (``--run-slow`` or ``OPENBOOK_SLOW=1``) loads the real default and checks that Python and the command give one answer.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import sys
import types
from pathlib import Path

import pytest

from openbook import cli, presets
from openbook.presets import INTERACTIVE, PAPER

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "openbook"
STATIC = PACKAGE / "serve" / "static"
CHOICE_LISTS = {name: value for name, value in vars(presets).items()
                if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value)}
DECODING_FIELDS = ("num_beams", "decoding", "max_new_tokens", "dtype")


def test_the_presets():
    assert dataclasses.astuple(INTERACTIVE)[1:] == (1, "lazy", 16, "auto", True)  # what `openbook ask` did
    assert dataclasses.astuple(PAPER)[1:] == (4, "thorough", None, "float32", False)  # None: the task's length
    with pytest.raises(dataclasses.FrozenInstanceError):
        INTERACTIVE.num_beams = 4
    assert presets.PRESETS == {"interactive": INTERACTIVE, "paper": PAPER}
    assert PAPER.flags() == "--beams 4 --decoding thorough --dtype float32 --no-abstain"
    assert INTERACTIVE.flags() == "--beams 1 --decoding lazy --max-new-tokens 16 --dtype auto"
    for preset in (INTERACTIVE, PAPER):
        assert preset.decoding in presets.DECODINGS and preset.dtype in presets.DTYPES


def test_presets_import_nothing_heavy():
    """The parser and the server's settings read presets without loading torch (or anything of openbook's)."""
    tree = ast.parse((PACKAGE / "presets.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "dataclasses"}, imported


# -- the choice lists: written once ---------------------------------------------------------------------


def _string_literals(node: ast.AST) -> tuple[str, ...] | None:
    """The strings of a literal tuple/list/set of two or more string constants (``Literal["a", "b"]`` holds one)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def copies_of_choice_lists(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == PACKAGE / "presets.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            strings = _string_literals(node)
            for name, choices in CHOICE_LISTS.items():
                if strings is not None and set(strings) == set(choices):
                    found.append(f"{path.relative_to(root)}:{node.lineno} spells out presets.{name}")
    return found


def test_no_module_keeps_its_own_copy_of_a_choice_list():
    assert copies_of_choice_lists(PACKAGE) == []


def test_the_copy_check_finds_a_copy(tmp_path):
    (tmp_path / "m.py").write_text('A = ("lazy", "fast", "thorough")\nB: Literal["bm25", "dense", "hybrid"]\n'
                                   'C = ("dense", "bm25")  # a subset is a choice of its own\n')
    assert copies_of_choice_lists(tmp_path) == ["m.py:1 spells out presets.DECODINGS",
                                                "m.py:2 spells out presets.RETRIEVERS"]


def test_the_page_keeps_no_copy_of_the_choices():
    """The page fills its selects from the API's description; its files name none of the choices."""
    page = {name: (STATIC / name).read_text(encoding="utf-8") for name in ("index.html", "app.js")}
    for name in ("MODELS", "RETRIEVERS", "DECODINGS"):
        for value in CHOICE_LISTS[name]:
            assert f'value="{value}"' not in page["index.html"], value
            assert f'"{value}"' not in page["app.js"] and f"'{value}'" not in page["app.js"], value
    assert "/openapi.json" in page["app.js"]


def test_the_api_describes_the_choices_and_the_interactive_defaults():
    """What the page reads: the enums and defaults of AskRequest in the API's JSON schema."""
    from openbook.serve.schemas import AskRequest

    fields = AskRequest.model_json_schema()["properties"]

    def enum(field):
        return next(v["enum"] for v in [field, *field.get("anyOf", [])] if "enum" in v)

    assert enum(fields["model"]) == list(presets.MODELS)
    assert enum(fields["retriever"]) == list(presets.RETRIEVERS)
    assert enum(fields["decoding"]) == list(presets.DECODINGS)
    assert (fields["beams"]["default"], fields["decoding"]["default"], fields["max_new_tokens"]["default"]) == (
        INTERACTIVE.num_beams, INTERACTIVE.decoding, INTERACTIVE.max_new_tokens)


# -- the entry points' defaults: each its preset's ------------------------------------------------------


def subparser(*names: str):
    parser = cli.build_parser()
    for name in names:
        parser = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]
    return parser


def argparse_defaults(parser) -> dict:
    """The defaults of a parser's decoding options, by preset field (those it has)."""
    dests = {"beams": "num_beams", "decoding": "decoding", "max_new_tokens": "max_new_tokens", "dtype": "dtype"}
    return {dests[a.dest]: a.default for a in parser._actions if a.dest in dests}


def preset_values(preset, fields) -> dict:
    return {f: getattr(preset, f) for f in fields}


@pytest.mark.parametrize("command, preset", [
    (("ask",), INTERACTIVE), (("serve",), INTERACTIVE), (("eval",), PAPER),
    (("experiments", "closed-book-vs-rag"), PAPER), (("experiments", "ablation"), PAPER),
    (("experiments", "k-sweep"), PAPER), (("experiments", "diversity"), PAPER),
    (("experiments", "posterior"), PAPER), (("experiments", "hot-swap"), PAPER),
])
def test_each_command_defaults_to_its_preset(command, preset):
    got = argparse_defaults(subparser(*command))
    assert got and got == preset_values(preset, got), command


def signature_defaults(function, names=DECODING_FIELDS) -> dict:
    parameters = inspect.signature(function).parameters
    return {n: parameters[n].default for n in names if n in parameters}


def test_rag_ask_and_load_are_interactive():
    from openbook.rag.closed_book import ClosedBook
    from openbook.rag.model import RAG

    for ask in (RAG.ask, ClosedBook.ask):
        assert signature_defaults(ask) == preset_values(INTERACTIVE, ("num_beams", "decoding", "max_new_tokens"))
    assert signature_defaults(RAG.load) == {"dtype": INTERACTIVE.dtype}  # as `openbook ask --dtype`'s


def test_the_ask_request_is_interactive():
    from openbook.serve.schemas import AskRequest

    request = AskRequest(question="q")
    assert (request.beams, request.decoding, request.max_new_tokens) == (
        INTERACTIVE.num_beams, INTERACTIVE.decoding, INTERACTIVE.max_new_tokens)


def test_evaluation_and_the_experiments_are_the_papers(monkeypatch):
    from openbook.eval.evaluate import evaluate, predict
    from openbook.experiments import report
    from openbook.experiments.posterior import run_posterior

    decoding = ("num_beams", "decoding", "max_new_tokens")
    for function in (evaluate, predict):
        assert signature_defaults(function) == preset_values(PAPER, decoding), function.__name__
    assert signature_defaults(run_posterior, ("beams", "max_new_tokens")) == {
        "beams": PAPER.num_beams, "max_new_tokens": PAPER.max_new_tokens}
    settings = report.EvalSettings()
    assert (settings.beams, settings.decoding, settings.max_new_tokens) == tuple(getattr(PAPER, f) for f in decoding)
    seen = []  # the experiments' models compute in the paper's number type
    monkeypatch.setitem(sys.modules, "openbook.rag.assemble", types.SimpleNamespace(load_model=lambda **kw: seen.append(kw)))
    report.model_of_run(report.DEFAULT)
    assert seen[-1]["dtype"] == PAPER.dtype


# -- Python and the command: one answer -----------------------------------------------------------------

QUESTION = "Who wrote Hamlet?"


@pytest.mark.slow
@pytest.mark.shipped_default
def test_python_with_no_options_gives_the_commands_answer(capsys):
    """``RAG.load().ask([q])`` with no options decodes as ``openbook ask q`` does, so both give one answer."""
    from openbook.rag import RAG

    assert cli.main(["ask", QUESTION, "--json"]) == 0
    command = json.loads(capsys.readouterr().out)
    (answer,) = RAG.load().ask([QUESTION])
    assert answer.answer == command["answer"] and answer.truncated == command["truncated"], (answer, command)
    assert [str(p.id) for p in answer.passages] == [str(p["id"]) for p in command["passages"]]
