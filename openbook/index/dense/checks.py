"""Validation of the arguments and parameters of the dense indexes (:mod:`openbook.index.dense`)."""

import math

import numpy as np

from openbook.errors import InputError, positive_int


def as_float32_matrix(vectors, what: str, dim: int | None = None, allow_1d: bool = False) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous float32 ``(n, dim)`` array, or raise InputError naming ``what``.

    A 1-D array is read as a single row when ``allow_1d`` is true. Non-finite values are rejected.
    """
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} must be a numeric array: {exc}") from None
    if allow_1d and array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D array (n, dim), got shape {array.shape}")
    if dim is not None and array.shape[1] != dim:
        raise InputError(f"{what} have dimension {array.shape[1]} but the index has dimension {dim}")
    if not np.isfinite(array).all():
        raise InputError(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(array)


def check_exclude(exclude) -> np.ndarray | None:
    """Return the ids in ``exclude`` as a sorted unique int64 array (None when there are none)."""
    if exclude is None:
        return None
    array = np.asarray(exclude)
    if array.size == 0:
        return None
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise InputError(
            f"exclude must be a 1-D array of integer passage ids, got {array.dtype} array of shape {array.shape}"
        )
    return np.unique(array.astype(np.int64))


def _positive_int(value, name: str, owner: str) -> int:
    return positive_int(value, f"{owner} index parameter {name}")


def _optional_positive_int(value, name: str, owner: str) -> int | None:
    return None if value is None else _positive_int(value, name, owner)


def _optional_phi(value, owner: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value > 0:
        raise InputError(
            f"{owner} index parameter phi must be a positive number (a bound on |x|²), got {value!r}"
        )
    if not math.isfinite(value):
        raise InputError(f"{owner} index parameter phi must be finite, got {value!r}")
    return float(value)
