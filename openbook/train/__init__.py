"""End-to-end training of RAG (paper section 2.4)."""

from openbook.train.trainer import TrainConfig, TrainState, train

__all__ = ["TrainConfig", "TrainState", "train"]
