"""Tiny knowledge bases without a neural encoder: a hashed bag-of-words encoder, small corpora, builds, and
the ``openbook kb`` command line run in process. The fixtures ``encoders`` and ``corpus_dir`` are in conftest.py."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

from openbook import cli
from openbook.corpus import Passage
from openbook.index import KnowledgeBase
from openbook.index.kb import MANIFEST_FILE

DIM = 32
WORDS = ("paris france capital berlin germany moon earth orbit jupiter planet river lake ocean "
         "mountain music novel poem king queen war peace sun star light water carbon sugar").split()


def hashed_bow(texts: list[str], dim: int = DIM) -> np.ndarray:
    """Deterministic unit-norm hashed bag-of-words vectors: a stand-in for a neural encoder."""
    vectors = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, zlib.crc32(word.encode()) % dim] += 1.0
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)


class BowEncoder:
    """The encoder interface the CLI and the RAG model use (info, encode_passages, encode_queries)."""

    def __init__(self, name: str = "fake/bow", normalize: bool = True):
        self.name, self.normalize, self.dim = name, normalize, DIM

    def info(self) -> dict:
        return {"name": self.name, "pooling": "mean", "normalize": self.normalize, "dim": DIM}

    def encode_passages(self, passages, batch_size: int = 64) -> np.ndarray:
        return hashed_bow([f"{p.title} {p.text}" for p in passages])

    def encode_queries(self, texts, batch_size: int = 64) -> np.ndarray:
        return hashed_bow(list(texts))

    def to(self, device):  # the commands move an encoder to --device; hashing runs on the host anyway
        return self


ENCODER = BowEncoder()


def encode(batch: list[Passage]) -> np.ndarray:
    return ENCODER.encode_passages(batch)


def corpus(n: int, prefix: str = "doc") -> list[Passage]:
    """``n`` distinct passages, each with a few words of WORDS."""
    rng = np.random.default_rng(n)
    return [
        Passage(f"{prefix}:{i}", f"Title {i % 7}", " ".join(rng.choice(WORDS, size=6)) + f" number{i}")
        for i in range(n)
    ]


def build(out, passages, **kwargs) -> KnowledgeBase:
    kwargs.setdefault("progress", False)
    kwargs.setdefault("batch_size", 4)
    return KnowledgeBase.build(passages, kwargs.pop("encode", encode), ENCODER.info(), out, **kwargs)


def data_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != MANIFEST_FILE}


def without_times(manifest: dict) -> dict:
    manifest = json.loads(json.dumps(manifest))
    for key in ("created_at", "updated_at"):
        manifest.pop(key, None)
    for version in manifest["versions"]:
        version.pop("created_at", None)
    manifest.get("build", {}).pop("seconds", None)  # how long each stage took
    return manifest


class Crash(RuntimeError):
    pass


def crashing_encoder(at_batch: int, calls: list):
    def encode_or_crash(batch):
        calls.append(len(batch))
        if len(calls) == at_batch:
            raise Crash(f"simulated crash in batch {at_batch}")
        return encode(batch)

    return encode_or_crash


ARTICLES = [
    {"id": "paris", "title": "Paris", "text": "paris is the capital and largest city of france"},
    {"id": "berlin", "title": "Berlin", "text": "berlin is the capital of germany"},
    {"id": "moon", "title": "Moon", "text": "the moon orbits the earth every month"},
    {"id": "jupiter", "title": "Jupiter", "text": "jupiter is the largest planet of the solar system"},
]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def build_corpus_book(capsys, tmp_path: Path, n: int, *extra) -> Path:
    """``tmp_path/kb``, built by `openbook kb build` (with ``extra`` options) from :func:`corpus` ``(n)``
    written as JSON Lines."""
    source = tmp_path / "passages.jsonl"
    source.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n"
                              for p in corpus(n)), encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", source, "--out", tmp_path / "kb", "--quiet", *extra)
    assert code == 0, err
    return tmp_path / "kb"


def build_kb(capsys, corpus_dir, out, *extra) -> str:
    code, stdout, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", corpus_dir / "psgs.tsv",
                            corpus_dir / "notes", "--out", out, "--quiet", *extra)
    assert code == 0, err
    return stdout


def retrieve(capsys, kb, question, *extra) -> dict:
    code, out, err = run(capsys, "retrieve", question, "--kb", kb, "--json", *extra)
    assert code == 0, err
    return json.loads(out)
