"""bench/twin_kb.py on a tiny WikiExtractor folder: the twin holds what `openbook kb build` stores (passages, ids,
titles, metadata, the encoder's description), with seeded random unit vectors of the encoder's dimension (the
encoder is the hashed bag-of-words stand-in of the ``encoders`` fixture)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from bench_scripts import bench_modules
from openbook.index import KnowledgeBase
from tiny_kb import DIM, run


def record(page_id: int, title: str, paragraphs: list[str]) -> str:
    """One ``<doc>`` record as WikiExtractor writes it (the header, the title again, a blank line, the text)."""
    body = "".join(f"{p}\n" for p in paragraphs)
    return (f'<doc id="{page_id}" url="http://en.wikipedia.org/wiki?curid={page_id}" title="{title}">\n'
            f"{title}\n\n{body}\n</doc>\n")


@pytest.fixture(scope="module")
def bench():
    with bench_modules("twin_kb") as module:
        yield module


@pytest.fixture
def extracted(tmp_path):
    """A WikiExtractor folder of five articles (one of several passages) in a plain and a gzipped file."""
    root = tmp_path / "extracted"
    (root / "AA").mkdir(parents=True)
    long_text = " ".join(f"word{i}" for i in range(230))
    (root / "AA" / "wiki_00").write_text(
        record(12, "Anarchism", ["Anarchism is a political philosophy.", long_text])
        + record(25, "Autism", ["Autism is a neurodevelopmental disorder."]), encoding="utf-8")
    (root / "AA" / "wiki_01.gz").write_bytes(gzip.compress((
        record(39, "Albedo", ["Albedo is the fraction of light a surface reflects."])
        + record(290, "A", ["A is the first letter of the alphabet."])
        + record(303, "Alabama", ["Alabama is a state in the United States."])).encode()))
    return root


def rows(kb: KnowledgeBase) -> list[tuple]:
    return [(p.id, p.title, p.text, p.meta) for p in kb]


def test_the_twin_stores_what_kb_build_stores_with_random_unit_vectors(bench, extracted, tmp_path, capsys, encoders):
    code, _, err = run(capsys, "kb", "build", extracted, "--out", tmp_path / "real", "--quiet")
    assert code == 0, err
    bench.main([str(extracted), "--out", str(tmp_path / "twin"), "--batch-size", "2", "--quiet"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    real, twin = KnowledgeBase.load(tmp_path / "real"), KnowledgeBase.load(tmp_path / "twin")
    assert len(twin) == len(real) > 5 and rows(twin) == rows(real)  # every passage, id, title and metadata
    assert twin.documents() == real.documents()  # each row's document (what kb sync compares)
    assert twin.manifest["encoder"] == real.manifest["encoder"]  # `ask --kb TWIN` accepts it as the real book
    assert twin.manifest["build"]["sources"] == real.manifest["build"]["sources"]
    assert "random vectors" in twin.versions[0]["description"]
    assert twin.manifest["index_type"] == real.manifest["index_type"]  # kb build's default index
    vectors = np.asarray(twin.embeddings)
    assert vectors.dtype == np.float32 and vectors.shape == (len(real), DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert not np.allclose(vectors, np.asarray(real.embeddings))  # not the encoder's vectors
    assert line["rows"] == len(real) and line["seconds"] >= 0 and line["path"] == str(tmp_path / "twin")
    assert line["disk_bytes"] == sum(f.stat().st_size for f in (tmp_path / "twin").iterdir() if f.name != ".lock")
    real.close()
    twin.close()


def test_the_vectors_are_seeded(bench, extracted, tmp_path, encoders):
    info = {"name": "fake/bow", "dim": 8}
    built = [bench.build_twin([extracted], tmp_path / name, encoder_info=info, seed=seed, batch_size=2,
                              progress=False) for name, seed in (("a", 0), ("b", 0), ("c", 1))]
    a, b, c = (np.asarray(kb.embeddings) for kb in built)
    assert a.shape[1] == 8 and np.array_equal(a, b) and not np.array_equal(a, c)
    for kb in built:
        kb.close()


def test_the_encoder_is_kb_builds_default_and_the_twin_lives_in_the_cache(bench, encoders, monkeypatch, tmp_path):
    assert bench.default_encoder_info() == {"name": "fake/bow", "pooling": "mean", "normalize": True, "dim": DIM}
    assert encoders == ["default"]
    monkeypatch.setenv("OPENBOOK_CACHE", str(tmp_path / "cache"))
    assert bench.default_out() == tmp_path / "cache" / "kb" / "wiki2015-twin"


def test_a_missing_source_fails_before_the_encoder_loads(bench, tmp_path, encoders):
    with pytest.raises(SystemExit, match="no such file"):
        bench.main([str(tmp_path / "missing"), "--out", str(tmp_path / "twin")])
    assert encoders == []
