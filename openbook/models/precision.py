"""Which floating-point type a generator runs in: float32, or bfloat16 where the CPU computes it natively.

``bfloat16`` halves the bytes every matrix product reads and, on CPUs with AVX-512 BF16 or AMX, runs
those products in hardware; elsewhere PyTorch emulates it, slower than float32, so ``auto`` picks it
only where :func:`bf16_hardware` says so. Generators return their logits as float32 and take
log-softmax (and every marginal over documents) there, whatever the weights' type.
"""

from __future__ import annotations

import torch

from openbook.errors import InputError

DTYPES = ("auto", "float32", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def bf16_hardware() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX); elsewhere it is emulated."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def resolve_dtype(dtype: str) -> str:
    """``"float32"`` or ``"bfloat16"`` for one of :data:`DTYPES` (``auto``: bfloat16 on native hardware)."""
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if dtype == "auto":
        return "bfloat16" if bf16_hardware() else "float32"
    return dtype
