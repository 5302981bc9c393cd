"""Shared pytest setup.

Tests never reach a model hub: the offline default models come from installed packages, and anything
else a test needs it makes itself. Setting the hub's offline switches here turns an accidental hub
download into a fast, clear error instead of a hang.
"""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: loads real models or builds a real index (deselect with -m 'not slow')")
    config.addinivalue_line("markers", "shipped_default: sees the shipped fine-tuned default (openbook/data/default)")


@pytest.fixture(autouse=True)
def _no_shipped_default(request, monkeypatch):
    """Tests build models from tiny stand-ins for the offline default generator; the shipped fine-tuned
    adapters (made for the real SmolLM2) would not fit them. Only tests marked ``shipped_default`` see them."""
    if request.node.get_closest_marker("shipped_default") is None:
        import openbook.data
        import openbook.rag.assemble

        monkeypatch.setattr(openbook.data, "default_run_path", lambda: None)
        monkeypatch.setattr(openbook.rag.assemble, "default_run_path", lambda: None)
