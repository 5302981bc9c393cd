"""Tolerances for comparing two floating-point computations of the same quantity, from error analysis.

Two computations that are equal in exact arithmetic -- batched vs one by one, padded vs cut to length,
cached vs recomputed, openbook vs transformers, float32 vs a float64 reference -- differ only by rounding,
and how they round depends on the machine: summation order, SIMD width (AVX-512, AVX2 or none), BLAS
blocking and thread count. A test must accept every such difference and nothing more.

Derivation. With unit roundoff u = eps / 2 (float32: eps = 2**-23 = 1.19e-7), a sum or dot product of
n terms computed in any order satisfies ``|fl(s) - s| <= gamma_n * sum|x_i|`` with ``gamma_n = n*u /
(1 - n*u)`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., section 3.1 / eq. 3.5).
So each of the two computations is within ``~n * u * scale`` of the exact value, and their difference
within ``n * eps * scale``, where ``scale`` bounds the magnitude of the terms and results (we use the
largest |reference value|). A network stacks ``depth`` such reductions; to first order their errors
add, giving

    bound = depth * n * eps * scale.

This is the worst case: rounding errors of random sign grow like sqrt(n), so the typical error is
about sqrt(n) times smaller. That factor is the margin against other machines' rounding; nothing in
here is tuned to one machine.

The scale is that of the terms, which is not always the result's: a dot product that cancels is
bounded by |q| |d| (:func:`dot_tolerance`), and a gradient's rounding follows the largest
back-propagated values of the whole network rather than its own size (tests/models/test_length_groups.py
compares gradients norm-wise, scaled by the model's largest gradient).

What the bound still catches: a real bug (a wrong mask, a dropped prior, an off-by-one position, a
missing normalisation) changes a value by O(1) relative to its scale. In this suite ``depth * n * eps``
stays below ~3e-4 in float32 (the largest: tiny T5, 11 reductions over its 128-word vocabulary, 1.7e-4),
so a bug is over a thousand times the bound; :func:`tolerance` refuses a bound of 1% or more.

Comparisons that must be exact (token ids, decoded strings, integer counts, values copied without
arithmetic) stay exact and do not use this module.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

EPS = {
    "float64": float(np.finfo(np.float64).eps),  # 2.2e-16
    "float32": float(np.finfo(np.float32).eps),  # 1.19e-7
    "float16": float(np.finfo(np.float16).eps),  # 9.8e-4
    "bfloat16": float(torch.finfo(torch.bfloat16).eps),  # 7.8e-3
}
MAX_RELATIVE = 1e-2  # a bound this loose could hide an O(1) bug: refuse it


def eps(dtype: Any = torch.float32) -> float:
    """Machine epsilon of a torch or numpy dtype, or of a value's dtype (Python numbers are float64)."""
    if isinstance(dtype, (torch.Tensor, np.ndarray, np.generic)):
        dtype = dtype.dtype
    elif isinstance(dtype, (float, int, list, tuple)):
        dtype = np.float64
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype
    else:
        name = np.dtype(dtype).name
    if name not in EPS:
        raise ValueError(f"no machine epsilon for {dtype!r}")
    return EPS[name]


