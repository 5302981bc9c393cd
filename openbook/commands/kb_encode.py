"""The ``encode_passages`` function of ``openbook kb build``/``add``: the document encoder in this
process, or with ``kb build --ray`` a pool of Ray actors (:mod:`openbook.index.kb.ray_encode`) that each load
the encoder once, through :func:`load_encode_passages`, and encode every batch of the build."""

from __future__ import annotations

import argparse
import contextlib
import functools
from pathlib import Path

RAY_BATCH = 4096  # with --ray, passages per batch: enough chunks for every actor, few round trips to the cluster


def encode_fn(encoder, dtype: str | None = None, compile: bool = False):
    """``encode_passages`` for builds and edits: length-sorted batches of the encoder's ``PASSAGE_BATCH``, in
    ``dtype`` (None: the encoder's own, float32), by a compiled copy of the model with ``compile``."""
    if dtype is None and not compile:
        return encoder.encode_passages
    return functools.partial(encoder.encode_passages, dtype=dtype, compile=compile)


def load_encode_passages(name: str, dtype: str | None = None, compile: bool = False):
    """``encode_passages`` of the encoder called ``name``, loaded here: what each ``--ray`` actor runs
    (a top-level function, so ``functools.partial(load_encode_passages, name)`` pickles by reference)."""
    from openbook.models import load_encoder as load

    return encode_fn(load(name), dtype, compile)


def check_build_compile(args: argparse.Namespace) -> None:
    """``kb build --compile`` without what compiling needs here fails before the encoder loads (with ``--ray``
    the actors compile, maybe on other machines, so they check there)."""
    from openbook.models.precision import check_compile, resolve_dtype

    if args.compile and args.ray is None:
        check_compile(resolve_dtype(args.encode_dtype) if args.encode_dtype else "float32")


@contextlib.contextmanager
def build_encode_passages(args: argparse.Namespace, encoder):
    """The ``encode_passages`` of ``kb build``: the encoder here, or with ``--ray`` a Ray actor pool."""
    from openbook.models.precision import resolve_dtype

    dtype = resolve_dtype(args.encode_dtype) if args.encode_dtype else None
    if args.ray is None:
        yield encode_fn(encoder, dtype, args.compile)
        return
    from openbook.index.kb.ray_encode import RayEncodePassages

    name = args.encoder or "default"
    if Path(name).exists():  # the actors may run in another directory (or on another machine's same path)
        name = str(Path(name).resolve())
    make_encode = functools.partial(load_encode_passages, name, dtype, args.compile)
    with RayEncodePassages(make_encode, args.ray_workers, args.ray or None) as ray:
        yield ray
