"""Which device the models run on: the CPU, or a CUDA GPU when one is there.

``auto`` is CUDA if :func:`torch.cuda.is_available`, else the CPU. Every tensor openbook makes while
retrieving, decoding or training is made on the device of the tensors (or the model) it works with, so a
model moved with ``.to(device)`` runs there as a whole; the knowledge base's vectors stay in FAISS on the
host (:mod:`openbook.index.dense.gpu` copies a searchable index to the GPUs when ``faiss-gpu`` is installed).
"""

from __future__ import annotations

import os

import torch

from openbook.errors import InputError
from openbook.presets import DEVICES


def resolve_device(device: str | torch.device, name: str = "device") -> torch.device:
    """The :class:`torch.device` of one of :data:`DEVICES` (or a ``torch.device``/``"cuda:N"``).

    ``auto`` is CUDA where available, else the CPU. CUDA without a GPU is :class:`InputError` naming ``name``
    (the command line passes ``"--device"``). Under torchrun a bare ``cuda`` is the process's own GPU,
    ``cuda:LOCAL_RANK``, so that data-parallel ranks on one machine do not share one."""
    device = str(device) if isinstance(device, torch.device) else device
    kind, _, index = device.partition(":") if isinstance(device, str) else ("", "", "")
    if kind not in DEVICES or (index and (kind != "cuda" or not index.isdigit())):
        raise InputError(f"{name} must be one of {', '.join(DEVICES)}, not {device!r}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InputError(f"{name} {device}: no CUDA device is available here (torch.cuda.is_available() is "
                         "False); use cpu or auto")
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return torch.device(device)


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (or buffer); the CPU for a module with neither."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")