def magnitude(value: Any) -> float:
    """The largest |value| of a tensor, array, sequence or number (its scale for the bound)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().abs().max()) if value.numel() else 0.0
    array = np.abs(np.asarray(value, dtype=np.float64))
    return float(array.max()) if array.size else 0.0


def tolerance(reference: Any = 1.0, terms: int = 1, depth: int = 1, dtype: Any = None,
              scale: float | None = None) -> dict[str, float]:
    """``{"rtol", "atol"}`` for comparing a computed value with ``reference`` up to rounding (module docs).

    ``terms``: the length n of the longest reduction (sum, dot product, softmax normaliser) feeding a
    value; ``depth``: how many such reductions are stacked (layers of a network). ``dtype``: the working
    precision of the computation (default: the reference's; give it when the reference is a float64
    re-computation of a float32 result). ``scale``: the magnitude of the terms if it is not the
    reference's largest |value| (e.g. the size of the inputs of a sum that cancels).

    Returns ``rtol = depth * terms * eps`` and ``atol = rtol * scale``, for ``torch.testing.assert_close``,
    ``np.testing.assert_allclose`` (``pytest.approx`` takes them as ``rel=`` and ``abs=``).
    """
    if terms < 1 or depth < 1:
        raise ValueError("terms and depth are at least 1")
    rtol = depth * terms * eps(reference if dtype is None else dtype)
    if rtol >= MAX_RELATIVE:
        raise ValueError(f"a relative bound of {rtol:.2g} could hide a real bug; compute in a wider dtype")
    scale = magnitude(reference) if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError("the reference holds a non-finite value")
    return {"rtol": rtol, "atol": rtol * scale}


def bound(reference: Any = 1.0, terms: int = 1, depth: int = 1, dtype: Any = None,
          scale: float | None = None) -> float:
    """The absolute bound ``depth * terms * eps * scale`` alone (for ``abs(a - b) <= bound``)."""
    return tolerance(reference, terms, depth, dtype, scale)["atol"]


def model_tolerance(reference: Any, config: Any, length: int = 1, dtype: Any = torch.float32,
                    scale: float | None = None) -> dict[str, float]:
    """:func:`tolerance` for values computed by a transformer with this (transformers) ``config``.

    ``terms`` is the longest reduction of the network: the widest of its vocabulary (the softmax
    normaliser and the output projection), hidden and feed-forward sizes, and ``length``, the longest
    sequence attended over or summed over. ``depth`` counts the stacked reductions: two per encoder or
    decoder-only layer (attention, feed-forward), three per encoder-decoder decoder layer (with
    cross-attention), plus the output projection. Gradients run through the same reductions backwards.
    """
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    sizes = ("vocab_size", "d_model", "hidden_size", "d_ff", "intermediate_size", "encoder_ffn_dim",
             "decoder_ffn_dim")
    terms = max([length] + [v for v in (getattr(config, name, None) for name in sizes) if isinstance(v, int)])
    if getattr(config, "is_encoder_decoder", False):
        encoder = getattr(config, "encoder_layers", None) or config.num_layers
        decoder = getattr(config, "decoder_layers", None) or getattr(config, "num_decoder_layers", None) or encoder
        depth = 2 * encoder + 3 * decoder + 1
    else:
        depth = 2 * config.num_hidden_layers + 1
    return tolerance(reference, terms=terms, depth=depth, dtype=dtype, scale=scale)


def probability_sum_bound(k: int, logits: float = 1.0, dtype: Any = torch.float32) -> float:
    """The bound on ``|sum of k probabilities - 1|`` for a softmax over k values computed in ``dtype``.

    Normalising divides k rounded terms by their rounded sum, so the k quotients sum to 1 within
    ~k * eps whatever the inputs; probabilities taken as ``exp(log_softmax(x))`` also carry the rounding
    of each log-probability, ~k * eps * max|x|: give ``logits`` = max|x| (at least 1).
    """
    return bound(terms=k, dtype=dtype, scale=max(1.0, float(logits)))


def dot_tolerance(queries: Any, docs: Any, dtype: Any = np.float32) -> dict[str, float]:
    """:func:`tolerance` for inner products ``q . d`` (``dim`` terms each, as an index computes them):
    the terms' scale is at most ``max|q| * max|d|`` (Cauchy-Schwarz), however much the sum cancels."""
    queries, docs = np.atleast_2d(np.asarray(queries, np.float64)), np.atleast_2d(np.asarray(docs, np.float64))
    scale = float(np.linalg.norm(queries, axis=1).max() * np.linalg.norm(docs, axis=1).max())
    return tolerance(terms=queries.shape[1], dtype=dtype, scale=scale)


def bfloat16_bound(config, scale: float) -> float:
    """How far a value computed in bfloat16 may be from its float32 computation.

    bfloat16 keeps 8 significant bits: unit roundoff u = 2**-8 (half its eps, 2**-7). Every matrix
    product reads weights and activations rounded to bfloat16 (relative error u each) and PyTorch
    accumulates it in float32 (whose rounding is 2**16 times smaller, negligible here), then rounds
    the output: each reduction is off by at most ~3u times the scale of its terms, whatever its length
    (unlike float32's ``n * eps``, the error is in the rounded inputs, not in the summation). Stacked
    reductions add to first order, as in :func:`model_tolerance`: ``3 * depth * u * scale``, with ``depth``
    counted as :func:`model_tolerance` counts it. A real bug (a wrong mask, a dropped prior)
    is O(1) of the scale; this bound is 11-14% of it for these tiny models."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(config, "is_encoder_decoder", False):
        depth = 2 * config.encoder_layers + 3 * config.decoder_layers + 1
    else:
        depth = 2 * config.num_hidden_layers + 1
    return 3 * depth * (EPS["bfloat16"] / 2) * scale


def int8_bound(config, scale: float) -> float:
    """How far a value computed with int8 linear layers may be from float32's.

    A dynamically quantised layer rounds its input to 7 bits over the input's range (FBGEMM's
    ``reduce_range``: at most 1/127 of the largest input, as the range is at most twice it) and its weights
    to 8 bits per output channel (at most 1/255 of the row's largest), then accumulates exactly in int32:
    each product is off by at most 1/127 + 1/255 ~= 3 * 2**-8 of the scale of its terms, bfloat16's 3u
    (:func:`bfloat16_bound`). The output head is not quantised, attention and normalisation
    stay float32, so the same first-order sum over the stacked reductions holds."""
    return bfloat16_bound(config, scale)
