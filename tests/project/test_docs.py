"""The documentation stays a front door: a README that fits, links that resolve, no measured figures in help texts.

Benchmark figures go stale (a help text once cited "default v3" long after v5 shipped), so they live in
docs/benchmarks.md, docs/results.md and the model card, each with the command that measured it; help texts and
docstrings say what an option does, not how fast it was on one machine. The paper's own figures (the targets an
experiment compares with) may be quoted where the sentence names the paper.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

_NUMBER = r"(?<![\w.])~?\d[\d,]*(?:\.\d+)?"
# A measured figure: a speed-up, a percentage, a time, a size or a rate. (Sizes in binary units, "1 MiB blocks",
# are settings.)
FIGURE = re.compile(
    rf"{_NUMBER}\s*(?:x|×)\s+(?:faster|slower|quicker|the speed|as fast)\b"
    rf"|{_NUMBER}\s*%"
    rf"|{_NUMBER}\s*(?:ms|s|sec|seconds|min|minutes|hours|GB|MB|kB)(?![\w/-])"
    rf"|{_NUMBER}\s*(?:passages|answers|questions|tokens|steps)/s\b"
    rf"|{_NUMBER}\s*GFLOP/s"
)
# Not measurements: the statistics' own parameters, and option values given as defaults or limits.
ALLOWED = re.compile(r"\b95% (?:percentile|confidence)|\(default: [^)]*\)|default:? ~?\d[\d.]*\s*\w*"
                     r"|(?:\b(?:at most|at least|up to|within|every|after|longer than|larger than|more than|above|beyond)|\+)"
                     r"\s*~?\d[\d.,]*\s*\w*")
_SENTENCE = re.compile(r"(?<=[.;])\s+(?=[A-Z(`])")


def figures(text: str) -> list[str]:
    """The measured figures quoted in ``text``, each with its sentence; sentences citing the paper are exempt."""
    found = []
    for sentence in _SENTENCE.split(" ".join(text.split())):
        if re.search(r"\bpaper\b|Lewis et al", sentence, re.IGNORECASE):
            continue
        hits = FIGURE.findall(ALLOWED.sub("", sentence))
        if hits:
            found.append(f"{hits} in: {sentence}")
    return found


def test_the_figure_pattern_flags_measurements_and_spares_settings():
    assert figures("int8 is 1.35x faster than float32 on an AVX2 CPU.")
    assert figures("it scores 27.2% instead of 46.3% with default v3.")
    assert figures("A GGUF file takes ~25 s to dequantise.")
    assert figures("peaks at 3.5 GB in bfloat16.")
    assert figures("encodes 187.9 passages/s.")
    assert not figures("a request not answered in this time gets 504 (default: 60.0)")
    assert not figures("waits at most 10 ms for more (default: 10 ms)")
    assert not figures("a body larger than 16 MB gets 413; the process exits within drain + 5 s")
    assert not figures("its difference of means, 95% percentile interval and a two-sided p-value")
    assert not figures("The paper reports 70% / 68% for matched index and era.")
    assert not figures("questions x k x beams: 32 x 20 x 8 = 5,120 sequences; beam size 4")


def _parsers(parser: argparse.ArgumentParser, path: str):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_help_texts_quote_no_measured_figures():
    from openbook.cli import build_parser

    found = [f"{path}: {hit}" for path, parser in _parsers(build_parser(), "openbook")
             for hit in figures(parser.format_help())]
    assert not found, "\n".join(found)


def _docstrings():
    for path in sorted((ROOT / "openbook").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    yield f"{path.relative_to(ROOT)}:{getattr(node, 'name', '<module>')}", doc


def test_docstrings_quote_no_measured_figures():
    found = [f"{where}: {hit}" for where, doc in _docstrings() for hit in figures(doc)]
    assert not found, "\n".join(found)


def test_readme_fits_a_newcomer():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"


def _markdown_files():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))


_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REPO_PATH = re.compile(r"(?<![\w./-])((?:docs|bench|scripts|tests|openbook)/[\w./*-]*[\w*/])")


@pytest.mark.parametrize("md", list(_markdown_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md: Path):
    broken = []
    for target in _LINK.findall(md.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s), mailto, in-page anchors
        if not (md.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{md.relative_to(ROOT)}: links to missing files: {broken}"


def _texts():
    yield from _markdown_files()
    for folder in ("openbook", "bench", "scripts", "tests"):
        yield from sorted((ROOT / folder).rglob("*.py"))
        yield from sorted((ROOT / folder).rglob("*.sh"))
    yield ROOT / "pyproject.toml"
    yield ROOT / "Makefile"


def test_repository_paths_named_in_docs_and_code_exist():
    """A moved docs or test file leaves no stale mention: every docs/... or tests/... path quoted anywhere names a
    file that exists."""
    stale = []
    for path in _texts():
        if path == Path(__file__).resolve():
            continue
        for name in _REPO_PATH.findall(path.read_text(encoding="utf-8")):
            if not name.startswith(("docs/", "tests/")):
                continue
            name = name.rstrip(".")
            if not (any(ROOT.glob(name)) if "*" in name else (ROOT / name).exists()):
                stale.append(f"{path.relative_to(ROOT)}: {name}")
    assert not stale, "\n".join(stale)


def test_the_licence_is_declared_and_shipped():
    """LICENSE (Apache-2.0) and NOTICE (the licences of what ships: the demo's CC BY-SA Wikipedia text, the models)."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0 AND CC-BY-SA-4.0"
    assert project["license-files"] == ["LICENSE", "NOTICE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    for shipped in ("CC BY-SA", "all-MiniLM-L6-v2", "SmolLM2-135M-Instruct", "openbook/data/default", "Swagger UI"):
        assert shipped in notice
