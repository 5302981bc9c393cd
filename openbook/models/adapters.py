"""Parameter-efficient fine-tuning of the generator: LoRA adapters (Hu et al., 2021) through peft.

The paper fine-tunes all of BART-large. On a 2-core CPU, and for weights small enough to ship in the
repository, openbook instead freezes the packaged generator and trains low-rank adapters on its linear
layers: ``W x + (alpha / r) B A x`` with ``A`` (r x in) and ``B`` (out x r, zero at the start, so training
starts from the base model exactly). peft's ``inject_adapter_in_model`` adds them in place, so the
generator adapter, its prompts and RAG's marginalisation are unchanged; the state dict gains
``...lora_A.weight`` / ``...lora_B.weight`` tensors, which are all a LoRA run has to save.

For inference, :func:`merge_lora_tensors` folds a checkpoint's ``(alpha / r) B A`` into the plain model's ``W``
once, without peft, so answering costs what the base model costs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from openbook.errors import InputError

LORA_MARK = "lora_"  # in the names of every adapter tensor


@dataclass(frozen=True)
class LoraSettings:
    """Rank, scale (``alpha / r``), dropout and the linear layers that get adapters ("all-linear": every
    linear layer of the transformer blocks, not the output layer)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self):
        if not (isinstance(self.r, int) and 1 <= self.r <= 1024):
            raise InputError(f"LoRA rank r must be an integer from 1 to 1024, got {self.r!r}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise InputError(f"LoRA dropout must be in [0, 1), got {self.dropout!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        if not isinstance(self.target_modules, str):
            d["target_modules"] = list(self.target_modules)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> LoraSettings:
        unknown = sorted(set(data) - {"r", "alpha", "dropout", "target_modules"})
        if unknown:
            raise InputError(f"unknown LoRA setting(s) {', '.join(unknown)}")
        targets = data.get("target_modules", "all-linear")
        return cls(r=data.get("r", 16), alpha=data.get("alpha", 32), dropout=data.get("dropout", 0.05),
                   target_modules=targets if isinstance(targets, str) else tuple(targets))


def add_lora(model: nn.Module, settings: LoraSettings) -> nn.Module:
    """Inject LoRA adapters into the transformers ``model`` (in place) and make them its only trainable
    weights. Returns ``model``."""
    from peft import LoraConfig, inject_adapter_in_model

    if has_lora(model):
        raise InputError("the generator already has LoRA adapters")
    targets = settings.target_modules
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=sorted(_linear_layer_names(model)) if targets == "all-linear" else list(targets))
    try:
        inject_adapter_in_model(config, model)
    except ValueError as exc:
        raise InputError(f"cannot add LoRA adapters to this generator: {exc}") from None
    for name, param in model.named_parameters():
        param.requires_grad_(LORA_MARK in name)
    return model


def _linear_layer_names(model: nn.Module) -> set[str]:
    """The short names of the linear layers inside the transformer blocks (all but the output layer)."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and module is not output}


def has_lora(model: nn.Module) -> bool:
    return any(LORA_MARK in name for name, _ in model.named_parameters())


def lora_tensor_names(module: nn.Module) -> set[str]:
    """The state-dict names of ``module``'s LoRA adapters (what a LoRA checkpoint must hold)."""
    return {name for name in module.state_dict() if LORA_MARK in name}


def merge_lora_tensors(module: nn.Module, tensors: dict, settings: LoraSettings, prefix: str = "") -> dict:
    """Fold a LoRA checkpoint's adapters into the plain linear layers of ``module`` (``W += (alpha / r) B A``),
    without peft: loading the shipped default then costs no peft import and no wrapper layers. ``prefix`` is
    where the adapted transformers model sits in ``module`` (e.g. ``"generator.model."``); every linear layer
    that training adapted must have its pair of tensors. Returns the tensors that are not adapters."""
    pairs: dict[str, dict] = {}
    rest = {}
    for name, tensor in tensors.items():
        part = ".lora_A." if ".lora_A." in name else ".lora_B." if ".lora_B." in name else None
        if part is None:
            rest[name] = tensor
        else:
            pairs.setdefault(name.split(part)[0], {})[part[-2]] = tensor
    model = module.get_submodule(prefix.rstrip(".")) if prefix else module
    targets = settings.target_modules
    names = _linear_layer_names(model) if targets == "all-linear" else set(targets)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    expected = {prefix + name for name, m in model.named_modules()
                if isinstance(m, nn.Linear) and m is not output and name.rsplit(".", 1)[-1] in names}
    if set(pairs) != expected:
        odd = sorted(set(pairs) ^ expected)
        raise InputError(f"the LoRA adapters do not fit the generator: {len(odd)} layer(s) differ, e.g. {odd[0]}")
    scale = settings.alpha / settings.r
    with torch.no_grad():
        for path, ab in pairs.items():
            linear = module.get_submodule(path)
            a, b = ab.get("A"), ab.get("B")
            if a is None or b is None or (b.shape[0], a.shape[1]) != tuple(linear.weight.shape) or a.shape[0] != b.shape[1]:
                raise InputError(f"the LoRA adapter of {path} is incomplete or has the wrong shape")
            linear.weight += (scale * (b.float() @ a.float())).to(linear.weight.dtype)
    return rest
