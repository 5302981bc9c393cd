"""Putting a RAG model together from names: generators, encoders and knowledge bases.

This is where the layers meet: a knowledge base is built by encoding passages (corpus) with a document
encoder (models) into an index (index); a generator name becomes the right adapter.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterable

from openbook.corpus import Passage, read_passages
from openbook.data import demo_passages_path
from openbook.index import KnowledgeBase
from openbook.models import cache_dir, load_causal_lm, load_config, load_encoder, load_seq2seq
from openbook.models.causal import CausalLMGenerator
from openbook.models.encoders import Encoder
from openbook.models.generators import Generator, Seq2SeqGenerator
from openbook.models.hf_rag import is_hf_rag_checkpoint, load_hf_rag
from openbook.models.loading import GENERATOR_ALIASES


def load_generator(name_or_path: str = "default") -> Generator:
    """A generator adapter by name: the offline default (SmolLM2), a causal LM, or a seq2seq model."""
    if name_or_path in GENERATOR_ALIASES or str(name_or_path).endswith(".gguf"):
        return CausalLMGenerator(*load_causal_lm(name_or_path))
    if is_hf_rag_checkpoint(name_or_path):
        return load_hf_rag(name_or_path).generator
    config = load_config(name_or_path)
    if getattr(config, "is_encoder_decoder", False):
        return Seq2SeqGenerator(*load_seq2seq(name_or_path))
    return CausalLMGenerator(*load_causal_lm(name_or_path))


def build_knowledge_base(
    passages: Iterable[Passage], encoder: Encoder, out_dir: str | Path, batch_size: int = 256, progress: bool = True
) -> KnowledgeBase:
    """Encode passages with the (frozen) document encoder and write a knowledge base directory."""
    return KnowledgeBase.build(
        passages,
        lambda batch: encoder.encode_passages(batch, batch_size=64),
        encoder.info(),
        out_dir,
        batch_size=batch_size,
        progress=progress,
    )


def demo_kb_dir(encoder: Encoder) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", encoder.name).strip("-") or "encoder"
    return cache_dir() / "kb" / f"demo-{slug}"


def demo_knowledge_base(encoder: Encoder, progress: bool = True) -> KnowledgeBase:
    """The shipped demo knowledge base for ``encoder``: loaded if built, else built once (with a progress bar)."""
    path = demo_kb_dir(encoder)
    if (path / "manifest.json").is_file():
        return KnowledgeBase.load(path, expected_encoder=encoder.info())
    if progress:
        print(f"openbook: building the demo knowledge base in {path} (once)", file=sys.stderr)
    return build_knowledge_base(read_passages(demo_passages_path()), encoder, path, progress=progress)


def load_rag(
    model: str = "rag-sequence",
    kb: str | Path | KnowledgeBase | None = None,
    generator: str = "default",
    encoder: str = "default",
    **kwargs,
):
    """A :class:`~openbook.rag.model.RAG` from names. ``generator`` may be a transformers RAG checkpoint
    directory (then its DPR question encoder is used unless ``encoder`` is given explicitly)."""
    from openbook.rag.model import RAG

    if is_hf_rag_checkpoint(generator):
        imported = load_hf_rag(generator)
        gen = imported.generator
        query_encoder = imported.query_encoder if encoder == "default" else load_encoder(encoder)
    else:
        gen = load_generator(generator)
        query_encoder = load_encoder(encoder)
    if kb is None:
        knowledge = demo_knowledge_base(query_encoder)
    elif isinstance(kb, KnowledgeBase):
        knowledge = kb
    else:
        knowledge = KnowledgeBase.load(kb, expected_encoder=query_encoder.info())
    return RAG(query_encoder, gen, knowledge, model=model, **kwargs)
