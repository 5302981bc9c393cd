"""Knowledge bases from an encoder: building one, the shipped demo one, and which encoder one needs.

Below :mod:`openbook.rag` on purpose: ``openbook retrieve`` (the retriever alone) builds or loads its knowledge
base with these and never imports a generator. :mod:`openbook.rag.assemble` uses them to put a model together.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from openbook.corpus import (
    DEFAULT_MAX_WORDS,
    Passage,
    check_meta_fields,
    iter_source_passages,
    passages_from_record,
    read_passages,
    record_meta,
)
from openbook.data import demo_passages_path
from openbook.errors import InputError
from openbook.index import KnowledgeBase, KnowledgeBaseLike
from openbook.index.kb import FORMAT_VERSION, read_manifest, stored_format_version
from openbook.index.kb.layout import sha256_file
from openbook.index.sharded import stored_encoder_info
from openbook.models.encoders import Encoder
from openbook.models.loading import cache_dir, load_encoder
from openbook.presets import AUTO_INDEX

SHIPPED_VECTORS = "embeddings-minilm.f16.npy"  # d(z) of the demo corpus by the default encoder


def build_knowledge_base(
    passages: Iterable[Passage],
    encoder: Encoder,
    out_dir: str | Path,
    batch_size: int = 256,
    progress: bool = True,
    **options,
) -> KnowledgeBase:
    """Encode passages with the (frozen) document encoder and write a knowledge base directory.

    ``options`` go to :meth:`KnowledgeBase.build` (``index_type``, ``index_params``, ``dtype``,
    ``on_error``, ``resume``, ``description``, ``source_info``).
    """
    return KnowledgeBase.build(
        passages,
        encoder.encode_passages,
        encoder.info(),
        out_dir,
        batch_size=batch_size,
        progress=progress,
        **options,
    )


def build_kb(
    source: str | os.PathLike | Iterable[str | Mapping[str, Any]],
    out: str | os.PathLike,
    *,
    encoder: str | Encoder = "default",
    max_words: int = DEFAULT_MAX_WORDS,
    index_type: str = AUTO_INDEX,
    replace: bool = False,
    progress: bool = True,
    meta_fields: Sequence[str] = (),
) -> KnowledgeBase:
    """A knowledge base in one call, from a folder or corpus file or from texts; then ``RAG.load(kb=out)``.

    ``source`` is a path (a folder of documents or a corpus file, read as ``openbook kb build`` reads it: every
    file it does not read is named in a warning) or a list of texts or ``{"text", "title"?, "id"?}`` dicts (a
    text's id is ``text-<i>``, a dict's its ``id`` or ``record-<i>``). Every text is split into disjoint passages
    of at most ``max_words`` words that keep its title. ``encoder`` is an encoder or its name (the default
    document encoder); ``replace`` lets the build replace a knowledge base already at ``out``. ``meta_fields``
    names the fields each passage keeps as metadata (as ``--meta-fields`` does): of the dicts, or of the
    records and CSV columns read from ``source``; a value that is not text, a number or true/false is an
    InputError naming the item.
    """
    fields = check_meta_fields(meta_fields)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        passages = functools.partial(iter_source_passages, [path], max_words,  # a fresh pass for a resumed build
                                     meta_fields=fields)
        info = {"sources": [str(path.resolve())], "max_words": max_words}
    else:
        records = _records(source, fields)
        passages = functools.partial(_record_passages, records, max_words)
        info = {"sources": [f"{len(records)} record(s) from Python"], "max_words": max_words}
    if isinstance(encoder, str):
        encoder = load_encoder(encoder)
    return build_knowledge_base(passages, encoder, out, progress=progress, index_type=index_type, replace=replace,
                                description=f"build from {info['sources'][0]}", source_info=info)


def _records(source: Iterable[str | Mapping[str, Any]], fields: Sequence[str]) -> list[tuple[dict[str, Any], dict]]:
    """``source``'s items as records with ids, each with the metadata of its named ``fields``; InputError naming
    the first item that is neither text nor a dict, or whose metadata cannot be kept."""
    records = []
    for i, item in enumerate(source):
        if isinstance(item, str):
            records.append(({"id": f"text-{i}", "title": "", "text": item}, {}))
        elif isinstance(item, Mapping):
            try:
                meta = record_meta(item, fields)
            except InputError as exc:
                raise InputError(f"item {i} of the texts: {exc}") from None
            records.append(({"id": f"record-{i}", **item}, meta))
        else:
            raise InputError(f"item {i} of the texts is a {type(item).__name__}, not text or a {{text, title}} dict")
    if not records:
        raise InputError("no texts given to build a knowledge base from")
    return records


def _record_passages(records: list[tuple[dict[str, Any], dict]], max_words: int) -> Iterator[Passage]:
    for record, meta in records:
        for passage in passages_from_record(record, str(record["id"]), max_words):
            yield dataclasses.replace(passage, meta=meta) if meta else passage


def demo_kb_dir(encoder: Encoder) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", encoder.name).strip("-") or "encoder"
    return cache_dir() / "kb" / f"demo-{slug}"


def demo_knowledge_base(encoder: Encoder, progress: bool = True) -> KnowledgeBase:
    """The shipped demo knowledge base for ``encoder``: loaded if built, else built once (with a progress bar).

    For the offline default encoder the document vectors ship precomputed (float16) with the corpus;
    they are used only if a live re-encoding of a sample agrees with them. The build records the sha256
    of the shipped corpus file; a cached knowledge base built from another corpus (e.g. before an
    openbook upgrade changed how the demo passages are chunked) is rebuilt.
    """
    path = demo_kb_dir(encoder)
    corpus_sha256 = sha256_file(demo_passages_path())
    if _demo_built_from(path) == corpus_sha256:  # an older format or corpus is rebuilt below
        return KnowledgeBase.load(path, expected_encoder=encoder.info())
    if path.exists():  # an older format or corpus, or an unfinished build, in openbook's own cache: build afresh
        shutil.rmtree(path)
    passages = list(read_passages(demo_passages_path()))
    if progress:
        print(f"openbook: building the demo knowledge base ({len(passages)} passages) in {path} (once)",
              file=sys.stderr)
    source_info = {"corpus_sha256": corpus_sha256}
    shipped = _shipped_vectors(encoder, passages, corpus_sha256)
    if shipped is None:
        return build_knowledge_base(passages, encoder, path, progress=progress, source_info=source_info)
    offset = 0

    def precomputed(batch: list) -> np.ndarray:
        nonlocal offset
        offset += len(batch)
        return shipped[offset - len(batch): offset]

    # The shipped vectors are float16 already: storing them as float16 loses nothing and halves the file.
    return KnowledgeBase.build(passages, precomputed, encoder.info(), path, progress=progress, dtype="float16",
                               source_info=source_info)


def _demo_built_from(path: Path) -> str | None:
    """The sha256 of the corpus the demo knowledge base at ``path`` was built from, or None if there is
    none of the current format (or it predates that record)."""
    if stored_format_version(path) != FORMAT_VERSION:
        return None
    return read_manifest(path).get("build", {}).get("corpus_sha256")


def _shipped_vectors(encoder: Encoder, passages: list, corpus_sha256: str, sample: int = 32) -> np.ndarray | None:
    """The shipped demo vectors as float32 if they belong to this encoder and corpus, else None: their
    record names this corpus file (sha256) and these encoder weights, and a live re-encoding of a sample
    agrees with them (the same weights on this machine's kernels)."""
    path = demo_passages_path().parent / SHIPPED_VECTORS
    if not path.is_file():
        return None
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    built_with = meta.get("encoder", {})
    if built_with.get("name") != encoder.name or meta.get("corpus_sha256") != corpus_sha256:
        return None
    if built_with.get("weights_sha256") not in (None, encoder.weights_sha256):
        return None
    vectors = np.load(path).astype(np.float32)
    if vectors.shape != (len(passages), encoder.dim):
        return None
    live = encoder.encode_passages(passages[:sample])
    cosine = (live * vectors[:sample]).sum(1) / (
        np.linalg.norm(live, axis=1) * np.linalg.norm(vectors[:sample], axis=1) + 1e-12
    )
    return vectors if float(cosine.min()) > 0.999 else None


def encoder_name(encoder: str | None, kb=None) -> str:
    """The query encoder to load: ``encoder`` if given, else the one the knowledge-base directory ``kb``
    was built with, else the offline default (``"default"``). A ``kb`` path is read first, so that a
    wrong one fails before any model is loaded."""
    built_with = None
    if kb is not None and not isinstance(kb, KnowledgeBaseLike):
        built_with = stored_encoder_info(kb).get("name")
    elif isinstance(kb, KnowledgeBaseLike):
        built_with = kb.encoder_info.get("name")
    return encoder if encoder is not None else built_with or "default"
