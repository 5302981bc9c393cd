"""Import a transformers RAG checkpoint (``RagSequenceForGeneration`` / ``RagTokenForGeneration``).

The published ``facebook/rag-sequence-nq`` and ``facebook/rag-token-nq`` checkpoints, and any model
saved with ``save_pretrained``, are a directory with a ``RagConfig`` (question encoder + generator
sub-configs) and one weight file holding ``rag.question_encoder.*`` and ``rag.generator.*``; published
ones add ``question_encoder_tokenizer/`` and ``generator_tokenizer/``. We load it with transformers'
own classes and keep only the two parts openbook needs: the DPR query encoder (CLS/pooler output,
inner-product scores) and the seq2seq generator, fed ``title / text // question`` like transformers.

The generator is told to see exactly what transformers feeds such a checkpoint (see
:class:`~openbook.models.generators.Seq2SeqGenerator`): the question inside its context is the question
encoder tokenizer's decoding of it (transformers' ``RagRetriever``; lowercased by DPR's uncased tokenizer),
and fine-tuning targets start the decoder with the generator tokenizer's leading token (BART's ``<s>``),
as transformers' RAG fine-tuning feeds ``decoder_input_ids = labels``.
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


def _tokenizers(source: str, hf: dict):
    """The checkpoint's (question encoder, generator) tokenizers, or ``(None, None)`` if it has none."""
    from transformers import AutoTokenizer

    try:
        return (AutoTokenizer.from_pretrained(source, subfolder="question_encoder_tokenizer",
                                              trust_remote_code=False, **hf),
                AutoTokenizer.from_pretrained(source, subfolder="generator_tokenizer",
                                              trust_remote_code=False, **hf))
    except (OSError, ValueError):
        return None, None


def _leading_token(tokenizer) -> int | None:
    """The special token ``tokenizer`` puts before a text (BART: ``<s>``), or None (T5 puts none)."""
    if tokenizer is None:
        return None
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    return full[0] if len(full) > len(plain) and full[: len(plain)] != plain else None


def load_hf_rag(name_or_path: str | Path, question_tokenizer=None, generator_tokenizer=None) -> ImportedRag:
    """Load a transformers RAG checkpoint — a local directory, or a hub name such as
    ``facebook/rag-sequence-nq`` where the hub (or its local cache) is reachable — into openbook parts.
    Tokenizers come from the checkpoint's ``*_tokenizer`` subfolders unless given explicitly."""
    from transformers import RagConfig, RagSequenceForGeneration, RagTokenForGeneration

    from openbook.models.loading import _load_offline

    source = str(name_or_path)
    if Path(source).exists() and not is_hf_rag_checkpoint(source):
        raise ModelLoadError(f"{source} is not a transformers RAG checkpoint (no config.json with model_type 'rag')")

    def load(src: str, **hf):
        config = RagConfig.from_pretrained(src, trust_remote_code=False, **hf)
        cls = RagTokenForGeneration if _model_type(config) == "rag-token" else RagSequenceForGeneration
        return config, cls.from_pretrained(src, trust_remote_code=False, **hf), _tokenizers(src, hf)

    config, rag, (q_tok, g_tok) = _load_offline(source, load)
    model_type = _model_type(config)
    q_tok, g_tok = question_tokenizer or q_tok, generator_tokenizer or g_tok
    encoder = Encoder(rag.rag.question_encoder, q_tok, pooling="pooler", normalize=False, name=source)
    generator = Seq2SeqGenerator(
        rag.rag.generator,
        g_tok,
        max_context_length=config.max_combined_length,
        title_sep=config.title_sep,
        doc_sep=config.doc_sep,
        question_tokenizer=q_tok,
        training_start_token_id=_leading_token(g_tok),
    )
    return ImportedRag(encoder, generator, model_type, config.n_docs, config.label_smoothing, config)
