"""Precompute the offline default encoder's vectors for the shipped demo corpus.

A newcomer's first ``make demo`` would otherwise spend minutes encoding 20k passages on a 2-core
CPU. The file ``openbook/data/demo/embeddings-minilm.f16.npy`` holds d(z) for every passage of
``passages.jsonl.gz`` in order, as float16 (the knowledge base stores them as float32). At build
time openbook re-encodes a sample and falls back to encoding everything if they disagree, so a
changed corpus or encoder can never silently use stale vectors.

Run: .venv/bin/python scripts/make_demo_embeddings.py
"""

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from openbook.corpus import read_passages
from openbook.data import demo_passages_path
from openbook.models import load_encoder

OUT = Path(__file__).resolve().parents[1] / "openbook" / "data" / "demo" / "embeddings-minilm.f16.npy"


def main() -> None:
    passages = list(read_passages(demo_passages_path()))
    encoder = load_encoder("minilm")
    start = time.perf_counter()
    vectors = encoder.encode_passages(passages, batch_size=64, progress=True)
    seconds = time.perf_counter() - start
    np.save(OUT, vectors.astype(np.float16))
    digest = hashlib.sha256(demo_passages_path().read_bytes()).hexdigest()
    meta = {"encoder": encoder.info(), "passages": len(passages), "corpus_sha256": digest}
    OUT.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps({"passages": len(passages), "seconds": round(seconds, 1),
                      "passages_per_s": round(len(passages) / seconds, 1)}), file=sys.stderr)


if __name__ == "__main__":
    main()
