"""Tiny random encoder folders (BERT, DPR, sentence-transformers layout) for fast tests, no downloads."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import BertConfig, BertModel, BertTokenizerFast, DPRConfig, DPRContextEncoder, DPRQuestionEncoder

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the a of in is was who what when where which first nobel prize physics paris france capital river city "
    "born wrote novel author president country king queen war year sun rises hamlet play tragedy shakespeare "
    "ocean mountain music . , ?"
).split()
SIZES = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, max_position_embeddings=64
)


def bert_tokenizer(folder: Path) -> BertTokenizerFast:
    """A lower-casing word-piece tokenizer over a small vocabulary written to ``folder/vocab.txt``."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    return BertTokenizerFast(vocab_file=str(vocab), model_max_length=512)


def save_bert(folder: Path, seed: int = 0) -> Path:
    """A random 2-layer, 32-wide BERT and its tokenizer saved in ``folder``."""
    torch.manual_seed(seed)
    tokenizer = bert_tokenizer(folder)
    BertModel(BertConfig(vocab_size=len(tokenizer), **SIZES)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_dpr(folder: Path, role: str = "question", seed: int = 0, projection_dim: int = 0) -> Path:
    """A random tiny DPR question (``role="question"``) or context encoder and tokenizer saved in ``folder``."""
    torch.manual_seed(seed)
    tokenizer = bert_tokenizer(folder)
    config = DPRConfig(vocab_size=len(tokenizer), projection_dim=projection_dim, **SIZES)
    model_class = DPRQuestionEncoder if role == "question" else DPRContextEncoder
    model_class(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_sentence_transformers(
    folder: Path, pooling: str = "mean", normalize: bool = True, max_seq_length: int = 16
) -> Path:
    """A tiny BERT in the sentence-transformers layout (``modules.json``, ``1_Pooling/config.json``)."""
    save_bert(folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_Pooling").mkdir()
    pooling_config = {
        "word_embedding_dimension": SIZES["hidden_size"],
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}), encoding="utf-8")
    return folder
