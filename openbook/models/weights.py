"""Weights and tensors on disk: safetensors (plus JSON for what is not a tensor), never pickle.

A pickle-based ``.pt`` file can run any code when it is loaded, and checkpoints are files users pass
around, so openbook writes and reads only safetensors: a JSON header and raw tensor bytes. Shared
(tied) weights, such as BART's embeddings and output layer, are stored once and tied again on load
(safetensors' ``save_model``/``load_model``). A file that is not safetensors, or whose tensors do not
fit the model, is a one-line :class:`~openbook.errors.InputError`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

from openbook.errors import InputError, one_line

WEIGHTS_FILE = "model.safetensors"
LEGACY_WEIGHTS_FILE = "model.pt"  # what openbook wrote before it used safetensors; never unpickled


def weights_path(folder: str | os.PathLike, hint: str = "") -> Path:
    """``folder/model.safetensors``, or an InputError saying why there is none (an old ``model.pt`` is refused)."""
    folder = Path(folder)
    path = folder / WEIGHTS_FILE
    if path.is_file():
        return path
    if (folder / LEGACY_WEIGHTS_FILE).is_file():
        raise InputError(
            f"{folder} holds weights in the old pickle-based {LEGACY_WEIGHTS_FILE} format, which openbook no "
            f"longer reads (loading a pickle can run code); train the run again to get {WEIGHTS_FILE}"
        )
    raise InputError(f"no trained weights in {folder} (expected {path}{'; ' + hint if hint else ''})")


def save_weights(module: torch.nn.Module, path: str | os.PathLike, only: set[str] | None = None) -> None:
    """Write ``module.state_dict()`` to ``path`` as safetensors, each shared tensor once; with ``only``,
    just the tensors of those names (what a LoRA run trains: its adapters, not the packaged base model)."""
    if only is None:
        save_model(module, str(path))
        return
    state = module.state_dict()
    missing = sorted(only - set(state))
    if missing:
        raise ValueError(f"no tensors named {', '.join(missing[:3])} in the model")
    save_file({name: state[name].detach().contiguous() for name in sorted(only)}, str(path))


def load_weights(module: torch.nn.Module, path: str | os.PathLike, what: str = "the model",
                 required: set[str] | None = None) -> None:
    """Load the safetensors file ``path`` into ``module``: every tensor must be there, with its shape.

    With ``required``, the file may hold a part of the model (a LoRA run's adapters): it must hold at least
    the tensors named in ``required``, and every tensor in it must be one of the model's, with its shape."""
    if required is None:
        try:
            load_model(module, str(path), strict=True)
        except (SafetensorError, OSError) as exc:
            raise InputError(f"{path} is not a readable safetensors weights file: {_one_line(exc)}") from None
        except (RuntimeError, ValueError) as exc:  # missing, unexpected or misshapen tensors
            raise InputError(f"{path} does not fit {what}: {_one_line(exc)}") from None
        return
    load_tensors(module, read_tensors(path), path, what, required)


def load_tensors(module: torch.nn.Module, tensors: dict, path, what: str, required: set[str]) -> None:
    """Load ``tensors`` (read from ``path``) into part of ``module``: they must include ``required``, and each
    must be one of the module's, with its shape."""
    state = module.state_dict()
    problems = [f"missing {name}" for name in sorted(required - set(tensors))]
    problems += [f"unexpected {name}" for name in sorted(set(tensors) - set(state))]
    problems += [f"{name} has shape {tuple(t.shape)}, expected {tuple(state[name].shape)}"
                 for name, t in sorted(tensors.items()) if name in state and t.shape != state[name].shape]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InputError(f"{path} does not fit {what}: {'; '.join(problems[:3])}{more}")
    module.load_state_dict(tensors, strict=False)


def write_tensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], data: Any = None) -> None:
    """Write ``tensors`` to ``path`` (safetensors) and, if given, the JSON-able ``data`` to ``path`` with ``.json``."""
    save_file({name: tensor.detach().contiguous() for name, tensor in tensors.items()}, str(path))
    if data is not None:
        Path(path).with_suffix(".json").write_text(json.dumps(data, indent=1), encoding="utf-8")


def read_tensors(path: str | os.PathLike, with_data: bool = False):
    """The tensors of a :func:`write_tensors` file (and, with ``with_data``, its JSON part) or an InputError."""
    path = Path(path)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise InputError(f"{path} is not a readable safetensors file: {_one_line(exc)}") from None
    if not with_data:
        return tensors
    json_path = path.with_suffix(".json")
    try:
        return tensors, json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{json_path} is not a readable JSON file: {_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    return one_line(exc, limit=300) or type(exc).__name__
