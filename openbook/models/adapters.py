"""Parameter-efficient fine-tuning of the generator: LoRA adapters (Hu et al., 2021) through peft.

The paper fine-tunes all of BART-large. On a 2-core CPU, and for weights small enough to ship in the
repository, openbook instead freezes the packaged generator and trains low-rank adapters on its linear
layers: ``W x + (alpha / r) B A x`` with ``A`` (r x in) and ``B`` (out x r, zero at the start, so training
starts from the base model exactly). peft's ``inject_adapter_in_model`` adds them in place, so the
generator adapter, its prompts and RAG's marginalisation are unchanged; the state dict gains
``...lora_A.weight`` / ``...lora_B.weight`` tensors, which are all a LoRA run has to save.

For inference, :func:`merge_lora` folds ``B A`` into ``W`` once, so answering costs what the base model costs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=settings.target_modules if isinstance(settings.target_modules, str)
                        else list(settings.target_modules))
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if config.target_modules == "all-linear" and model_type is not None:
        config.target_modules = sorted(_linear_layer_names(model))
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


def lora_parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if LORA_MARK in name)


def merge_lora(model: nn.Module) -> int:
    """Fold every adapter into its base weight (``W += (alpha / r) B A``) for inference; returns how many
    layers were merged. The adapters stay (disabled by the merge) so that the weights can still be saved."""
    from peft.tuners.lora import LoraLayer

    merged = 0
    for module in model.modules():
        if isinstance(module, LoraLayer) and not module.merged:
            module.merge()
            merged += 1
    return merged


def unload_lora(model: nn.Module) -> nn.Module:
    """Merge every adapter into its base weight and put the plain base layers back in place of peft's
    wrappers (what peft's ``merge_and_unload`` does), so that ``model`` saves as an ordinary transformers
    model with the trained weights. Returns ``model``."""
    from peft.tuners.lora import LoraLayer

    merge_lora(model)
    wrapped = [(name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer)]
    for name, module in wrapped:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module.get_base_layer())
    return model
