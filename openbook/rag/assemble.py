"""Putting a RAG model together from names: generators, encoders and knowledge bases.

This is where the layers meet: a knowledge base is built by encoding passages (corpus) with a document
encoder (models) into an index (index); a generator name becomes the right adapter.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Iterable

import numpy as np

from openbook.corpus import Passage, read_passages
from openbook.data import demo_passages_path
from openbook.index import KnowledgeBase
from openbook.index.kb import FORMAT_VERSION, stored_format_version
from openbook.models import cache_dir, load_causal_lm, load_config, load_encoder, load_seq2seq
from openbook.models.causal import CausalLMGenerator
from openbook.models.encoders import Encoder
from openbook.models.generators import Generator, Seq2SeqGenerator
from openbook.models.hf_rag import is_hf_rag_checkpoint, load_hf_rag
from openbook.models.loading import GENERATOR_ALIASES

SHIPPED_VECTORS = "embeddings-minilm.f16.npy"  # d(z) of the demo corpus by the default encoder


def _is_rag_checkpoint(name_or_path: str) -> bool:
    """A transformers RAG checkpoint: a local directory, or a hub name whose config says ``rag``."""
    if name_or_path in GENERATOR_ALIASES or str(name_or_path).endswith(".gguf"):
        return False
    return is_hf_rag_checkpoint(name_or_path) or getattr(load_config(name_or_path), "model_type", "") == "rag"


def load_generator(name_or_path: str = "default") -> Generator:
    """A generator adapter by name: the offline default (SmolLM2), a causal LM, a seq2seq model, or the
    generator of a transformers RAG checkpoint."""
    if name_or_path in GENERATOR_ALIASES or str(name_or_path).endswith(".gguf"):
        return CausalLMGenerator(*load_causal_lm(name_or_path))
    config = load_config(name_or_path)
    if getattr(config, "model_type", "") == "rag":
        return load_hf_rag(name_or_path).generator
    if getattr(config, "is_encoder_decoder", False):
        return Seq2SeqGenerator(*load_seq2seq(name_or_path))
    return CausalLMGenerator(*load_causal_lm(name_or_path))


def build_knowledge_base(
    passages: Iterable[Passage],
    encoder: Encoder,
    out_dir: str | Path,
    batch_size: int = 256,
    progress: bool = True,
    **options,
) -> KnowledgeBase:
    """Encode passages with the (frozen) document encoder and write a knowledge base directory.

    ``options`` go to :meth:`KnowledgeBase.build` (``index_type``, ``index_params``, ``dtype``,
    ``on_error``, ``resume``, ``description``, ``source_info``).
    """
    return KnowledgeBase.build(
        passages,
        lambda batch: encoder.encode_passages(batch, batch_size=64),
        encoder.info(),
        out_dir,
        batch_size=batch_size,
        progress=progress,
        **options,
    )


def demo_kb_dir(encoder: Encoder) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", encoder.name).strip("-") or "encoder"
    return cache_dir() / "kb" / f"demo-{slug}"


def demo_knowledge_base(encoder: Encoder, progress: bool = True) -> KnowledgeBase:
    """The shipped demo knowledge base for ``encoder``: loaded if built, else built once (with a progress bar).

    For the offline default encoder the document vectors ship precomputed (float16) with the corpus;
    they are used only if a live re-encoding of a sample agrees with them.
    """
    path = demo_kb_dir(encoder)
    if stored_format_version(path) == FORMAT_VERSION:  # an older format is rebuilt below
        return KnowledgeBase.load(path, expected_encoder=encoder.info())
    passages = list(read_passages(demo_passages_path()))
    if progress:
        print(f"openbook: building the demo knowledge base ({len(passages)} passages) in {path} (once)",
              file=sys.stderr)
    shipped = _shipped_vectors(encoder, passages)
    if shipped is None:
        return build_knowledge_base(passages, encoder, path, progress=progress)
    offset = 0

    def precomputed(batch: list) -> np.ndarray:
        nonlocal offset
        offset += len(batch)
        return shipped[offset - len(batch): offset]

    # The shipped vectors are float16 already: storing them as float16 loses nothing and halves the file.
    return KnowledgeBase.build(passages, precomputed, encoder.info(), path, progress=progress, dtype="float16")


def _shipped_vectors(encoder: Encoder, passages: list, sample: int = 32) -> np.ndarray | None:
    """The shipped demo vectors as float32 if they belong to this encoder and corpus, else None."""
    path = demo_passages_path().parent / SHIPPED_VECTORS
    if not path.is_file():
        return None
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if meta.get("encoder", {}).get("name") != encoder.name:
        return None
    vectors = np.load(path).astype(np.float32)
    if vectors.shape != (len(passages), encoder.dim):
        return None
    live = encoder.encode_passages(passages[:sample])
    cosine = (live * vectors[:sample]).sum(1) / (
        np.linalg.norm(live, axis=1) * np.linalg.norm(vectors[:sample], axis=1) + 1e-12
    )
    return vectors if float(cosine.min()) > 0.999 else None


def load_rag(
    model: str | None = None,
    kb: str | Path | KnowledgeBase | None = None,
    generator: str = "default",
    encoder: str = "default",
    **kwargs,
):
    """A :class:`~openbook.rag.model.RAG` from names. ``generator`` may be a transformers RAG checkpoint
    (``facebook/rag-sequence-nq``, or a ``save_pretrained`` directory): then its DPR question encoder
    is used unless ``encoder`` is given, and ``model`` defaults to the checkpoint's kind."""
    from openbook.rag.model import RAG

    if _is_rag_checkpoint(generator):
        imported = load_hf_rag(generator)
        gen = imported.generator
        query_encoder = imported.query_encoder if encoder == "default" else load_encoder(encoder)
        model = model or imported.model_type
    else:
        gen = load_generator(generator)
        query_encoder = load_encoder(encoder)
    if kb is None:
        knowledge = demo_knowledge_base(query_encoder)
    elif isinstance(kb, KnowledgeBase):
        knowledge = kb
    else:
        knowledge = KnowledgeBase.load(kb, expected_encoder=query_encoder.info())
    return RAG(query_encoder, gen, knowledge, model=model or "rag-sequence", **kwargs)
