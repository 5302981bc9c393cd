"""Shared pytest setup.

Tests never reach a model hub: the offline default models come from installed packages, and anything
else a test needs it makes itself. Setting the hub's offline switches here turns an accidental hub
download into a fast, clear error instead of a hang.

One marker gates the slow tests: ``@pytest.mark.slow`` (a test that loads the real default models, builds
a real index or starts servers in other processes). They run with ``--run-slow`` (``make test`` passes it)
or ``OPENBOOK_SLOW=1``, and are skipped otherwise. A test that loads a real default model without the
marker fails at the load (:func:`_real_models_are_marked_slow`). The layout rule is in tests/README.md.
"""

import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (as OPENBOOK_SLOW=1 does)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: loads real models, builds a real index or starts servers in other "
                            "processes (runs with --run-slow or OPENBOOK_SLOW=1)")
    config.addinivalue_line("markers", "shipped_default: sees the shipped fine-tuned default (openbook/data/default)")


def run_slow(config) -> bool:
    return config.getoption("--run-slow") or os.environ.get("OPENBOOK_SLOW") == "1"


def pytest_collection_modifyitems(config, items):
    if run_slow(config):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or OPENBOOK_SLOW=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_shipped_default(request, monkeypatch):
    """Tests build models from tiny stand-ins for the offline default generator; the shipped fine-tuned
    adapters (made for the real SmolLM2) would not fit them. Only tests marked ``shipped_default`` see them."""
    if request.node.get_closest_marker("shipped_default") is None:
        import openbook.data
        import openbook.rag.assemble

        monkeypatch.setattr(openbook.data, "default_run_path", lambda: None)
        monkeypatch.setattr(openbook.rag.assemble, "default_run_path", lambda: None)


@pytest.fixture(autouse=True)
def _real_models_are_marked_slow(request, monkeypatch):
    """openbook finding a packaged default model (to load it) in a test not marked ``slow`` fails that test.

    A test may still look at the packaged paths itself; only openbook's own calls (the loaders) count."""
    if request.node.get_closest_marker("slow") is not None:
        return
    from openbook.models import loading

    def guard(real):
        def packaged(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller == "openbook" or caller.startswith("openbook."):
                pytest.fail(f"{request.node.nodeid} loads a real default model ({real.__name__}): mark it "
                            "@pytest.mark.slow", pytrace=False)
            return real(*args, **kwargs)
        return packaged

    monkeypatch.setattr(loading, "packaged_minilm_path", guard(loading.packaged_minilm_path))
    monkeypatch.setattr(loading, "packaged_smollm2_gguf", guard(loading.packaged_smollm2_gguf))


# ------------------------------------------------------------------ shared builders (tests/helpers/tiny_kb.py)


@pytest.fixture
def encoders(monkeypatch):
    """``openbook kb``'s encoder loader replaced by hashed bag-of-words encoders; returns the names asked for."""
    import openbook.commands.kb as kb_commands
    from tiny_kb import BowEncoder

    asked: list[str] = []
    made = {}

    def fake_load(name):
        asked.append(name)
        key = "fake/bow" if name in ("default", "fake/bow") else name
        return made.setdefault(key, BowEncoder(key))

    monkeypatch.setattr(kb_commands, "load_encoder", fake_load)
    return asked


@pytest.fixture
def corpus_dir(tmp_path) -> Path:
    """A small corpus in three formats: JSON Lines, a DPR TSV and a folder of text files."""
    from tiny_kb import ARTICLES

    src = tmp_path / "src"
    src.mkdir()
    (src / "articles.jsonl").write_text("".join(json.dumps(a) + "\n" for a in ARTICLES), encoding="utf-8")
    (src / "psgs.tsv").write_text("id\ttext\ttitle\n100\tthe pacific is the largest ocean\tPacific\n",
                                  encoding="utf-8")
    notes = src / "notes"
    notes.mkdir()
    (notes / "volcano.md").write_text("# Volcanoes\n\na volcano erupts lava and ash", encoding="utf-8")
    return src
