"""How an encoder folder says to pool, normalise and format passages, and which class loads it
(:meth:`openbook.models.encoders.Encoder.from_pretrained`): a sentence-transformers folder's ``modules.json``,
pooling config and ``sentence_bert_config.json``; DPR's architectures; else a BERT-style CLS encoder."""

from __future__ import annotations

import json

from transformers import AutoModel, DPRContextEncoder, DPRQuestionEncoder
from transformers.utils import cached_file

from openbook.errors import ModelLoadError

_DPR_CLASSES = {"DPRQuestionEncoder": DPRQuestionEncoder, "DPRContextEncoder": DPRContextEncoder}


def detect_settings(source: str, config, hf_kwargs: dict) -> dict:
    """Pooling, normalisation, max length and passage format for the model at ``source``."""
    modules = _read_json(source, "modules.json", hf_kwargs)
    if modules is not None:
        return _sentence_transformers_settings(source, modules, hf_kwargs)
    pooling = "pooler" if getattr(config, "model_type", None) == "dpr" else "cls"
    return {"pooling": pooling, "normalize": False, "max_length": None, "passage_format": "pair"}


def _sentence_transformers_settings(source: str, modules: list[dict], hf_kwargs: dict) -> dict:
    """Read pooling mode, Normalize module and ``max_seq_length`` of a sentence-transformers folder."""
    kinds = {module.get("type", "").rsplit(".", 1)[-1]: module for module in modules}
    unsupported = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
    if unsupported:
        raise ModelLoadError(
            f"sentence-transformers model {source!r} has modules openbook does not support: {', '.join(unsupported)}"
        )
    pooling = "mean"
    if "Pooling" in kinds:
        pooling_config = _read_json(source, f"{kinds['Pooling'].get('path', '1_Pooling')}/config.json", hf_kwargs) or {}
        pooling = _pooling_mode(source, pooling_config)
    st_config = _read_json(source, "sentence_bert_config.json", hf_kwargs) or {}
    return {
        "pooling": pooling,
        "normalize": "Normalize" in kinds,
        "max_length": st_config.get("max_seq_length"),
        "passage_format": "joined",
    }


def _pooling_mode(source: str, pooling_config: dict) -> str:
    """Map a sentence-transformers pooling config to ``"mean"`` or ``"cls"``."""
    if pooling_config.get("pooling_mode_cls_token"):
        return "cls"
    if pooling_config.get("pooling_mode_mean_tokens", True):
        return "mean"
    modes = [key for key, value in pooling_config.items() if key.startswith("pooling_mode") and value]
    raise ModelLoadError(f"sentence-transformers model {source!r} uses pooling {modes}; openbook supports mean and cls")


def _read_json(source: str, filename: str, hf_kwargs: dict):
    """A JSON file of a local folder or cached hub model, or None if the model has no such file."""
    path = cached_file(
        source,
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **hf_kwargs,
    )
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def model_class(config):
    """``DPRQuestionEncoder``/``DPRContextEncoder`` for DPR checkpoints, else ``AutoModel``."""
    for architecture in getattr(config, "architectures", None) or []:
        if architecture in _DPR_CLASSES:
            return _DPR_CLASSES[architecture]
    return AutoModel
