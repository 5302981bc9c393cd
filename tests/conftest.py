"""Shared pytest setup.

Tests never reach a model hub: the offline default models come from installed packages, and anything
else a test needs it makes itself. Setting the hub's offline switches here turns an accidental hub
download into a fast, clear error instead of a hang.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: loads real models or builds a real index (deselect with -m 'not slow')")
