"""Pure helpers on a model's inputs and outputs: padding tokenized texts into a batch, pooling token states into
one vector per text, and a fingerprint of a model's weights."""

from __future__ import annotations

import hashlib

import torch

#: One tokenized text: ``input_ids``, ``attention_mask`` and, for some tokenizers, ``token_type_ids``.
Features = dict[str, list[int]]


def pool(outputs, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Turn model outputs into one vector per text.

    ``"mean"`` averages ``last_hidden_state`` over tokens whose mask is 1; ``"cls"`` takes the first
    token's state (or ``pooler_output`` for models such as DPR that return only that, which is the CLS
    state); ``"pooler"`` takes ``pooler_output``.
    """
    hidden = getattr(outputs, "last_hidden_state", None)
    if pooling == "pooler" or (pooling == "cls" and hidden is None):
        return outputs.pooler_output
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """Hex sha256 over a model's parameters: name, dtype, shape and bytes of each, in name order.

    Buffers are left out (which of them transformers saves varies between its versions); one pass
    over the weights, about a tenth of a second for MiniLM.
    """
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters(), key=lambda item: item[0]):
        tensor = parameter.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{tensor.dtype}:{tuple(parameter.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy())
    return digest.hexdigest()


def pad_features(features: list[Features], pad_id: int, side: str = "right") -> dict[str, torch.Tensor]:
    """Pad tokenized texts to the longest of the batch and stack them into tensors.

    ``input_ids`` are padded with ``pad_id``, the attention mask and segment ids with 0.
    """
    longest = max(len(feature["input_ids"]) for feature in features)
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        fill = pad_id if key == "input_ids" else 0
        rows = []
        for feature in features:
            padding = [fill] * (longest - len(feature[key]))
            rows.append(padding + list(feature[key]) if side == "left" else list(feature[key]) + padding)
        batch[key] = torch.tensor(rows, dtype=torch.long)
    return batch
