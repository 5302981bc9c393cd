"""Models: dense encoders for retrieval and generators, loaded offline first."""

from openbook.models.encoders import Encoder, PassageLike
from openbook.models.loading import (
    cache_dir,
    load_causal_lm,
    load_config,
    load_encoder,
    load_seq2seq,
    offline_default_names,
)

__all__ = [
    "Encoder",
    "PassageLike",
    "cache_dir",
    "load_causal_lm",
    "load_config",
    "load_encoder",
    "load_seq2seq",
    "offline_default_names",
]
