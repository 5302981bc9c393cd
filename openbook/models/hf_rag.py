"""Import a transformers RAG checkpoint (``RagSequenceForGeneration`` / ``RagTokenForGeneration``).

The published ``facebook/rag-sequence-nq`` and ``facebook/rag-token-nq`` checkpoints, and any model
saved with ``save_pretrained``, are a directory with a ``RagConfig`` (question encoder + generator
sub-configs) and one weight file holding ``rag.question_encoder.*`` and ``rag.generator.*``; published
ones add ``question_encoder_tokenizer/`` and ``generator_tokenizer/``. We load it with transformers'
own classes and keep only the two parts openbook needs: the DPR query encoder (CLS/pooler output,
inner-product scores) and the seq2seq generator, fed ``title / text // question`` like transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from openbook.errors import ModelLoadError
from openbook.models.encoders import Encoder
from openbook.models.generators import Seq2SeqGenerator


@dataclass
class ImportedRag:
    query_encoder: Encoder
    generator: Seq2SeqGenerator
    model_type: str  # "rag-sequence" or "rag-token"
    n_docs: int
    label_smoothing: float
    config: object  # the RagConfig, for reference


def is_hf_rag_checkpoint(path: str | Path) -> bool:
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") == "rag"
    except (OSError, json.JSONDecodeError):
        return False


def _model_type(config) -> str:
    archs = " ".join(getattr(config, "architectures", None) or [])
    return "rag-token" if "Token" in archs else "rag-sequence"


def _tokenizers(path: Path):
    """The checkpoint's (question encoder, generator) tokenizers, or ``(None, None)`` if it has none."""
    from transformers import AutoTokenizer

    q_dir, g_dir = path / "question_encoder_tokenizer", path / "generator_tokenizer"
    if q_dir.is_dir() and g_dir.is_dir():
        return AutoTokenizer.from_pretrained(q_dir), AutoTokenizer.from_pretrained(g_dir)
    return None, None


def load_hf_rag(path: str | Path, question_tokenizer=None, generator_tokenizer=None) -> ImportedRag:
    """Load a transformers RAG directory into openbook parts (tokenizers may be given explicitly)."""
    from transformers import RagConfig, RagSequenceForGeneration, RagTokenForGeneration

    path = Path(path)
    if not is_hf_rag_checkpoint(path):
        raise ModelLoadError(f"{path} is not a transformers RAG checkpoint (no config.json with model_type 'rag')")
    config = RagConfig.from_pretrained(path)
    model_type = _model_type(config)
    cls = RagTokenForGeneration if model_type == "rag-token" else RagSequenceForGeneration
    try:
        rag = cls.from_pretrained(path, local_files_only=True)
    except OSError as err:
        raise ModelLoadError(f"could not load the RAG checkpoint in {path}: {err}") from None
    q_tok, g_tok = _tokenizers(path)
    q_tok, g_tok = question_tokenizer or q_tok, generator_tokenizer or g_tok
    encoder = Encoder(rag.rag.question_encoder, q_tok, pooling="pooler", normalize=False, name=str(path))
    generator = Seq2SeqGenerator(
        rag.rag.generator,
        g_tok,
        max_context_length=config.max_combined_length,
        title_sep=config.title_sep,
        doc_sep=config.doc_sep,
    )
    return ImportedRag(encoder, generator, model_type, config.n_docs, config.label_smoothing, config)
